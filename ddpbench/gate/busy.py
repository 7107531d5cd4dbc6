"""A regression measured on a busy machine: other processes took cores or GPUs that a run
wanted during its timed window (each record's `machine_load`, ddpbench.running.machine_load). Such
a regression says nothing about the code. Like a drift the canary accounts for, it still fails, with
exit 4 and the figures, and asks for a rerun on a quiet machine or a same-job A/B; it never passes.
No torch."""

from __future__ import annotations

from ddpbench.gate.compare import Comparison
from ddpbench.gate.values import describe, run_key
from ddpbench.records.schema import Record


def busy_runs(candidate: list[Record]) -> dict[str, list[str]]:
    """Configuration -> one line per candidate run of it that ran on a busy machine. The baseline's
    are not read: a busy baseline is slower, which can hide a regression but never make one."""
    found: dict[str, list[str]] = {}
    for record in candidate:
        load = record.machine_load
        if record.status == "ok" and load is not None and load.busy:
            found.setdefault(describe(run_key(record)), []).append(f"candidate run {record.run_id}: {load.why}")
    return found


def busy_regressions(busy: dict[str, list[str]], comparisons: list[Comparison]) -> list[str]:
    """The lines that account for the regressions when every configuration that regressed had a
    run on a busy machine; empty when there is no regression or one the load cannot explain."""
    regressed = {c.configuration for c in comparisons if c.verdict == "regression"}
    if not regressed or not regressed <= set(busy):
        return []
    return [line for configuration in sorted(regressed) for line in busy[configuration]]


def busy_words(lines: list[str]) -> str:
    return (
        "every regression has a run measured on a busy machine, so it says nothing about the code: "
        + "; ".join(lines)
        + "; rerun on a quiet machine, or confirm with a same-job A/B (ddpbench ab, gate --confirm-with)"
    )
