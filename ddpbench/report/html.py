"""The HTML scaling report: one self-contained file built only from a sweep's stored records.

The page is `templates/report.html.j2` (Jinja2, autoescaped) filled with a list of sections;
tables are pandas Stylers with their cells and headings HTML-escaped. Images are embedded as PNG
data URIs and there is no script and no external resource, so the page opens from file:// with no
network. Adding a section is one entry in `SECTIONS`; a metric added to
`ddpbench.analysis.registry` appears in the scaling and runs tables by itself.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

import jinja2
import pandas as pd
from markupsafe import Markup, escape

from ddpbench.analysis import ranks, registry
from ddpbench.analysis.agreement import AGREEMENT, estimates_agreement
from ddpbench.analysis.frames import (
    breakdown_frame,
    headlines,
    iteration_frame,
    overlap_table,
    runs_frame,
    scaling_table,
    step_time_frame,
)
from ddpbench.config.errors import SpecError
from ddpbench.config.workloads import short_workload_name
from ddpbench.records.schema import Record
from ddpbench.records.store import read_records, write_atomic
from ddpbench.report import breakdown_section, plots, projection_sections

GLOSSARY = [
    (
        "step time",
        "On one rank, from the start of step i to the start of step i+1, data loading included. "
        "GPU: CUDA events on the current stream, read after the timed window. CPU: perf_counter. "
        "Warm-up steps (and DDP's first iteration) are never counted.",
    ),
    ("iteration time", "For step i, the largest step time over all ranks: the slowest rank sets the pace."),
    (
        "throughput X(N)",
        "Global samples (or tokens) in the timed window divided by the window's wall time; "
        "the window starts and ends with a barrier across ranks.",
    ),
    ("speedup S(N)", "X(N) / X(1), where X(1) is the local run: one device, no wrapper."),
    (
        "scaling efficiency E(N)",
        "X(N) / (N x X(1)). Weak scaling keeps the per-device batch; strong scaling "
        "keeps the global batch and splits it.",
    ),
    (
        "overlap",
        "From the profiler trace, as HolisticTraceAnalysis defines it: communication and computation "
        "intervals are merged separately; overlap = time both are active / time communication is active.",
    ),
    (
        "exposed communication",
        "Communication time not overlapped by computation, per step. Estimated three ways: "
        "from the trace; as the step time with all-reduce minus the step time of the same "
        "in-memory batches under no_sync(), alternating, after the timed window; and from "
        "DDP's reducer timers over those replayed steps (their overlap runs start-to-end "
        "rather than being a true intersection).",
    ),
    (
        "profiled step",
        "A step run under torch.profiler, after the timed window: overlap, the trace's exposed "
        "communication and the step breakdown come from these. The profiler records every op and "
        "slows them, most where a step is many small ops; their p50 (the slowest rank's, per step) "
        "stands beside the timed iteration p50. CPU: the ProfilerStep; GPU: from a step's first "
        "kernel to its last.",
    ),
    (
        "step breakdown",
        "A profiled step split into compute, exposed communication, other (memory copies, "
        "data loading) and idle; the four add up to the step's span.",
    ),
    (
        "DataParallel on CPU",
        "nn.DataParallel without CUDA just calls the module: one process with N times the "
        "threads and the global batch. Nothing is replicated.",
    ),
    *breakdown_section.glossary(),
]


_TEMPLATES = jinja2.Environment(
    loader=jinja2.FileSystemLoader(os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")),
    autoescape=True,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
)


def table_html(frame: pd.DataFrame, formats: dict[str, str] | None = None, text_columns: tuple = ()) -> Markup:
    """A DataFrame as a table through pandas' Styler: numbers formatted per column, blanks for
    missing values, every cell and heading HTML-escaped, status cells coloured by class."""
    formats = {column: fmt for column, fmt in (formats or {}).items() if column in frame.columns}
    classes = pd.DataFrame("", index=frame.index, columns=frame.columns)
    for column in frame.columns:
        if column in text_columns:
            classes[column] = "text"
        if column == "status":
            classes[column] = "text status-" + frame[column].astype(str).map(lambda v: str(escape(v)))
    styler = (
        frame.style.format(formats, na_rep="", escape="html")
        .format_index(escape="html", axis=1)
        .hide(axis="index")
        .set_td_classes(classes)
    )
    return Markup(f'<div class="table-wrap">{styler.to_html()}</div>')


def figure_html(figure, alt: str, caption: str) -> Markup:
    # Never wider than drawn: a one-panel figure stays panel-sized instead of filling the page.
    width_px = int(figure.get_figwidth() * plots.DPI)
    data = base64.b64encode(plots.png_bytes(figure)).decode("ascii")
    return Markup(
        f'<figure><img src="data:image/png;base64,{data}" alt="{escape(alt)}" '
        f'style="max-width: {width_px}px"><figcaption>{escape(caption)}</figcaption></figure>'
    )


def note(text: str) -> Markup:
    return Markup(f'<p class="note">{escape(text)}</p>')


def default_report_path(sweep_dir: str) -> str:
    sweep_id = os.path.basename(os.path.normpath(sweep_dir))
    return os.path.join("reports", sweep_id, "index.html")


@dataclass
class ReportData:
    """Everything a section may draw from, computed once."""

    records: list[tuple[str, Record]]
    unreadable: list[tuple[str, str]]
    runs: pd.DataFrame
    table: pd.DataFrame
    report_dir: str
    profile: dict | None = None
    """Network profile for the projection sections (ddpbench report --profile)."""


def metric_columns(frame: pd.DataFrame, names: list[str]) -> tuple[pd.DataFrame, dict[str, str]]:
    """The registry's metrics among `names`, scaled for display and renamed to their headings."""
    shown, formats = frame.copy(), {}
    for metric in registry.METRICS:
        if metric.name in names and metric.name in shown.columns:
            heading = metric.heading().replace("unit/s", "/s")
            shown[heading] = shown.pop(metric.name) * metric.scale
            formats[heading] = metric.fmt
    return shown, formats


def scaling_section(data: ReportData) -> list[Markup]:
    if data.table.empty:
        return []
    table = data.table
    blocks = [
        figure_html(
            plots.throughput(table),
            "Line charts of throughput against world size for DDP and DataParallel, one per workload, with "
            "the ideal linear line from the local run.",
            "Throughput against world size; the dashed line is perfect linear scaling of the local run.",
        ),
        figure_html(
            plots.efficiency(table),
            "Line charts of scaling efficiency in percent against world size for DDP and DataParallel, one "
            "per workload, with a dashed line at 100 percent.",
            "Scaling efficiency E(N) = X(N) / (N x X(1)); 100 % is perfect.",
        ),
    ]
    metrics = [m.name for m in registry.METRICS if m.in_scaling_table]
    shown = table[
        [
            "workload",
            "strategy_label",
            "world_size",
            "batch_size",
            "global_batch",
            "sample_unit",
            *metrics,
            "speedup",
            "efficiency",
            "reference",
            "oversubscribed",
        ]
    ]
    shown, formats = metric_columns(shown, metrics)
    shown = shown.rename(
        columns={
            "strategy_label": "strategy",
            "world_size": "world size",
            "batch_size": "batch / device",
            "global_batch": "global batch",
            "sample_unit": "unit",
            "reference": "X(1)",
        }
    )
    shown["X(1)"] = shown["X(1)"].replace("", "local run")
    shown["oversubscribed"] = shown["oversubscribed"].map({True: "yes", False: ""})
    formats.update({"batch / device": "{:.0f}", "global batch": "{:.0f}", "speedup": "{:.2f}x", "efficiency": "{:.1%}"})
    blocks.append(table_html(shown, formats, text_columns=("workload", "strategy", "unit", "X(1)", "oversubscribed")))
    if (shown["oversubscribed"] == "yes").any():
        blocks.append(
            Markup(
                '<p class="status-failed">Points marked oversubscribed ran more threads than usable '
                "cores: their throughput and efficiency describe time-sharing, not scaling.</p>"
            )
        )
    return blocks


def step_times_section(data: ReportData) -> list[Markup]:
    ok = [(path, record) for path, record in data.records if record.status == "ok" and record.ranks]
    if not ok:
        return []
    blocks = []
    # Rank by rank only while a box per rank can still be told apart.
    detailed = [(p, r) for p, r in ok if len(r.ranks) <= ranks.RANK_DETAIL_LIMIT]
    step_times = step_time_frame([(p, r) for p, r in detailed if r.spec.strategy == "ddp"])
    if not step_times.empty:
        blocks.append(
            figure_html(
                plots.step_time_by_rank(step_times),
                "Box plots of DDP step time in milliseconds for each rank at each world size, "
                "one chart per workload.",
                f"Each rank's step-time distribution (DDP runs of up to {ranks.RANK_DETAIL_LIMIT} "
                "ranks): a rank whose box sits higher is slow.",
            )
        )
    blocks += large_runs_blocks([r for _, r in ok])
    blocks.append(
        figure_html(
            plots.iteration_over_steps(iteration_frame(ok)),
            "Line charts of iteration time in milliseconds over the timed steps of every run, "
            "one chart per workload.",
            "Iteration time (slowest rank) over the timed steps of each run.",
        )
    )
    return blocks


def largest_ddp_runs(records: list[Record]) -> list[Record]:
    """Per workload, its largest DDP run beyond the rank-by-rank limit (the first of its repeats)."""
    chosen: dict[str, Record] = {}
    for record in records:
        if record.spec.strategy != "ddp" or len(record.ranks) <= ranks.RANK_DETAIL_LIMIT:
            continue
        workload = short_workload_name(record.spec.workload)
        if workload not in chosen or record.spec.world_size > chosen[workload].spec.world_size:
            chosen[workload] = record
    return [chosen[workload] for workload in sorted(chosen)]


def large_runs_blocks(records: list[Record]) -> list[Markup]:
    """Runs beyond a few dozen ranks, summarised: the spread of ranks against world size; for the
    largest run of each workload a rank x step heat map, percentile bands, the slowest ranks with
    their hosts, the slowest nodes, and the straggler verdict."""
    large = largest_ddp_runs(records)
    if not large:
        return []
    blocks = [
        figure_html(
            plots.rank_spread(
                ranks.rank_spread_frame(records), {r.run_id: short_workload_name(r.spec.workload) for r in records}
            ),
            "Line charts of the median, 90th percentile and maximum over ranks of each rank's median "
            "step time, against world size on a log-2 axis, one chart per workload.",
            "How far the slowest ranks drift from the median rank as the world grows.",
        )
    ]
    for record in large:
        matrix = ranks.step_matrix(record)
        if matrix is None:
            continue
        title = f"{short_workload_name(record.spec.workload)}, {record.run_id}: {record.spec.world_size} ranks"
        binned, width = ranks.heat_map_bins(matrix)
        per_rank = ranks.rank_frame(record)
        verdict = ranks.straggler_verdict(per_rank)
        blocks.append(Markup("<h3>{}</h3>").format(title))
        blocks.append(
            Markup('<p><strong>Stragglers:</strong> <span class="{}">{}</span> {}</p>').format(
                "status-failed" if verdict.straggler else "status-ok", verdict.text, verdict.basis
            )
        )
        blocks.append(
            figure_html(
                plots.rank_heat_map(binned, width, title),
                f"Heat map of step time in milliseconds, {matrix.shape[0]} ranks by " f"{matrix.shape[1]} timed steps.",
                "Step time of every rank (rows) at every step (columns): a slow rank is a bright "
                "row, a slow moment of the whole job a bright column.",
            )
        )
        blocks.append(
            figure_html(
                plots.step_bands(ranks.step_bands(matrix), title),
                "Band chart of step time over the timed steps: median rank, 90th to 99th "
                "percentile of ranks, and fastest to slowest rank.",
                "Per step, how the ranks spread: a wide top band is a slow minority of ranks.",
            )
        )
        blocks.append(slowest_ranks_table(per_rank))
        if per_rank["host"].nunique() > 1:
            blocks.append(slowest_nodes_table(per_rank))
    return blocks


def slowest_ranks_table(per_rank: pd.DataFrame) -> Markup:
    measure = ranks.measure_name(per_rank)
    shown = per_rank.sort_values("measure_s", ascending=False).head(ranks.SLOWEST_SHOWN)
    shown = shown[
        ["rank", "host", "step_p50_s", "step_p90_s", "no_sync_p50_s", "above_median_pct", "slowest_steps_pct"]
    ].copy()
    for column in ("step_p50_s", "step_p90_s", "no_sync_p50_s"):
        shown[column] = shown[column] * 1000
    shown.columns = [
        "rank",
        "host",
        "step p50 (ms)",
        "step p90 (ms)",
        "no_sync p50 (ms)",
        f"{measure} vs median rank (%)",
        "slowest rank in (% of steps)",
    ]
    return Markup("<p>The {} slowest of {} ranks by {}:</p>").format(len(shown), len(per_rank), measure) + table_html(
        shown, {c: "{:,.2f}" for c in shown.columns[2:]} | {shown.columns[5]: "{:+.1f}"}, text_columns=("host",)
    )


def slowest_nodes_table(per_rank: pd.DataFrame) -> Markup:
    nodes = ranks.node_frame(per_rank)
    shown = nodes.head(ranks.SLOWEST_SHOWN).assign(measure_s=lambda f: f["measure_s"] * 1000)
    shown = shown[["host", "ranks", "measure_s", "above_median_pct", "slowest_rank"]]
    shown.columns = [
        "host",
        "ranks",
        f"median {ranks.measure_name(per_rank)} (ms)",
        "vs median rank (%)",
        "its slowest rank",
    ]
    return Markup("<p>The {} slowest of {} nodes (median over each node's ranks):</p>").format(
        len(shown), len(nodes)
    ) + table_html(shown, {shown.columns[2]: "{:,.2f}", shown.columns[3]: "{:+.1f}"}, text_columns=("host",))


def stragglers_section(data: ReportData) -> list[Markup]:
    """One sentence per DDP run of two or more ranks."""
    items, bases = [], []
    for _, record in data.records:
        if record.status != "ok" or record.spec.strategy != "ddp" or len(record.ranks) < 2:
            continue
        verdict = ranks.straggler_verdict(ranks.rank_frame(record))
        bases.append(verdict.basis)
        items.append(
            Markup('<li><code>{}</code> ({} ranks): <span class="{}">{}</span></li>').format(
                record.run_id, len(record.ranks), "status-failed" if verdict.straggler else "", verdict.text
            )
        )
    if not items:
        return []
    return [note(" ".join(sorted(set(bases)))), Markup("<ul>") + Markup("").join(items) + Markup("</ul>")]


def communication_section(data: ReportData) -> list[Markup]:
    overlap = overlap_table(data.runs) if not data.runs.empty else pd.DataFrame()
    breakdown = breakdown_frame(data.records)
    blocks = []
    if not overlap.empty:
        blocks.append(
            figure_html(
                plots.exposed_communication(overlap),
                "Grouped bar charts of exposed communication per step in milliseconds from three "
                "estimates, and bar charts of overlap percent, per world size and workload.",
                "Exposed all-reduce per step, estimated three ways, and the share of it hidden " "behind computation.",
            )
        )
        shown, formats = metric_columns(overlap, list(overlap.columns))
        blocks.append(
            table_html(shown.rename(columns={"world_size": "world size"}), formats, text_columns=("workload",))
        )
    spread = exposed_spread_frame(data.records)
    if not spread.empty:
        blocks.append(
            Markup(
                "<p>Exposed communication across the ranks of each DDP run (no_sync replay), with the "
                "rank exposing most named:</p>"
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
        if record.status != "ok" or record.spec.strategy != "ddp" or len(record.ranks) < 2:
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


def runs_section(data: ReportData) -> list[Markup]:
    blocks = []
    if not data.runs.empty:
        metrics = ["throughput", "iteration_p50_s"]
        shown = data.runs[
            [
                "run_id",
                "status",
                "workload",
                "strategy_label",
                "world_size",
                "batch_size",
                "threads_per_rank",
                "sample_unit",
                *metrics,
                "checks_failed",
                "checks_not_decided",
            ]
        ]
        shown, formats = metric_columns(shown, metrics)
        shown = shown.rename(
            columns={
                "run_id": "run",
                "strategy_label": "strategy",
                "world_size": "world size",
                "batch_size": "batch / device",
                "threads_per_rank": "threads / process",
                "sample_unit": "unit",
                "checks_failed": "failed checks",
                "checks_not_decided": "not checked",
            }
        )
        formats["batch / device"] = "{:.0f}"
        blocks.append(
            table_html(
                shown,
                formats,
                text_columns=("run", "status", "workload", "strategy", "unit", "failed checks", "not checked"),
            )
        )
    problems = [record for _, record in data.records if record.error]
    if problems:
        items = []
        for record in problems:
            tail = "\n".join(record.error.output_tail)
            details = Markup("<details><summary>output</summary><pre>{}</pre></details>").format(tail) if tail else ""
            items.append(
                Markup('<li><code>{}</code> <span class="status-{}">{}</span>: {}{}</li>').format(
                    record.run_id, record.status, record.status, record.error.message, details
                )
            )
        blocks.append(
            Markup("<p>Errors, with the last lines the run printed:</p><ul>") + Markup("").join(items) + Markup("</ul>")
        )
    if data.unreadable:
        rows = pd.DataFrame(
            [(path, "unreadable", reason) for path, reason in data.unreadable], columns=["file", "status", "reason"]
        )
        blocks.append(Markup("<p>Record files that could not be read (left out of everything above):</p>"))
        blocks.append(table_html(rows, text_columns=("file", "status", "reason")))
    return blocks


def traces_section(data: ReportData) -> list[Markup]:
    items = []
    for _, record in data.records:
        trace = record.overlap.trace if record.overlap else None
        paths = [path for path in (trace.paths if trace else []) if path]
        if not paths:
            continue
        if len(paths) > ranks.RANK_DETAIL_LIMIT:
            # A link per rank would be a page of links: name the folder and the command instead.
            folders = sorted({os.path.dirname(os.path.abspath(path)) for path in paths})
            links = Markup(", ").join(
                Markup('<a href="{}">{}</a>').format(
                    os.path.relpath(folder, os.path.abspath(data.report_dir)), os.path.basename(folder)
                )
                for folder in folders
            )
            missing = sum(not os.path.exists(path) for path in paths)
            items.append(
                Markup(
                    "<li><code>{}</code>: {} trace files in {}{} (<code>ddpbench trace analyze {}</code>)" "</li>"
                ).format(record.run_id, len(paths), links, f", {missing} missing" if missing else "", folders[0])
            )
            continue
        links = []
        for path in paths:
            absolute = os.path.abspath(path)
            relative = os.path.relpath(absolute, os.path.abspath(data.report_dir))
            missing = "" if os.path.exists(absolute) else " (missing)"
            links.append(Markup('<a href="{}">{}</a>{}').format(relative, os.path.basename(path), missing))
        items.append(Markup("<li><code>{}</code>: {}</li>").format(record.run_id, Markup(" ").join(links)))
    if not items:
        return [note("No traces (runs were made with --no-profile, or failed before profiling).")]
    return [
        Markup(
            '<p class="note">Chrome traces, one per rank: open them in Perfetto (ui.perfetto.dev) or with '
            "TensorBoard's profiler plugin, or summarise them with <code>ddpbench trace analyze</code>.</p>"
        ),
        Markup("<ul>") + Markup("").join(items) + Markup("</ul>"),
    ]


ENVIRONMENT_ROWS = [
    ("hostname", "host"),
    ("gpu_count", "GPUs"),
    ("gpu_names", "GPU models"),
    ("cpu_model", "CPU"),
    ("cpu_cores", "usable CPU cores"),
    ("torch", "torch"),
    ("torchvision", "torchvision"),
    ("cuda", "CUDA"),
    ("cudnn", "cuDNN"),
    ("nccl", "NCCL"),
    ("python", "Python"),
    ("platform", "platform"),
    ("git_sha", "ddpbench commit"),
    ("git_dirty", "uncommitted changes"),
]


def environment_section(data: ReportData) -> list[Markup]:
    with_env = [record for _, record in data.records if record.env.hostname]
    env = next((r.env for r in with_env if r.status == "ok"), None) or (with_env[0].env if with_env else None)
    if env is None:
        return [note("No environment recorded.")]
    rows = []
    for key, label in ENVIRONMENT_ROWS:
        value = getattr(env, key)
        if value is not None and value != []:
            rows.append((label, ", ".join(map(str, value)) if isinstance(value, list) else value))
    scheduler = env.scheduler
    if scheduler is not None:  # the job's facts; each run's own nodes are in its record (step_nodes)
        rows += [
            (f"{scheduler.name.upper()} {label}", value)
            for label, value in (
                ("job", scheduler.job_id),
                ("partition", scheduler.partition),
                ("cluster", scheduler.cluster),
                ("job nodes", scheduler.job_nodes),
            )
            if value
        ]
    rows += sorted(env.env_vars.items())
    return [table_html(pd.DataFrame(rows, columns=["what", "value"]).astype(str), text_columns=("what", "value"))]


def history_section(data: ReportData) -> list[Markup]:
    """The stored history of this sweep's machine class and suite, when there is one."""
    from ddpbench.gate.history import DEFAULT_HISTORY, HistoryError, history_dir, history_frame

    ok = [record for _, record in data.records if record.status == "ok"]
    sweep_dir = os.path.dirname(os.path.dirname(data.records[0][0])) if data.records else ""
    folder = history_dir(ok, sweep_dir, DEFAULT_HISTORY) if ok else ""
    if not folder or not os.path.isdir(folder):
        return []
    try:
        series, method = history_frame(folder)
    except HistoryError as exc:
        return [note(f"The history in {folder} could not be read: {exc}")]
    return [
        figure_html(
            plots.history(series),
            "Line charts of throughput over the runs stored in the history, one per configuration, with "
            "change points marked by dashed vertical lines and each segment's mean as a flat line.",
            f"Throughput over the history in {folder}; change points by {method}.",
        ),
        note("ddpbench gate --baseline history compares a candidate with the runs since the last change point."),
    ]


@dataclass(frozen=True)
class Section:
    title: str
    build: Callable[[ReportData], list[Markup]]
    """The section's blocks; an empty list leaves the section out."""
    always: bool = False
    """Shown even when empty (with a note), so a reader knows it was looked for."""


SECTIONS = [
    Section("Scaling", scaling_section),
    Section("Step times", step_times_section),
    Section("Stragglers", stragglers_section),
    Section("Communication", communication_section),
    Section(
        "Where the scaling went",
        lambda data: breakdown_section.where_the_scaling_went_section(
            data, projection_sections.Blocks(table_html, figure_html, note)
        ),
    ),
    Section(
        "Projection vs measurement",
        lambda data: projection_sections.projection_vs_measurement_section(
            data, projection_sections.Blocks(table_html, figure_html, note)
        ),
    ),
    Section(
        "Beyond this machine (projection)",
        lambda data: projection_sections.beyond_this_machine_section(
            data, projection_sections.Blocks(table_html, figure_html, note)
        ),
    ),
    Section("History", history_section),
    Section("Runs", runs_section, always=True),
    Section("Traces", traces_section, always=True),
    Section("Environment", environment_section, always=True),
]


def build_report(sweep_dir: str, out_path: str | None = None, profile: str | None = None) -> str:
    """Write the report for a sweep folder and return its path."""
    records, unreadable = read_records(sweep_dir)
    if not records and not unreadable:
        raise SpecError(f"{sweep_dir!r} holds no run records (expected {sweep_dir}/runs/*.json)")
    out_path = out_path or default_report_path(sweep_dir)
    runs = runs_frame(records)
    table = scaling_table(runs)
    data = ReportData(
        records,
        unreadable,
        runs,
        table,
        os.path.dirname(os.path.abspath(out_path)),
        projection_sections.report_profile(sweep_dir, profile),
    )
    sections = []
    for section in SECTIONS:
        blocks = section.build(data)
        if blocks or section.always:
            sections.append({"title": section.title, "blocks": blocks})
    counts = runs["status"].value_counts().to_dict() if not runs.empty else {}
    page = _TEMPLATES.get_template("report.html.j2").render(
        sweep_id=os.path.basename(os.path.normpath(sweep_dir)),
        sweep_dir=sweep_dir,
        run_count=len(runs),
        status_counts=", ".join(f"{n} {status}" for status, n in sorted(counts.items())),
        made=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        headlines=headlines(runs, table) if not table.empty else {},
        nothing_ok=runs.empty or not (runs["status"] == "ok").any(),
        sections=sections,
        glossary=GLOSSARY,
    )
    write_atomic(out_path, page)
    return out_path
