"""The report's "Where the scaling went" section: per workload, a waterfall per world size from
100 % down to E(N) made of the points each measured term lost, a table of the terms, and the
advice. The terms, their labels and how they are measured are `ddpbench.analysis.breakdown`'s;
this module only shows them. No torch.
"""

from __future__ import annotations

import textwrap

import matplotlib.pyplot as plt
import pandas as pd
from markupsafe import Markup

from ddpbench.analysis.breakdown import explain_sweep
from ddpbench.analysis.breakdown_terms import ADVICE_MIN_POINTS, LABELS, TERMS, Breakdown, ExplainError
from ddpbench.analysis.breakdown_text import efficiency_cells, points_cell, verdict
from ddpbench.config.workloads import short_workload_name
from ddpbench.report.plots import DPI, PALETTE, PANEL_HEIGHT_IN

# Green for what is kept; no two terms share a hue family (the palette's two oranges would blur).
KEPT_COLOUR = PALETTE[2]
TERM_COLOURS = {
    "ddp_work": PALETTE[8],
    "contention": "#6a3d9a",
    "data": PALETTE[9],
    "exposed_comm": PALETTE[3],
    "overlap_slowdown": PALETTE[4],
    "slowest_rank": PALETTE[5],
    # The measurement's own terms in greys: they are not DDP's.
    "window_vs_ladder": "#8c8c8c",
    "reference_vs_rung0": "#b3b3b3",
    "unexplained": "#d9d9d9",
}
UNEXPLAINED_HATCH = "///"
FASTER_HATCH = "xxx"
VALUE_MIN_POINTS = 4.0
"""Segments this tall or taller carry their points as text; thinner ones would not fit it."""
KEPT_LABEL_MIN_POINTS = 10.0
"""E(N) is written inside its bar where this much of it shows, else under the bar."""
NOTE_CHARS_PER_INCH = 16
"""How many characters of the figure's small note text fit an inch, for wrapping."""
GLOSSARY_SUFFIX = " (scaling loss)"


def glossary() -> list[tuple[str, str]]:
    """One glossary entry per term, from the analysis' own definitions."""
    return [(term.label + GLOSSARY_SUFFIX, term.method[0].upper() + term.method[1:] + ".") for term in TERMS]


def where_the_scaling_went_section(data, html) -> list[Markup]:
    """`html` is the report's block makers (table_html, figure_html, note)."""
    try:
        breakdowns, problems = explain_sweep(data.records, data.profile)
    except ExplainError as exc:
        return [html.note(f"Not broken down: {exc}.")]
    if not breakdowns:
        return [html.note(_not_broken_down(problems))]
    blocks = [
        html.note(
            "Each DDP run's time per step against the one-device reference (the sweep's local run, a "
            "device's batch per step): the points of efficiency lost, 100 % - E(N), split into measured "
            "terms, each with its 95 % interval; a term in parentheses is within noise (its interval "
            "includes 0) and is no finding. Nothing is forced to add up: the terms' sum stands beside "
            "the loss. The in-run efficiency compares a rank alone and unwrapped with full DDP inside "
            "the run's own processes, which the machine's speed between processes cannot move. The "
            "glossary says how each term is measured; ddpbench explain prints the same per run."
        )
    ]
    if not any(breakdown.world_size >= 2 for breakdown in breakdowns):
        blocks.append(
            html.note(
                "No DDP run of 2 or more ranks: only DDP's own work and data loading can be lost at "
                "one rank. Sweep more devices (ddpbench sweep --nproc 2 or more, or --gpus) for "
                "communication and waiting."
            )
        )
    by_workload: dict[str, list[Breakdown]] = {}
    for breakdown in breakdowns:
        by_workload.setdefault(short_workload_name(breakdown.workload), []).append(breakdown)
    for workload, runs in sorted(by_workload.items()):
        runs = sorted(runs, key=lambda b: (b.world_size, b.run_id))
        blocks.append(Markup("<h3>{}</h3>").format(workload))
        blocks.append(
            html.figure_html(
                waterfall(workload, runs),
                _alt_text(workload, runs),
                "From 100 % (perfect weak scaling) down to E(N): each segment is the points of "
                "efficiency one term lost, its whisker the term's 95 % interval from the ladder's "
                "paired blocks (terms under 1 point: in the table); the two greys are the "
                "measurement's (the timed window against the ladder, the reference run against "
                "its bottom rung), hatched grey the part "
                "the terms do not explain; a cross-hatched segment below the E(N) line is a term "
                "that made the step faster, giving back what the terms above it overshoot.",
            )
        )
        blocks.append(
            Markup("<ul>{}</ul>").format(
                Markup("").join(
                    Markup("<li><code>{}</code> ({}): {}</li>").format(b.run_id, _devices(b.world_size), _headline(b))
                    for b in runs
                )
            )
        )
        blocks.append(html.table_html(terms_table(runs), text_columns=("term",)))
        blocks += [html.note(f"{run.run_id}: {said}") for run in runs for said in run.notes]
        blocks.append(_advice(runs))
    if problems:
        blocks.append(html.note(_not_broken_down(problems)))
    return blocks


def _devices(world_size: int) -> str:
    return f"{world_size} device" + ("s" if world_size != 1 else "")


def _headline(breakdown: Breakdown) -> str:
    textbook, in_run = efficiency_cells(breakdown)
    return (
        f"step {breakdown.step_s * 1e3:.2f} ms against {breakdown.reference_step_s * 1e3:.2f} ms at one device: "
        f"E(N) {textbook}, {100 - 100 * breakdown.efficiency:.1f} points lost; in-run efficiency {in_run}. "
        f"{verdict(breakdown)[0].upper()}{verdict(breakdown)[1:]}."
    )


def _not_broken_down(problems: list[str]) -> str:
    """The problems in one line: runs that failed for the same reason are named together."""
    reasons: dict[str, list[str]] = {}
    for problem in problems:
        run_id, _, reason = problem.partition(": ")
        reasons.setdefault(reason, []).append(run_id)
    return "Not broken down: " + "; ".join(f"{', '.join(runs)}: {reason}" for reason, runs in reasons.items()) + "."


def _run_names(runs: list[Breakdown]) -> list[str]:
    """A run by its world size, and by its id too where the world size repeats."""
    sizes = [run.world_size for run in runs]
    return [_devices(run.world_size) + (f" ({run.run_id})" if sizes.count(run.world_size) > 1 else "") for run in runs]


def terms_table(runs: list[Breakdown]) -> pd.DataFrame:
    """Terms (rows) in ms per step and points per run (columns), as display strings."""
    rows = []
    for term in TERMS:
        row = {"term": term.label}
        for name, run in zip(_run_names(runs), runs):
            found = run.terms[term.name]
            measured = found.s_per_step is not None
            row[f"{name}: ms per step"] = f"{found.s_per_step * 1e3:.2f}" if measured else "not measured"
            row[f"{name}: points"] = points_cell(found, run.step_s).replace("±", " ± ") if measured else ""
        rows.append(row)
    total = {"term": "sum of the measured terms"}
    lost = {"term": "lost in all: t(N) - t(1)"}
    in_run = {"term": "in-run efficiency (same processes)"}
    for name, run in zip(_run_names(runs), runs):
        added = run.terms_sum_s()
        total[f"{name}: ms per step"] = "n/a" if added is None else f"{added * 1e3:.2f}"
        total[f"{name}: points"] = "" if added is None else f"{100 * added / run.step_s:.1f}"
        lost[f"{name}: ms per step"] = f"{(run.step_s - run.reference_step_s) * 1e3:.2f}"
        lost[f"{name}: points"] = f"{100 - 100 * run.efficiency:.1f}"
        in_run[f"{name}: ms per step"] = ""
        in_run[f"{name}: points"] = efficiency_cells(run)[1].replace("±", " ± ")
    return pd.DataFrame(rows + [total, lost, in_run])


def _advice(runs: list[Breakdown]) -> Markup:
    items = [
        Markup("<li><code>{}</code> ({}): {}</li>").format(run.run_id, _devices(run.world_size), sentence)
        for run in runs
        for sentence in run.advice
    ]
    if not items:
        return Markup(
            '<p class="note">No term of DDP\'s is a finding worth {:g} points or more (its 95 % interval excluding '
            "0): nothing to act on.</p>"
        ).format(ADVICE_MIN_POINTS)
    return Markup("<p>What to try:</p><ul>{}</ul>").format(Markup("").join(items))


def _not_measured(runs: list[Breakdown]) -> list[str]:
    """'not measured: <label> (<basis>)', once per term and reason, naming the runs it holds for."""
    found: dict[tuple[str, str], list[str]] = {}
    for name, run in zip(_run_names(runs), runs):
        for term_name, term in run.terms.items():
            if term.s_per_step is None:
                found.setdefault((LABELS[term_name], term.basis), []).append(name)
    return [f"not measured: {label} ({basis}), at {', '.join(names)}" for (label, basis), names in found.items()]


def _made_faster(runs: list[Breakdown]) -> list[str]:
    """A sentence per negative term: its segment can be thin, so the figure says it in words too."""
    return [
        f"made the step faster (drawn below the E(N) line): {LABELS[name]} {term.points:.1f} points "
        f"({term.s_per_step * 1e3:.2f} ms per step) at {label}"
        for label, run in zip(_run_names(runs), runs)
        for name, term in run.terms.items()
        if term.points is not None and term.points < 0
    ]


def _alt_text(workload: str, runs: list[Breakdown]) -> str:
    measured = [
        LABELS[name]
        for name in LABELS
        if name != "unexplained" and any(run.terms[name].s_per_step is not None for run in runs)
    ]
    missing = _made_faster(runs) + _not_measured(runs)
    return (
        f"Stacked bar chart for {workload}, one bar per world size, from 100 percent down to the scaling "
        f"efficiency E(N): segments for the points lost to {', '.join(measured) or 'no measured term'}, the part "
        "not explained hatched grey, E(N) as the bottom segment." + (" " + "; ".join(missing) + "." if missing else "")
    )


def waterfall(workload: str, runs: list[Breakdown]) -> plt.Figure:
    """A stacked bar per run: E(N) at the bottom, above it the terms' points down from 100 %.
    A negative term cannot be stacked among the others: the positive terms then overshoot E(N) by
    its size, and it is drawn cross-hatched from where they end back up to the E(N) line."""
    notes = _made_faster(runs) + _not_measured(runs)
    width_in = max(7.5, 4.5 + 1.3 * len(runs))
    wrapped = [textwrap.fill(line, int(width_in * NOTE_CHARS_PER_INCH), subsequent_indent="    ") for line in notes]
    note_lines = sum(text.count("\n") + 1 for text in wrapped)
    note_in = 0.17 * note_lines + 0.15 if notes else 0.0
    figure = plt.figure(figsize=(width_in, PANEL_HEIGHT_IN * 1.3 + note_in), dpi=DPI)
    grid = figure.add_gridspec(2 if notes else 1, 1, height_ratios=[PANEL_HEIGHT_IN * 1.3, note_in] if notes else [1])
    axis = figure.add_subplot(grid[0])
    handles = {}
    lowest, highest = 0.0, 100.0
    names = _run_names(runs)
    for x, run in enumerate(runs):
        kept = 100 * run.efficiency
        handles["E(N): efficiency kept"] = axis.bar(x, kept, width=0.6, color=KEPT_COLOUR)
        top = 100.0
        lost = [(name, term.points) for name, term in run.terms.items() if term.points is not None]
        for name, points in [(n, p) for n, p in lost if p > 0]:
            top -= points
            handles[LABELS[name]] = _segment(
                axis, x, top, points, name, hatch=UNEXPLAINED_HATCH if name == "unexplained" else None
            )
            _whisker(axis, x, top, run, name)
        lowest = min(lowest, top)
        # Below where the terms end, the bar is E(N) alone; a term that made the step faster covers the rest.
        shows = min(kept, top)
        if shows >= KEPT_LABEL_MIN_POINTS:
            axis.text(
                x,
                shows / 2,
                f"E(N)\n{kept:.1f} %",
                ha="center",
                va="center",
                color="white",
                fontsize="small",
                fontweight="bold",
            )
        else:
            names[x] += f"\nE(N) {kept:.1f} %"
        for name, points in [(n, p) for n, p in lost if p < 0]:
            handles[f"{LABELS[name]}: made the step faster"] = _segment(
                axis, x, top, -points, name, hatch=FASTER_HATCH, faster=True
            )
            top -= points
            _whisker(axis, x, top, run, name)
        axis.hlines(kept, x - 0.36, x + 0.36, color="black", linewidth=1.6)
        highest = max(highest, kept)
    axis.axhline(100, linestyle="--", color="grey", linewidth=1)
    axis.set_xticks(range(len(runs)), names)
    axis.set_xlim(-0.6, len(runs) - 0.4)
    axis.set_ylim(lowest, highest + 4)
    axis.set_ylabel("scaling efficiency (%)")
    axis.set_title(f"{workload}: 100 % down to E(N)")
    axis.grid(axis="x", visible=False)
    # The legend reads top to bottom as the bars do: the terms first, E(N) last.
    order = [LABELS[t.name] for t in TERMS] + [f"{LABELS[t.name]}: made the step faster" for t in TERMS]
    shown = sorted((label for label in handles if label in order), key=order.index) + ["E(N): efficiency kept"]
    axis.legend(
        [handles[label] for label in shown],
        shown,
        fontsize="small",
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        frameon=False,
    )
    if notes:
        note_axis = figure.add_subplot(grid[1])
        note_axis.axis("off")
        note_axis.text(
            0.0,
            1.0,
            "\n".join(wrapped),
            ha="left",
            va="top",
            fontsize="x-small",
            color="#444444",
            transform=note_axis.transAxes,
        )
    figure.tight_layout()
    return figure


WHISKER_MIN_POINTS = 1.0
"""Terms this small get no whisker in the figure (the table has every interval)."""
WHISKER_OFFSETS = 0.22
"""How far right of the bar's centre a term's whisker sits (the value label is at the centre)."""


def _whisker(axis, x: int, edge: float, run: Breakdown, name: str) -> None:
    """The term's 95 % interval as a whisker at the segment's lower edge, where the term ends:
    how far that edge could lie, in points, given the ladder's paired blocks."""
    term = run.terms[name]
    if term.ci_low_s is None or term.ci_high_s is None or term.ci_high_s == term.ci_low_s:
        return
    if abs(term.points or 0.0) < WHISKER_MIN_POINTS:
        return  # a sliver's whisker would sit on its neighbours'; the table gives its interval
    half = 100 * (term.ci_high_s - term.ci_low_s) / 2 / run.step_s
    axis.errorbar(x + WHISKER_OFFSETS, edge, yerr=half, fmt="none", ecolor="black", elinewidth=0.9, capsize=2.5)


def _segment(axis, x: int, bottom: float, points: float, name: str, hatch: str | None, faster: bool = False):
    colour = TERM_COLOURS[name]
    if faster:
        # The unexplained part's light grey would vanish as a hatch on white: its edge is darker.
        edge = "#7f7f7f" if name == "unexplained" else colour
        drawn = axis.bar(
            x, points, bottom=bottom, width=0.6, color="white", edgecolor=edge, hatch=hatch, linewidth=1.2, alpha=0.9
        )
    else:
        drawn = axis.bar(
            x,
            points,
            bottom=bottom,
            width=0.6,
            color=colour,
            hatch=hatch,
            edgecolor="#7f7f7f" if hatch else "white",
            linewidth=0.6,
        )
    if points >= VALUE_MIN_POINTS:
        axis.text(
            x,
            bottom + points / 2,
            f"{'-' if faster else ''}{points:.1f}",
            ha="center",
            va="center",
            fontsize="x-small",
            color="black",
            bbox=dict(boxstyle="round,pad=0.15", facecolor="white", edgecolor="none", alpha=0.7) if hatch else None,
        )
    return drawn
