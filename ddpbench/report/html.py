"""The HTML scaling report: one self-contained file built only from a sweep's stored records.

The page answers first: its first screen is the verdict per workload (`verdict`); below it, what
the verdict rests on (where the efficiency went, E(N) against world size, the ranks); everything
else is in an appendix that opens on a click (the cross-checks, the whole tables, memory when the
sweep changes none, collectives, projections, runs, environment, the glossary).

The page is `templates/report.html.j2` (Jinja2, autoescaped) filled with a list of sections, each
built by a function in a `sections_*` module (or `breakdown_section`, `projection_sections`) from
the blocks of `blocks`: tables are pandas Stylers with their cells and headings HTML-escaped.
Images are embedded as PNG data URIs and there is no script and no external resource, so the page
opens from file:// with no network. Adding a section is one entry in `BODY` or `APPENDIX`; a metric
added to `ddpbench.analysis.registry` appears in the scaling and runs tables by itself.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

import jinja2
from markupsafe import Markup

from ddpbench.analysis.answers import answer_sweep
from ddpbench.analysis.causes import ExplainError
from ddpbench.analysis.frames import changes_memory, runs_frame, scaling_table
from ddpbench.config.errors import SpecError
from ddpbench.records.store import read_records, write_atomic
from ddpbench.report import breakdown_section, projection_sections
from ddpbench.report.blocks import ReportData, figure_html, note, table_html
from ddpbench.report.collectives_section import collectives_section
from ddpbench.report.sections_communication import communication_section
from ddpbench.report.sections_memory import memory_section
from ddpbench.report.sections_runs import environment_section, history_section, runs_section, traces_section
from ddpbench.report.sections_scaling import iterations_section, ranks_section, scaling_section, scaling_table_section
from ddpbench.report.verdict import verdict_section
from ddpbench.report.where import claim, default_report_path, owner_line, sweep_id_of

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
        "exposed communication's cross-checks",
        "Three other estimates, in the appendix, each measuring something else than the exposed "
        "communication defined above: the trace's communication time not overlapped by computation; "
        "the no_sync replay (the step time with all-reduce minus the step time of the same in-memory "
        "batches under no_sync(), alternating, after the timed window: it also holds DDP's bucket copies "
        "and the waits); and DDP's reducer timers over those replayed steps (their overlap runs "
        "start-to-end rather than being a true intersection).",
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


@dataclass(frozen=True)
class Section:
    title: str
    build: Callable[[ReportData], list[Markup]]
    """The section's blocks; an empty list leaves the section out."""
    always: bool = False
    """Shown even when empty (with a note), so a reader knows it was looked for."""


BLOCKS = projection_sections.Blocks(table_html, figure_html, note)


def _where_it_went(data: ReportData) -> list[Markup]:
    found = breakdown_section.where_the_efficiency_went(data.answers, BLOCKS)
    if found:
        found.append(Markup("<p>What to try:</p>") + breakdown_section.what_to_try(data.answers, data.profile))
    if data.problems:
        found.append(note("Not explained: " + "; ".join(data.problems)))
    return found


def _memory_in_body(data: ReportData) -> list[Markup]:
    return memory_section(data) if not data.runs.empty and changes_memory(data.runs) else []


def _memory_in_appendix(data: ReportData) -> list[Markup]:
    return memory_section(data) if data.runs.empty or not changes_memory(data.runs) else []


BODY = [
    Section("Where the efficiency went", _where_it_went),
    Section("Scaling", scaling_section),
    Section("Ranks", ranks_section),
    Section("Memory and compiling", _memory_in_body),
]
APPENDIX = [
    Section("Exposed communication and its cross-checks", communication_section),
    Section("Collectives across ranks", collectives_section),
    Section("Throughput and the scaling table", scaling_table_section),
    Section("Iteration time over the run", iterations_section),
    Section("Memory and compiling", _memory_in_appendix),
    Section(
        "Projection vs measurement",
        lambda data: projection_sections.projection_vs_measurement_section(data, BLOCKS),
    ),
    Section(
        "Beyond this machine (projection)",
        lambda data: projection_sections.beyond_this_machine_section(data, BLOCKS),
    ),
    Section("History", history_section),
    Section("Runs", runs_section, always=True),
    Section("Traces", traces_section, always=True),
    Section("Environment", environment_section, always=True),
]


def _built(sections: list[Section], data: ReportData) -> list[dict]:
    found = []
    for section in sections:
        blocks = section.build(data)
        if blocks or section.always:
            found.append({"title": section.title, "blocks": blocks})
    return found


def build_report(
    sweep_dir: str, out_path: str | None = None, profile: str | None = None, sweep_id: str | None = None
) -> str:
    """Write the report for a sweep folder and return its path (by default reports/<sweep-id>/,
    or the sweep's own folder where that holds another sweep's report: `report_place`)."""
    records, unreadable = read_records(sweep_dir)
    if not records and not unreadable:
        raise SpecError(f"{sweep_dir!r} holds no run records (expected {sweep_dir}/runs/*.json)")
    out_path = out_path or default_report_path(sweep_dir, sweep_id=sweep_id)[0]
    runs = runs_frame(records)
    table = scaling_table(runs)
    try:
        answers, problems = answer_sweep(records)
    except ExplainError as exc:
        answers, problems = [], [str(exc)]
    data = ReportData(
        records,
        unreadable,
        runs,
        table,
        os.path.dirname(os.path.abspath(out_path)),
        projection_sections.report_profile(sweep_dir, profile),
        answers,
        problems if answers else [],
    )
    counts = runs["status"].value_counts().to_dict() if not runs.empty else {}
    page = _TEMPLATES.get_template("report.html.j2").render(
        sweep_id=sweep_id_of(sweep_dir, sweep_id),
        owner=owner_line(sweep_dir),
        sweep_dir=sweep_dir,
        run_count=len(runs),
        status_counts=", ".join(f"{n} {status}" for status, n in sorted(counts.items())),
        made=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        verdict=verdict_section(answers, table, BLOCKS),
        nothing_ok=runs.empty or not (runs["status"] == "ok").any(),
        body=_built(BODY, data),
        appendix=_built(APPENDIX, data),
        glossary=GLOSSARY,
    )
    write_atomic(out_path, page)
    return out_path


def report_words(
    sweep_dir: str, out_path: str | None = None, profile: str | None = None, sweep_id: str | None = None
) -> str:
    """Write the report and say where it went: `report: PATH`, and why not in reports/<sweep-id>/
    where the report went into the sweep's own folder."""
    path, why = (out_path, "") if out_path else default_report_path(sweep_dir, sweep_id=sweep_id)
    build_report(sweep_dir, path, profile, sweep_id)
    if not out_path and not why:
        claim(os.path.dirname(path), sweep_dir)
    return f"report: {path}" + (f" ({why}, which is left as it is)" if why else "")
