"""The short text a person reads at the end of a run."""

from __future__ import annotations

import re

from ddpbench.analysis.ablation import NoAblation, read_ablation
from ddpbench.analysis.answer_text import cause_figure, cause_value, percent
from ddpbench.analysis.answers import pool_runs
from ddpbench.analysis.causes import answer_from_ablation
from ddpbench.analysis.labels import strategy_label
from ddpbench.analysis.without_ablation import exposed_comm
from ddpbench.records.schema import Metrics, Record, RunError

TAIL_LINES = 10
_NAMED_RANK = re.compile(r"\brank (\d+)")


def _last_lines(lines: list[str]) -> list[str]:
    # Python's ^^^^ markers under each frame take room and say nothing in a short tail.
    return [line for line in lines if line.strip(" ^~")][-TAIL_LINES:]


def relevant_tail(error: RunError) -> tuple[str, list[str]]:
    """(where from, last lines) that explain a failure: the end of the failing rank's own
    traceback when torchrun kept one (the combined output ends with torchrun's wrapper error
    instead), else the end of what the processes printed."""
    tracebacks = error.tracebacks or {}
    if tracebacks:
        named = _NAMED_RANK.search(error.message or "")
        rank = named.group(1) if named and named.group(1) in tracebacks else next(iter(tracebacks))
        return f"rank {rank}'s traceback", _last_lines(tracebacks[rank].splitlines())
    return "end of the output", _last_lines(error.output_tail)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


CHECK_WORDS = {True: "ok", False: "FAILED", None: "not checked"}


def _mfu(metrics: Metrics) -> str:
    """Model FLOPs utilisation against the device's published peak, or why it is unknown."""
    basis = metrics.mfu_basis
    if metrics.mfu is None:
        return f"unknown ({basis.reason if basis and basis.reason else 'not measured'})"
    mix = ""
    if basis.matmul_precision and basis.conv_precision and basis.matmul_precision != basis.conv_precision:
        mix = (
            f"; matmuls {basis.matmul_precision}, convolutions ({100 * (basis.conv_flops_share or 0):.0f} % "
            f"of FLOPs) {basis.conv_precision}"
        )
    return (
        f"{100 * metrics.mfu:.1f} % of {basis.peak_flops_per_s / 1e12:,.1f} TFLOP/s "
        f"{basis.precision} ({basis.matched}, published dense peak{mix})"
    )


def _host_sync_notes(record: Record) -> list[str]:
    """Where timed steps waited for the GPU on the host: the numbers then show the CPU's pace."""
    found = record.host_sync
    if found is None:
        return []
    notes = list(found.host_reads_per_step)
    logging = found.ddp_runtime_logging
    if logging is not None and logging.timed_steps_host_synchronised:
        notes.append(logging.how)
    return notes


def _in_process_lines(record: Record) -> list[str]:
    """A DDP run's own answer from its in-process ablation (the same engine and figures as
    `ddpbench explain`): the in-process efficiency, its largest cause, and at two ranks or more the
    one figure of exposed communication."""
    try:
        run = answer_from_ablation(record, read_ablation(record), [], [])
    except NoAblation:
        if record.spec.script or not record.spec.launched_by_torchrun or record.spec.world_size < 2:
            return []
        seconds, basis = exposed_comm(record)  # the labelled path: measured once, elsewhere in the run
        return [] if seconds is None else [f"  exposed comm {seconds * 1e3:.2f} ms per step ({basis})"]
    answer = pool_runs([run], {})
    largest = answer.largest()
    if largest:
        said = f"largest cause {cause_figure(answer, largest[0])}"
    elif answer.loss_within_noise():
        said = "no loss beyond this run's noise"
    else:
        said = "no single cause beyond this run's noise (ddpbench explain --detail lists them)"
    lines = [
        f"  in-process   efficiency {percent(answer.in_process, runs=False)} (one rank alone against DDP, in "
        f"these processes); {said}"
    ]
    if record.spec.world_size > 1:
        lines.append(
            f"  exposed comm {cause_value(answer, 'exposed_comm')}, the slowest rank's waits in DDP's collectives"
        )
    return lines


def _script_lines(record: Record, path: str) -> list[str]:
    """A script's run has only its traces: the exposed communication of the rank that waits least,
    and the wait for the slowest rank as every view reads it (`straggler`), from the collectives
    matched across the ranks' traces."""
    if record.script is None:
        return []
    lines = []
    trace = record.overlap.trace if record.overlap else None
    summaries = [s for s in (trace.by_rank if trace else []) if s.exposed_comm_us_per_step is not None]
    if summaries:
        # The rank that waits least shows the transfer alone.
        least = min(summaries, key=lambda s: s.exposed_comm_us_per_step)
        lines.append(
            f"  exposed comm {least.exposed_comm_us_per_step / 1e3:.2f} ms/step on the rank that waits least, "
            f"{least.overlap_pct or 0.0:.0f} % of its all-reduce hidden (from the profiled steps' traces)"
        )
    if record.spec.world_size > 1:
        lines.append(f"  straggler    {_script_straggler(record, path).sentence()}")
    lines += [f"  script       {note}" for note in record.script.notes]
    return lines


def _script_straggler(record: Record, path: str):
    from ddpbench.analysis.collectives import match_job
    from ddpbench.analysis.rank_clocks import run_traces
    from ddpbench.analysis.straggler import without_ablation
    from ddpbench.analysis.traces import TraceError

    traces = run_traces(path, record)
    job, why = None, "the run has no traces of two ranks or more (profiling off?)"
    if len(traces) >= 2:
        try:
            job = match_job(traces)
        except (TraceError, OSError) as exc:
            why = f"its traces could not be matched: {exc}"
    return without_ablation(record, job, why)


def format_summary(record: Record, path: str) -> str:
    spec = record.spec
    threads = spec.threads_per_rank
    title = (
        f"{spec.workload}{'/' + spec.size if spec.size else ''}  {strategy_label(spec)}  world {spec.world_size} on "
        f"{spec.device}, {threads} thread{'s' if threads != 1 else ''}/process  {spec.precision}  "
        f"batch {spec.batch_size or 'default'}/device"
    )
    lines = [title]
    if record.status != "ok":
        error = record.error
        lines.append(f"  status       {record.status.upper()}: {error.message if error else 'no message'}")
        # A script ddpbench cannot measure: the one line says it all; the traceback is ddpbench's own.
        # So does a known pitfall of torch's: the record keeps the traceback.
        source, tail = (
            relevant_tail(error) if error and error.kind not in ("not_measurable", "known_pitfall") else ("", [])
        )
        if tail:
            lines.append(f"  {source}:")
            lines += [f"    | {line}" for line in tail]
    else:
        metrics = record.metrics
        unit = metrics.sample_unit
        iteration = metrics.iteration_time_s
        lines.append(
            f"  throughput   {metrics.throughput_units_per_s:,.1f} {unit}/s "
            f"({metrics.throughput_units_per_s_per_device:,.1f} per device)"
        )
        if spec.device == "cuda":
            lines.append(f"  MFU          {_mfu(metrics)}")
        for note in _host_sync_notes(record):
            lines.append(f"  host sync    {note}")
        lines.append(
            f"  iteration    p50 {_ms(iteration.p50)}  p90 {_ms(iteration.p90)}  "
            f"p99 {_ms(iteration.p99)}  mean {_ms(iteration.mean)} ± {_ms(iteration.std)}"
            f"  over {metrics.timed_steps} timed steps"
        )
        lines += _in_process_lines(record)
        lines += _script_lines(record, path)
        marks = [f"{name} {CHECK_WORDS[check.ok]}" for name, check in record.checks.items()]
        lines.append("  checks       " + ", ".join(marks))
        for name in record.failed_checks():
            check = record.checks[name]
            lines.append(f"  !! CHECK FAILED: {name}: {check.reason or ''} {check.details}".rstrip())
        undecided: dict[str, list[str]] = {}  # one line per reason: one rank leaves three undecided
        for name, check in record.checks.items():
            if check.ok is None:
                undecided.setdefault(check.reason or "no reason given", []).append(name)
        for reason, names in undecided.items():
            lines.append(f"  not checked  {', '.join(names)}: {reason}")
        if record.error:
            lines.append(f"  !! {record.error.message}")
        for attempt in record.oom_backoff or []:
            lines.append(
                f"  oom backoff  batch {attempt.batch_size}/device ran out of memory; "
                f"measured at batch {spec.batch_size}/device instead"
            )
    if record.oversubscribed:
        figures = record.oversubscribed
        lines.append(
            f"  !! oversubscribed: {figures.threads} threads on {figures.usable_cores} usable cores; "
            "these numbers describe time-sharing, not scaling"
        )
    load = record.machine_load
    if load and load.busy:
        lines.append(f"  !! busy machine: {load.why}; these numbers are slower than this machine can give")
    lines.append(f"  record       {path}")
    logs = record.launch.logs if record.launch else None
    if logs and (record.status != "ok" or record.error):
        per_rank = "; per-rank files under ranks/" if spec.launched_by_torchrun else ""
        lines.append(f"  logs         {logs}  (output.log: everything the processes printed{per_rank})")
    return "\n".join(lines)
