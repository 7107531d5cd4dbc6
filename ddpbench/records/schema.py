"""The run record's types: one self-describing JSON file per run, and what each part holds.

Every record is written through these types (`ddpbench.records.store.write_record`), so a field
that is misspelt or of the wrong type fails when it is written, not when someone reads it a month
later. `record.schema.json` beside this file is the published JSON Schema of these types; a test
fails when the two drift apart (regenerate it with `python -m ddpbench.records.schema`).

Version history:
- 1: untyped dicts; checks kept their details beside `ok`.
- 2: these types. Checks hold `ok`, `reason` and `details`; schema-1 files are converted on load.
"""

from __future__ import annotations

import json
import os
from typing import Any, Literal

import msgspec

from ddpbench.config.spec import RunSpec

SCHEMA_VERSION = 2
STATUSES = ("ok", "failed", "timeout", "oom", "skipped")
Status = Literal["ok", "failed", "timeout", "oom", "skipped"]
SCHEMA_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "record.schema.json")


class Part(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Base of every record part: fields by name only, and unknown fields are an error."""


class Environment(Part):
    """What machine and software the run used. Secrets in environment variables are redacted."""

    hostname: str | None = None
    platform: str | None = None
    system: str | None = None
    """platform.system(), e.g. Linux (records before these three fields have only `platform`)."""
    release: str | None = None
    machine: str | None = None
    python: str | None = None
    python_implementation: str | None = None
    cpu_model: str | None = None
    cpu_cores: int | None = None
    """Cores the launching process could run on (its affinity), not the machine's total."""
    git_sha: str | None = None
    """Commit of the ddpbench checkout that ran; None outside a git checkout."""
    git_dirty: bool | None = None
    env_vars: dict[str, str] = {}
    """NCCL_*, TORCH_*, OMP_*, CUDA_*, GLOO_*, MASTER_*, PYTORCH_* variables, secrets redacted."""
    torch: str | None = None
    torchvision: str | None = None
    cuda: str | None = None
    cudnn: int | None = None
    nccl: str | None = None
    gpu_count: int = 0
    gpu_names: list[str] = []


class RankResult(Part):
    """What one rank measured."""

    rank: int
    local_rank: int = 0
    hostname: str | None = None
    device: str | None = None
    threads: int | None = None
    """Intra-op threads this rank trained with."""
    step_times_s: list[float] = []
    """Raw step times of the timed steps, in order: start of step i to start of step i+1."""
    final_loss: float | None = None
    epochs_started: int | None = None
    param_digest: str | None = None
    """sha256 of the parameters' bytes after the timed window."""
    peak_memory_bytes: int | None = None
    peak_memory_kind: str | None = None
    """cuda_max_memory_allocated on GPUs, process_max_rss on CPU."""
    trace_path: str | None = None
    no_sync_step_times_s: list[float] | None = None
    """The first timed steps replayed under DDP's no_sync() (no all-reduce)."""


class Distribution(Part):
    """Summary of a list of times in seconds: sample std (ddof=1), percentiles by linear interpolation."""

    mean: float
    std: float
    min: float
    max: float
    p50: float
    p90: float
    p99: float


class Metrics(Part):
    """Metrics derived from the raw step times (see `ddpbench.analysis.metrics`)."""

    timed_steps: int
    window_s: float
    """Wall time of the timed window, its edges aligned across ranks with a barrier."""
    global_samples: int
    throughput_samples_per_s: float
    throughput_samples_per_s_per_device: float
    throughput_units_per_s: float
    throughput_units_per_s_per_device: float
    iteration_time_s: Distribution
    """Iteration time = the slowest rank's step time, per step."""
    step_time_s_by_rank: list[Distribution]
    sample_unit: str = "samples"
    units_per_sample: int = 1
    flops_per_sample: float | None = None
    """Forward plus backward, counted by torch.utils.flop_counter."""
    final_loss: float | None = None


class Check(Part):
    """One correctness check: passed (True), failed (False) or could not be decided (None)."""

    ok: bool | None
    reason: str | None = None
    """Why a check could not be decided, or why it failed, in words."""
    details: dict[str, Any] = {}
    """The evidence: counts, digests, errors and tolerances, per check."""


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


class ReducerView(Part):
    by_rank: list[ReducerRank]
    note: str = ""


class Overlap(Part):
    """Three views of how much of the all-reduce hides behind computation; None where a view does
    not apply (local, dp, --no-profile, no replay)."""

    trace: TraceView | None = None
    no_sync: NoSyncView | None = None
    reducer: ReducerView | None = None


class HangEvidence(Part):
    """What a hung run left in its log folder (paths), and what was read from it."""

    heartbeats: str
    stacks: dict[str, str] = {}
    """Global rank (as text) -> its stack dump (at the stall, else when torchrun ended it)."""
    flight_recorder: dict[str, str] = {}
    """Global rank (as text) -> its Flight Recorder dump."""
    top_frames: dict[str, list[str]] | None = None
    """Hung rank (as text) -> its main thread's innermost frames, "file:line in function"."""
    flight_recorder_analysis: str | None = None
    """The verdict of torch's Flight Recorder analyzer on the dumps."""


class Hang(Part):
    """Which rank hung or skipped a collective, where it was, and what the others waited in."""

    kind: str
    """hung (behind in collectives) or skipped (its collectives out of step with the others')."""
    ranks: list[int]
    step: int | None = None
    where: str | None = None
    """Where in the step: data, forward, backward, optimizer, barrier (after the steps)."""
    phase: str | None = None
    """warm-up, timed, checks, overlap phases."""
    collectives: dict[str, int] | None = None
    """Global rank (as text) -> collectives its process group had issued."""
    waiting: dict[str, str] = {}
    """Waiting rank (as text) -> the collective it waited in, and where."""
    explanation: str = ""
    evidence: HangEvidence | None = None


class RunError(Part):
    """What went wrong, and the evidence for it."""

    message: str
    exit_code: int | None = None
    output_tail: list[str] = []
    """The last lines the processes printed."""
    failed_ranks: list[int] | None = None
    tracebacks: dict[str, str] | None = None
    """Global rank (as text) -> the Python traceback torchrun's error file holds."""
    signals: dict[str, str] | None = None
    """Global rank (as text) -> the signal that ended it."""
    hung_ranks: list[int] | None = None
    hang_evidence: str | None = None
    hang: Hang | None = None


class Launch(Part):
    """How the launcher started the run, and how it ended."""

    command: list[str]
    wall_s: float
    """Launch to exit, start-up included."""
    exit_code: int | None
    node_rank: int = 0
    timeout_s: float | None = None
    logs: str | None = None
    attempts: int = 1
    """Rendezvous attempts (a failed single-node rendezvous is retried on a fresh port)."""
    notes: list[str] = []


class OomAttempt(Part):
    """A batch size that ran out of memory before `--oom-backoff` halved it."""

    batch_size: int
    status: str
    message: str


class Record(Part):
    """One run: what was asked for, where it ran, what it measured, and whether it was right."""

    run_id: str
    status: Status
    spec: RunSpec
    schema_version: int = SCHEMA_VERSION
    env: Environment = msgspec.field(default_factory=Environment)
    ranks: list[RankResult] = []
    metrics: Metrics | None = None
    """None when the run measured nothing."""
    checks: dict[str, Check] = {}
    overlap: Overlap | None = None
    error: RunError | None = None
    started_at: str | None = None
    ended_at: str | None = None
    launch: Launch | None = None
    oom_backoff: list[OomAttempt] | None = None

    def failed_checks(self) -> list[str]:
        return [name for name, check in self.checks.items() if check.ok is False]


def json_schema() -> dict:
    return msgspec.json.schema(Record)


def json_schema_text() -> str:
    return json.dumps(json_schema(), indent=1, sort_keys=True) + "\n"


if __name__ == "__main__":
    with open(SCHEMA_FILE, "w", encoding="utf-8") as handle:
        handle.write(json_schema_text())
    print(f"wrote {SCHEMA_FILE}")
