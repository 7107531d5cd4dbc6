"""The report's "Collectives across ranks" section: for each run with rank traces, its collectives
matched across ranks (per bucket, medians over the profiled steps), who held its steps on the
critical path across ranks, and a link to its merged timeline, written beside the report.

Runs beyond `RANK_DETAIL_LIMIT` ranks get the command instead of a merged file: a report should
not write gigabytes of traces on its own.
"""

from __future__ import annotations

import os
import statistics

import pandas as pd
from markupsafe import Markup

from ddpbench.analysis.collectives import bucket_table, match_job
from ddpbench.analysis.critical_path import held_sentence, job_paths, path_summary
from ddpbench.analysis.rank_clocks import run_traces
from ddpbench.analysis.ranks import RANK_DETAIL_LIMIT
from ddpbench.analysis.trace_merge import write_merged
from ddpbench.analysis.traces import TraceError
from ddpbench.report.blocks import ReportData, note, table_html

MERGED_FOLDER = "merged-traces"
"""Where, beside the report, the merged timelines go."""


def _rows(run_id: str, job) -> list[dict]:
    rows = []
    for row in bucket_table(job):
        waits = row["wait_ms_by_rank"]
        slowest = max(waits, key=waits.get)
        shares = sorted(row["last_arrival_share_by_rank"].items(), key=lambda item: -item[1])
        rows.append(
            {
                "run": run_id,
                "group": row["group"],
                "bucket": row["bucket"],
                "collective": row["name"],
                "steps": row["steps"],
                "arrival spread ms": row["spread_ms"],
                "transfer ms": row["transfer_ms"],
                "median wait ms": statistics.median(waits.values()),
                "longest wait ms": waits[slowest],
                "longest waiting rank": str(slowest),
                "last to arrive": ", ".join(f"rank {rank} ({share:.0%})" for rank, share in shares[:2]) or "tie",
            }
        )
    return rows


def collectives_section(data: ReportData) -> list[Markup]:
    rows, items, problems = [], [], []
    for record_path, record in data.records:
        paths = run_traces(record_path, record)
        if len(paths) < 2:
            continue
        if len(paths) > RANK_DETAIL_LIMIT:
            folder = os.path.dirname(paths[0])
            items.append(
                Markup(
                    "<li><code>{}</code>: {} ranks: <code>ddpbench trace collectives {}</code>, "
                    "<code>ddpbench trace merge {}</code></li>"
                ).format(record.run_id, len(paths), folder, folder)
            )
            continue
        try:
            # One process: at most RANK_DETAIL_LIMIT small traces, and no fork of a process that
            # has drawn figures.
            job = match_job(paths, jobs=1)
        except TraceError as exc:
            problems.append(f"{record.run_id}: {exc}")
            continue
        steps = job_paths(job)
        rows += _rows(record.run_id, job)
        merged = os.path.join(data.report_dir, MERGED_FOLDER, f"{record.run_id}.merged.json.gz")
        os.makedirs(os.path.dirname(merged), exist_ok=True)
        write_merged(job, steps, merged)
        sentence = held_sentence(path_summary(steps)) or "no step to follow"
        items.append(
            Markup('<li><code>{}</code>: <a href="{}">merged timeline</a> ({} ranks, one clock); {}</li>').format(
                record.run_id, os.path.relpath(merged, data.report_dir), job.ranks, sentence
            )
        )
    if not rows and not items and not problems:
        return []
    blocks = [
        Markup(
            '<p class="note">Each collective of each profiled step matched across ranks. Transfer: its '
            "shortest duration across ranks (nobody waiting); a rank's wait: its duration minus the "
            "transfer; arrival spread: the last rank's start minus the first's. Medians over steps. "
            "On CPU, gloo's annotations of one collective end up to milliseconds apart on one host, "
            "so waits under a few milliseconds are within that noise.</p>"
        )
    ]
    if rows:
        frame = pd.DataFrame(rows)
        formats = {c: "{:.3f}" for c in ("arrival spread ms", "transfer ms", "median wait ms", "longest wait ms")}
        blocks.append(
            table_html(
                frame, formats, text_columns=("run", "group", "collective", "longest waiting rank", "last to arrive")
            )
        )
    if items:
        blocks.append(
            Markup(
                "<p>Merged timelines (open in Perfetto; each rank's <em>critical path</em> track shows "
                "the stretches of each step it held) and who held the steps:</p>"
            )
        )
        blocks.append(Markup("<ul>") + Markup("").join(items) + Markup("</ul>"))
    blocks += [note(f"not matched: {problem}") for problem in problems]
    return blocks
