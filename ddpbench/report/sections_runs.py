"""The report's sections on the runs themselves: every run with its status and errors, their traces,
the environment they ran in, and the stored history of this machine class and suite."""

from __future__ import annotations

import os

import pandas as pd
from markupsafe import Markup

from ddpbench.analysis import ranks
from ddpbench.report import plots
from ddpbench.report.blocks import ReportData, figure_html, metric_columns, note, table_html


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
        for column in ("checks_failed", "checks_not_decided"):
            # With a space after each comma the names wrap inside their cell; unbroken, one long
            # list widened the table past its column and hid the columns after it.
            shown[column] = shown[column].str.replace(",", ", ", regex=False)
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
