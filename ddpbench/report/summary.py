"""The short text a person reads at the end of a run."""

from __future__ import annotations

import re

from ddpbench.analysis.agreement import estimates_agreement
from ddpbench.analysis.breakdown import in_run_summary
from ddpbench.analysis.labels import strategy_label
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


def _script_lines(record: Record) -> list[str]:
    """A script's run has only the trace's view of overlap (no replay): say what it saw."""
    if record.script is None:
        return []
    lines = []
    trace = record.overlap.trace if record.overlap else None
    summaries = [s for s in (trace.by_rank if trace else []) if s.exposed_comm_us_per_step is not None]
    if summaries:
        # The rank that waits least shows the transfer alone; the others' extra is their wait for it.
        least = min(summaries, key=lambda s: s.exposed_comm_us_per_step)
        wait_ms = (max(s.exposed_comm_us_per_step for s in summaries) - least.exposed_comm_us_per_step) / 1e3
        waits = f"; the rank that waits most waits {wait_ms:.2f} ms more for its peers" if len(summaries) > 1 else ""
        lines.append(
            f"  exposed comm {least.exposed_comm_us_per_step / 1e3:.2f} ms/step on the rank that waits least, "
            f"{least.overlap_pct or 0.0:.0f} % of its all-reduce hidden (from the profiled steps' traces){waits}"
        )
    lines += [f"  script       {note}" for note in record.script.notes]
    return lines


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
        in_run = in_run_summary(record)
        if in_run:
            lines.append(f"  in-run       {in_run}")
        if spec.strategy == "ddp" and spec.world_size > 1:
            agreement = estimates_agreement(record)
            if agreement.agree is not None:
                lines.append(f"  exposed comm {agreement.sentence}")
        lines += _script_lines(record)
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
