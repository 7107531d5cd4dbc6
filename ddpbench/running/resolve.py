"""Before a run starts: its spec made concrete for this machine (`auto` device, size, threads per
rank, a run id, a SLURM allocation's placement), the oversubscription it would cause, and an output
folder it can write to. Bad choices raise SpecError. No torch imported here."""

from __future__ import annotations

import dataclasses
import functools
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from datetime import datetime

from ddpbench.config.identity import locate_files
from ddpbench.config.ids import plain_name
from ddpbench.config.spec import RunSpec, SpecError, check_launchable, resolve_device, threads_per_process
from ddpbench.config.workloads import check_script, check_workload_name, short_workload_name
from ddpbench.host.facts import usable_cores, visible_gpu_count
from ddpbench.host.gpu_needs import (
    check_dp_memory,
    check_gpu_compile_tools,
    check_not_rocm,
    first_gpu_memory_bytes,
)
from ddpbench.host.torch_env import check_gpu_build, check_installed, gpu_build
from ddpbench.running import slurm


def resolve(spec: RunSpec, gpu_count: int | None = None, cores: int | None = None) -> RunSpec:
    """Turn `auto` and defaults into concrete choices for this machine, or raise SpecError."""
    if spec.script is not None:
        check_script(spec.script.path)
        # every rank, on every node, finds it wherever its working directory is
        spec = spec.replace(script=dataclasses.replace(spec.script, path=os.path.abspath(spec.script.path)))
    else:
        check_workload_name(spec.workload)
    check_launchable(spec)
    # A run on this machine (no node shape given) runs with this interpreter's torch: missing or too
    # old is said before torch is asked how many GPUs there are.
    here = gpu_count is None
    if here:
        check_installed()
    spec = spec.replace(run_id=spec.run_id or make_run_id(spec))
    # What the user's files are, fixed now: the record's configuration is then the same wherever it
    # is read from (`config.identity`).
    spec = locate_files(spec)
    if spec.launcher == "slurm":  # the allocation's nodes, not this one, say what a node has
        node_gpus, node_cores, rendezvous = slurm.placement(spec)
        gpu_count = node_gpus if gpu_count is None else gpu_count
        cores = node_cores if cores is None else cores
        spec = spec.replace(**rendezvous)
    gpu_count = visible_gpu_count() if gpu_count is None else gpu_count
    cores = usable_cores() if cores is None else cores
    device = resolve_device(spec.device, gpu_count)
    if here and device == "cuda":  # before counting GPUs: a torch without CUDA sees none
        check_not_rocm(gpu_build())
        check_gpu_build(spec.world_size if spec.launched_by_torchrun else 1)
    if device == "cuda" and spec.nproc > gpu_count:
        raise SpecError(
            f"nproc {spec.nproc} needs {spec.nproc} GPUs per node with device cuda; " f"this machine has {gpu_count}"
        )
    threads = spec.threads_per_rank or threads_per_process(spec.strategy, spec.nproc, cores, spec.nproc)
    changes = {
        # A run under torchrun forks its ranks unless told otherwise; local and dp are one new Python.
        "rank_start": (spec.rank_start or "fork") if spec.launched_by_torchrun else "exec",
        "device": device,
        # a script's model is its own: no size to pick
        "size": None if spec.script else spec.size or ("full" if device == "cuda" else "tiny"),
        "threads_per_rank": threads,
    }
    spec = spec.replace(**changes)  # RunSpec re-validates, e.g. fp16 once device is cpu
    if spec.compile != "off" and spec.device == "cpu" and not cpp_compiler():
        raise SpecError(
            f"--compile {spec.compile} on cpu needs a C++ compiler: torch's inductor builds its CPU kernels with one "
            "(g++ or c++ on PATH, or CXX); install g++, or use --compile off"
        )
    if here and spec.device == "cuda" and spec.compile != "off":
        check_gpu_compile_tools(spec.compile)
    if here and spec.device == "cuda" and spec.script is None:
        check_dp_memory(spec, first_gpu_memory_bytes())
    if spec.strategy == "fsdp2" and spec.script is None:
        check_shardable(spec.workload, spec.size or "tiny")
    return spec


@functools.cache
def check_shardable(workload: str, size: str) -> None:
    """SpecError where FSDP2 cannot shard the workload's model unit by unit, asked of a process of
    its own (`ddpbench.worker.shardable`: it imports torch and the workload); once per workload and
    size, however many runs a sweep plans of it. The same process first asks this torch for FSDP2's
    `fully_shard`: a build without it is refused there, in one line."""
    done = subprocess.run(
        [sys.executable, "-m", "ddpbench.worker.shardable", workload, size],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode == 2:
        raise SpecError(done.stdout.strip())
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SpecError(f"fsdp2: could not check whether {workload} can be sharded: {tail}")


def cpp_compiler() -> str | None:
    """The C++ compiler inductor would find for CPU kernels: $CXX, else g++, else c++ on PATH."""
    if os.environ.get("CXX"):
        return shutil.which(os.environ["CXX"])
    return shutil.which("g++") or shutil.which("c++")


def oversubscription(spec: RunSpec, cores: int | None = None) -> dict | None:
    """The figures when a resolved CPU run asks for more threads than this node has usable cores
    (None otherwise): its ranks then time-share cores, and its throughput describes that, not
    scaling. A GPU run cannot get here: `resolve` refuses more processes than GPUs."""
    if spec.device != "cpu":
        return None
    cores = usable_cores() if cores is None else cores
    processes = spec.nproc if spec.launched_by_torchrun else 1  # dp and local: one process
    threads = processes * spec.threads_per_rank
    if threads <= cores:
        return None
    return {
        "device": "cpu",
        "processes": processes,
        "threads_per_process": spec.threads_per_rank,
        "threads": threads,
        "usable_cores": cores,
    }


def wanted_cores(spec: RunSpec) -> int:
    """Cores a resolved run asks of its node: each process's threads on CPU, one host thread per
    process on GPUs, and one per data loader worker (as the worker's machine_load counts them)."""
    processes = spec.nproc if spec.launched_by_torchrun else 1
    threads = (spec.threads_per_rank or 1) if spec.device == "cpu" else 1
    return processes * (threads + (spec.num_workers or 0))


def oversubscription_warning(figures: dict) -> str:
    return (
        f"warning: oversubscribed: {figures['processes']} process{'es' if figures['processes'] != 1 else ''} x "
        f"{figures['threads_per_process']} thread{'s' if figures['threads_per_process'] != 1 else ''} = "
        f"{figures['threads']} threads on {figures['usable_cores']} usable cores; ranks will time-share cores, "
        "so throughput and efficiency describe time-sharing, not scaling (the record says so)"
    )


def make_run_id(spec: RunSpec) -> str:
    workload = plain_name(short_workload_name(spec.workload))  # a user's file may be named anything
    stamp = datetime.now().strftime("%Y%m%dT%H%M%S")
    return f"{workload}-{spec.strategy_name.replace('+', '-')}-n{spec.world_size}-{stamp}-{secrets.token_hex(2)}"


MIN_FREE_BYTES = 200 * 1024 * 1024  # records are small, but traces and logs are not


def check_output_folder(out_dir: str) -> None:
    """Fail before launching if records could not be written there, or the disk is nearly full."""
    runs = os.path.join(out_dir, "runs")
    try:
        os.makedirs(runs, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=runs, prefix=".write-test-"):
            pass
    except OSError as exc:
        raise SpecError(f"output folder {out_dir!r} is not writable: {exc.strerror or exc}") from None
    free = shutil.disk_usage(runs).free
    if free < MIN_FREE_BYTES:
        raise SpecError(
            f"output folder {out_dir!r} has only {free / 2**20:.0f} MiB free; "
            f"ddpbench needs at least {MIN_FREE_BYTES / 2**20:.0f} MiB for records, logs and traces"
        )
