"""What the gate prints and writes: the terminal table, sentences on what each comparison can
see, Markdown for a CI job summary, and JSON. No torch."""

from __future__ import annotations

import math
from dataclasses import asdict

from ddpbench.gate.compare import Comparison, overall_verdict, underpowered
from ddpbench.gate.stats import GateSettings


def _value(comparison: Comparison, value: float | None) -> str:
    if value is None:
        return ""
    return f"{value:.1%}" if comparison.measure in ("efficiency", "exposed_share") else f"{value:,.4g}"


def _needed(comparison: Comparison) -> str:
    if comparison.runs_needed is None:
        return "over 1000"
    return str(comparison.runs_needed)


def percent(fraction: float) -> str:
    """A setting as given: 5 %, 2.5 %, 9.75 %."""
    return f"{100 * fraction:.3g}%"


def _slowdown(fraction: float) -> str:
    """A slowdown the gate catches, rounded up (to 0.1 % below 10 %), so that the claim stays true."""
    step = 0.001 if fraction < 0.1 else 0.01
    rounded = min(1.0, math.ceil(fraction / step - 1e-9) * step)
    return f"{rounded:.1%}" if step < 0.01 else f"{rounded:.0%}"


def _chance(probability: float) -> str:
    """A probability of catching, rounded down, so that the claim stays true."""
    return f"{math.floor(100 * probability + 1e-9):.0f}%"


def sight(comparison: Comparison, settings: GateSettings) -> str:
    """In words: what this comparison can catch, and what it would take to see the target (twice
    the threshold: one exactly at the threshold is caught at most half the time)."""
    if comparison.mde is None:
        return ""
    unit = "rounds" if comparison.paired else "runs per side"
    have = (
        f"{comparison.candidate_runs} paired rounds"
        if comparison.paired
        else f"{comparison.baseline_runs} baseline and {comparison.candidate_runs} candidate run(s)"
    )
    target = percent(settings.target)
    caught = f"catches a {_slowdown(comparison.mde)} slowdown {settings.power:.0%} of the time"
    if comparison.sees_threshold:
        at_threshold = (
            ""
            if comparison.threshold_power is None
            else f" and one of {percent(settings.max_regression)} (the threshold) "
            f"{_chance(comparison.threshold_power)}"
        )
        return f"sees {target}: {caught}{at_threshold} ({have})"
    return (
        f"CANNOT SEE {target}: with {have} it only {caught}; "
        f"{_needed(comparison)} {unit} would be needed to see {target}"
    )


def _seeing(settings: GateSettings) -> str:
    """What 'see' means, for the footnotes."""
    return (
        f"to see {percent(settings.target)} is to catch that slowdown {settings.power:.0%} of the time: twice "
        f"the {percent(settings.max_regression)} threshold on the log scale, since one exactly at the threshold "
        f"is caught at most half the time however many runs there are"
    )


def format_table(comparisons: list[Comparison], settings: GateSettings) -> str:
    lines = [
        f"{'configuration':<36} {'measure':<22} {'baseline':>10} {'candidate':>10} {'ratio':>6} "
        f"{'p':>8} {'noise':>6} {'MDE':>5} {'runs':>5}  verdict"
    ]
    for c in comparisons:
        ratio = f"{c.ratio:.3f}" if c.ratio is not None else ""
        p = f"{c.p_value:.2g}" if c.p_value is not None and not math.isnan(c.p_value) else ""
        noise = f"{c.noise:.1%}" if c.noise is not None and math.isfinite(c.noise) else ""
        mde = _slowdown(c.mde) if c.mde is not None else ""
        runs = _needed(c) if c.mde is not None else ""
        verdict = c.verdict.upper() if c.verdict in ("regression", "inconclusive", "not comparable") else c.verdict
        note = f"  ({c.note})" if c.note else ""
        label = c.label if c.measure != "run" else "run"
        lines.append(
            f"{c.configuration:<36} {label[:22]:<22} {_value(c, c.baseline):>10} {_value(c, c.candidate):>10} "
            f"{ratio:>6} {p:>8} {noise:>6} {mde:>5} {runs:>5}  {verdict}{note}"
        )
    lines.append(
        f"ratio = candidate / baseline, above 1 is better (no_sync share, the no_sync replay's cross-check: (1 - "
        f"share now) / (1 - share before)); regression when one-sided p < {settings.family_alpha:g} / comparisons "
        f"AND ratio < {1 - settings.max_regression:.2f}; inconclusive when the ratio is below it but p is not. "
        f"noise = run-to-run spread used; MDE = slowdown that rule (test and "
        f"threshold) catches {settings.power:.0%} of the time; runs = "
        f"{'rounds' if any(c.paired for c in comparisons) else 'runs per side'} needed to see "
        f"{percent(settings.target)} ({_seeing(settings)})."
    )
    return "\n".join(lines)


def inconclusive(comparison: Comparison, settings: GateSettings) -> str:
    """In words: how much slower an inconclusive comparison looks, its interval, and the runs that
    would decide it (those that see the target)."""
    c = comparison
    unit = "rounds" if c.paired else "runs per side"
    return (
        f"looks {1 - c.ratio:.1%} slower (ratio {c.ratio:.3f}, 95% interval {c.ratio_low:.3f} to "
        f"{c.ratio_high:.3f}), beyond the {percent(settings.max_regression)} threshold but not significant "
        f"(p = {c.p_value:.2g}, a regression needs < {c.alpha:.2g}): noise could explain it, and so could a real "
        f"slowdown; {_needed(c)} {unit} would decide it (they see {percent(settings.target)})"
    )


def inconclusive_lines(comparisons: list[Comparison], settings: GateSettings) -> list[str]:
    return [
        f"{c.configuration}, {c.label}: {inconclusive(c, settings)}" for c in comparisons if c.verdict == "inconclusive"
    ]


def sight_lines(comparisons: list[Comparison], settings: GateSettings) -> list[str]:
    return [f"{c.configuration}, {c.label}: {sight(c, settings)}" for c in comparisons if c.mde is not None]


def markdown_summary(
    comparisons: list[Comparison], settings: GateSettings, notes: list[str], env_notes: list[str], why=None
) -> str:
    """The CI job summary; `why` (`gate.why.Why`s) adds the cause lines and reproducing commands."""
    result = overall_verdict(comparisons)
    lines = [f"## ddpbench gate: {result.upper()}", ""]
    failing = [c for c in comparisons if c.verdict in ("regression", "inconclusive", "not comparable")]
    if failing:
        lines += ["What failed:", ""]
        for c in failing:
            if c.verdict == "regression":
                lines.append(
                    f"- **{c.configuration}**, {c.label}: {1 - c.ratio:.1%} worse (ratio {c.ratio:.3f}, "
                    f"p = {c.p_value:.2g} < {c.alpha:.2g})"
                )
            elif c.verdict == "inconclusive":
                lines.append(f"- **{c.configuration}**, {c.label}: inconclusive: {inconclusive(c, settings)}")
            else:
                lines.append(f"- **{c.configuration}**: not comparable: {c.note}")
        lines.append("")
    if why:
        from ddpbench.gate.why_text import why_markdown

        lines += why_markdown(why)
    blind = underpowered(comparisons)
    if blind:
        lines += [
            f"{len(blind)} of {sum(c.mde is not None for c in comparisons)} comparisons cannot see a "
            f"{percent(settings.target)} slowdown ({_seeing(settings)}):",
            "",
        ]
        lines += [f"- {c.configuration}, {c.label}: {sight(c, settings)}" for c in blind]
        lines.append("")
    lines += [
        "| configuration | measure | baseline | candidate | ratio | p | noise (source) | catches | "
        f"runs to see {percent(settings.target)} | verdict |",
        "|---|---|---:|---:|---:|---:|---|---:|---:|---|",
    ]
    for c in comparisons:
        cells = [
            c.configuration,
            c.label if c.measure != "run" else "run",
            _value(c, c.baseline),
            _value(c, c.candidate),
            f"{c.ratio:.3f}" if c.ratio is not None else "",
            f"{c.p_value:.2g}" if c.p_value is not None and not math.isnan(c.p_value) else "",
            f"{c.noise:.1%} ({c.noise_source})" if c.noise is not None else c.note,
            _slowdown(c.mde) if c.mde is not None else "",
            _needed(c) if c.mde is not None else "",
            f"**{c.verdict}**" if c.verdict in ("regression", "inconclusive", "not comparable") else c.verdict,
        ]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    lines += [
        "",
        f"Ratio = candidate / baseline, above 1 is better. A regression needs both a one-sided test "
        f"significant at a family-wise {settings.family_alpha:.0%} (Bonferroni over "
        f"{sum(c.mde is not None for c in comparisons)} comparisons) and a ratio below "
        f"{1 - settings.max_regression:.2f}. 'catches' is the slowdown that rule catches "
        f"{settings.power:.0%} of the time; {_seeing(settings)}.",
    ]
    for note in env_notes + notes:
        lines.append(f"- {note}")
    return "\n".join(lines) + "\n"


def as_json(
    comparisons: list[Comparison],
    settings: GateSettings,
    notes: list[str],
    env_notes: list[str],
    extra: dict | None = None,
) -> dict:
    def clean(value):
        return None if isinstance(value, float) and not math.isfinite(value) else value

    rows = []
    for c in comparisons:
        row = {name: clean(value) for name, value in asdict(c).items()}
        row["label"] = c.label
        row["sight"] = sight(c, settings)
        rows.append(row)
    return {
        "verdict": overall_verdict(comparisons),
        "settings": asdict(settings),
        "target_slowdown": settings.target,
        "comparisons": rows,
        "underpowered": len(underpowered(comparisons)),
        "notes": notes,
        "environment_differences": env_notes,
        **(extra or {}),
    }
