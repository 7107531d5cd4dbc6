"""The gate's cause lines in words: the terminal, the Markdown of a CI job summary and the JSON.
No torch.

Every figure is candidate less baseline with its 95 % interval; a cause is named only where it grew
beyond noise at the level `why` holds it to (said once, under the lines).
"""

from __future__ import annotations

from ddpbench.analysis.estimates import Estimate
from ddpbench.gate.why import COMPUTE, ONE_DEVICE, Change, Why

SOURCES = {
    "ablation": "the in-process ablation's own steps",
    "collectives": "the collectives matched across the ranks' traces",
    "replay": "the no_sync replay",
    "mixed": "the runs' ablation, traces or replay",
}


def _ms(estimate: Estimate) -> str:
    half = f" ± {estimate.half * 1e3:.2f}" if estimate.has_interval else ""
    return f"{estimate.value * 1e3:+.2f}{half} ms per step"


def _pp(estimate: Estimate) -> str:
    half = f" ± {estimate.half:.1f}" if estimate.has_interval else ""
    return f"{estimate.value:+.1f}{half} pp"


def _pct(estimate: Estimate) -> str:
    """A percent change from the log scale: its interval is not symmetric, so both ends are given."""
    if not estimate.has_interval:
        return f"{estimate.value:+.0f} %"
    return f"{estimate.value:+.0f} % ({estimate.low:+.0f} to {estimate.high:+.0f} %)"


def straggler_words(straggler: dict) -> str:
    source = SOURCES.get(straggler["source"], straggler["source"])
    if not straggler["named"] or straggler["rank"] is None:
        return f"no single rank: the ranks take turns being the slowest (from {source})"
    host = f" on {straggler['host']}" if straggler.get("host") else ""
    phase = f"in its {straggler['phase']}" if straggler.get("phase") else "phase unclear"
    return f"rank {straggler['rank']}{host} held the others back, {phase} (from {source})"


def change_line(why: Why, change: Change) -> str:
    figures = f"{_ms(change.seconds)}, {_pp(change.points)}"
    if change.name == COMPUTE:
        return f"{change.label}: {ONE_DEVICE[change.source]} slowed by {_pct(change.slowdown)} too ({figures})"
    if change.name == "straggler_wait" and why.straggler is not None:
        return f"{change.label}: {figures}; {straggler_words(why.straggler)}"
    return f"{change.label}: {figures}"


def headline(why: Why) -> str:
    """What the configuration's causes say, in one line after its name."""
    if why.single_device:
        return "one device: no scaling causes to compare; what slowed is the model's own compute or the machine"
    if why.compute_leads:
        return (
            f"the model's own compute slowed, not its scaling: the DDP step slowed by {_pct(why.ddp_slowdown)} and "
            f"{ONE_DEVICE[why.compute.source]} about as much"
        )
    if len(why.named) == 1:
        return f"{why.named[0].label} grew beyond noise"
    if why.named:
        return f"{len(why.named)} causes grew beyond noise, largest first"
    if why.changes:
        grown = max(why.changes, key=lambda c: c.points.value)
        return (
            f"no cause grew beyond noise (largest growth: {change_line(why, grown)}); the slowdown is spread over "
            "the causes or within their noise"
        )
    return "not attributed: what it would need follows"


def why_lines(found: list[Why]) -> list[str]:
    """The terminal's lines: every configuration that regressed or names a cause."""
    lines = []
    for why in found:
        if why.verdict != "regression" and not why.named:
            continue
        lines.append(f"why  {why.configuration} ({why.verdict}): {headline(why)}")
        lines += [f"  {i}. {change_line(why, change)}" for i, change in enumerate(why.named, 1)]
        lines += [f"  would need: {need}" for need in why.needs if why.verdict == "regression"]
        if why.reproduce is not None:
            lines.append(f"  reproduce: {why.reproduce.command}")
            lines += [f"    ({note})" for note in why.reproduce.notes]
    if lines and any(why.level for why in found):
        lines.append(level_words(found))
    # What the passing configurations would need, once per reason: where nothing regressed, why
    # nothing could be named either.
    quiet = [why for why in found if why.verdict != "regression" and not why.named and why.needs]
    for need in sorted({need for why in quiet for need in why.needs}):
        count = sum(need in why.needs for why in quiet)
        lines.append(f"why: causes not compared in {count} configuration(s) that did not regress: {need}")
    return lines


def level_words(found: list[Why]) -> str:
    levels = sorted({why.level for why in found if why.level})
    level = f"{100 * levels[0]:.2g} %" if len(levels) == 1 else f"{100 * levels[0]:.2g}-{100 * levels[-1]:.2g} %"
    return (
        f"(a cause is named where its ms per step grew beyond noise, a one-sided test at {level} (5 % per "
        "configuration split over its causes), by at least half the gate's threshold of the baseline's step; "
        "± are 95 % intervals, candidate less baseline, over the runs of both sides; points: 100 x a cause over "
        "its run's DDP step)"
    )


def why_markdown(found: list[Why]) -> list[str]:
    """The job summary's section, empty when no configuration regressed or names a cause."""
    shown = [why for why in found if why.verdict == "regression" or why.named]
    if not shown:
        return []
    lines = ["### Why", ""]
    for why in shown:
        lines += [f"**{why.configuration}** ({why.verdict}): {headline(why)}", ""]
        lines += [f"{i}. {change_line(why, change)}" for i, change in enumerate(why.named, 1)]
        lines += [f"- would need: {need}" for need in why.needs if why.verdict == "regression"]
        if why.reproduce is not None:
            lines += ["", "Reproduce:", "", "```sh", why.reproduce.command, "```"]
            lines += [f"- {note}" for note in why.reproduce.notes]
        lines.append("")
    if any(why.level for why in found):
        lines += [level_words(found), ""]
    return lines


def why_json(found: list[Why]) -> list[dict]:
    return [
        {
            "configuration": why.configuration,
            "verdict": why.verdict,
            "compared": bool(why.changes),
            "level": why.level,
            "min_seconds": why.min_seconds if why.level else None,
            "causes": [change.as_dict() for change in why.changes],
            "named": [change.name for change in why.named],
            "compute_leads": why.compute_leads,
            "ddp_slowdown_pct": why.ddp_slowdown.as_dict() if why.ddp_slowdown is not None else None,
            "straggler": why.straggler,
            "needs": why.needs,
            "headline": headline(why),
            "lines": [change_line(why, change) for change in why.named],
            "reproduce": why.reproduce.as_dict() if why.reproduce is not None else None,
        }
        for why in found
    ]
