"""The projection in the terminal (`ddpbench project`): one what-if's step time, exposed
communication, throughput and efficiency with their bands, marked as a projection."""

from __future__ import annotations

from ddpbench.analysis.projection import Projection
from ddpbench.records.schema import Record


def format_projection(projection: Projection, record: Record) -> str:
    what = projection.what
    knobs = [f"bucket cap {what.bucket_cap_mb:g} MB", f"comm hook {what.comm_hook}"]
    if what.bandwidth_scale != 1:
        knobs.append(f"bandwidth x{what.bandwidth_scale:g}")
    lines = [
        f"PROJECTION (not a measurement) of {record.run_id} "
        f"(measured: {record.spec.world_size} ranks, {record.spec.backend}, "
        f"bucket cap {record.spec.ddp.bucket_cap_mb:g} MB, {record.spec.ddp.comm_hook})",
        f"  to world size {what.world_size} on profile {projection.profile_name} ({projection.basis}), "
        f"{', '.join(knobs)}",
        f"  step time        {projection.step_s * 1e3:9.2f} ms   "
        f"band {projection.step_low_s * 1e3:.2f} .. {projection.step_high_s * 1e3:.2f} ms",
        f"  exposed comm     {projection.exposed_comm_s * 1e3:9.2f} ms   of {projection.comm_s * 1e3:.2f} ms "
        f"all-reduce over {projection.buckets} buckets (in the replay from parts)",
        f"  backward slowed  x{projection.backward_slowdown:.3f} by DDP's copies, casts and overlapping all-reduces "
        "(in the replay from parts)",
        f"  DDP overhead     {projection.ddp_work}",
        f"  anchored on      {projection.anchor}",
        f"  overlapping      backward at {projection.contention.backward_rate:.0%} and all-reduce at "
        f"{projection.contention.comm_rate:.0%} of their speed while both run ({projection.contention.basis})",
        f"  throughput       {projection.throughput:9.1f} {projection.sample_unit}/s   "
        f"band {projection.throughput_low:.1f} .. {projection.throughput_high:.1f}",
        f"  efficiency E(N)  {projection.efficiency:9.1%}   "
        f"band {projection.efficiency_low:.1%} .. {projection.efficiency_high:.1%} "
        f"(against {projection.efficiency_reference})",
    ]
    if projection.measured_step_s is not None:
        # Anchored, the run's projection of itself is its measurement: the model's test is the replay from parts.
        error = projection.modelled_step_s / projection.measured_step_s - 1
        lines.append(
            f"  measured         {projection.measured_step_s * 1e3:9.2f} ms   (median iteration time of the run; "
            f"replay from parts {error:+.1%})"
        )
    return "\n".join(lines)
