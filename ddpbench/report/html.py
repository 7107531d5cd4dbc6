"""The HTML scaling report: one self-contained file built only from a sweep's stored records.

Images are embedded as PNG data URIs and there is no script and no external resource, so the
page opens from file:// with no network. Every string that comes from a record is escaped.
"""

from __future__ import annotations

import base64
import html
import os
from datetime import datetime, timezone

import pandas as pd

from ddpbench.report import plots
from ddpbench.records.store import write_atomic
from ddpbench.analysis.frames import (breakdown_frame, headlines, iteration_frame, overlap_table, read_records,
                              record_row, scaling_table, step_time_frame)
from ddpbench.config.spec import SpecError

GLOSSARY = [
    ("step time", "On one rank, from the start of step i to the start of step i+1, data loading included. "
                  "GPU: CUDA events on the current stream, read after the timed window. CPU: perf_counter. "
                  "Warm-up steps (and DDP's first iteration) are never counted."),
    ("iteration time", "For step i, the largest step time over all ranks: the slowest rank sets the pace."),
    ("throughput X(N)", "Global samples (or tokens) in the timed window divided by the window's wall time; "
                        "the window starts and ends with a barrier across ranks."),
    ("speedup S(N)", "X(N) / X(1), where X(1) is the local run: one device, no wrapper."),
    ("scaling efficiency E(N)", "X(N) / (N x X(1)). Weak scaling keeps the per-device batch; strong scaling "
                                "keeps the global batch and splits it."),
    ("overlap", "From the profiler trace, as HolisticTraceAnalysis defines it: communication and computation "
                "intervals are merged separately; overlap = time both are active / time communication is active."),
    ("exposed communication", "Communication time not overlapped by computation, per step. Estimated three ways: "
                              "from the trace; as the step time with all-reduce minus the step time of the same "
                              "batches under no_sync(); and from DDP's reducer timers (sampled, one step behind, "
                              "their overlap runs start-to-end rather than being a true intersection)."),
    ("step breakdown", "A profiled step split into compute, exposed communication, other (memory copies, "
                       "data loading) and idle; the four add up to the step's span."),
    ("DataParallel on CPU", "nn.DataParallel without CUDA just calls the module: one process with N times the "
                            "threads and the global batch. Nothing is replicated."),
]

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 auto; max-width: 1100px;
       padding: 1rem 1.5rem 3rem; color: #1a1a1a; line-height: 1.45; }
h1 { font-size: 1.6rem; margin-bottom: 0.2rem; }
h2 { font-size: 1.25rem; margin-top: 2.2rem; border-bottom: 1px solid #ccc; padding-bottom: 0.2rem; }
.meta { color: #555; font-size: 0.9rem; }
.headline li { margin: 0.3rem 0; }
figure { margin: 1rem 0; }
figure img { width: 100%; height: auto; border: 1px solid #eee; }
figcaption { font-size: 0.85rem; color: #444; }
.table-wrap { overflow-x: auto; }
table { border-collapse: collapse; font-size: 0.85rem; margin: 0.6rem 0; }
th, td { border: 1px solid #ddd; padding: 0.25rem 0.5rem; text-align: right; vertical-align: top; }
th { background: #f3f3f3; }
td.text, th.text { text-align: left; }
.status-failed, .status-timeout, .status-oom, .status-unreadable { color: #a40000; font-weight: 600; }
.status-ok { color: #1a5e20; }
.note { font-size: 0.85rem; color: #444; }
dt { font-weight: 600; margin-top: 0.5rem; }
dd { margin-left: 1.2rem; }
code { font-size: 0.85rem; }
pre { font-size: 0.75rem; background: #f6f6f6; padding: 0.5rem; overflow-x: auto; max-height: 20rem; }
"""


def esc(value) -> str:
    return html.escape("" if value is None else str(value))


def frame_html(frame: pd.DataFrame, formats: dict[str, str] | None = None, text_columns: tuple = ()) -> str:
    """A DataFrame as an escaped HTML table; numbers formatted per column, blanks for missing."""
    formats = formats or {}
    head = "".join(f'<th class="{"text" if c in text_columns else ""}">{esc(c)}</th>' for c in frame.columns)
    body = []
    for _, row in frame.iterrows():
        cells = []
        for column in frame.columns:
            value = row[column]
            if value is None or (isinstance(value, float) and pd.isna(value)):
                shown = ""
            elif column in formats:
                shown = formats[column].format(value)
            else:
                shown = str(value)
            css = "text" if column in text_columns else ""
            if column == "status":
                css += f" status-{esc(value)}"
            cells.append(f'<td class="{css.strip()}">{esc(shown)}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f'<div class="table-wrap"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def figure_html(figure, alt: str, caption: str) -> str:
    # Never wider than drawn: a one-panel figure stays panel-sized instead of filling the page.
    width_px = int(figure.get_figwidth() * plots.DPI)
    data = base64.b64encode(plots.png_bytes(figure)).decode("ascii")
    return (f'<figure><img src="data:image/png;base64,{data}" alt="{esc(alt)}" style="max-width: {width_px}px">'
            f"<figcaption>{esc(caption)}</figcaption></figure>")


def default_report_path(sweep_dir: str) -> str:
    sweep_id = os.path.basename(os.path.normpath(sweep_dir))
    return os.path.join("reports", sweep_id, "index.html")


def environment_rows(records: list[dict]) -> list[tuple[str, str]]:
    env = next((r["env"] for r in records if r["status"] == "ok" and r.get("env")), None) or \
        next((r["env"] for r in records if r.get("env")), {})
    keys = [("hostname", "host"), ("gpu_count", "GPUs"), ("gpu_names", "GPU models"), ("cpu_model", "CPU"),
            ("cpu_cores", "usable CPU cores"), ("torch", "torch"), ("torchvision", "torchvision"), ("cuda", "CUDA"),
            ("cudnn", "cuDNN"), ("nccl", "NCCL"), ("python", "Python"), ("platform", "platform"),
            ("git_sha", "ddpbench commit"), ("git_dirty", "uncommitted changes")]
    rows = [(label, ", ".join(map(str, env[key])) if isinstance(env.get(key), list) else env.get(key))
            for key, label in keys if key in env]
    rows += [(name, value) for name, value in sorted((env.get("env_vars") or {}).items())]
    return rows


def trace_links(records: list[dict], report_dir: str) -> str:
    items = []
    for record in records:
        trace = (record.get("overlap") or {}).get("trace") or {}
        links = []
        for path in trace.get("paths") or []:
            if not path:
                continue
            absolute = os.path.abspath(path)
            relative = os.path.relpath(absolute, os.path.abspath(report_dir))
            missing = "" if os.path.exists(absolute) else " (missing)"
            links.append(f'<a href="{esc(relative)}">{esc(os.path.basename(path))}</a>{missing}')
        if links:
            items.append(f"<li><code>{esc(record['run_id'])}</code>: {' '.join(links)}</li>")
    if not items:
        return '<p class="note">No traces (runs were made with --no-profile, or failed before profiling).</p>'
    return ('<p class="note">Chrome traces, one per rank: open them in Perfetto (ui.perfetto.dev) or with '
            "TensorBoard's profiler plugin, or summarise them with <code>ddpbench trace analyze</code>.</p><ul>"
            + "".join(items) + "</ul>")


def build_report(sweep_dir: str, out_path: str | None = None) -> str:
    """Write the report for a sweep folder and return its path."""
    records, unreadable = read_records(sweep_dir)
    if not records and not unreadable:
        raise SpecError(f"{sweep_dir!r} holds no run records (expected {sweep_dir}/runs/*.json)")
    out_path = out_path or default_report_path(sweep_dir)
    report_dir = os.path.dirname(os.path.abspath(out_path))
    runs = pd.DataFrame([record_row(r) for r in records])
    sweep_id = os.path.basename(os.path.normpath(sweep_dir))
    sections = [f"<h1>Scaling report: {esc(sweep_id)}</h1>", _meta_line(runs, sweep_dir)]

    ok = runs[runs["status"] == "ok"] if not runs.empty else runs
    table = scaling_table(runs) if not runs.empty else pd.DataFrame()
    sentences = headlines(runs, table) if not table.empty else {}
    if sentences:
        sections.append('<ul class="headline">' + "".join(
            f"<li><strong>{esc(w)}</strong>: {esc(s)}</li>" for w, s in sentences.items()) + "</ul>")
    elif ok.empty:
        sections.append('<p class="status-failed">No run of this sweep succeeded; see "Runs" below.</p>')

    if not table.empty:
        sections.append("<h2>Scaling</h2>")
        sections.append(figure_html(plots.throughput(table),
                                    "Line charts of throughput against world size for DDP and DataParallel, one per "
                                    "workload, with the ideal linear line from the local run.",
                                    "Throughput against world size; the dashed line is perfect linear scaling of the local run."))
        sections.append(figure_html(plots.efficiency(table),
                                    "Line charts of scaling efficiency in percent against world size for DDP and "
                                    "DataParallel, one per workload, with a dashed line at 100 percent.",
                                    "Scaling efficiency E(N) = X(N) / (N x X(1)); 100 % is perfect."))
        shown = table.drop(columns=["strategy"]).rename(columns={
            "strategy_label": "strategy", "world_size": "world size", "batch_size": "batch / device",
            "global_batch": "global batch", "throughput": "throughput (/s)", "sample_unit": "unit",
            "throughput_per_device": "per device (/s)", "iteration_p50_s": "iteration p50 (ms)"})
        shown["iteration p50 (ms)"] = shown["iteration p50 (ms)"] * 1000
        shown["oversubscribed"] = shown["oversubscribed"].map({True: "yes"}).fillna("")
        sections.append(frame_html(shown, {"batch / device": "{:.0f}", "global batch": "{:.0f}",
                                           "throughput (/s)": "{:,.1f}", "per device (/s)": "{:,.1f}",
                                           "speedup": "{:.2f}x", "efficiency": "{:.1%}", "iteration p50 (ms)": "{:,.2f}"},
                                   text_columns=("workload", "strategy", "unit", "oversubscribed")))
        if (shown["oversubscribed"] == "yes").any():
            sections.append('<p class="status-failed">Points marked oversubscribed ran more threads than usable '
                            "cores: their throughput and efficiency describe time-sharing, not scaling.</p>")

    step_times = step_time_frame(records)
    if not step_times.empty:
        sections.append("<h2>Step times</h2>")
        if (step_times["strategy"] == "ddp").any():
            sections.append(figure_html(plots.step_time_by_rank(step_times),
                                        "Box plots of DDP step time in milliseconds for each rank at each world size, "
                                        "one chart per workload.",
                                        "Each rank's step-time distribution (DDP): a rank whose box sits higher is slow."))
        sections.append(figure_html(plots.iteration_over_steps(iteration_frame(step_times)),
                                    "Line charts of iteration time in milliseconds over the timed steps of every run, "
                                    "one chart per workload.",
                                    "Iteration time (slowest rank) over the timed steps of each run."))

    overlap = overlap_table(runs) if not runs.empty else pd.DataFrame()
    breakdown = breakdown_frame(records)
    if not overlap.empty or not breakdown.empty:
        sections.append("<h2>Communication</h2>")
    if not overlap.empty:
        sections.append(figure_html(plots.exposed_communication(overlap),
                                    "Grouped bar charts of exposed communication per step in milliseconds from three "
                                    "estimates, and bar charts of overlap percent, per world size and workload.",
                                    "Exposed all-reduce per step, estimated three ways, and the share of it hidden behind computation."))
        shown = overlap.rename(columns={"world_size": "world size", "overlap_pct": "overlap (%)",
                                        "exposed_comm_trace_s": "exposed, trace (ms)",
                                        "exposed_comm_no_sync_s": "exposed, no_sync (ms)",
                                        "exposed_comm_reducer_s": "exposed, reducer (ms)",
                                        "iteration_p50_s": "iteration p50 (ms)"})
        for column in shown.columns[3:]:
            shown[column] = shown[column] * 1000
        sections.append(frame_html(shown, {c: "{:,.2f}" for c in shown.columns[2:]}, text_columns=("workload",)))
    if not breakdown.empty:
        sections.append(figure_html(plots.step_breakdown(breakdown),
                                    "Stacked bar charts of the time of a profiled step split into compute, exposed "
                                    "communication, other and idle, for every run with a trace.",
                                    "Where a profiled step's time goes (mean over ranks and profiled steps)."))

    sections.append("<h2>Runs</h2>")
    sections.append(_runs_table(runs, records, unreadable))
    sections.append("<h2>Traces</h2>")
    sections.append(trace_links(records, report_dir))
    sections.append("<h2>Environment</h2>")
    env_rows = environment_rows(records)
    sections.append(frame_html(pd.DataFrame(env_rows, columns=["what", "value"]), text_columns=("what", "value"))
                    if env_rows else '<p class="note">No environment recorded.</p>')
    sections.append("<h2>Glossary</h2><dl>" + "".join(
        f"<dt>{esc(term)}</dt><dd>{esc(text)}</dd>" for term, text in GLOSSARY) + "</dl>")

    page = (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>ddpbench: {esc(sweep_id)}</title><style>{CSS}</style></head><body>"
            + "\n".join(sections) + "</body></html>\n")
    write_atomic(out_path, page)
    return out_path


def _meta_line(runs: pd.DataFrame, sweep_dir: str) -> str:
    counts = runs["status"].value_counts().to_dict() if not runs.empty else {}
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    made = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f'<p class="meta">{esc(len(runs))} runs ({esc(summary)}) from <code>{esc(sweep_dir)}</code>; '
            f"report made {esc(made)} from the stored records.</p>")


def _runs_table(runs: pd.DataFrame, records: list[dict], unreadable: list[tuple[str, str]]) -> str:
    parts = []
    if not runs.empty:
        shown = runs[["run_id", "status", "workload", "strategy_label", "world_size", "batch_size", "threads_per_rank",
                      "throughput", "sample_unit", "iteration_p50_s", "checks_failed"]].copy()
        shown["iteration_p50_s"] = shown["iteration_p50_s"] * 1000
        shown = shown.rename(columns={"run_id": "run", "strategy_label": "strategy", "world_size": "world size",
                                      "batch_size": "batch / device", "threads_per_rank": "threads / process",
                                      "throughput": "throughput (/s)", "sample_unit": "unit",
                                      "iteration_p50_s": "iteration p50 (ms)", "checks_failed": "failed checks"})
        parts.append(frame_html(shown, {"throughput (/s)": "{:,.1f}", "iteration p50 (ms)": "{:,.2f}",
                                        "batch / device": "{:.0f}"},
                                text_columns=("run", "status", "workload", "strategy", "unit", "failed checks")))
    problems = [r for r in records if r.get("error")]
    if problems:
        parts.append("<p>Errors, with the last lines the run printed:</p><ul>")
        for record in problems:
            error = record["error"]
            tail = "\n".join(error.get("output_tail") or [])
            details = f"<details><summary>output</summary><pre>{esc(tail)}</pre></details>" if tail else ""
            parts.append(f'<li><code>{esc(record["run_id"])}</code> <span class="status-{esc(record["status"])}">'
                         f'{esc(record["status"])}</span>: {esc(error.get("message"))}{details}</li>')
        parts.append("</ul>")
    if unreadable:
        rows = pd.DataFrame([(path, "unreadable", reason) for path, reason in unreadable],
                            columns=["file", "status", "reason"])
        parts.append("<p>Record files that could not be read (left out of everything above):</p>")
        parts.append(frame_html(rows, text_columns=("file", "status", "reason")))
    return "\n".join(parts)
