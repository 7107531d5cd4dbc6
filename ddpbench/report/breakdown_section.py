"""The report's "Where the efficiency went": one chart for every configuration of DDP runs, from the
in-process efficiency up to 100 %, each cause's percentage points stacked with its interval, E(N)
beside it as the check; a table of the same figures; what to try. The causes, their labels and how
they are measured are `ddpbench.analysis.causes`'; this module only shows them. No torch.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
from markupsafe import Markup

from ddpbench.analysis.answer_text import ADVICE_MIN_POINTS, advice, percent, points
from ddpbench.analysis.answers import Answer
from ddpbench.analysis.causes import CAUSES, CHECKS, LABELS
from ddpbench.report.plots import DPI, PALETTE

KEPT_COLOUR = PALETTE[2]
# No two causes share a hue family.
CAUSE_COLOURS = {
    "contention": "#6a3d9a",
    "ddp_overhead": PALETTE[8],
    "exposed_comm": PALETTE[3],
    "overlap_slowdown": PALETTE[4],
    "straggler_wait": PALETTE[5],
    "forward_optimizer": "#8c8c8c",
    "data": PALETTE[9],
}
FASTER_HATCH = "xxx"
VALUE_MIN_POINTS = 5.0
"""Segments this wide or wider carry their percentage points as text."""


def glossary() -> list[tuple[str, str]]:
    """One glossary entry per cause and check, from the analysis' own definitions."""
    return [(d.label, d.method[0].upper() + d.method[1:] + ".") for d in (*CAUSES, *CHECKS)]


def shown(answers: list[Answer]) -> list[Answer]:
    """The configurations the chart shows: those of two ranks or more, or all where none has two."""
    many = [answer for answer in answers if answer.world_size > 1]
    return many or answers


def where_the_efficiency_went(answers: list[Answer], html) -> list[Markup]:
    """`html` is the report's block makers (table_html, figure_html, note)."""
    answers = [answer for answer in shown(answers) if answer.in_process is not None]
    if not answers:
        return []
    return [
        html.figure_html(
            chart(answers),
            alt_text(answers),
            "Each bar is a configuration: the in-process efficiency (green), then what each cause cost in "
            "percentage points, up to 100 %; whiskers are 95 % intervals over the runs. The causes add up to the "
            "in-process loss by construction. The black diamond is E(N), against the local run, with its "
            "interval: where it lies off the green bar's end, the reference process or the timed steps ran at "
            "another speed than the ablation (the table's check).",
        ),
        html.table_html(table(answers), text_columns=("configuration",)),
    ]


def table(answers: list[Answer]) -> pd.DataFrame:
    """One row per configuration: runs, E(N), the in-process efficiency, each cause (pp ± its
    interval; in parentheses within noise) and the check."""
    rows = []
    for answer in answers:
        row = {
            "configuration": answer.name,
            "runs": len(answer.runs),
            "E(N)": percent(answer.efficiency, runs=False),
            "in-process": percent(answer.in_process, runs=False),
        }
        for definition in CAUSES:
            cause = answer.causes.get(definition.name)
            row[f"{definition.label} (pp)"] = points(cause.points) if cause and cause.points else "n/a"
        row["check: E(N) - in-process (pp)"] = points(answer.gap) if answer.gap else ""
        rows.append(row)
    return pd.DataFrame(rows)


def alt_text(answers: list[Answer]) -> str:
    parts = []
    for answer in answers:
        largest = answer.largest()
        said = f"largest cause {LABELS[largest[0]]}" if largest else "no cause beyond noise"
        parts.append(f"{answer.name}: in-process {percent(answer.in_process, runs=False)}, {said}")
    return "Horizontal stacked bars, one per configuration. " + "; ".join(parts) + "."


def chart(answers: list[Answer]) -> plt.Figure:
    """A horizontal bar per configuration: kept (the in-process efficiency), then the causes that
    lost points stacked to 100 %; causes that made the step faster are drawn hatched back from
    where the others end; E(N) as a diamond with its interval."""
    # Bars, then the legend in rows of four below them.
    legend_rows = 3
    height = 1.1 + 0.5 * len(answers) + 0.25 * legend_rows
    figure, axis = plt.subplots(figsize=(10.5, height), dpi=DPI)
    handles = {}
    for y, answer in enumerate(answers):
        kept = 100 * answer.in_process.value
        handles["in-process efficiency (kept)"] = axis.barh(y, kept, color=KEPT_COLOUR, height=0.6)
        left = kept
        for definition in CAUSES:
            cause = answer.causes.get(definition.name)
            if cause is None or cause.points is None or cause.points.value <= 0:
                continue
            width = cause.points.value
            handles[definition.label] = axis.barh(
                y, width, left=left, color=CAUSE_COLOURS[definition.name], height=0.6, edgecolor="white"
            )
            if cause.points.has_interval and width >= 1.0:
                axis.errorbar(left + width, y + 0.18, xerr=cause.points.half, fmt="none", ecolor="black", capsize=2)
            if width >= VALUE_MIN_POINTS:
                axis.text(left + width / 2, y, f"{width:.0f}", ha="center", va="center", fontsize="x-small")
            left += width
        for definition in CAUSES:
            cause = answer.causes.get(definition.name)
            if cause is None or cause.points is None or cause.points.value >= 0:
                continue
            width = -cause.points.value
            handles[f"{definition.label}: made the step faster"] = axis.barh(
                y,
                width,
                left=left - width,
                color="white",
                edgecolor=CAUSE_COLOURS[definition.name],
                hatch=FASTER_HATCH,
                height=0.6,
            )
            left -= width
        if answer.efficiency is not None:
            value = 100 * answer.efficiency.value
            error = 100 * answer.efficiency.half if answer.efficiency.has_interval else None
            handles["E(N) against the local run"] = axis.errorbar(
                value, y - 0.18, xerr=error, fmt="D", color="black", markersize=5, capsize=3
            )
    axis.axvline(100, linestyle="--", color="grey", linewidth=1)
    axis.set_yticks(range(len(answers)), [answer.name for answer in answers])
    axis.invert_yaxis()
    axis.set_xlim(0, max(105, axis.get_xlim()[1]))
    axis.set_xlabel("scaling efficiency and what each cause lost (%)")
    axis.grid(axis="y", visible=False)
    figure.legend(list(handles.values()), list(handles), fontsize="x-small", loc="lower center", ncol=4, frameon=False)
    figure.tight_layout(rect=(0, 0.25 * legend_rows / height + 0.02, 1, 1))
    return figure


def what_to_try(answers: list[Answer], profile: dict | None) -> Markup:
    items = [
        Markup("<li><strong>{}</strong>: {}</li>").format(answer.name, said)
        for answer in answers
        for _, said in advice(answer, profile)[:1]
    ]
    if not items:
        return Markup(
            '<p class="note">No cause is beyond noise and worth {:g} percentage points or more: nothing to change.</p>'
        ).format(ADVICE_MIN_POINTS)
    return Markup("<ul>{}</ul>").format(Markup("").join(items))
