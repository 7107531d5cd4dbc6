"""`ddpbench tune`: measure the DDP knobs that matter around a run's settings, rank them, and say
what to change. No torch imported here.

Variants (each a real run, repeated `repeat` times in rounds: every round runs every variant
once, so a drift of the machine hits every variant alike): the run as given, bucket cap / 5 and
x 4, gradient_as_bucket_view, static_graph, fp16 and bf16 compression. Each variant's throughput
is the median over its repeats, with the range of the repeats as its interval.

Beside each throughput, the variant's peak memory per rank in the timed window (the median over
its runs, and its change against the run as given): a knob may trade memory for speed.

Which differences are real: the gate's statistics on the rounds as pairs (`ddpbench ab`'s test):
the mean of the per-round log ratios against the run as given, with its t interval over the
rounds, at a family-wise false-alarm rate of 5 % over the variants (Bonferroni), and only beyond
3 % (smaller gains are not worth a knob). With one round nothing can be real.

When a network profile is given, each variant is also projected from the baseline's first run
(`ddpbench project`), so the measured gain sits next to the predicted one. The profile is loaded,
and checked to predict an all_reduce at the run's world size, before any variant runs; where it
still cannot serve the run (e.g. a run without a gradient timeline), the projection column says
"unavailable" and why, and the measurements are printed as ever.
"""

from __future__ import annotations

import math
import statistics
import sys
from dataclasses import dataclass, field

from ddpbench.config.spec import DDP_FIRST_BUCKET_MB, DDPKnobs, RunSpec, SpecError
from ddpbench.gate import stats
from ddpbench.records.store import UnreadableRecord, load_record
from ddpbench.running.launch import launch
from ddpbench.running.resolve import resolve

TUNE_SETTINGS = stats.GateSettings(max_regression=0.03, family_alpha=0.05)


def variants(knobs: DDPKnobs, compile_mode: str = "off") -> dict[str, DDPKnobs]:
    """The knobs tried. Under compiled autograd DDP's Python reducer calls communication hooks with
    a gradient and a parameter, not a bucket: torch's compression hooks do not fit it, so they
    are left out; under --compile default, bucket caps below DDP's first bucket (DDPOptimizer
    refuses them)."""
    cap = knobs.bucket_cap_mb
    found = {
        "as given": knobs,
        f"bucket cap {cap / 5:g} MB": knobs.__class__(**{**knobs.__dict__, "bucket_cap_mb": cap / 5}),
        f"bucket cap {cap * 4:g} MB": knobs.__class__(**{**knobs.__dict__, "bucket_cap_mb": cap * 4}),
        "gradient_as_bucket_view": knobs.__class__(**{**knobs.__dict__, "gradient_as_bucket_view": True}),
        "static_graph": knobs.__class__(**{**knobs.__dict__, "static_graph": True}),
        "fp16_compress": knobs.__class__(**{**knobs.__dict__, "comm_hook": "fp16_compress"}),
        "bf16_compress": knobs.__class__(**{**knobs.__dict__, "comm_hook": "bf16_compress"}),
    }
    if compile_mode == "compiled-autograd":
        found = {name: variant for name, variant in found.items() if variant.comm_hook == "allreduce"}
    if compile_mode == "default":  # DDPOptimizer refuses caps below DDP's first bucket
        found = {name: variant for name, variant in found.items() if variant.bucket_cap_mb >= DDP_FIRST_BUCKET_MB}
    return found


def difference(baseline: dict[int, float], candidate: dict[int, float], tests: int) -> str:
    """'better', 'worse', 'not real' or 'too few rounds': throughputs by round, paired by round;
    `tests` is how many variants are compared with the baseline (the family)."""
    rounds = sorted(set(baseline) & set(candidate))
    if len(rounds) < 2:
        return "too few rounds"
    evidence, _ = stats.paired([math.log(baseline[r]) for r in rounds], [math.log(candidate[r]) for r in rounds])
    # decide() tests "better" and "worse" one-sided at the level it is given: half the family's
    # rate for each keeps the chance of any false "real" over all the variants at the family's.
    verdict, _ = stats.decide(evidence, TUNE_SETTINGS.family_alpha / (2 * max(1, tests)), TUNE_SETTINGS)
    return {"improvement": "better", "regression": "worse"}.get(verdict, "not real")


@dataclass
class Variant:
    name: str
    knobs: DDPKnobs
    by_round: dict[int, float] = field(default_factory=dict)
    """Throughput of this variant's run in each round that finished."""
    record_paths: list[str] = field(default_factory=list)
    projected: float | None = None
    projection_unavailable: str | None = None
    """Why a projection was asked for (a profile given) and this variant has none."""
    unit: str = "samples"
    peak_memory_bytes: list[int] = field(default_factory=list)
    """Each finished run's largest rank's peak memory in the timed window (device memory on GPUs,
    the process's resident set on CPU)."""

    @property
    def throughputs(self) -> list[float]:
        return list(self.by_round.values())

    @property
    def median(self) -> float | None:
        return statistics.median(self.throughputs) if self.throughputs else None


def run_tune(spec: RunSpec, repeat: int, out_dir: str, profile_spec: str | None = None) -> list[Variant]:
    if spec.strategy != "ddp" or spec.world_size < 2:
        raise SpecError("tune measures DDP knobs: use --strategy ddp with --nproc 2 or more")
    if repeat < 1:
        raise SpecError(f"--repeat must be >= 1; got {repeat}")
    profile = tune_profile(profile_spec, spec.world_size) if profile_spec else None
    if profile is not None and not spec.profile:
        print(
            "ddpbench tune: note: with --no-profile the runs record no gradient timeline, so the projection "
            "column will be unavailable",
            file=sys.stderr,
        )
    found = [Variant(name, knobs) for name, knobs in variants(spec.ddp, spec.compile).items()]
    base_spec = resolve(spec.replace(out_dir=out_dir, run_id=""))
    for round_number in range(repeat):
        for variant in found:
            run_spec = base_spec.replace(
                ddp=variant.knobs, run_id=f"{base_spec.run_id}-{slug(variant.name)}-r{round_number}"
            )
            result = launch(run_spec, show_progress=False)
            record = readable_record(result.record_path)
            if record and record.status == "ok" and record.metrics:
                variant.by_round[round_number] = record.metrics.throughput_units_per_s
                variant.record_paths.append(result.record_path)
                variant.unit = record.metrics.sample_unit
                peaks = [rank.peak_memory_bytes for rank in record.ranks if rank.peak_memory_bytes]
                if peaks:
                    variant.peak_memory_bytes.append(max(peaks))
                outcome = f"{record.metrics.throughput_units_per_s:.1f} {record.metrics.sample_unit}/s"
            else:
                outcome = f"{record.status if record else 'no record'}; see {result.record_path or run_spec.out_dir}"
            print(f"tune: round {round_number + 1}/{repeat}  {variant.name:<26} {outcome}", flush=True)
    if profile is not None:
        project_variants(found, profile, spec.world_size)
    return found


def readable_record(path: str | None):
    """The variant's record, or None when there is none to read: one bad run never costs the table."""
    try:
        return load_record(path) if path else None
    except UnreadableRecord as exc:
        print(f"ddpbench tune: note: {exc}", file=sys.stderr)
        return None


def tune_profile(profile_spec: str, world_size: int) -> dict:
    """The network profile, refused before any variant runs when it cannot be read or cannot
    predict an all_reduce at the run's world size (every variant's projection would need one)."""
    from ddpbench.analysis.network import ProfileError, load_profile, predict

    try:
        profile = load_profile(profile_spec)
    except ProfileError as exc:
        raise SpecError(str(exc)) from None
    try:
        predict(profile, "all_reduce", world_size, 1.0)
    except ProfileError as exc:
        raise SpecError(
            f"{exc}; tune projects every variant at the run's world size, {world_size}: give a profile "
            "measured there, one with a fabric model, or a preset"
        ) from None
    return profile


def project_variants(found: list[Variant], profile: dict, world_size: int) -> None:
    """Each variant projected from the first record of the run as given. What the profile or
    that record cannot serve is kept as the reason on each variant: the measurements stand."""
    from ddpbench.analysis.network import ProfileError
    from ddpbench.analysis.projection import ProjectionError, WhatIf, project

    for variant in found:
        variant.projected, variant.projection_unavailable = None, None
    if not found[0].record_paths:
        for variant in found:
            variant.projection_unavailable = "the run as given did not finish: no record to project from"
        return
    try:
        source = load_record(found[0].record_paths[0])
    except UnreadableRecord as exc:
        for variant in found:
            variant.projection_unavailable = str(exc)
        return
    for variant in found:
        try:
            what = WhatIf(
                world_size=world_size,
                bucket_cap_mb=variant.knobs.bucket_cap_mb,
                comm_hook=variant.knobs.comm_hook,
                gradient_as_bucket_view=variant.knobs.gradient_as_bucket_view,
            )
            variant.projected = project(source, profile, what).throughput
        except (ProfileError, ProjectionError) as exc:
            variant.projection_unavailable = str(exc)


def slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name).strip("-")


def format_tune(found: list[Variant]) -> str:
    base = found[0]
    unit = next((v.unit for v in found if v.throughputs), "samples")
    lines = [
        f"{'variant':<26} {'throughput (median)':>20} {'range over repeats':>24} {'vs given':>9} "
        f"{'real?':>14} {'peak memory/rank':>17} {'projected':>11}"
    ]
    ranked = sorted((v for v in found if v.throughputs), key=lambda v: -v.median)
    tests = len(found) - 1
    for variant in ranked:
        change = variant.median / base.median - 1 if base.median else float("nan")
        real = "-" if variant is base else difference(base.by_round, variant.by_round, tests)
        projected = projected_change(variant, base)
        lines.append(
            f"{variant.name:<26} {variant.median:>14.1f} {unit}/s {min(variant.throughputs):>11.1f} .. "
            f"{max(variant.throughputs):<10.1f} {change:>+9.1%} {real:>14} {memory_change(variant, base):>17} "
            f"{projected:>11}"
        )
    unavailable = projection_unavailable(found)
    if unavailable:
        lines.append(unavailable)
    lines.append(advice(found))
    return "\n".join(lines)


def memory_change(variant: Variant, base: Variant) -> str:
    """The memory column: the median peak per rank, and for a variant its change against the run as
    given (gradient_as_bucket_view drops a gradient copy)."""
    if not variant.peak_memory_bytes:
        return ""
    peak = statistics.median(variant.peak_memory_bytes)
    text = f"{peak / 2**20:.0f} MiB"
    if variant is base or not base.peak_memory_bytes:
        return text
    return f"{text} {peak / statistics.median(base.peak_memory_bytes) - 1:+.0%}"


def projected_change(variant: Variant, base: Variant) -> str:
    """The projection column: the predicted change against the run as given."""
    if variant.projected is not None and base.projected is not None:
        return f"{variant.projected / base.projected - 1:+.1%}"
    # A change needs both projections: without the base's, no variant has one.
    return "unavailable" if variant.projection_unavailable or base.projection_unavailable else ""


def projection_unavailable(found: list[Variant]) -> str:
    """One line saying why the projection column is (partly) unavailable; empty when it is not."""
    base = found[0]
    if base.projection_unavailable:
        return f"projected: unavailable: {base.projection_unavailable}"
    reasons = {}
    for variant in found[1:]:
        if variant.projection_unavailable and variant.throughputs:
            reasons.setdefault(variant.projection_unavailable, []).append(variant.name)
    if not reasons:
        return ""
    return "projected: unavailable " + "; ".join(
        f"for {', '.join(names)}: {reason}" for reason, names in reasons.items()
    )


def advice(found: list[Variant]) -> str:
    base = found[0]
    if not base.throughputs:
        return "advice: none; the run as given did not finish, see its record"
    better = [v for v in found[1:] if difference(base.by_round, v.by_round, len(found) - 1) == "better"]
    if not better:
        runs = len(base.throughputs)
        text = (
            f"advice: keep the settings as given; no knob beat them by more than "
            f"{TUNE_SETTINGS.max_regression:.0%} with significance over {runs} round(s)"
        )
        hopeful = [
            v for v in found[1:] if v.throughputs and v.median > base.median * (1 + TUNE_SETTINGS.max_regression)
        ]
        if hopeful:
            best = max(hopeful, key=lambda v: v.median)
            text += (
                f"; {best.name} measured {best.median / base.median - 1:+.1%} but the rounds cannot tell it "
                f"from noise: run --repeat {max(5, runs + 2)} to decide"
            )
        return text
    best = max(better, key=lambda v: v.median)
    gain = best.median / base.median - 1
    predicted = (
        ""
        if best.projected is None or base.projected is None
        else f" (the projection predicted {best.projected / base.projected - 1:+.1%})"
    )
    return (
        f"advice: use {best.name} ({knob_flags(best.knobs, base.knobs)} on run, sweep or trainjob): {gain:+.1%} "
        f"throughput, measured over {len(best.throughputs)} runs{predicted}"
    )


def knob_flags(knobs: DDPKnobs, given: DDPKnobs) -> str:
    """The options that turn the knobs as given into `knobs`, as run and sweep spell them."""
    words = []
    for name, value in knobs.__dict__.items():
        if value == getattr(given, name):
            continue
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            words.append(flag if value else flag.replace("--", "--no-", 1))
        else:
            words.append(f"{flag} {value:g}" if isinstance(value, float) else f"{flag} {value}")
    return " ".join(words) or "the options as given"
