"""The gate and the history's hosts: where a regression's culprit rank ran on a host the history
store names as the slowest beyond chance (`ddpbench.history.culprits`), the gate says so, and how to
confirm it. No torch.

The culprit: where the gate compared the causes (a baseline sweep) and waiting for the slowest rank
grew beyond noise, the rank whose wait grew (the rank every candidate run chose, as the gate's why
names it); otherwise (against the history, or a wait whose growth two runs a side can neither show
nor rule out) the candidate's slowest rank beyond noise as a sweep's vote counts it
(`ddpbench.history.culprits.sweep_straggler`). Where the compared wait's interval rules out growth,
there is no culprit: a host that is always slow can be the slowest in a regression the code made.
The second case matters on a slow host: a host held to half a core was the slowest beyond noise in 14
of 15 planted sweeps, while in the gate on one of them (against a null sweep, two runs a side) the
wait for it grew +1.5 ms at p = 0.05, not beyond the level of 0.006 (docs/measurements/recurring-hosts.md).
The candidate's own sweep is left out of the history's test: a sweep is no evidence about itself. The
verdict never depends on this: where the store cannot be read, a note says so.
"""

from __future__ import annotations

from ddpbench.gate.values import describe, run_key


def culprit(configuration: str, records: list, why=None) -> tuple[int, str] | None:
    """(rank, host) of the configuration's culprit in the candidate, or None where it has none."""
    from ddpbench.analysis.straggler import run_straggler
    from ddpbench.history.culprits import sweep_straggler
    from ddpbench.history.ranks import host_of

    runs = [r for r in records if r.status == "ok" and describe(run_key(r)) == configuration and len(r.ranks) > 1]
    if not runs:
        return None
    compared = next((one for one in why or [] if one.configuration == configuration and one.changes), None)
    grew = compared.straggler if compared is not None else None  # set only where the wait grew
    if grew and grew["named"] and grew["rank"] is not None:
        rank = grew["rank"]
    else:
        if compared is not None and wait_ruled_out(compared):
            return None  # the wait did not grow: whatever regressed, the slow rank did not cause it
        straggler = sweep_straggler([run_straggler(record) for record in runs])
        if straggler is None or not straggler.named:
            return None
        rank = straggler.rank
    held = next((r for r in runs[0].ranks if r.rank == rank), None)
    host = host_of(held) if held is not None else None
    return (rank, host) if host else None


def wait_ruled_out(compared) -> bool:
    """Whether the compared causes show that waiting for the slowest rank did not grow by as much as
    the gate names (its interval's upper end below `min_seconds`)."""
    wait = next((change for change in compared.changes if change.name == "straggler_wait"), None)
    high = getattr(getattr(wait, "seconds", None), "high", None)
    return high is not None and high < compared.min_seconds


def suspect_hosts(url: str | None, records: list, comparisons: list, why, candidate_sweep: str | None):
    """(findings as JSON, lines for the gate's notes): one per regressed configuration whose culprit
    rank ran on a host the store names."""
    from ddpbench.history import NoHistoryYet, StoreError, open_store
    from ddpbench.history.culprits import store_verdict

    regressed = sorted({c.configuration for c in comparisons if c.verdict == "regression"})
    culprits = {name: found for name in regressed if (found := culprit(name, records, why)) is not None}
    if url is None or not culprits:
        return [], []
    try:
        with open_store(url, create=False) as store:
            verdict, shown = store_verdict(store, leave_out=candidate_sweep), store.shown
    except NoHistoryYet:
        return [], []
    except StoreError as exc:
        return [], [f"the history's hosts could not be read ({exc}); the verdict stands"]
    findings, lines = [], []
    for configuration, (rank, host) in culprits.items():
        unit = verdict.host(host)
        if unit is None:
            continue
        findings.append({"configuration": configuration, "rank": rank, **unit.as_dict()})
        lines.append(
            f"{configuration}: {host} has been slowest in {unit.votes} of {unit.trials} sweeps: likely the host, not "
            f"the code (rank {rank} ran there; history store {shown}, p = {unit.corrected:.2g} corrected over "
            f"{unit.tested} hosts, this sweep left out); to confirm, run the baseline and the candidate as a same-job "
            f"A/B on other hosts (ddpbench ab, or gate --confirm-with, in a job that avoids {host}: ddpbench sbatch "
            f"--avoid-hosts {host}, ddpbench trainjob --avoid-hosts {host})"
        )
    return findings, lines
