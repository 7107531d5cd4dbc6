"""What a run's processes are started with: the command (the worker alone, or torchrun around it,
under srun for SLURM) and the environment they inherit. No torch imported here."""

from __future__ import annotations

import os
import sys
import time

from ddpbench.config.channels import HANG_DUMPS_FOLDER, HEARTBEAT_ENV, LAUNCHED_AT_ENV
from ddpbench.config.spec import RunSpec
from ddpbench.running import slurm


def worker_module_args(spec: RunSpec) -> list[str]:
    # A script runs in place of the worker's own loop, under the observer's hooks.
    module = "ddpbench.worker.script" if spec.script is not None else "ddpbench.worker"
    return ["-m", module, "--spec-json", spec.to_json()]


AGENT = "ddpbench.worker.agent"
"""The agent that forks a run's ranks (`--rank-start fork`); it reads torchrun's command line."""


def torchrun_equivalent(command: list[str]) -> list[str]:
    """The plain torchrun command line a forked run's command stands for: the same options, with
    torchrun's own module in place of the agent that forks its ranks."""
    return [part if part != AGENT else "torch.distributed.run" for part in command]


def command_for(spec: RunSpec, log_dir: str | None = None) -> list[str]:
    if spec.launcher == "slurm":  # the same command on every node of the run, started by srun
        return slurm.srun_command(spec) + _command_on_node(spec, log_dir)
    return _command_on_node(spec, log_dir)


def _command_on_node(spec: RunSpec, log_dir: str | None) -> list[str]:
    if not spec.launched_by_torchrun:
        return [sys.executable, *worker_module_args(spec)]
    # Forked ranks: the same torchrun command line, read by ddpbench's agent (ddpbench.worker.agent).
    agent = AGENT if spec.rank_start != "exec" else "torch.distributed.run"
    command = [sys.executable, "-m", agent, f"--nproc-per-node={spec.nproc}", "--max-restarts=0"]
    if log_dir:
        # Per-rank stdout/stderr files (and @record error files), still shown on the console.
        command += [f"--log-dir={log_dir}", "--tee=3"]
    if spec.rdzv_endpoint:
        # c10d gives agents their node ranks itself; srun starts the same command on every node.
        node_rank = [] if spec.launcher == "slurm" else [f"--node-rank={spec.node_rank}"]
        command += [
            f"--nnodes={spec.nnodes}",
            *node_rank,
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={spec.rdzv_endpoint}",
            f"--rdzv-id={spec.rdzv_id}",
        ]
    elif spec.rdzv_port:
        # One node on a chosen port: the same c10d rendezvous, on localhost only.
        command += [
            "--nnodes=1",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint=localhost:{spec.rdzv_port}",
            f"--rdzv-id={spec.run_id}",
        ]
    else:
        # Standalone: a c10d rendezvous on localhost with a free port picked by torchrun.
        command += ["--standalone"]
    return command + worker_module_args(spec)


# What torchrun tells its workers about their job. A ddpbench run started from inside such a job
# (a torchrun or SLURM script) inherits them; `local` and `dp` are one process of their own.
LAUNCHER_VARIABLES = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "ROLE_NAME",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_ERROR_FILE",
)


# Kineto (the profiler's C++ side) logs through its own levels: ... ERROR 4, USDT 5 (its
# profiler_start/stop markers). 6 silences it, and on CPU it has nothing else to say: its one
# ERROR there is "gpuGetDeviceCount failed", i.e. that the machine has no GPU.
KINETO_LOG_LEVEL = "KINETO_LOG_LEVEL"
KINETO_QUIET_ON_CPU = "6"


def child_environment(spec: RunSpec, heartbeat_dir: str, verbose: bool = False) -> dict[str, str]:
    env = dict(os.environ)
    if not spec.launched_by_torchrun:
        for name in LAUNCHER_VARIABLES:
            env.pop(name, None)
    # torchrun would otherwise force OMP_NUM_THREADS=1; the worker also calls set_num_threads.
    env["OMP_NUM_THREADS"] = str(spec.threads_per_rank)
    # The workers write into a pipe, so they cannot see that a person is watching: tell them.
    # Without `verbose` nobody sees their output, and the launcher draws the bar from heartbeats.
    env["DDPBENCH_PROGRESS"] = "1" if verbose and sys.stderr.isatty() else "0"
    env[HEARTBEAT_ENV] = heartbeat_dir
    # When the launcher started the run's processes: each rank's time to its first timed step.
    env[LAUNCHED_AT_ENV] = repr(time.time())
    # Quiet the profiler at its source rather than filtering its lines; a level the user set wins,
    # and `verbose` shows everything.
    if spec.device == "cpu" and not verbose and KINETO_LOG_LEVEL not in env:
        env[KINETO_LOG_LEVEL] = KINETO_QUIET_ON_CPU
    # NCCL's own Flight Recorder dump when its watchdog times a collective out, beside ours;
    # a user's own settings win.
    dumps = os.path.join(os.path.dirname(os.path.abspath(heartbeat_dir)), HANG_DUMPS_FOLDER)
    env.setdefault("TORCH_NCCL_DUMP_ON_TIMEOUT", "1")
    for names, default in FLIGHT_RECORDER_VARIABLES:
        value = next((env[name] for name in names if env.get(name)), default or os.path.join(dumps, "nccl_trace_rank_"))
        for name in names:
            env.setdefault(name, value)
    return env


# The Flight Recorder's settings under both of their names, with one value (a user's, under either
# name, wins): torch 2.5 to 2.7 read only TORCH_NCCL_TRACE_BUFFER_SIZE and TORCH_NCCL_DEBUG_INFO_TEMP_FILE;
# later releases read TORCH_FR_BUFFER_SIZE and TORCH_FR_DUMP_TEMP_FILE first and the old names after
# (pytorch#152563 made the recorder vendor-neutral; torch 2.14's libtorch holds all four names). Set
# under one name only, an older torch records nothing (a buffer of 0) and its hang dumps come out empty.
# (names, default; None: the hang-dumps folder's prefix)
FLIGHT_RECORDER_VARIABLES = (
    (("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"), "2000"),
    (("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"), None),
)
