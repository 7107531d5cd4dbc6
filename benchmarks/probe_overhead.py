"""What the process probe costs a run: its two probes (before the warm-up, after the window) on the
slowest process, against the run's wall time, for every run of a sweep folder; written to
docs/measurements/probe-overhead.md with the folder's commit, machine and command.

    python benchmarks/probe_overhead.py results/<sweep-id>      # e.g. the CPU suite's sweep

The probe runs outside the timed window, so it never touches a step time: what it costs is wall
time, which is what this page measures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from ddpbench.analysis.probes import probe_seconds  # noqa: E402
from ddpbench.config.workloads import short_workload_name  # noqa: E402
from ddpbench.records.store import read_records  # noqa: E402

PAGE = os.path.join(REPO, "docs", "measurements", "probe-overhead.md")
LIMIT = 0.03
"""The most of a run's wall time the probe may take."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir")
    args = parser.parse_args(argv)
    records, _ = read_records(args.sweep_dir)
    rows, shares = [], []
    for _, record in sorted(records, key=lambda item: item[1].run_id):
        cost = probe_seconds(record)
        wall = record.launch.wall_s if record.launch else None
        if record.status != "ok" or cost is None or not wall:
            continue
        shares.append(cost / wall)
        rows.append(
            f"| {record.run_id} | {short_workload_name(record.spec.workload)} {record.spec.strategy_name} "
            f"x{record.spec.world_size} | {cost:.2f} | {wall:.1f} | {100 * cost / wall:.2f} % |"
        )
    if not rows:
        print(f"{args.sweep_dir}: no ok run with probes and a wall time", file=sys.stderr)
        return 2
    commit = next((r.env.git_sha[:7] for _, r in records if r.env and r.env.git_sha), "?")
    worst = max(shares)
    page = f"""# What the process probe costs

- **Runs**: the records of `{os.path.basename(os.path.normpath(args.sweep_dir))}`, made at commit {commit}
  on {records[0][1].env.cpu_model if records[0][1].env else "?"} ({len(rows)} runs).
- **Command**: `python benchmarks/probe_overhead.py {args.sweep_dir}`.

Each process of a run times its fixed probe twice (before the warm-up, after the window), outside
the timed window. Per run, the slowest process's two probes against the run's wall time
(`launch.wall_s`, from the launch to the record):

| run | what | probe s | run wall s | share |
|---|---|---|---|---|
{chr(10).join(rows)}

Median share {100 * statistics.median(shares):.2f} %, largest {100 * worst:.2f} %
({"within" if worst < LIMIT else "above"} the {100 * LIMIT:.0f} % the probe may cost).
"""
    with open(PAGE, "w", encoding="utf-8") as handle:
        handle.write(page)
    print(page)
    return 0 if worst < LIMIT else 1


if __name__ == "__main__":
    sys.exit(main())
