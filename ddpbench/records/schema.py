"""The run record's types: one self-describing JSON file per run, and what each part holds.

Every record is written through these types (`ddpbench.records.store.write_record`), so a field
that is misspelt or of the wrong type fails when it is written, not when someone reads it a month
later. `record.schema.json` beside this file is the published JSON Schema of these types; a test
fails when the two drift apart (regenerate it with `python -m ddpbench.records.schema`). The parts
the overlap phases fill (traces, no_sync, reducer, the gradient timeline) are in
`ddpbench.records.overlap_schema`, and are imported from here as well.

Version history:
- 1: untyped dicts; checks kept their details beside `ok`.
- 2: these types. Checks hold `ok`, `reason` and `details`; schema-1 files are converted on load.
  Later, within 2: `step_times_sidecar` (large runs keep their ranks' step times in a .npy file
  beside the record; a reader that does not know the field refuses the record instead of
  reading empty step times).
"""

from __future__ import annotations

import json
import os
from typing import Any, Literal

import msgspec

from ddpbench.config.spec import RunSpec
from ddpbench.records.overlap_schema import (  # noqa: F401  (re-exported: records' readers import them from here)
    CastCost,
    ContentionProbe,
    HookCast,
    Ladder,
    NoSyncRank,
    NoSyncView,
    Overlap,
    ReducerRank,
    ReducerView,
    StepCpu,
    Timeline,
    TimelineRank,
    TimelineStep,
    TraceKernels,
    TraceStep,
    TraceSummary,
    TraceView,
)
from ddpbench.records.part import Part

# 3: the machine's load over the window (`machine_load`), the kind of a run error (`error.kind`),
# all optional: a record of schema 2 reads as one that measured neither
# (ddpbench.records.store.from_schema_2). The ladder's optional fields (`timeline.ladder`, steps'
# `block`, ranks' `alone`) came late in schema 2.
# 4: strategies fsdp2 and replicate, `spec.compile` and the record's `compile`, ranks'
# `model_state_bytes`, the check `parameters_sharded`; all optional, so a record of schema 3 reads
# as an eager run that did not count its model state (from_schema_3). Numbered anew so that an
# older ddpbench says a newer one wrote the record instead of refusing an unknown field.
# 5: ranks' `model_state_by_part`; `model_state_bytes` counts DDP's gradient buckets and FSDP2's
# unsharded buffers. A schema-4 record of ddp, replicate or fsdp2 left them out, so its model state
# reads as not counted (from_schema_4) rather than as a smaller figure beside newer ones. Ranks'
# `probe` (the process's fixed probe before the warm-up and after the window) and the scripts'
# check `gradients_in_sync` came in the same schema.
# 6: what the kernel counted of each rank's CPU: ranks' `cpu` (per timed step), the ablation's
# steps' `cpu`, probes' `waited_s`; GPU memory beyond torch's allocated bytes: ranks'
# `peak_memory_reserved_bytes`, `device_memory_used_bytes` and `device_memory_note`, phases'
# `reserved_bytes` and `reserved_by_device`. All optional, so a schema-5 record reads as one that
# did not measure them (from_schema_5). Also within 6, all optional: the spec's `started_in` and
# `files` (where the run started, and what each of the user's files is: its path inside its git
# repository and that repository's root commit, else its real path), which a record without them
# reads as located from its own folder where that says (ddpbench.records.store.started_in), else by
# its paths as typed; where each rank ran, ranks' `node_name`, `node_rank`, `cpu_set`, `device_uuid`,
# `device_serial` and `device_pci_bus_id` (the history keeps them per run and rank), which a record
# without them reads as not recorded.
SCHEMA_VERSION = 6
STATUSES = ("ok", "failed", "timeout", "oom", "skipped")
Status = Literal["ok", "failed", "timeout", "oom", "skipped"]
SCHEMA_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "record.schema.json")


class Scheduler(Part):
    """The batch scheduler's job a run belonged to, from the job's environment variables (ids,
    partition and nodes only; nothing else of that environment is kept)."""

    name: str
    """The scheduler: slurm."""
    job_id: str | None = None
    cluster: str | None = None
    partition: str | None = None
    job_nodes: str | None = None
    """Every node of the job (allocation), as SLURM writes it: node[01-04]."""
    job_num_nodes: int | None = None
    step_id: str | None = None
    """The srun step of the process that wrote the record; None for the batch script itself."""
    step_nodes: str | None = None
    """The nodes of that step: the nodes this run ran on."""
    node: str | None = None
    """The SLURM node of the process that wrote the record."""


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
    """NCCL_*, TORCH_*, OMP_*, CUDA_*, GLOO_*, MASTER_*, PYTORCH_*, KINETO_*, PET_* and NVIDIA_* (such as
    NVIDIA_TF32_OVERRIDE) variables, secrets redacted."""
    torch: str | None = None
    torchvision: str | None = None
    cuda: str | None = None
    cudnn: int | None = None
    nccl: str | None = None
    gpu_count: int = 0
    gpu_names: list[str] = []
    gpu_capabilities: list[str] = []
    """Compute capability per GPU, e.g. 9.0."""
    gpu_memory_bytes: list[int] = []
    bf16_supported: bool | None = None
    """bf16 natively supported by the first GPU (not emulated); None without a GPU."""
    driver_version: str | None = None
    """NVIDIA driver, from nvidia-smi or /proc/driver/nvidia/version; None without a driver."""
    mig_mode: list[str] = []
    """MIG mode per GPU as nvidia-smi reports it (Enabled, Disabled, [N/A])."""
    mig_devices_visible: bool = False
    """CUDA_VISIBLE_DEVICES names MIG instances."""
    gpu_topology: str | None = None
    """`nvidia-smi topo -m`: how the GPUs, NICs and CPUs are connected."""
    matmul_allow_tf32: bool | None = None
    cudnn_allow_tf32: bool | None = None
    float32_matmul_precision: str | None = None
    cudnn_benchmark: bool | None = None
    cudnn_deterministic: bool | None = None
    scheduler: Scheduler | None = None
    """The SLURM job the run ran in; None when it was not started by a scheduler."""


class MemoryPeak(Part):
    """The peak memory of one phase of a rank."""

    peak_bytes: int
    """On the rank's largest device."""
    by_device: list[int]
    """Every device the process drove (all of DataParallel's GPUs)."""
    kind: str
    reserved_bytes: int | None = None
    """GPU: the caching allocator's peak reserved bytes (`torch.cuda.max_memory_reserved`) on the
    rank's largest device: what it held from the driver, cached free blocks and fragmentation
    included. None on CPU and in records before it (not measured)."""
    reserved_by_device: list[int] | None = None


class GpuLoad(Part):
    """One of the run's GPUs over the timed window, from NVML (start and end of the window)."""

    index: int
    """CUDA device index, as the run's ranks number them."""
    other_processes: int = 0
    """Compute processes on it that were not the run's, the most seen."""
    sm_clock_mhz: int | None = None
    """The lower SM clock of the two readings."""
    max_sm_clock_mhz: int | None = None
    slowdowns: list[str] = []
    """Clock-event reasons that slow the GPU: hardware slowdown, thermal, power brake, power cap."""


class MachineLoad(Part):
    """How busy a node was during the timed window, read by its local rank 0 before the window's
    opening barrier and after its closing one. CPU figures are cores averaged over the window:
    /proc/stat's non-idle time for the machine, the CPU time of the run's process tree for its own."""

    hostname: str
    window_s: float
    cores: int
    """CPUs /proc/stat counts (the machine's, not a container's quota)."""
    busy_cores: float
    own_cores: float | None
    """The run's processes (everything under torchrun's agent on this node)."""
    others_cores: float
    """busy - own: what other processes used."""
    steal_cores: float | None
    """Time the hypervisor gave other guests (part of busy)."""
    wanted_cores: int
    """What the run asked of the node: its processes x threads per rank (one per process on GPUs),
    plus data loader workers."""
    busy: bool
    """Other processes used at least 0.25 of a core and left fewer cores than the run wanted; or a
    GPU of the run had another compute process or a slowdown reason."""
    why: str | None = None
    """One line with the figures, when busy."""
    gpus: list[GpuLoad] = []
    gpu_note: str | None = None
    """Why the GPU readings are missing or partial (no NVML)."""


class ProbeReading(Part):
    """The fixed probe's rates in one process at one moment (`ddpbench.worker.probe`)."""

    matmul_gflops: float
    """float32 matrix products on the process's device at its thread count, GFLOP/s."""
    copy_gbps: float
    """A copy of a buffer larger than the caches, GB/s counting bytes read and written."""
    seconds: float
    """Wall time the probe took (its cost to the run)."""
    threads: int | None = None
    device: str | None = None
    version: int = 1
    waited_s: float | None = None
    """Of `seconds`, the time the probing thread waited for a core (cgroup throttling included);
    None in older records. A probe slowed by waiting measured the moment's contention, which the
    window's own counters judge, not the process's speed on a core."""


class CpuWindow(Part):
    """What the kernel counted of one rank's CPU in the timed window (`ddpbench.host.cpu_denied`),
    one value per timed step for each field of `StepCpu`, seconds (None where not read)."""

    cpu_s: list[float | None] = []
    waited_s: list[float | None] = []
    """The training thread runnable but waiting for a core, per step (cgroup throttling included)."""
    threads_cpu_s: list[float | None] = []
    threads_waited_s: list[float | None] = []
    comm_cpu_s: list[float | None] = []
    comm_waited_s: list[float | None] = []
    loader_cpu_s: list[float | None] = []
    loader_waited_s: list[float | None] = []
    throttled_s: list[float | None] = []
    pressure_s: list[float | None] = []
    threads: int = 0
    """The rank's other threads at the window's start (not the collective library's, not the harness's)."""
    comm_threads: int = 0
    loader_processes: int = 0
    quota_cores: float | None = None
    """The tightest CPU quota of the rank's cgroups, in cores; None where none applies."""
    cgroup: str | None = None
    """The cgroup folder holding that quota."""


class StartUp(Part):
    """What the run cost before its first timed step, read by local rank 0 at the window's opening."""

    rank_start: str | None = None
    """fork or exec: how the ranks were started (`spec.rank_start`)."""
    to_first_step_s: float | None = None
    """Wall time from the launcher starting the processes to the timed window's opening."""
    cpu_s: float | None = None
    """CPU-seconds the run's processes on that node had used by then: torchrun's agent (or ddpbench's)
    and every rank, or the one process of a local run."""


class ProcessProbe(Part):
    """The probe before the warm-up (a script's: after its first step, the warm-up being its own
    loop) and after the timed window, in the same process."""

    before: ProbeReading | None = None
    after: ProbeReading | None = None


class RankResult(Part):
    """What one rank measured."""

    rank: int
    local_rank: int = 0
    hostname: str | None = None
    node_name: str | None = None
    """The machine as its scheduler names it, where that is not `hostname`: the Kubernetes node (a
    pod's host name is the pod's) or the SLURM node; None outside a scheduler and in older records."""
    node_rank: int | None = None
    """The node rank torchrun's rendezvous gave this rank's node; None outside torchrun and in older
    records."""
    cpu_set: str | None = None
    """The CPUs this rank's process could run on, as the kernel lists them (0-3,8); None off Linux and
    in older records."""
    device: str | None = None
    device_uuid: str | None = None
    """GPU: the device's UUID (torch); None on CPU and in older records."""
    device_serial: str | None = None
    """GPU: the board's serial number, through NVML; None where NVML cannot say, on CPU and in older
    records."""
    device_pci_bus_id: str | None = None
    """GPU: the device's PCI bus id (0000:41:00.0), through NVML; None where NVML cannot say."""
    threads: int | None = None
    """Intra-op threads this rank trained with."""
    probe: ProcessProbe | None = None
    """This process's speed on fixed work before the warm-up and after the window; None in older
    records and in scripts' runs."""
    step_times_s: list[float] = []
    """Raw step times of the timed steps, in order: start of step i to start of step i+1."""
    window_cpu_s: float | None = None
    """CPU time this rank's process (all its threads) used in the timed window: the work done,
    which machine load disturbs far less than wall time."""
    final_loss: float | None = None
    epochs_started: int | None = None
    param_digest: str | None = None
    """sha256 of the parameters' bytes after the timed window."""
    peak_memory_bytes: int | None = None
    """The timed window's peak, on the largest device."""
    peak_memory_kind: str | None = None
    """cuda_max_memory_allocated on GPUs; process_peak_rss on CPU (reset per phase), or
    process_max_rss where the peak cannot be reset (since the process started)."""
    peak_memory_bytes_by_device: list[int] | None = None
    """The timed window's peak on each device the process drove."""
    peak_memory_reserved_bytes: int | None = None
    """GPU: the timed window's peak reserved by torch's caching allocator (`max_memory_reserved`) on
    the largest device: at least `peak_memory_bytes`, with the allocator's cached free blocks and
    fragmentation. None on CPU and in older records (not measured)."""
    device_memory_used_bytes: list[int] | None = None
    """GPU: each device's used memory from NVML at the timed window's end, as nvidia-smi shows it:
    every process on the device, the CUDA contexts, NCCL's buffers and cuBLAS's workspaces, which
    torch's allocator figures leave out. None on CPU, where NVML could not be read
    (`device_memory_note` says why) and in older records (not measured)."""
    device_memory_note: str | None = None
    peak_memory_by_phase: dict[str, MemoryPeak] | None = None
    """compile (with --compile), warm-up, timed, checks: each phase's peak, reset at its start."""
    model_state_bytes: int | None = None
    """Bytes of model state this rank holds, the sum of `model_state_by_part`: parameters, gradients
    and optimizer state (its shards of them under fsdp2), DDP's gradient buckets where they are a
    copy of the gradients, FSDP2's unsharded parameters and gradients at their peak in a step. None
    in older records, and in schema-4 records of ddp, replicate and fsdp2, which left those out."""
    model_state_by_part: dict[str, int] | None = None
    """The same, by part: `parameters`, `gradients`, `optimizer` after the window; `gradient_buckets`
    (ddp, replicate: the reducer's buckets; 0 under gradient_as_bucket_view, whose gradients are the
    buckets); `unsharded` (fsdp2: the most unsharded bytes held at once during the last warm-up
    step). None in records of schema 4 and older."""
    trace_path: str | None = None
    no_sync_step_times_s: list[float] | None = None
    """The first timed steps' batches replayed under DDP's no_sync() (no all-reduce)."""
    replay_step_times_s: list[float] | None = None
    """The same batches replayed with all-reduce, alternating with the no_sync steps. Records
    before this field compared the no_sync replay with the timed steps themselves."""
    data_wait_mean_s: float | None = None
    """Host time from a timed step's start until its batch was in hand (GPU: the device's idle time
    waiting for it), mean over the timed steps; None in older records."""
    data_wait_p50_s: float | None = None
    """The same, median over the timed steps; None in older records."""
    machine_load: MachineLoad | None = None
    """Local rank 0 of each node: the node's load over the timed window; None on the other ranks
    and in records of schema 2."""
    cpu: CpuWindow | None = None
    """What the kernel counted of this rank's CPU per timed step; None off Linux and in older
    records (not measured, never zero)."""


class Distribution(Part):
    """Summary of a list of times in seconds: sample std (ddof=1), percentiles by linear interpolation."""

    mean: float
    std: float
    min: float
    max: float
    p50: float
    p90: float
    p99: float


class MfuBasis(Part):
    """How MFU was computed, or why it is unknown."""

    device: str | None = None
    matched: str | None = None
    """The entry of the published-peak table the device matched."""
    precision: str | None = None
    """What the run computed in: bf16, fp16, tf32, fp32, or fp32+tf32 where an fp32 run's matrix
    products and convolutions ran in different precisions."""
    matmul_precision: str | None = None
    """What matrix products (cuBLAS) computed in; fp32 runs use TF32 only with matmul TF32 allowed."""
    conv_precision: str | None = None
    """What convolutions (cuDNN) computed in; cuDNN allows TF32 by default."""
    conv_flops_share: float | None = None
    """Fraction of the model's FLOPs in convolutions (the rest are matrix products); None in older
    records."""
    peak_flops_per_s: float | None = None
    """The peak of the mix: FLOPs / sum over op classes of (their FLOPs / their precision's peak)."""
    source: str | None = None
    reason: str | None = None
    """Why MFU is unknown."""


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
    mfu: float | None = None
    """Model FLOPs utilisation: flops_per_sample x samples/s per device / the device's published
    peak (a fraction); None where the device or the FLOPs are unknown."""
    mfu_basis: MfuBasis | None = None


class DdpRuntimeLogging(Part):
    """DDP times its first iterations for its logging; on GPUs those forwards wait on the host."""

    sample_rate: int
    logged_iterations: int
    timed_steps_host_synchronised: int
    how: str


class HostSync(Part):
    """Where timed steps wait for the GPU on the host, and what was done about it."""

    ddp_runtime_logging: DdpRuntimeLogging | None = None
    host_reads_per_step: list[str] = []


# Checks that compare one rank with another. At world size 1 they have nothing to compare (a
# gradient is its own mean, one digest matches itself), so a record never holds them as passed there.
RANK_COMPARING_CHECKS = ("replicas_in_sync", "gradients_averaged", "gradients_in_sync", "shards_disjoint")
ONE_RANK_REASON = "one rank: nothing to compare (needs 2 or more ranks)"


class Check(Part):
    """One correctness check: passed (True), failed (False) or could not be decided (None)."""

    ok: bool | None
    reason: str | None = None
    """Why a check could not be decided, or why it failed, in words."""
    details: dict[str, Any] = {}
    """The evidence: counts, digests, errors and tolerances, per check."""


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
    kind: str | None = None
    """`not_measurable`: a script that is not DDP training ddpbench can measure (no DDP model, no
    optimizer step on it, nn.DataParallel); `ddpbench run` exits 5. `known_pitfall`: torch refused a
    setting in a way ddpbench recognises (the message says what to change; the traceback stays in
    `tracebacks`). None for every other failure."""


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
    torchrun_command: list[str] | None = None
    """With forked ranks (`spec.rank_start` fork): the plain torchrun command line `command` stands
    for (torchrun's own module in place of ddpbench's agent); None otherwise."""


class OomAttempt(Part):
    """A batch size that ran out of memory before `--oom-backoff` halved it."""

    batch_size: int
    status: str
    message: str


class Oversubscribed(Part):
    """A CPU run that asked for more threads than the node has usable cores: its ranks time-shared
    cores, so its throughput describes that, not scaling."""

    device: str
    processes: int
    threads_per_process: int
    threads: int
    """processes x threads_per_process."""
    usable_cores: int


class StepTimesSidecar(Part):
    """Where a large run's step times are: a numpy .npy file beside the record holding a float64
    matrix, one row per entry of `ranks` (in that order), one column per timed step. The ranks'
    `step_times_s` are empty in the JSON and filled from this file when the record is loaded."""

    file: str
    """File name in the record's folder, e.g. `<run_id>.step_times.<sha256 prefix>.npy`."""
    sha256: str
    """Of the whole file; a file that does not match makes the record unreadable."""
    shape: list[int]
    """[ranks, timed steps]."""
    dtype: Literal["<f8"] = "<f8"
    """Little-endian float64, as numpy names it."""


class ScriptRun(Part):
    """A run of the user's own training script (`ddpbench run --script`; the spec's `script`
    says which, with its arguments), measured from outside its loop: what that way of measuring
    saw and could not see."""

    steps_seen: int | None = None
    """Optimizer steps the script took while ddpbench watched (rank 0)."""
    notes: list[str] = []
    """What differs from a workload's run: estimates that need a replay, a comm hook of its own."""


class CompileStats(Part):
    """What `--compile` cost, apart from step time: the compile warm-up stepped one fixed batch
    until a step compiled nothing."""

    mode: str
    """default or compiled-autograd."""
    warmup_steps: int
    """Steps of the compile warm-up, the last being the first that compiled nothing (when stable)."""
    stable: bool
    """A step compiled nothing within the warm-up's limit; False: it still recompiled at the end."""
    first_step_s: float
    """Wall time of the first compiled step, compiling included."""
    warmup_s: float
    """Wall time of the whole compile warm-up."""
    compile_s: float
    """Time torch's compiler reports for its own work (dynamo's `_compile.compile_inner`)."""
    graphs: int
    """Forward graphs compiled (under DDP, DDPOptimizer's split counts as one)."""
    backward_graphs: int
    """Backward graphs compiled autograd captured (0 without it)."""
    graph_breaks: int
    """Graph breaks dynamo met (DDP's own forward breaks on purpose around the module)."""
    graph_break_reasons: list[str] = []
    """The first line of each distinct reason, most frequent first (at most 5)."""
    frames: int = 0
    """Python frames dynamo compiled."""
    recompiles_in_window: int | None = None
    """Frames compiled or backward graphs captured during the timed window; above 0, some timed
    steps hold compile time."""


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
    timeline: Timeline | None = None
    """DDP runs with profiling: per-parameter gradient-ready times with and without all-reduce."""
    error: RunError | None = None
    started_at: str | None = None
    ended_at: str | None = None
    launch: Launch | None = None
    oom_backoff: list[OomAttempt] | None = None
    oversubscribed: Oversubscribed | None = None
    """Set by the launcher when the run's threads exceeded the usable cores; None otherwise."""
    host_sync: HostSync | None = None
    step_times_sidecar: StepTimesSidecar | None = None
    """Set when the ranks' step times are kept beside the record (runs with at least
    `ddpbench.records.sidecar.SIDECAR_MIN_VALUES` step times); None when they are inline."""
    script: ScriptRun | None = None
    """Set for runs of a user's training script; None for workloads."""
    machine_load: MachineLoad | None = None
    """The busiest node's load over the timed window (each node's is on its local rank 0); None
    where it could not be read (not Linux) and in records of schema 2."""
    compile: CompileStats | None = None
    """Runs with --compile: what compiling cost; None for eager runs."""
    start_up: StartUp | None = None
    """What the run cost before its first timed step; None in older records (not measured)."""

    def __post_init__(self):
        # Records written before world-size-1 checks were left undecided say `ok` for them; read
        # them as not checked, so an old one-rank run never reads as proof of averaging.
        if self.spec.world_size == 1:
            for name in RANK_COMPARING_CHECKS:
                if name == "gradients_averaged" and self.spec.strategy in ("fsdp2", "replicate"):
                    continue  # compared with a plain copy of the model, which one rank can do
                check = self.checks.get(name)
                if check is not None and check.ok is True:
                    self.checks[name] = Check(ok=None, reason=ONE_RANK_REASON, details=check.details)

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
