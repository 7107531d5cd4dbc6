"""Runs on a SLURM cluster: `srun` inside an allocation, `sbatch` for a whole sweep. No torch.

Plain `srun`/`sbatch`, not submitit: a run is `srun` over the nodes it needs with one torchrun
agent per node, which is the command cluster users already type (and what PyTorch documents);
submitit would pickle a Python function per task and put its own layer between the user and
torchrun, for no behaviour ddpbench needs. Inside the allocation the sweep runs as on one node
(timeouts, diagnosis, resume), with `srun ... torchrun` as each run's command.

The records are written by global rank 0 wherever it runs, and read by the launcher: the output
folder must be on a file system every node shares (home, project or scratch on clusters).
"""

from __future__ import annotations

import os
import random
import re
import shlex
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

from ddpbench.config.errors import SpecError
from ddpbench.config.spec import RunSpec

HOW_TO_GET_ONE = (
    "run it inside an allocation: `salloc --nodes N --exclusive` then the same command, "
    "or submit the whole sweep with `ddpbench sbatch`"
)
RENDEZVOUS_PORTS = (29500, 29999)
"""Ports tried for the c10d rendezvous on the step's first node (torchrun's default is 29500)."""


@dataclass(frozen=True)
class Allocation:
    """The SLURM job this process runs in, as its environment variables describe it."""

    job_id: str
    nodes: tuple[str, ...]
    """Node names, in the allocation's order; the batch script runs on the first."""
    cpus_per_node: int
    """The smallest CPU count any of the job's nodes has (every node runs the same ranks)."""
    gpus_per_node: int | None
    """GPUs per node when the job asked for them and SLURM says so; None when unknown."""
    partition: str | None


def expand_cpus_per_node(text: str) -> list[int]:
    """SLURM_JOB_CPUS_PER_NODE, e.g. `72(x2),36` -> [72, 72, 36]."""
    counts = []
    for part in filter(None, text.split(",")):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not match:
            raise SpecError(f"cannot read SLURM_JOB_CPUS_PER_NODE={text!r}")
        counts += [int(match[1])] * int(match[2] or 1)
    return counts


def _scontrol(*args: str) -> str:
    scontrol = shutil.which("scontrol")
    if scontrol is None:
        raise SpecError("SLURM's scontrol is not on PATH; load the cluster's slurm module first")
    done = subprocess.run([scontrol, *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise SpecError(f"scontrol {' '.join(args)} failed: {(done.stderr or done.stdout).strip()}")
    return done.stdout


def expand_nodelist(nodelist: str) -> tuple[str, ...]:
    """`node[1-3],gpu7` -> (node1, node2, node3, gpu7), as SLURM expands it."""
    return tuple(_scontrol("show", "hostnames", nodelist).split())


def node_address(node: str) -> str:
    """Where other nodes reach `node`: its NodeAddr (often the host name, sometimes an address)."""
    match = re.search(r"\bNodeAddr=(\S+)", _scontrol("-o", "show", "node", node))
    return match[1] if match else node


def gpus_on_node(environ: Mapping[str, str]) -> int | None:
    for name in ("SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_NODE"):
        value = environ.get(name, "").rpartition(":")[2]  # "h100:8" names the type too
        if value.isdigit():
            return int(value)
    return None


def current_allocation(environ: Mapping[str, str] = os.environ) -> Allocation:
    """The allocation this process is in, or SpecError saying how to get one."""
    job_id = environ.get("SLURM_JOB_ID")
    if not job_id or not environ.get("SLURM_JOB_NODELIST"):
        raise SpecError(f"--launcher slurm needs a SLURM allocation and this shell has none; {HOW_TO_GET_ONE}")
    # The batch script, salloc's shell and its interactive step (LaunchParameters=use_interactive_step)
    # are fine: SLURM's ids for them, by name or number.
    if environ.get("SLURM_STEP_ID") not in (
        None,
        "",
        "batch",
        "interactive",
        "extern",
        "4294967294",
        "4294967290",
        "4294967295",
    ):
        # A step started with srun holds its nodes: each run's own srun would wait for them forever.
        raise SpecError(
            "ddpbench is running inside a SLURM job step (under srun): start it from the batch "
            "script or the salloc shell instead, so that it can start one srun step per run"
        )
    if shutil.which("srun") is None:
        raise SpecError("SLURM's srun is not on PATH; load the cluster's slurm module first")
    nodes = expand_nodelist(environ["SLURM_JOB_NODELIST"])
    cpus = expand_cpus_per_node(environ.get("SLURM_JOB_CPUS_PER_NODE", "")) or [1]
    return Allocation(
        job_id=job_id,
        nodes=nodes,
        cpus_per_node=min(cpus),
        gpus_per_node=gpus_on_node(environ),
        partition=environ.get("SLURM_JOB_PARTITION"),
    )


def check_nodes(allocation: Allocation, wanted: int) -> None:
    if wanted > len(allocation.nodes):
        raise SpecError(
            f"asked for {wanted} nodes; SLURM job {allocation.job_id} has {len(allocation.nodes)} "
            f"({','.join(allocation.nodes)}): ask salloc/sbatch for --nodes {wanted}, or use fewer"
        )


def rendezvous_endpoint(allocation: Allocation) -> str:
    """host:port on the step's first node (the allocation's first), where torchrun's c10d store
    listens. Another node's ports cannot be probed from here: a taken one fails the rendezvous,
    and the launcher retries on another."""
    return f"{node_address(allocation.nodes[0])}:{random.randint(*RENDEZVOUS_PORTS)}"


def placement(spec: RunSpec) -> tuple[int | None, int, dict]:
    """For a slurm run: (GPUs per node or None when SLURM does not say, CPUs per node, the spec's
    rendezvous fields). One node needs no endpoint: torchrun --standalone on it picks a free port."""
    allocation = current_allocation()
    check_nodes(allocation, spec.nnodes)
    changes = {}
    if spec.launched_by_torchrun and spec.nnodes > 1 and not spec.rdzv_endpoint:
        changes = {
            "rdzv_endpoint": rendezvous_endpoint(allocation),
            "rdzv_id": f"slurm-{allocation.job_id}-{spec.run_id}",
        }
    return allocation.gpus_per_node, allocation.cpus_per_node, changes


def fresh_rendezvous(spec: RunSpec) -> RunSpec:
    """The same run with its rendezvous on another port, after one failed."""
    if not spec.rdzv_endpoint:
        return spec
    host = spec.rdzv_endpoint.rpartition(":")[0]
    return spec.replace(rdzv_endpoint=f"{host}:{random.randint(*RENDEZVOUS_PORTS)}")


def srun_command(spec: RunSpec, environ: Mapping[str, str] = os.environ) -> list[str]:
    """`srun` for one run: one task per node (a torchrun agent, or the one process of local/dp)
    on the allocation's first nodes, each with the CPUs its ranks use (never more than a node
    has). --kill-on-bad-exit: when one node's agent fails, the others stop at once instead of
    waiting on collectives until the timeout. GPUs need no option: a step gets all the GPUs the
    job asked for on its nodes."""
    nodes = expand_nodelist(environ["SLURM_JOB_NODELIST"])[: spec.nnodes]
    cpus = spec.threads_per_rank * (spec.nproc if spec.launched_by_torchrun else 1)
    node_cpus = expand_cpus_per_node(environ.get("SLURM_JOB_CPUS_PER_NODE", ""))
    cpus = min([cpus, *node_cpus])
    return [
        "srun",
        f"--nodes={len(nodes)}",
        f"--ntasks={len(nodes)}",
        "--ntasks-per-node=1",
        f"--nodelist={','.join(nodes)}",
        f"--cpus-per-task={cpus}",
        "--kill-on-bad-exit=1",
        f"--job-name={spec.run_id}",
    ]


def cancel_step(run_id: str, environ: Mapping[str, str] = os.environ) -> None:
    """scancel the run's step if it outlived its srun (an srun killed hard leaves its tasks to
    slurmd): no orphan keeps a node's cores or GPUs from the next run."""
    job_id, squeue, scancel = environ.get("SLURM_JOB_ID"), shutil.which("squeue"), shutil.which("scancel")
    if not (job_id and squeue and scancel):
        return
    try:
        steps = subprocess.run(
            [squeue, "--steps", f"--jobs={job_id}", "--noheader", "--format=%i %j"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
        for step_id, name in (line.split(maxsplit=1) for line in steps.splitlines() if " " in line.strip()):
            if name.strip() == run_id:
                subprocess.run([scancel, step_id], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        pass


# --- sbatch: a whole sweep as one job --------------------------------------------------------


def check_partition(partition: str) -> int:
    """The partition's node count, or SpecError naming the partitions that exist."""
    try:
        text = _scontrol("-o", "show", "partition", partition)
    except SpecError:
        known = re.findall(r"PartitionName=(\S+)", _scontrol("-o", "show", "partition"))
        raise SpecError(
            f"partition {partition!r} does not exist on this cluster; " f"valid: {', '.join(known) or 'none'}"
        ) from None
    match = re.search(r"\bTotalNodes=(\d+)", text)
    return int(match[1]) if match else 0


SAFE_DIRECTIVE_WORD = re.compile(r"[A-Za-z0-9._/%:=@+,-]+")
"""What an #SBATCH value may hold without quotes."""


def directive_word(value: str, what: str) -> str:
    """`value` as one word of an #SBATCH line: as it is where it is plain, else in double quotes
    with backslashes and quotes escaped (sbatch reads a directive's quotes and backslashes so; `#`
    outside quotes would start a comment). A line break cannot be quoted in a directive: SpecError."""
    if any(character in value for character in "\n\r\0"):
        raise SpecError(f"{what} {value!r} cannot be written in an #SBATCH line: it holds a line break or a NUL")
    if SAFE_DIRECTIVE_WORD.fullmatch(value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def exclude_options(hosts: tuple[str, ...]) -> list[str]:
    """`--exclude=node-1,node-7`: the nodes the job must not be given (SLURM's own option, which
    sbatch, salloc and srun share; the names are plain host names, `config.options.host_names`, so
    SLURM reads them as node names, never as a hostlist range or a file)."""
    return [f"--exclude={','.join(hosts)}"] if hosts else []


def check_directive(option: str) -> str:
    """A whole #SBATCH line the user gave (--sbatch-option): one line, as it is."""
    if any(character in option for character in "\n\r\0"):
        raise SpecError(f"--sbatch-option {option!r} is not one #SBATCH line: it holds a line break or a NUL")
    return option


def sbatch_script(
    sweep_argv: list[str],
    sweep_dir: str,
    nodes: int,
    gpus_per_node: int | None,
    options: list[str],
    python: str,
    workdir: str,
) -> str:
    """The batch script: whole nodes for the sweep, which then starts one srun step per run and
    writes the report at the end. Submitted again (or requeued), it resumes the same sweep."""
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={directive_word('ddpbench-' + os.path.basename(sweep_dir), 'the job name')}",
        f"#SBATCH --nodes={nodes}",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --exclusive",
        f"#SBATCH --output={directive_word(os.path.join(sweep_dir, 'slurm-%j.out'), '--out')}",
    ]
    if gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={gpus_per_node}")
    lines += [f"#SBATCH {check_directive(option)}" for option in options]
    sweep = [python, "-m", "ddpbench", "sweep", "--launcher", "slurm", *sweep_argv]
    # --resume is the sweep's own option: before a script's arguments, which follow --.
    cut = sweep.index("--") if "--" in sweep else len(sweep)
    resume = [*sweep[:cut], "--resume", *sweep[cut:]]
    lines += [
        "set -euo pipefail",
        f"cd {shlex.quote(workdir)}",
        f"if [ -e {shlex.quote(os.path.join(sweep_dir, 'manifest.json'))} ]; then",
        f"  exec {shlex.join(resume)}  # requeued or submitted again: carry on",
        "fi",
        f"exec {shlex.join(sweep)}",
        "",
    ]
    return "\n".join(lines)


def check_submission(script_path: str) -> None:
    """`sbatch --test-only`: the scheduler's own verdict on the job (partition, node count,
    account, time limit) before anything is queued; its refusal becomes a one-line error."""
    sbatch = shutil.which("sbatch")
    if sbatch is None:
        raise SpecError("SLURM's sbatch is not on PATH; load the cluster's slurm module first")
    done = subprocess.run([sbatch, "--test-only", script_path], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        lines = [line.strip() for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        raise SpecError(f"SLURM would refuse the job: {lines[-1] if lines else f'sbatch exit code {done.returncode}'}")


def submit(script_path: str, wait: bool, secrets: dict[str, str] | None = None) -> tuple[int, str]:
    """sbatch the script; (exit code, sbatch's output: the job id, or its error). `secrets` are
    variables the job reads (sbatch passes its environment on)."""
    sbatch = shutil.which("sbatch")
    if sbatch is None:
        raise SpecError("SLURM's sbatch is not on PATH; load the cluster's slurm module first")
    done = subprocess.run(
        [sbatch, "--parsable", *(["--wait"] if wait else []), script_path],
        capture_output=True,
        text=True,
        env={**os.environ, **(secrets or {})},
    )
    return done.returncode, (done.stdout + done.stderr).strip()
