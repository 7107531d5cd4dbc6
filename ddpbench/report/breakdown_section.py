"""The report's "Where the efficiency went": one chart for every configuration of DDP runs, from the
in-process efficiency up to 100 %, each cause's percentage points stacked with its interval, E(N)
beside it as the check; a table of the same figures; what to try. The causes, their labels and how
they are measured are `ddpbench.analysis.causes`'; this module only shows them. No torch.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
from markupsafe import Markup
from matplotlib.patches import Patch

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
            "percentage points, solid where beyond noise and pale where within it (the table has every interval); "
            "what made the step faster is hatched, so every bar ends at 100 %: the causes add up to the in-process "
            "loss by construction. The black diamond is E(N), against the local run, with its interval: where it "
            "lies off the green bar's end, the reference process or the timed steps ran at another speed than the "
            "ablation (the table's check).",
        ),
        html.table_html(table(answers), text_columns=("configuration",)),
        html.note(
            "Percentage points of the DDP step, ± 95 % intervals over the runs; (in parentheses): within noise. "
            "The check is E(N) less the in-process efficiency. The glossary defines each cause."
        ),
    ]


HEADINGS = {
    "contention": "host contention",
    "ddp_overhead": "DDP overhead",
    "exposed_comm": "exposed comm.",
    "overlap_slowdown": "backward slowed",
    "straggler_wait": "slowest rank",
    "forward_optimizer": "fwd + optimizer",
    "data": "data loading",
}
"""The table's column heads: the causes' labels, short enough for the table to fit the page."""


def table(answers: list[Answer]) -> pd.DataFrame:
    """One row per configuration: runs, E(N), the in-process efficiency, each cause (pp ± its
    interval; in parentheses within noise) and the check."""
    rows = []
    for answer in answers:
        row = {
            "configuration": answer.name,
            "runs": len(answer.runs),
            "E(N) %": points(answer.efficiency.scaled(100)) if answer.efficiency else "n/a",
            "in-process %": points(answer.in_process.scaled(100)) if answer.in_process else "n/a",
        }
        for definition in CAUSES:
            cause = answer.causes.get(definition.name)
            row[HEADINGS[definition.name]] = points(cause.points) if cause and cause.points else "n/a"
        row["check"] = points(answer.gap) if answer.gap else ""
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
    """A horizontal bar per configuration: what was kept (the in-process efficiency), then the causes
    that lost points stacked to the right, solid where beyond noise and pale where within it; what
    made the step faster is one hatched segment drawn back from where the others end, so the bar ends
    at 100 %; E(N) as a diamond with its interval. The intervals of the causes are the table's."""
    height = 1.0 + 0.55 * len(answers)
    figure, axis = plt.subplots(figsize=(11.5, max(2.4, height)), dpi=DPI)
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
            axis.barh(
                y,
                width,
                left=left,
                color=CAUSE_COLOURS[definition.name],
                alpha=1.0 if cause.significant else 0.35,
                height=0.6,
                edgecolor="white",
            )
            # The legend shows each cause's solid colour, whether this bar's segment is pale or not.
            handles.setdefault(definition.label, Patch(facecolor=CAUSE_COLOURS[definition.name]))
            if width >= VALUE_MIN_POINTS:
                axis.text(left + width / 2, y, f"{width:.0f}", ha="center", va="center", fontsize="x-small")
            left += width
        faster = -sum(
            cause.points.value
            for cause in answer.causes.values()
            if cause.points is not None and cause.points.value < 0
        )
        if faster > 0:
            handles["causes that made the step faster"] = axis.barh(
                y, faster, left=left - faster, color="white", edgecolor="#7f7f7f", hatch=FASTER_HATCH, height=0.6
            )
        if answer.efficiency is not None:
            value = 100 * answer.efficiency.value
            error = 100 * answer.efficiency.half if answer.efficiency.has_interval else None
            handles["E(N) against the local run, ± its interval"] = axis.errorbar(
                value, y, xerr=error, fmt="D", color="black", markersize=5, capsize=3
            )
    axis.axvline(100, linestyle="--", color="grey", linewidth=1)
    axis.set_yticks(range(len(answers)), [answer.name for answer in answers])
    axis.invert_yaxis()
    axis.set_xlim(0, max(105, axis.get_xlim()[1]))
    axis.set_xlabel("efficiency kept, and what each cause lost (%; pale: within noise)")
    axis.grid(axis="y", visible=False)
    axis.legend(list(handles.values()), list(handles), fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    figure.tight_layout()
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
