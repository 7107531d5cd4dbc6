"""The report's appendix on communication: exposed communication as the causes measure it beside
its three cross-checks (trace, no_sync, reducer), each saying what it measures, the overlap the
traces show, its spread across ranks, whether the estimates agree, and where a profiled step's time
goes. Runs of one rank send nothing and are left out."""

from __future__ import annotations

import pandas as pd
from markupsafe import Markup

from ddpbench.analysis import ranks
from ddpbench.analysis.agreement import AGREEMENT, estimates_agreement
from ddpbench.analysis.frames import breakdown_frame, overlap_table
from ddpbench.records.schema import Record
from ddpbench.report import plots
from ddpbench.report.blocks import ReportData, figure_html, metric_columns, note, table_html

CROSS_CHECKS = (
    "Exposed communication is the causes' (ddpbench explain): the slowest rank's waits in DDP's collectives, DDP "
    "against DDP on one rank in the in-process ablation, ± its 95 % interval over the runs; 'not in place' where a "
    "run has no ablation. The cross-checks measure other things: the trace, time inside the collectives' own "
    "profiler events that no computation overlaps, over the profiled steps, on the rank exposing most (it holds "
    "that rank's wait for its peers); no_sync, a step with DDP against the same batches under no_sync() (it holds "
    "DDP's bucket copies and the waits too); the reducer, DDP's own timers from the first all-reduce's start to "
    "backward's end (it counts the compute in between)."
)


def exposed_cells(data: ReportData) -> dict[str, str]:
    """Run id -> its configuration's exposed communication in ms with its interval over the runs."""
    found = {}
    for answer in data.answers:
        cause = answer.causes.get("exposed_comm")
        if cause is None or cause.seconds is None:
            cell = "n/a"
        elif not cause.seconds.has_interval:
            cell = f"{cause.seconds.value * 1e3:.2f} (not in place)"
        else:
            cell = f"{cause.seconds.value * 1e3:.2f} ± {cause.seconds.half * 1e3:.2f}"
        found.update({run_id: cell for run_id in answer.run_ids})
    return found


def communication_section(data: ReportData) -> list[Markup]:
    runs = data.runs[data.runs["world_size"] > 1] if not data.runs.empty else data.runs
    overlap = overlap_table(runs) if not runs.empty else pd.DataFrame()
    breakdown = breakdown_frame([(p, r) for p, r in data.records if r.spec.world_size > 1])
    blocks = []
    if not overlap.empty:
        shown, formats = metric_columns(overlap, list(overlap.columns))
        # One exposed-communication figure, the causes'; the three estimates beside it are
        # cross-checks, each measuring something else (the note says what).
        cross = {heading: f"cross-check: {heading}" for heading in shown.columns if heading.startswith("exposed, ")}
        shown = shown.rename(columns={"run_id": "run", "world_size": "world size", **cross})
        formats = {cross.get(column, column): fmt for column, fmt in formats.items()}
        cells = exposed_cells(data)
        shown.insert(4, "exposed communication (ms)", [cells.get(run, "") for run in shown["run"]])
        blocks.append(table_html(shown, formats, text_columns=("run", "workload", "exposed communication (ms)")))
        blocks.append(note(CROSS_CHECKS))
    spread = exposed_spread_frame(data.records)
    if not spread.empty:
        blocks.append(
            Markup(
                "<p>Cross-check, the no_sync replay across the ranks of each DDP run (each rank's DDP step "
                "beyond its no_sync step: it also holds DDP's bucket copies and the waits, so it is not the "
                "exposed communication above), with the rank where it is largest named:</p>"
            )
        )
        blocks.append(
            table_html(
                spread, {c: "{:,.2f}" for c in ("p50 (ms)", "p90 (ms)", "max (ms)")}, text_columns=("run", "host")
            )
        )
    sentences = [
        (record.run_id, estimates_agreement(record))
        for _, record in data.records
        if record.status == "ok" and record.spec.strategy == "ddp" and record.spec.world_size > 1
    ]
    sentences = [(run_id, found) for run_id, found in sentences if found.agree is not None]
    if sentences:
        items = Markup("").join(
            Markup("<li><code>{}</code>: {}.</li>").format(run_id, found.sentence) for run_id, found in sentences
        )
        blocks.append(
            Markup("<p>Do the three estimates agree (within {:.0%} of their median)?</p><ul>{}</ul>").format(
                AGREEMENT, items
            )
        )
    if not breakdown.empty:
        blocks.append(
            figure_html(
                plots.step_breakdown(breakdown),
                "Stacked bar charts of the time of a profiled step split into compute, exposed "
                "communication, other and idle, for every run with a trace.",
                "Where a profiled step's time goes (mean over ranks and profiled steps).",
            )
        )
    return blocks


def exposed_spread_frame(records: list[tuple[str, Record]]) -> pd.DataFrame:
    rows = []
    for _, record in records:
        if record.status != "ok" or not record.spec.launched_by_torchrun or len(record.ranks) < 2:
            continue
        found = ranks.exposed_across_ranks(record)
        if found:
            rows.append(
                {
                    "run": record.run_id,
                    "world size": record.spec.world_size,
                    "p50 (ms)": found["p50_s"] * 1000,
                    "p90 (ms)": found["p90_s"] * 1000,
                    "max (ms)": found["max_s"] * 1000,
                    "rank": found["worst_rank"],
                    "host": found["worst_host"],
                }
            )
    return pd.DataFrame(rows).sort_values(["world size", "run"]) if rows else pd.DataFrame()
