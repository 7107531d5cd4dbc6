"""The record's parts that the overlap phases fill, after the timed window: each rank's profiler
trace summarised, the no_sync replay and DDP's reducer timers (`overlap`), and the gradient
timeline with its ladder (`timeline`). Part of the record's types: `ddpbench.records.schema`
holds the record itself and re-exports these names."""

from __future__ import annotations

from typing import Any

from ddpbench.records.part import Part


class TraceStep(Part):
    """One profiler step of one rank, in microseconds, as `ddpbench.analysis.traces` measures it.
    overlap_pct is None when the step has no communication (overlap does not apply, it is not 0)."""

    step: int
    span_us: float
    comm_us: float
    compute_us: float
    overlap_us: float
    overlap_pct: float | None
    exposed_comm_us: float
    other_us: float
    idle_us: float
    first_comm_start_us: float | None = None
    """Absolute start of the step's first collective (base time + ts), for straggler analysis."""


class TraceKernels(Part):
    """GPU kernels of a trace, and those the step analysis could not place."""

    total: int
    analysed: int
    without_launch: int
    """No launch event carries their correlation id, though it lies within the trace's launches:
    a launch the analysis cannot link. They belong to no step."""
    without_launch_us: float
    outside_analysed_steps: int
    """Launched outside the analysed steps (the last step is always dropped)."""
    launched_before_trace: int = 0
    """No launch event, with a correlation id below the trace's first launch: queued before the
    profiler's window opened (the GPU still ran the step before it). Not an error."""
    communication: int | None = None
    """NCCL's kernels (names starting with `nccl`) among `total`: none on one rank, whose all-reduce
    launches no kernel. None in records from before it (not counted)."""


class TraceSummary(Part):
    """One rank's trace analysed; only `error` is set when the trace could not be analysed."""

    error: str | None = None
    path: str | None = None
    rank: int | None = None
    rank_source: str | None = None
    world_size: int | None = None
    backend: str | None = None
    kind: str | None = None
    mode: str | None = None
    steps_analysed: int = 0
    span_us: float | None = None
    comm_us: float | None = None
    compute_us: float | None = None
    overlap_us: float | None = None
    exposed_comm_us: float | None = None
    other_us: float | None = None
    idle_us: float | None = None
    overlap_pct: float | None = None
    """None when the trace has no communication: overlap does not apply."""
    exposed_comm_us_per_step: float | None = None
    steps: list[TraceStep] = []
    kernels: TraceKernels | None = None
    hta: dict[str, Any] | None = None


class TraceView(Part):
    paths: list[str]
    by_rank: list[TraceSummary]


class NoSyncRank(Part):
    step_time_median_s: float
    no_sync_step_time_median_s: float
    exposed_comm_s: float
    steps: int


class NoSyncView(Part):
    """Exposed communication = median step time with all-reduce - the same steps under no_sync()."""

    by_rank: list[NoSyncRank]
    exposed_comm_s_max: float
    method: str = "the first timed steps (data loading included) against their no_sync() replay"
    """What was compared; the default describes records made before the replay compared like with like."""


class ReducerRank(Part):
    """DDP's reducer timers, converted to seconds, and its buckets."""

    forward_compute_time_s: float | None = None
    backward_compute_time_s: float | None = None
    backward_comm_time_s: float | None = None
    backward_compute_comm_overlap_time_s: float | None = None
    exposed_comm_s: float | None = None
    sampled_iteration: int | None = None
    bucket_cap_bytes: int | None = None
    bucket_sizes_bytes: list[int] = []
    rebuilt_bucket_sizes_bytes: list[int] = []
    has_rebuilt_buckets: bool = False
    num_buckets: int = 0
    iterations: int | None = None
    """How many iterations the timers average over; None in records made before it was known."""
    covers: str = "DDP's running averages over the iterations it sampled (1 to 10, the warm-up among them)"
    """Which iterations the timers describe, in words."""


class ReducerView(Part):
    by_rank: list[ReducerRank]
    note: str = ""


class Overlap(Part):
    """Three views of how much of the all-reduce hides behind computation; None where a view does
    not apply (local, dp, --no-profile, no replay)."""

    trace: TraceView | None = None
    no_sync: NoSyncView | None = None
    reducer: ReducerView | None = None


class StepCpu(Part):
    """What the kernel counted of the rank's CPU over one step (`ddpbench.host.cpu_denied`), seconds;
    None where it was not read."""

    cpu_s: float | None = None
    """The training thread on a core."""
    waited_s: float | None = None
    """The training thread runnable but waiting for a core (cgroup throttling included)."""
    threads_cpu_s: float | None = None
    threads_waited_s: float | None = None
    """The rank's other threads (its intra-op pool), summed over them."""
    comm_cpu_s: float | None = None
    comm_waited_s: float | None = None
    """The collective library's threads (gloo, NCCL), summed: communication's, not contention's."""
    loader_cpu_s: float | None = None
    loader_waited_s: float | None = None
    """The rank's DataLoader worker processes, summed over their threads."""
    throttled_s: float | None = None
    """Time the rank's cgroup was throttled by its CPU quota; None where no quota applies."""
    pressure_s: float | None = None
    """The host's CPU pressure: time at least one task waited for a CPU (`/proc/pressure/cpu`)."""


class TimelineStep(Part):
    """One step of the gradient timeline phase, in seconds from the step's start (data loading not
    included; it is `data_s`). None where a hook did not fire (e.g. a parameter without gradient)."""

    step_s: float
    data_s: float
    forward_start_s: float | None
    forward_end_s: float | None
    backward_start_s: float | None
    """When the gradient reached the model's output (loss backward done)."""
    grad_ready_s: list[float | None]
    """Per parameter, in `Timeline.param_names` order: when its gradient was accumulated."""
    optimizer_start_s: float | None
    """Also when backward() returned: under DDP, after every bucket's all-reduce finished."""
    optimizer_end_s: float | None
    block: int | None = None
    """The round of the in-process ablation the step belongs to (`Timeline.ladder`); None in older
    records."""
    cpu: StepCpu | None = None
    """What the kernel counted of the rank's CPU over this step; None in older records (not measured)."""


class ContentionProbe(Part):
    """How backward and an all-reduce slow each other (one rank; per round, seconds). Each round:
    an all-reduce of `probe_bytes` alone after a barrier; backward alone (a no_sync step); and a
    no_sync step that starts the same all-reduce when backward starts."""

    probe_bytes: int
    comm_alone_s: list[float]
    backward_alone_s: list[float]
    """From the gradient reaching the model to the last parameter's gradient being accumulated."""
    backward_with_comm_s: list[float]
    comm_with_backward_s: list[float]
    """From starting the all-reduce (at the start of backward) to its completion."""


class TimelineRank(Part):
    rank: int
    with_ddp: list[TimelineStep]
    """Steps with DDP's all-reduce (see `Timeline.ddp_lead_in` for what precedes each)."""
    without_allreduce: list[TimelineStep]
    """The same kind of steps under DDP's no_sync(): backward alone, no all-reduce."""
    contention: ContentionProbe | None = None
    """None in records from before the probe existed."""
    solo: list[TimelineStep] | None = None
    """Steps through DDP over a process group of this rank alone: DDP overhead (copies, casts,
    finalizing) without the network. None in older records."""
    unwrapped: list[TimelineStep] | None = None
    """Steps of the same module without DDP (no wrapper; DDP's gradient hooks return at once), in
    this run: the reference DDP overhead is measured against. None in older records."""
    alone: list[TimelineStep] | None = None
    """The in-process ablation's one-device step: the module unwrapped, this rank stepping while the
    others wait at a barrier, in the rounds where it was the alone rank (`Ladder.alone_rank_by_block`).
    None with one rank (its one-device step is `unwrapped` there) and in older records."""
    ladder_wall_s: float | None = None
    """Wall time of this rank's rounds of the in-process ablation (the contention probe and cast
    costs not included)."""


class HookCast(Part):
    compress_s_per_byte: float
    """Cast to half and divide by the world size, per byte of fp32 gradient (on the backward thread)."""
    decompress_s_per_byte: float
    """Copy the half result back into the fp32 bucket, per byte of fp32 gradient."""


class CastCost(Part):
    copy_s_per_byte: float
    """One fp32 copy, per byte: DDP copies gradients into and out of buckets."""
    fp16_compress: HookCast
    bf16_compress: HookCast
    scaled_copy_s_per_byte: float | None = None
    """A copy that also divides by the world size, per byte: without a comm hook, DDP's copy into
    the bucket (None in older records)."""
    copy_call_s: float | None = None
    """The fixed cost of one copy call (a one-element copy): DDP copies each gradient on its own."""


class Ladder(Part):
    """How the in-process ablation's rounds ran (see ddpbench.worker.ablation; `blocks` is the number
    of rounds): each round holds one segment of every step kind, a barrier, `lead_in_per_segment`
    unmarked steps, then `marked_per_segment`
    marked steps; blocks alternate the order of their segments."""

    blocks: int
    marked_per_segment: int
    lead_in_per_segment: int
    alone_rank_by_block: list[int]
    """The rank that stepped alone in each round; empty with one rank."""
    wall_s: float
    """Rank 0's wall time for all rounds."""
    extra_blocks: int = 0
    """Of `blocks`, the rounds added because the rounds before them left the largest cause undecided
    (0 in older records)."""
    lead_decided: bool | None = None
    """Whether the last look at the rounds found the largest cause decided (its lead over every other
    cause would hold in another run); None where nothing was decided this way (one rank, older
    records)."""


class Timeline(Part):
    """The gradient timeline phase (DDP runs with profiling on): what `ddpbench project` replays."""

    param_names: list[str]
    param_bytes: list[int]
    """Gradient bytes per parameter, in the module's parameter order."""
    by_rank: list[TimelineRank]
    cast_cost: CastCost
    """Measured on rank 0 over a buffer the size of all gradients."""
    ddp_lead_in: bool = False
    """Whether each marked DDP step followed an unmarked DDP step, as every timed step follows one.
    False in records made before the lead-in. In the in-process ablation (`ladder`) every marked step
    also starts after a barrier, which the timed steps do not: the check's `timed_vs_ablation` holds
    the difference."""
    ladder: Ladder | None = None
    """The steps ran as the in-process ablation's rounds (each step's `block`); None in older
    records, whose kinds alternated step by step."""
