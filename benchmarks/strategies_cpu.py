"""Eager and compiled DDP and FSDP2 in one CPU sweep, written up: runs the sweep once and writes
docs/measurements/strategies-cpu.md (commit, machine, command, what the sweep printed, memory
table included, and the few comparisons the records allow, each computed here from them).

    python benchmarks/strategies_cpu.py        # about 2 minutes on the 2-core machine

Run it on a quiet machine: one run per point is one sample, and the page says so.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from ddpbench.analysis.frames import load, scaling_table  # noqa: E402

PAGE = os.path.join(REPO, "docs", "measurements", "strategies-cpu.md")
OPTIONS = [
    "--device",
    "cpu",
    "--workloads",
    "mlp",
    "--strategies",
    "local,ddp,fsdp2",
    "--compile",
    "off,default",
    "--steps",
    "30",
    "--repeat",
    "1",
]


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()


def mib(value: float) -> str:
    return f"{value / 2**20:.0f} MiB"


def comparisons(table) -> list[str]:
    """Sentences from the scaling table's own figures: model state per rank of FSDP2 against DDP,
    and what compiling changed against each strategy's own eager run."""
    said = []
    two = table[table["world_size"] == 2].set_index("strategy")
    if {"ddp", "fsdp2"} <= set(two.index) and two.loc["ddp", "model_state_bytes"]:
        ddp, fsdp2 = two.loc["ddp", "model_state_bytes"], two.loc["fsdp2", "model_state_bytes"]
        said.append(
            f"At 2 ranks FSDP2 holds {mib(fsdp2)} of model state per rank against DDP's {mib(ddp)} "
            f"({fsdp2 / ddp:.0%}): its shards, plus the unsharded parameters and gradients it holds at once "
            "during a step; DDP's counts its gradient buckets beside the gradients."
        )
    for world_size in (1, 2):
        rows = table[table["world_size"] == world_size].set_index("strategy")
        for strategy in ("local", "ddp", "fsdp2"):
            compiled = f"{strategy}+compile"
            if strategy in rows.index and compiled in rows.index:
                eager_x, compiled_x = rows.loc[strategy, "throughput"], rows.loc[compiled, "throughput"]
                said.append(
                    f"{strategy} x{world_size}: compiled {compiled_x:,.1f} against eager {eager_x:,.1f} samples/s "
                    f"({compiled_x / eager_x - 1:+.0%}), one run each."
                )
    return said


def main() -> int:
    commit = git("rev-parse", "--short", "HEAD")
    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    out = tempfile.mkdtemp(prefix="strategies-cpu-")
    command = [sys.executable, "-m", "ddpbench", "sweep", *OPTIONS, "--out", out, "--sweep-id", "example"]
    shown = ".venv/bin/ddpbench sweep " + " ".join(OPTIONS)
    load_before, started = os.getloadavg()[0], time.time()
    done = subprocess.run(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    took, load_after = time.time() - started, os.getloadavg()[0]
    printed = "\n".join(line for line in done.stdout.splitlines() if not line.startswith("["))
    runs = load(os.path.join(out, "example"))
    table = scaling_table(runs)
    sentences = "\n".join(f"- {sentence}" for sentence in comparisons(table))
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    page = f"""# Eager and compiled DDP and FSDP2 in one CPU sweep

What `--strategies local,ddp,fsdp2 --compile off,default` prints on the development machine: the
example in [Sweeps](../sweeps.md#compiled-ddp-fsdp2-and-replicate). Written by
`benchmarks/strategies_cpu.py`, which ran the sweep once.

- **Commit**: {commit}{" with uncommitted changes to tracked files" if dirty else ""}.
- **Machine**: {os.cpu_count()} cores, {platform.system()} {platform.release()}, no GPU, torch over gloo;
  1-minute load average {load_before:.2f} before, {load_after:.2f} after; {date}.
- **Command**: `{shown}` (exit code {done.returncode}, {took / 60:.1f} minutes, {len(runs)} runs).

```text
{printed.strip()}
```

From the records (one run per point: a sample, not a finding; see the scaling table's in-run
column and `!!` lines for what the machine did to each process):

{sentences}
"""
    with open(PAGE, "w", encoding="utf-8") as handle:
        handle.write(page)
    print(page)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
