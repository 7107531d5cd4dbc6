"""The short text a person reads at the end of a run."""

from __future__ import annotations

import re

from ddpbench.analysis.labels import strategy_label
from ddpbench.records.store import failed_checks

TAIL_LINES = 10
_NAMED_RANK = re.compile(r"\brank (\d+)")


def _last_lines(lines: list[str]) -> list[str]:
    # Python's ^^^^ markers under each frame take room and say nothing in a short tail.
    return [line for line in lines if line.strip(" ^~")][-TAIL_LINES:]


def relevant_tail(error: dict) -> tuple[str, list[str]]:
    """(where from, last lines) that explain a failure: the end of the failing rank's own
    traceback when torchrun kept one (the combined output ends with torchrun's wrapper error
    instead), else the end of what the processes printed."""
    tracebacks = error.get("tracebacks") or {}
    if tracebacks:
        named = _NAMED_RANK.search(error.get("message") or "")
        rank = named.group(1) if named and named.group(1) in tracebacks else next(iter(tracebacks))
        return f"rank {rank}'s traceback", _last_lines(tracebacks[rank].splitlines())
    return "end of the output", _last_lines(error.get("output_tail") or [])


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def format_summary(record: dict, path: str) -> str:
    spec = record["spec"]
    title = (f"{spec['workload']}/{spec['size']}  {strategy_label(spec)}  world {spec['world_size']} on "
             f"{spec['device']}, {spec['threads_per_rank']} thread{'s' if spec['threads_per_rank'] != 1 else ''}/process  {spec['precision']}  "
             f"batch {spec['batch_size'] or 'default'}/device")
    lines = [title]
    if record["status"] != "ok":
        error = record.get("error") or {}
        lines.append(f"  status       {record['status'].upper()}: {error.get('message', 'no message')}")
        source, tail = relevant_tail(error)
        if tail:
            lines.append(f"  {source}:")
            lines += [f"    | {line}" for line in tail]
    else:
        metrics = record["metrics"]
        unit = metrics["sample_unit"]
        iteration = metrics["iteration_time_s"]
        lines.append(f"  throughput   {metrics['throughput_units_per_s']:,.1f} {unit}/s "
                     f"({metrics['throughput_units_per_s_per_device']:,.1f} per device)")
        lines.append(f"  iteration    p50 {_ms(iteration['p50'])}  p90 {_ms(iteration['p90'])}  "
                     f"p99 {_ms(iteration['p99'])}  mean {_ms(iteration['mean'])} ± {_ms(iteration['std'])}"
                     f"  over {metrics['timed_steps']} timed steps")
        marks = []
        for name, check in record["checks"].items():
            verdict = {True: "ok", False: "FAILED", None: "n/a"}[check.get("ok")]
            marks.append(f"{name} {verdict}")
        lines.append("  checks       " + ", ".join(marks))
        for name in failed_checks(record):
            lines.append(f"  !! CHECK FAILED: {name}: {record['checks'][name]}")
        if record.get("error"):
            lines.append(f"  !! {record['error']['message']}")
        for attempt in record.get("oom_backoff") or []:
            lines.append(f"  oom backoff  batch {attempt['batch_size']}/device ran out of memory; "
                         f"measured at batch {spec['batch_size']}/device instead")
    if record.get("oversubscribed"):
        figures = record["oversubscribed"]
        lines.append(f"  !! oversubscribed: {figures['threads']} threads on {figures['usable_cores']} usable cores; "
                     "these numbers describe time-sharing, not scaling")
    lines.append(f"  record       {path}")
    logs = (record.get("launch") or {}).get("logs")
    if logs and (record["status"] != "ok" or record.get("error")):
        per_rank = "; per-rank files under ranks/" if spec["strategy"] == "ddp" else ""
        lines.append(f"  logs         {logs}  (output.log: everything the processes printed{per_rank})")
    return "\n".join(lines)
