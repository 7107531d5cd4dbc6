"""`ddpbench comm`: launch the collective microbenchmark under torchrun, fit the network profile,
print the table and draw the plot. No torch imported here (the benchmark itself is
`ddpbench.worker.comm_bench`, one process per device).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass

from ddpbench.analysis.network import COLLECTIVES, DTYPES, format_results_table, profile_from_results
from ddpbench.config.errors import SpecError
from ddpbench.host.facts import usable_cores, visible_gpu_count
from ddpbench.records.store import write_atomic
from ddpbench.running.launch import end_process_group

MIB = 1024 * 1024
# 256 MiB is nccl-tests' usual top size and the default on GPUs. On CPU (gloo over loopback, a few
# hundred MB/s on a busy 2-core machine) one 256 MiB all_reduce takes seconds, so the default
# stops at 64 MiB there; --max-bytes 256M measures the rest when there is time.
DEFAULT_MAX_BYTES = {"cuda": 256 * MIB, "cpu": 64 * MIB}
UNITS = {"": 1, "K": 1024, "M": MIB, "G": 1024 * MIB}


def parse_bytes(text: str) -> int:
    """8, 64K, 256M, 1G (binary units, as nccl-tests' -b/-e)."""
    value = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = value[-1] if value and value[-1] in UNITS else ""
    try:
        number = int(value[: len(value) - len(unit)] if unit else value)
    except ValueError:
        raise SpecError(f"size {text!r} is not a whole number of bytes (e.g. 8, 64K, 256M, 1G)") from None
    if number < 1:
        raise SpecError(f"size {text!r} must be at least 1 byte")
    return number * UNITS[unit]


@dataclass(frozen=True)
class CommOptions:
    """What `ddpbench comm` measures."""

    nproc: int
    """Processes (devices) on this node."""
    backend: str
    """gloo (CPU) or nccl (GPUs)."""
    collectives: tuple[str, ...] = COLLECTIVES
    dtypes: tuple[str, ...] = ("float32",)
    """Element types; float16/bfloat16 are what the compression hooks all-reduce."""
    min_bytes: int = 8
    max_bytes: int = 64 * MIB
    warmup: int = 5
    """Untimed calls per size."""
    min_iters: int = 10
    max_iters: int = 200
    seconds_per_size: float = 0.5
    """Timed calls per size are chosen from the warm-up to take about this long."""
    out: str = "results/comm"
    """Folder for results.json, profile.json and bandwidth.png."""
    name: str = ""

    def __post_init__(self):
        unknown = [c for c in self.collectives if c not in COLLECTIVES]
        if unknown:
            raise SpecError(f"unknown collective {unknown[0]!r}; choose from {', '.join(COLLECTIVES)}")
        unknown = [d for d in self.dtypes if d not in DTYPES]
        if unknown or not self.dtypes:
            raise SpecError(f"unknown element type {(unknown or [''])[0]!r}; choose from {', '.join(DTYPES)}")
        if self.backend not in ("gloo", "nccl"):
            raise SpecError(f"backend must be gloo or nccl; got {self.backend!r}")
        if self.nproc < 2:
            raise SpecError(f"--nproc must be >= 2: a collective needs at least two processes; got {self.nproc}")
        if self.min_bytes > self.max_bytes:
            raise SpecError(f"--min-bytes {self.min_bytes} is above --max-bytes {self.max_bytes}")
        if self.warmup < 1 or self.min_iters < 1 or self.max_iters < self.min_iters:
            raise SpecError("need --warmup >= 1 and 1 <= --min-iters <= --max-iters")
        if self.backend == "nccl" and self.nproc > visible_gpu_count():
            raise SpecError(f"--nproc {self.nproc} with nccl needs {self.nproc} GPUs; {visible_gpu_count()} visible")
        if self.backend == "gloo" and self.nproc > usable_cores():
            raise SpecError(f"--nproc {self.nproc} is more processes than the {usable_cores()} usable cores")


class CommFailed(RuntimeError):
    """The benchmark ended before it measured anything: a failed run, not bad input (exit 1)."""


def run_comm(options: CommOptions) -> tuple[dict, dict, str]:
    """Run the benchmark; returns (results, profile, folder). A run cut short keeps what it measured."""
    os.makedirs(options.out, exist_ok=True)
    results_path = os.path.join(options.out, "results.json")
    threads = max(1, usable_cores() // options.nproc)
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={options.nproc}",
        "--max-restarts=0",
        "-m",
        "ddpbench.worker.comm_bench",
        "--out",
        results_path,
        "--backend",
        options.backend,
        "--collectives",
        ",".join(options.collectives),
        "--dtypes",
        ",".join(options.dtypes),
        "--min-bytes",
        str(options.min_bytes),
        "--max-bytes",
        str(options.max_bytes),
        "--warmup",
        str(options.warmup),
        "--min-iters",
        str(options.min_iters),
        "--max-iters",
        str(options.max_iters),
        "--seconds-per-size",
        str(options.seconds_per_size),
        "--threads",
        str(threads),
    ]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    if os.path.exists(results_path):
        os.unlink(results_path)  # never mistake an older run's results for this one's
    process = subprocess.Popen(command, env=env, start_new_session=True)
    try:
        exit_code = process.wait()
    finally:
        end_process_group(process)
    if not os.path.exists(results_path):
        raise CommFailed(
            f"the collective benchmark exited with code {exit_code} before measuring any size, so "
            f"nothing was written to {options.out}; its processes' output above says why"
        )
    with open(results_path, encoding="utf-8") as handle:
        results = json.load(handle)
    results["exit_code"] = exit_code
    name = (
        options.name
        or f"{results['backend']}-{results['device']}-n{results['world_size']}-{results['env'].get('hostname')}"
    )
    profile = profile_from_results(results, name)
    write_atomic(os.path.join(options.out, "profile.json"), json.dumps(profile, indent=1) + "\n")
    write_atomic(results_path, json.dumps(results, indent=1) + "\n")
    return results, profile, options.out


def report_comm(results: dict, profile: dict, folder: str) -> str:
    """The terminal table, and the plot written beside the results."""
    from ddpbench.report.comm_plots import bandwidth_figure, save_png

    plot_path = os.path.join(folder, "bandwidth.png")
    save_png(bandwidth_figure(results, profile), plot_path)
    text = format_results_table(results, profile)
    if results.get("exit_code"):
        text += (
            f"\nWARNING: the benchmark exited with code {results['exit_code']}; the sizes above are what it measured"
        )
    return text + f"\nprofile: {os.path.join(folder, 'profile.json')}\nplot: {plot_path}"
