"""`ddpbench history hosts` in words and JSON: the hosts, devices and ranks that were the slowest
beyond chance (`ddpbench.history.culprits`), and what to do about them. No torch."""

from __future__ import annotations

from fractions import Fraction
from html import escape

from ddpbench.history.culprits import Culprit, HostsVerdict, SweepOutcome

PLURALS = {"host": "hosts", "device": "devices", "rank": "ranks"}


def _count(number: int, word: str) -> str:
    return f"{number} {word if number == 1 else PLURALS.get(word, word + 's')}"


def chance_words(unit: Culprit) -> str:
    """`1 in 2` where every sweep had the same layout, else the votes chance gives in all."""
    if len(set(round(p, 12) for p in unit.chances)) == 1:
        share = Fraction(unit.chances[0]).limit_denominator(4096)
        return f"{share.numerator} in {share.denominator}"
    return f"{unit.expected:.1f} of {unit.trials}"


def _p(unit: Culprit) -> str:
    if unit.corrected is None:
        return f"p = {unit.p_value:.2g}, not tested: it could not reach the level even with every vote"
    return f"p = {unit.corrected:.2g}, corrected over {_count(unit.tested, unit.kind)}"


def _ms(lead) -> str:
    half = f" ± {lead.half * 1e3:.1f}" if lead.has_interval else ""
    return f"{lead.value * 1e3:+.1f}{half} ms per step"


def first_day(verdict: HostsVerdict) -> str:
    return verdict.window.since or (verdict.sweeps[0].ended_at[:10] if verdict.sweeps else "")


def device_words(verdict: HostsVerdict, uuid: str) -> str:
    known = verdict.devices.get(uuid) or {}
    parts = [
        f"serial {known['serial']}" if known.get("serial") else "",
        f"bus {known['bus']}" if known.get("bus") else "",
    ]
    said = ", ".join(part for part in parts if part)
    return f"{uuid} ({said})" if said else uuid


def unit_line(verdict: HostsVerdict, unit: Culprit) -> str:
    """`node-1: slowest in 12 of 13 sweeps since 2026-12-01, where chance gives 1 in 2 (p = 0.003,
    corrected over 2 hosts); +12.4 ± 3.1 ms per step, in backward; since sweep nightly-17`."""
    name = unit.name
    if unit.kind == "device":
        host = (verdict.devices.get(name) or {}).get("host")
        name = device_words(verdict, name) + (f" on {host}" if host else "")
    elif unit.kind == "rank":
        name = f"rank {name}"
    line = (
        f"{name}: slowest in {unit.votes} of {unit.trials} sweeps since {first_day(verdict)}, where chance gives "
        f"{chance_words(unit)} ({_p(unit)})"
    )
    if unit.lead is not None:
        line += f"; {_ms(unit.lead)}, " + (f"in {unit.phase}" if unit.phase else "phase unclear")
    if unit.since:
        line += f"; since sweep {unit.since}"
    return line


def _votes_by(counter) -> str:
    return ", ".join(f"{name} {count}" for name, count in sorted(counter.items(), key=lambda kv: str(kv[0])))


def hosts_lines(verdict: HostsVerdict, shown: str) -> list[str]:
    sweeps, voting = verdict.sweeps, verdict.voting
    if not sweeps:
        return [
            f"history store {shown}: no sweep in the window has runs of several ranks with their hosts recorded; "
            "nothing to test (sweeps added before ddpbench kept ranks: add them again from their folders)"
        ]
    lines = [
        f"hosts over {_count(len(sweeps), 'sweep')} from {sweeps[0].ended_at[:10]} to {sweeps[-1].ended_at[:10]} "
        f"(window: {window_words(verdict)}) in {shown}: {len(voting)} named their slowest rank beyond noise (one "
        f"vote each), {len(sweeps) - len(voting)} named none"
        + (f"; {verdict.not_recorded} vote(s) from ranks whose host was not recorded" if verdict.not_recorded else "")
    ]
    named = verdict.named("host")
    for unit in named:
        lines.append(unit_line(verdict, unit))
        if unit.with_devices:
            top, count = unit.with_devices.most_common(1)[0]
            lines.append(f"  on {device_words(verdict, top)} in {count} of those {unit.votes} sweeps")
    lines += [unit_line(verdict, unit) for unit in verdict.named("device")]
    for unit in verdict.confounded():
        lines.append(
            f"{unit.name} and {unit.confounded_with} go together: {unit_line(verdict, unit).split(': ', 1)[1]}; "
            f"{unit.name} held {unit.confounded_with} in every one of its votes, so the host cannot be told from the "
            "rank: vary which node takes node rank 0 (another node first in the job) to tell them apart"
        )
    for unit in (unit for unit in verdict.families["rank"] if unit.beyond_chance):
        hosts = len(unit.with_ranks)
        lines.append(
            f"{unit_line(verdict, unit)}, on {_count(hosts, 'host')} ({_votes_by(unit.with_ranks)}): the slowness "
            "recurs with the rank (its code or its place in the job)"
            + (", not a host; excluding hosts will not help" if hosts > 1 else "")
        )
    if not named and not verdict.named("device"):
        closest = next((unit for unit in verdict.families["host"] if not unit.beyond_chance and unit.votes), None)
        lines.append(
            "no host or device was the slowest beyond chance"
            + (f" (the most votes: {unit_line(verdict, closest)})" if closest is not None else "")
        )
    lines.append(
        f"(a sweep's vote: the host and device that held its slowest rank beyond noise; each host's votes against "
        f"the chance its share of each job's ranks gives, an exact binomial test corrected over the hosts tested, "
        f"so that a window with no slow host names one at most {100 * verdict.alpha:.2g} % of the time; devices and "
        "ranks the same way"
        + (f"; ± are 95 % intervals over the sweeps; change points by {verdict.method})" if named else ")")
    )
    return lines + advice(verdict)


def window_words(verdict: HostsVerdict) -> str:
    if verdict.window.since:
        return f"since {verdict.window.since}"
    return f"the last {verdict.window.last} sweeps" if verdict.window.last else "every sweep"


def avoid_hosts(verdict: HostsVerdict) -> list[str]:
    """The hosts to keep out of the next jobs: those named (beyond chance, not a rank's doing), and
    the hosts of named devices."""
    hosts = [unit.name for unit in verdict.named("host")]
    for unit in verdict.named("device"):
        host = (verdict.devices.get(unit.name) or {}).get("host")
        if host and host not in hosts:
            hosts.append(host)
    return hosts


def advice(verdict: HostsVerdict) -> list[str]:
    hosts = avoid_hosts(verdict)
    if not hosts:
        return ["what to do: no host to keep out of the next jobs"]
    listed = ",".join(hosts)
    return [
        f"what to do: keep {listed} out of the next jobs, and confirm with a same-job A/B on other hosts "
        "(ddpbench ab, or gate --confirm-with, in such a job):",
        f"  SLURM: ddpbench sbatch --avoid-hosts {listed} ...  (writes #SBATCH --exclude={listed}; by hand: "
        f"sbatch/salloc/srun --exclude={listed})",
        f"  Kubernetes: ddpbench trainjob --avoid-hosts {listed} ...  (a required node anti-affinity: "
        f"kubernetes.io/hostname NotIn {listed})",
    ]


def _sweep(one: SweepOutcome) -> dict:
    return {
        "machine_class": one.machine_class,
        "suite": one.suite,
        "sweep": one.sweep,
        "ended_at": one.ended_at,
        "configuration": one.configuration,
        "voted": one.voted,
        "rank": one.rank,
        "host": one.host,
        "device": one.device,
        "wait_s": one.straggler.wait.value if one.voted else None,
        "phase": one.straggler.phase if one.voted else None,
        "hosts": {str(rank): host for rank, host in sorted(one.hosts.items())},
    }


def hosts_json(verdict: HostsVerdict, shown: str) -> dict:
    return {
        "store": shown,
        "window": verdict.window.as_dict(),
        "sweeps": len(verdict.sweeps),
        "votes": len(verdict.voting),
        "host_not_recorded": verdict.not_recorded,
        "family_alpha": verdict.alpha,
        "change_point_method": verdict.method,
        "named": {kind: [unit.name for unit in verdict.named(kind)] for kind in ("host", "device")},
        "ranks_beyond_chance": [unit.name for unit in verdict.families["rank"] if unit.beyond_chance],
        "confounded": [unit.as_dict() for unit in verdict.confounded()],
        "avoid_hosts": avoid_hosts(verdict),
        "families": {kind: [unit.as_dict() for unit in units] for kind, units in verdict.families.items()},
        "devices": verdict.devices,
        "by_sweep": [_sweep(one) for one in verdict.sweeps],
        "lines": hosts_lines(verdict, shown),
    }


def hosts_html(verdict: HostsVerdict, shown: str) -> str:
    """The history page's hosts section: the answer's lines, then every host tested in a table."""
    lines = hosts_lines(verdict, shown)
    rows = []
    for unit in verdict.families.get("host", []):
        lead = _ms(unit.lead) if unit.lead is not None else ""
        verdict_words = (
            "named"
            if unit.named
            else f"goes with {unit.confounded_with}"
            if unit.confounded_with
            else "within chance"
            if unit.corrected is not None
            else "too few sweeps to tell"
        )
        cells = [
            unit.name,
            f"{unit.votes} of {unit.trials}",
            chance_words(unit),
            f"{unit.corrected:.2g}" if unit.corrected is not None else "not tested",
            verdict_words,
            lead + (f", in {unit.phase}" if unit.lead is not None and unit.phase else ""),
            unit.since or "",
        ]
        rows.append("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in cells) + "</tr>")
    table = (
        "<table><thead><tr><th>host</th><th>slowest in (sweeps)</th><th>chance gives</th><th>p, corrected</th>"
        "<th>verdict</th><th>lead</th><th>since sweep</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
        if rows
        else ""
    )
    said = "".join(f'<p class="note">{escape(line)}</p>' for line in lines)
    return f'<section id="hosts"><h2>Hosts</h2>{said}{table}</section>'
