"""Projection against measurement: the step replay's what-ifs checked against a sweep's own runs
of those knobs (the report's "Projection vs measurement" and benchmarks/projection_validation.py).
No torch."""

from __future__ import annotations

import statistics

from ddpbench.analysis.projection import RunModel, WhatIf, project
from ddpbench.config.spec import DEFAULT_BUCKET_CAP_MB
from ddpbench.records.schema import Record


def _setting(record: Record) -> tuple:
    spec = record.spec
    return (spec.workload, spec.size, spec.batch_size, spec.world_size, spec.precision, spec.device)


def _is_default(record: Record) -> bool:
    knobs = record.spec.ddp
    return (
        knobs.bucket_cap_mb == DEFAULT_BUCKET_CAP_MB
        and knobs.comm_hook == "allreduce"
        and not knobs.gradient_as_bucket_view
        and not knobs.static_graph
    )


def _what_if_of(record: Record) -> WhatIf:
    knobs = record.spec.ddp
    return WhatIf(
        world_size=record.spec.world_size,
        bucket_cap_mb=knobs.bucket_cap_mb,
        comm_hook=knobs.comm_hook,
        gradient_as_bucket_view=knobs.gradient_as_bucket_view,
    )


def _case_label(record: Record) -> str:
    knobs = record.spec.ddp
    return f"bucket cap {knobs.bucket_cap_mb:g} MB" if knobs.comm_hook == "allreduce" else knobs.comm_hook


def validation_cases(records: list[Record], profile: dict) -> list[dict]:
    """Projection against measurement, for every group of DDP runs that share everything but the
    bucket cap and the comm hook. Every run with the defaults (cap 25 MB, plain all-reduce) is a
    source: replayed as itself (next to the spread between the default runs: (max - min) / median
    of their median iteration times; from its parts alone, since anchored it would be its own
    measurement), and projected to the knobs of the other runs. With several
    runs of a knob (or several sources), a what-if compares the median over sources of the
    projection with the median over runs of the measurement: one run on a shared machine is one
    draw of its noise."""
    groups: dict[tuple, list[Record]] = {}
    for record in records:
        modelled = not record.spec.ddp.static_graph and not record.spec.ddp.find_unused_parameters
        if record.status == "ok" and record.spec.strategy == "ddp" and record.timeline and record.metrics and modelled:
            groups.setdefault(_setting(record), []).append(record)
    cases = []
    for setting, members in sorted(groups.items(), key=lambda item: str(item[0])):
        sources = sorted((r for r in members if _is_default(r)), key=lambda r: (r.started_at or "", r.run_id))
        if not sources:
            continue
        own = [r.metrics.iteration_time_s.p50 for r in sources]
        spread = (max(own) - min(own)) / statistics.median(own) if len(own) > 1 else None
        for source in sources:
            # Anchored, a run's projection of itself is its own measurement: the test of the model
            # is the replay from its parts alone.
            model = RunModel(source)
            replayed = project(source, profile, model.source)
            measured = source.metrics.iteration_time_s.p50
            shift = replayed.unexplained_s or 0.0
            cases.append(
                {
                    "workload": setting[0],
                    "kind": "replay",
                    "case": "replay of the run itself",
                    "sources": [source.run_id],
                    "targets": [source.run_id],
                    "anchored": 0,
                    "projected_s": replayed.modelled_step_s,
                    "modelled_s": replayed.modelled_step_s,
                    "measured_s": measured,
                    "error": replayed.modelled_step_s / measured - 1,
                    "spread": spread,
                    "timeline_step_s": model.timeline_step_s(),
                    "band_s": [replayed.step_low_s - shift, replayed.step_high_s - shift],
                }
            )
        by_knobs: dict[tuple, list[Record]] = {}
        for target in members:
            if not _is_default(target):
                what = _what_if_of(target)
                by_knobs.setdefault((what.bucket_cap_mb, what.comm_hook, what.gradient_as_bucket_view), []).append(
                    target
                )
        for _, targets in sorted(by_knobs.items(), key=lambda item: str(item[0])):
            targets.sort(key=lambda r: r.run_id)
            projections = [project(source, profile, _what_if_of(targets[0])) for source in sources]
            projected = statistics.median(p.step_s for p in projections)
            measured = statistics.median(t.metrics.iteration_time_s.p50 for t in targets)
            cases.append(
                {
                    "workload": setting[0],
                    "kind": "what-if",
                    "case": _case_label(targets[0]),
                    "sources": [r.run_id for r in sources],
                    "targets": [t.run_id for t in targets],
                    "anchored": sum(p.unexplained_s is not None for p in projections),
                    "projected_s": projected,
                    "modelled_s": statistics.median(p.modelled_step_s for p in projections),
                    "measured_s": measured,
                    "error": projected / measured - 1,
                    "spread": spread,
                    "timeline_step_s": statistics.median(RunModel(t).timeline_step_s() for t in targets),
                    "band_s": [
                        statistics.median(p.step_low_s for p in projections),
                        statistics.median(p.step_high_s for p in projections),
                    ],
                }
            )
    return cases
