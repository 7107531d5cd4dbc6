"""`ddpbench tune`: measure the DDP knobs that matter around a run's settings, rank them, and say
what to change. No torch imported here.

Variants (each a real run, repeated `repeat` times, interleaved so a drift of the machine hits
every variant alike): the run as given, bucket cap / 5 and x 4, gradient_as_bucket_view,
static_graph, fp16 and bf16 compression. Each variant's throughput is the median over its repeats,
with the range of the repeats as its interval.

Which differences are real: `is_real_difference` below, kept in one small function so it can be
swapped for the gate's statistics later. A variant differs for real from the baseline when the
ranges of their repeats do not overlap AND the ratio of medians is beyond the run-to-run noise
(`RUN_NOISE`, 6 %: the same configuration's median moves that much between runs on the 2-core
development machine; see README "How well it works here"). With one repeat nothing can be real.

When a network profile is given, each variant is also projected from the baseline's first run
(`ddpbench project`), so the measured gain sits next to the predicted one.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass, field

from ddpbench.config.spec import DDPKnobs, RunSpec, SpecError
from ddpbench.records.store import load_record
from ddpbench.running.launch import launch, resolve

RUN_NOISE = 0.06


def variants(knobs: DDPKnobs) -> dict[str, DDPKnobs]:
    cap = knobs.bucket_cap_mb
    return {
        "as given": knobs,
        f"bucket cap {cap / 5:g} MB": knobs.__class__(**{**knobs.__dict__, "bucket_cap_mb": cap / 5}),
        f"bucket cap {cap * 4:g} MB": knobs.__class__(**{**knobs.__dict__, "bucket_cap_mb": cap * 4}),
        "gradient_as_bucket_view": knobs.__class__(**{**knobs.__dict__, "gradient_as_bucket_view": True}),
        "static_graph": knobs.__class__(**{**knobs.__dict__, "static_graph": True}),
        "fp16_compress": knobs.__class__(**{**knobs.__dict__, "comm_hook": "fp16_compress"}),
        "bf16_compress": knobs.__class__(**{**knobs.__dict__, "comm_hook": "bf16_compress"}),
    }


def is_real_difference(baseline: list[float], candidate: list[float], noise: float = RUN_NOISE) -> bool:
    """Non-overlapping ranges of repeats and a ratio of medians beyond the run-to-run noise."""
    if len(baseline) < 2 or len(candidate) < 2:
        return False
    ratio = statistics.median(candidate) / statistics.median(baseline)
    apart = min(candidate) > max(baseline) or max(candidate) < min(baseline)
    return apart and abs(ratio - 1) > noise


@dataclass
class Variant:
    name: str
    knobs: DDPKnobs
    throughputs: list[float] = field(default_factory=list)
    record_paths: list[str] = field(default_factory=list)
    projected: float | None = None

    @property
    def median(self) -> float | None:
        return statistics.median(self.throughputs) if self.throughputs else None


def run_tune(spec: RunSpec, repeat: int, out_dir: str, profile_spec: str | None = None) -> list[Variant]:
    if spec.strategy != "ddp" or spec.world_size < 2:
        raise SpecError("tune measures DDP knobs: use --strategy ddp with --nproc 2 or more")
    if repeat < 1:
        raise SpecError(f"--repeat must be >= 1; got {repeat}")
    profile = None
    if profile_spec:
        from ddpbench.analysis.network import ProfileError, load_profile
        try:
            profile = load_profile(profile_spec)
        except ProfileError as exc:
            raise SpecError(str(exc)) from None
    found = [Variant(name, knobs) for name, knobs in variants(spec.ddp).items()]
    base_spec = resolve(spec.replace(out_dir=out_dir, run_id=""))
    for round_number in range(repeat):
        for variant in found:
            run_spec = base_spec.replace(ddp=variant.knobs, run_id=f"{base_spec.run_id}-{slug(variant.name)}-r{round_number}")
            result = launch(run_spec, echo=False)
            record = load_record(result.record_path) if result.record_path else None
            if record and record.status == "ok" and record.metrics:
                variant.throughputs.append(record.metrics.throughput_units_per_s)
                variant.record_paths.append(result.record_path)
    if profile is not None and found[0].record_paths:
        from ddpbench.analysis.projection import ProjectionError, WhatIf, project
        source = load_record(found[0].record_paths[0])
        for variant in found:
            try:
                what = WhatIf(world_size=spec.world_size, bucket_cap_mb=variant.knobs.bucket_cap_mb,
                              comm_hook=variant.knobs.comm_hook,
                              gradient_as_bucket_view=variant.knobs.gradient_as_bucket_view)
                variant.projected = project(source, profile, what).throughput
            except ProjectionError:
                variant.projected = None
    return found


def slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name).strip("-")


def format_tune(found: list[Variant], unit: str = "units") -> str:
    base = found[0]
    lines = [f"{'variant':<26} {'throughput (median)':>20} {'range over repeats':>24} {'vs given':>9} "
             f"{'real?':>6} {'projected':>10}"]
    ranked = sorted((v for v in found if v.throughputs), key=lambda v: -v.median)
    for variant in ranked:
        change = variant.median / base.median - 1 if base.median else float("nan")
        real = "-" if variant is base else ("yes" if is_real_difference(base.throughputs, variant.throughputs) else "no")
        projected = "" if variant.projected is None or base.projected is None else f"{variant.projected / base.projected - 1:+.1%}"
        lines.append(f"{variant.name:<26} {variant.median:>14.1f} {unit}/s {min(variant.throughputs):>11.1f} .. "
                     f"{max(variant.throughputs):<10.1f} {change:>+9.1%} {real:>6} {projected:>10}")
    lines.append(advice(found))
    return "\n".join(lines)


def advice(found: list[Variant]) -> str:
    base = found[0]
    if not base.throughputs:
        return "advice: none; the run as given did not finish, see its record"
    better = [v for v in found[1:] if v.throughputs and v.median > base.median
              and is_real_difference(base.throughputs, v.throughputs)]
    if not better:
        runs = len(base.throughputs)
        return (f"advice: keep the settings as given; no knob beat them by more than the run-to-run noise "
                f"({RUN_NOISE:.0%}) with {runs} run(s) each" + ("" if runs > 1 else "; use --repeat 3 to tell"))
    best = max(better, key=lambda v: v.median)
    gain = best.median / base.median - 1
    predicted = "" if best.projected is None or base.projected is None else \
        f" (the projection predicted {best.projected / base.projected - 1:+.1%})"
    return f"advice: use {best.name}: {gain:+.1%} throughput, measured over {len(best.throughputs)} runs{predicted}"
