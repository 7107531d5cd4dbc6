"""A regression measured on a busy machine: other processes took cores or GPUs that a run
wanted during its timed window (each record's `machine_load`, ddpbench.host.load). Such
a regression says nothing about the code. Like a drift the canary accounts for, it still fails, with
exit 4 and the figures, and asks for a rerun on a quiet machine or a same-job A/B; it never passes.

A run whose own process ran at another speed than its sweep's others on the fixed probe
(`ddpbench.analysis.probes`), on either side, is treated alike, whichever way it went: a fast
baseline process fakes a regression, a fast candidate process hides one. No verdict of the
configurations it touches is a plain pass or regression. No torch."""

from __future__ import annotations

from ddpbench.analysis.probes import probe_flags
from ddpbench.gate.compare import Comparison
from ddpbench.gate.values import describe, local_key, run_key
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


def probe_flagged(side: str, records: list[Record]) -> dict[str, list[str]]:
    """Configuration -> one line per run of this side (`baseline` or `candidate`) whose process the
    probe flags. A flagged `local` run flags every configuration whose efficiency divides by it."""
    by_id = {record.run_id: record for record in records}
    found: dict[str, list[str]] = {}
    for flag in probe_flags(records):
        record = by_id[flag.run_id]
        keys = {run_key(record)}
        if record.spec.strategy == "local":
            keys |= {run_key(other) for other in records if local_key(other) == run_key(record)}
        for key in sorted(keys, key=str):
            found.setdefault(describe(key), []).append(f"{side} run {flag.run_id}: {flag.sentence()}")
    return found


def flagged_comparisons(flagged: dict[str, list[str]], comparisons: list[Comparison]) -> list[str]:
    """The lines of the flagged runs among the configurations compared (any verdict)."""
    compared = {c.configuration for c in comparisons if c.verdict not in ("n/a", "not comparable")}
    return [line for configuration in sorted(compared & set(flagged)) for line in flagged[configuration]]


def flagged_words(lines: list[str]) -> str:
    return (
        "a run's own process ran at another speed than its sweep's others on the speed check, so its comparison says "
        "nothing about the code: " + "; ".join(dict.fromkeys(lines)) + "; rerun, or confirm with a same-job A/B "
        "(ddpbench ab, gate --confirm-with)"
    )
