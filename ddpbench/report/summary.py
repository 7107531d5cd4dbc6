"""The short text a person reads at the end of a run."""

from __future__ import annotations

from ddpbench.analysis.labels import strategy_label
from ddpbench.records.store import failed_checks


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
        lines += [f"    | {line}" for line in (error.get("output_tail") or [])[-10:]]
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
    lines.append(f"  record       {path}")
    return "\n".join(lines)
