"""What defines one benchmark run, validated before any process starts.

Nothing here imports torch: the command line checks a spec in milliseconds, and a bad value
fails with a message naming the field and what is allowed.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from ddpbench.config.errors import SpecError
from ddpbench.config.faults import USAGE as FAULT_USAGE
from ddpbench.config.faults import Fault, check_fault_fits, parse_fault
from ddpbench.config.ids import check_stored_id
from ddpbench.config.options import flag

Strategy = Literal["local", "ddp", "dp", "fsdp2", "replicate"]
CompileMode = Literal["off", "default", "compiled-autograd"]
Precision = Literal["fp32", "bf16", "fp16"]
Device = Literal["auto", "cuda", "cpu"]
Size = Literal["tiny", "full"]
CommHook = Literal["allreduce", "fp16_compress", "bf16_compress"]
ScalingMode = Literal["weak", "strong"]
Launcher = Literal["local", "slurm"]
RankStart = Literal["fork", "exec"]
STRATEGIES = get_args(Strategy)
"""In the order sweeps run them and tables show them: the local reference first."""
DEFAULT_STRATEGIES = ("local", "ddp", "dp")
"""What a sweep runs unless told: the reference, DDP and DataParallel (fsdp2 and replicate are asked for)."""
TORCHRUN_STRATEGIES = ("ddp", "fsdp2", "replicate")
"""Strategies launched by torchrun, one process per device, in one process group."""
COMPILE_MODES = get_args(CompileMode)
PRECISIONS = get_args(Precision)
DEVICES = get_args(Device)
SIZES = get_args(Size)
COMM_HOOKS = get_args(CommHook)
SCALING_MODES = get_args(ScalingMode)
LAUNCHERS = get_args(Launcher)
RANK_STARTS = get_args(RankStart)
DEFAULT_BUCKET_CAP_MB = 25.0
"""DDP's own default bucket cap (torch's DistributedDataParallel bucket_cap_mb)."""
DEFAULT_STEPS = 30
DEFAULT_WARMUP = 5
# DDP times its first 10 iterations for its runtime logging (torch's Reducer,
# should_collect_runtime_stats), and on GPUs reading those timers waits for the previous
# iteration's CUDA events at the start of the next forward: forwards 2 to 11 are
# host-synchronised. A warm-up of 11 keeps all of them out of the timed window.
DDP_LOGGED_ITERATIONS = 10


def default_warmup(strategy: str, device: str, steps: int) -> int:
    """The warm-up when none is asked: 5, or enough to cover DDP's logged iterations on GPUs
    (but always leaving at least one timed step)."""
    if strategy in ("ddp", "replicate") and device == "cuda":  # replicate runs DDP's reducer inside
        return max(1, min(DDP_LOGGED_ITERATIONS + 1, steps - 1))
    return DEFAULT_WARMUP


DDP_MIN_WARMUP = 2
DEFAULT_PG_TIMEOUT_S = 300.0
"""How long a collective may wait before the run fails, unless told."""
# A compiled run's first collective waits for every rank to finish compiling, and ranks compiling at
# once on one host's cores finish minutes apart (gpt2's inductor compile alone takes a minute or more
# on a GPU node): its timeouts get this on top, in a sweep, a lone `ddpbench run` and the rounds of
# ab and bisect alike. `--pg-timeout` and `--run-timeout` set them outright.
COMPILE_ALLOWANCE_S = 600.0


def compile_allowance_s(compile_mode: str) -> float:
    """What a compile mode adds to a run's timeouts (`COMPILE_ALLOWANCE_S`), 0 for eager runs."""
    return 0.0 if compile_mode == "off" else COMPILE_ALLOWANCE_S


def default_pg_timeout_s(compile_mode: str) -> float:
    """The process-group timeout of a run not given one: 300 s, plus the compile allowance."""
    return DEFAULT_PG_TIMEOUT_S + compile_allowance_s(compile_mode)


def check_launchable(spec: RunSpec) -> None:
    """Rules a new run must follow that older records need not: checked before launching (and for
    every run of a sweep plan), never when a stored record is read back.

    DDP all-reduces its first iteration in one big bucket and rebuilds its buckets at the start of
    the second forward, so a warm-up of 1 leaves the rebuild inside the first timed step."""
    warmup = DEFAULT_WARMUP if spec.warmup is None else spec.warmup
    if spec.strategy in ("ddp", "replicate") and warmup < DDP_MIN_WARMUP:
        raise SpecError(
            f"warmup must be at least {DDP_MIN_WARMUP} for {spec.strategy}; got {warmup}: DDP's first iteration "
            "all-reduces in one bucket and its second forward rebuilds the buckets, so with less "
            "the rebuild lands in a timed step"
        )


def strategy_name(strategy: str, compile_mode: str = "off") -> str:
    """How a run's strategy is named in tables, the gate and the history: compiled runs are
    their own series (`ddp+compile`, `ddp+compiled-autograd`); eager runs keep the plain name."""
    if compile_mode == "off":
        return strategy
    return f"{strategy}+{'compile' if compile_mode == 'default' else compile_mode}"


def strategy_order(name: str) -> tuple[int, int]:
    """Where a strategy name (as `strategy_name` writes it) sorts: by strategy, eager first."""
    base, _, mode = name.partition("+")
    position = STRATEGIES.index(base) if base in STRATEGIES else len(STRATEGIES)
    return position, {"": 0, "compile": 1, "compiled-autograd": 2}.get(mode, 3)


def compile_fits(strategy: str, compile_mode: str) -> bool:
    try:
        check_compile_fits(strategy, compile_mode)
    except SpecError:
        return False
    return True


def check_compile_fits(strategy: str, compile_mode: str) -> None:
    """The strategy/compile pairs torch supports, refused in one line before anything starts."""
    _one_of("compile", compile_mode, COMPILE_MODES)
    if compile_mode == "off":
        return
    if strategy == "dp":
        raise SpecError(
            f"--compile {compile_mode} does not apply to dp: nn.DataParallel replicates the module in every "
            "forward, which torch.compile does not trace; compile local, ddp, fsdp2 or replicate runs"
        )
    if strategy == "fsdp2" and compile_mode == "compiled-autograd":
        raise SpecError(
            "--compile compiled-autograd traces DDP's all-reduce into backward (ddp, replicate or local); "
            "fsdp2's hooks are not traceable by it: use --compile default with fsdp2"
        )


DDP_FIRST_BUCKET_MB = 1.0
"""torch.compile's DDPOptimizer gives its first bucket 1 MiB (torch.distributed._DEFAULT_FIRST_BUCKET_BYTES)
and refuses a bucket cap below that."""


def check_compile_knobs(strategy: str, compile_mode: str, bucket_cap_mb: float, comm_hook: str) -> None:
    """DDP options that a compile mode cannot take, refused before anything starts."""
    if strategy not in ("ddp", "replicate"):
        return
    if compile_mode == "default" and bucket_cap_mb < DDP_FIRST_BUCKET_MB:
        raise SpecError(
            f"--bucket-cap-mb {bucket_cap_mb:g} is below the {DDP_FIRST_BUCKET_MB:g} MB first bucket of "
            "torch.compile's DDPOptimizer, which refuses it (\"First bucket should be smaller/equal to other "
            f'buckets"): use a cap of at least {DDP_FIRST_BUCKET_MB:g} MB with --compile default, or '
            "--compile compiled-autograd"
        )
    if compile_mode == "compiled-autograd" and comm_hook != "allreduce":
        raise SpecError(
            f"--comm-hook {comm_hook} does not fit --compile compiled-autograd: DDP's Python reducer calls a "
            "communication hook with one gradient, not a bucket; use --comm-hook allreduce, or --compile default"
        )


def _one_of(name: str, value: Any, allowed: tuple) -> None:
    if value not in allowed:
        raise SpecError(f"{name} must be one of {', '.join(map(str, allowed))}; got {value!r}")


def check_plain_name(name: str, value: str) -> None:
    """A name that becomes one file or folder inside the output folder (`runs/<run_id>.json`,
    `logs/<run_id>/`): one path component, so no value can reach outside it (a run removes its
    old record before it starts). Empty means "choose one". A spec read back from a record goes
    through here too, so this is the stored-id check: a new id is checked where it is given
    (`--run-id`, ddpbench.config.ids.check_id) or made (plain names only)."""
    if value:
        check_stored_id(name, value, "the output folder")


def _at_least(name: str, value: Any, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise SpecError(f"{name} must be an integer >= {minimum}; got {value!r}")


def resolve_device(device: str, gpu_count: int) -> str:
    """What `auto` means: cuda when a GPU is visible, else cpu."""
    if device == "auto":
        return "cuda" if gpu_count > 0 else "cpu"
    return device


def threads_per_process(strategy: str, nproc: int, cores: int, devices_sharing_cores: int) -> int:
    """A CPU "device" is a fixed slice of the cores (cores // the devices that share them), so N
    ranks never fight over them and scaling means what it means on GPUs; DataParallel's one
    process drives nproc devices, so it gets nproc slices."""
    per_device = max(1, cores // devices_sharing_cores)
    return per_device * (nproc if strategy == "dp" else 1)


@dataclass(frozen=True)
class ScriptSpec:
    """A user's own training script, run unmodified under torchrun (`ddpbench run --script`)."""

    path: str = flag(
        "a training script that runs under torchrun; measured as it is", flags=("--script",), metavar="SCRIPT"
    )
    """The script, run as `__main__` on every rank."""
    args: tuple[str, ...] = ()
    """Its own command-line arguments: what follows `--` on ddpbench's command line."""
    run_to_end: bool = flag("let the script finish after the measurements instead of stopping it", default=False)
    """Let the script finish instead of stopping every rank at a step boundary once measured."""
    sample_unit: str = flag("what throughput counts, e.g. tokens (default samples)", default="samples")
    """What one unit of throughput is; with units_per_sample, tokens for a language model."""
    units_per_sample: int | None = flag(
        "units per sample: the forward's leading dimension counts samples (default 1; with --sample-unit "
        "tokens, the second dimension of the forward's first input where it is token ids)",
        default=None,
    )
    """Units (tokens) per sample; None: 1, or counted from token-id inputs with sample_unit tokens."""

    def __post_init__(self) -> None:
        if not isinstance(self.path, str) or not self.path:
            raise SpecError("script must be a path to a Python file")
        object.__setattr__(self, "args", tuple(self.args))
        if self.units_per_sample is not None:
            _at_least("units_per_sample", self.units_per_sample, 1)

    @property
    def workload_name(self) -> str:
        """How the script is named where a workload's name stands (tables, run ids)."""
        return f"script:{os.path.basename(self.path)}"


@dataclass(frozen=True)
class DDPKnobs:
    """DistributedDataParallel constructor options and the gradient communication hook."""

    bucket_cap_mb: float = flag(
        f"gradient bucket size in MiB: DDP all-reduces one bucket at a time during backward (default "
        f"{DEFAULT_BUCKET_CAP_MB:g})",
        default=DEFAULT_BUCKET_CAP_MB,
    )
    """Size of a gradient bucket in MiB; DDP all-reduces one bucket at a time during backward."""
    gradient_as_bucket_view: bool = flag(
        "let .grad alias DDP's bucket memory: one copy less per step, and less memory (default off)",
        negatable=True,
        default=False,
    )
    """Let .grad alias the bucket memory, saving one copy and the memory of the gradients."""
    static_graph: bool = flag(
        "promise DDP that the parameters used never change from step to step, which saves its per-step "
        "bookkeeping (default off)",
        negatable=True,
        default=False,
    )
    """Promise DDP the set of used parameters never changes, enabling its static-graph optimisations."""
    find_unused_parameters: bool = flag(
        "walk the autograd graph every step for parameters that got no gradient (default off)",
        negatable=True,
        default=False,
    )
    """Walk the autograd graph each step to find parameters that got no gradient."""
    broadcast_buffers: bool = flag(
        "broadcast buffers (BatchNorm statistics) from rank 0 at every forward (default on)",
        negatable=True,
        default=True,
    )
    """Broadcast buffers (BatchNorm statistics) from rank 0 at every forward."""
    comm_hook: CommHook = flag(
        "gradient communication: plain all-reduce (default), or all-reduce compressed to fp16 or bf16",
        default="allreduce",
    )
    """Gradient communication: plain all-reduce, or all-reduce compressed to fp16/bf16."""

    def __post_init__(self) -> None:
        if not isinstance(self.bucket_cap_mb, int | float) or self.bucket_cap_mb <= 0:
            raise SpecError(f"bucket_cap_mb must be a number > 0; got {self.bucket_cap_mb!r}")
        _one_of("comm_hook", self.comm_hook, COMM_HOOKS)


@dataclass(frozen=True)
class RunSpec:
    """Everything that defines one run; stored whole in its record."""

    workload: str = flag("built-in name (resnet50, vit_b_16, gpt2, mlp) or path/to/file.py:factory")
    """A built-in workload name, or `path/to/file.py:factory` for a user's own."""
    strategy: Strategy = flag(
        "ddp, fsdp2 or replicate under torchrun; dp: nn.DataParallel; local: one process, no wrapper", default="ddp"
    )
    """`ddp`: DistributedDataParallel under torchrun; `local`: one process, no wrapper (the
    reference); `dp`: nn.DataParallel, one process driving `nproc` devices with the global batch;
    `fsdp2`: `fully_shard` on each of the workload's shard units, then the root, under torchrun;
    `replicate`: the composable `replicate` (DDP's reducer without the wrapper), under torchrun."""
    compile: CompileMode = flag(
        "torch.compile the wrapped model: default (DDPOptimizer splits graphs at buckets), compiled-autograd "
        "(backward and its all-reduces traced too; ddp, replicate, local), off (default)",
        default="off",
    )
    """`off`: eager; `default`: `torch.compile` of the wrapped model (for DDP, DDPOptimizer splits
    the graph at bucket boundaries); `compiled-autograd`: also backward, with DDP's Python reducer
    tracing the all-reduces into it (`optimize_ddp = "python_reducer"`)."""
    nproc: int = flag("processes per node, one per device (default 1)", default=1)
    """Devices per node: one process each for ddp, all in one process for dp."""
    nnodes: int = flag("nodes of the run: start the same command on each (default 1)", default=1)
    """Nodes in the job; world_size = nproc * nnodes."""
    device: Device = flag("auto picks cuda when a GPU is visible", default="auto")
    """`cuda`, `cpu`, or `auto` (cuda when a GPU is visible)."""
    size: Size | None = flag("workload size (default: full on GPUs, tiny on CPU)", default=None)
    """`tiny` or `full`; None picks full on GPUs and tiny on CPU."""
    batch_size: int | None = flag("samples per device per step (default: the workload's)", default=None)
    """Samples per device per step; None takes the workload's default for its size."""
    steps: int = flag(f"total steps per rank, warm-up included (default {DEFAULT_STEPS})", default=DEFAULT_STEPS)
    """Total steps per rank, warm-up included."""
    warmup: int | None = flag(
        "leading steps never timed (default 5, or 11 for ddp on GPUs; ddp needs >= 2)", default=None
    )
    """Leading steps that are never timed. DDP needs at least one: its first iteration is special.
    None: 5, or 11 for ddp on GPUs (DDP host-synchronises its first 10 iterations); filled in
    once the device is known."""
    precision: Precision = flag("fp16 needs a GPU", default="fp32")
    """fp32, or autocast to bf16 / fp16 (fp16 with a GradScaler, GPU only)."""
    threads_per_rank: int | None = flag("CPU threads per process (default cores // nproc)", default=None)
    """Intra-op CPU threads per process; None gives max(1, cores // nproc), times nproc for dp."""
    num_workers: int = flag("DataLoader workers per rank (default 0)", default=0)
    """DataLoader worker processes per rank."""
    data_dir: str | None = flag("an ImageFolder tree for the image workloads instead of synthetic data", default=None)
    """An image folder (torchvision ImageFolder layout) instead of synthetic data."""
    seed: int = flag(
        "seed of the model's initialisation and of synthetic data, alike on every rank (default 0)", default=0
    )
    """Seed for model initialisation and synthetic data; the same on every rank."""
    pg_timeout_s: float = flag(
        f"seconds a collective may wait before the run fails (default {DEFAULT_PG_TIMEOUT_S:g}, plus "
        f"{COMPILE_ALLOWANCE_S:g} with --compile)",
        flags=("--pg-timeout",),
        default=DEFAULT_PG_TIMEOUT_S,
    )
    """Process-group timeout: a collective that waits longer fails instead of hanging for 30 min."""
    ddp: DDPKnobs = field(default_factory=DDPKnobs)
    """DDP options, for `ddp` and `replicate` (which runs DDP's reducer); ignored by `local`, `dp`
    and `fsdp2`."""
    profile: bool = flag(
        "skip the profiled phase (by default each rank writes a trace after the timed steps)",
        flags=("--no-profile",),
        default=True,
    )
    """Run a profiled phase after the timed steps and write one trace per rank."""
    profile_wait: int = 1
    """Profiler schedule: steps run before the profiler starts."""
    profile_warmup: int = 2
    """Profiler schedule: steps traced but discarded (the profiler's own start-up is inflated)."""
    profile_active: int = flag(
        "profiler steps kept in each trace (default 3; GPU analysis drops the last)",
        flags=("--profile-steps",),
        metavar="PROFILE_STEPS",
        default=3,
    )
    """Profiler schedule: steps kept in the trace."""
    no_sync_steps: int | None = flag(
        "timed steps replayed under no_sync() to estimate exposed communication (default min(10, timed); 0 skips)",
        default=None,
    )
    """Timed steps replayed under DDP's no_sync() to estimate exposed communication; 0 skips
    it; None replays min(10, timed steps)."""
    node_rank: int = flag("this node's place in a run of several nodes, 0 to nnodes - 1 (default 0)", default=0)
    """This node's rank, for multi-node jobs."""
    rdzv_endpoint: str | None = flag("host:port reachable from every node", default=None)
    """host:port of torchrun's c10d rendezvous; None runs single-node (standalone, localhost)."""
    rdzv_id: str | None = flag("a job id shared by all nodes", default=None)
    """Job id shared by every node of a multi-node job."""
    rdzv_port: int | None = flag(
        "single node: rendezvous port on localhost (default: a free one; a taken one is replaced)", default=None
    )
    """Single node: the rendezvous port on localhost; None lets torchrun pick a free one. A port
    that is taken is replaced by a free one (and the record says so)."""
    launcher: Launcher = flag(
        "local: on this machine; slurm: with srun inside a SLURM allocation (salloc/sbatch), one torchrun agent "
        "per node",
        default="local",
    )
    """`local`: torchrun (or the one process) started on this node; `slurm`: started with `srun`
    inside a SLURM allocation, one torchrun agent per node, rendezvous on the step's first node."""
    rank_start: RankStart | None = flag(
        "how torchrun's agent starts each rank: fork (from an agent that imported torch and the worker once; "
        "default) or exec (a new Python per rank, as plain torchrun)",
        default=None,
    )
    """`fork`: the agent (`ddpbench.worker.agent`) imports torch and the worker, then forks every rank;
    `exec`: each rank is a new Python that imports them itself, as plain torchrun starts it. None in a
    spec before it is resolved (fork) and in records made before the choice existed (exec)."""
    fault: dict | None = flag(
        "testing aid: make rank R raise, be killed, hang (before or inside step S), skip an all-reduce or run out "
        "of memory at step S",
        flags=("--inject-fault",),
        metavar=FAULT_USAGE,
        parse=lambda text: parse_fault(text).to_dict() if text else None,
        default=None,
    )
    """A fault to inject (testing aid): {"rank": R, "kind": raise|kill|hang|oom|skip, "step": S},
    and for an in-step hang "where": data|forward|backward|optimizer|collective."""
    slowdown: float = flag(
        "testing aid for the gate: add real work worth FRACTION of a step (0.1 = 10 %%) to every timed step",
        metavar="FRACTION",
        default=0.0,
    )
    """Testing aid for the gate: extra real work per timed step, as a fraction of a warm-up step."""
    scaling: ScalingMode = "weak"
    """How the sweep that planned this run sized its batch: weak (fixed per-device batch) or strong
    (fixed global batch split over the devices). Decides which local run is its X(1)."""
    run_id: str = flag("name of the run (default: workload-strategy-nN-time-random)", default="")
    """Unique name of the run; the record is `<out_dir>/runs/<run_id>.json`."""
    out_dir: str = flag("records go to OUT/runs/ (default results/single)", flags=("--out",), default="results/single")
    """Folder that receives `runs/` (records) and later `traces/`."""
    script: ScriptSpec | None = None
    """A user's training script measured as it is, in place of a workload (whose name is then
    `script:<file name>`); None for workloads."""
    started_in: str | None = None
    """The folder the run was started in (absolute), from which its relative paths were given; None
    in records made before it was kept (their loader infers it where the record's own folder says:
    `ddpbench.records.store`)."""
    files: dict[str, str] | None = None
    """The user's files the run names (its workload file, script, data folder), as given -> what
    each is wherever the record is read (`ddpbench.host.repository.located`: its path inside its git
    repository and the repository's root commit, else its real path), fixed when the run starts;
    None in records made before."""
    repeat: int = flag(
        "which round of its sweep this run is (sweeps and TrainJobs set it; default 1)",
        flags=("--round",),
        metavar="N",
        default=1,
    )
    """Which run of its configuration this is (1, 2, ...): a sweep runs every configuration several
    times, one round of every configuration after another; E(N) divides by the reference runs of
    every round, pooled. 1 in records made before repeats were numbered."""
    world_size: int = field(init=False, default=1)
    """Devices in the run, nproc * nnodes (for dp too, although it is one process). Derived;
    stored so that a record says it without arithmetic."""
    backend: str = field(init=False, default="gloo")
    """Process-group backend: nccl on GPUs, gloo on CPU, as PyTorch recommends. Derived."""

    def __post_init__(self) -> None:
        # Derived fields first: the checks below use them. (Frozen, hence object.__setattr__.)
        object.__setattr__(self, "world_size", self.nproc * self.nnodes)
        if self.script is not None and self.compile != "off":
            raise SpecError("--compile applies to workloads: a script compiles (or not) as it is written")
        if self.script is not None and self.strategy != "ddp":
            raise SpecError(
                f"a script runs under torchrun with DDP; strategy {self.strategy} is measured with workloads "
                "(--workload)"
            )
        object.__setattr__(self, "backend", "nccl" if self.device == "cuda" else "gloo")
        if not isinstance(self.workload, str) or not self.workload:
            raise SpecError("workload must be a name or path/to/file.py:factory")
        _one_of("strategy", self.strategy, STRATEGIES)
        check_plain_name("run_id", self.run_id)
        check_compile_fits(self.strategy, self.compile)
        check_compile_knobs(self.strategy, self.compile, self.ddp.bucket_cap_mb, self.ddp.comm_hook)
        _one_of("device", self.device, DEVICES)
        _one_of("precision", self.precision, PRECISIONS)
        _one_of("scaling", self.scaling, SCALING_MODES)
        _one_of("launcher", self.launcher, LAUNCHERS)
        if self.rank_start is not None:
            _one_of("rank_start", self.rank_start, RANK_STARTS)
        if self.size is not None:
            _one_of("size", self.size, SIZES)
        _at_least("nproc", self.nproc, 1)
        _at_least("repeat", self.repeat, 1)
        _at_least("nnodes", self.nnodes, 1)
        if self.batch_size is not None:
            _at_least("batch_size", self.batch_size, 1)
        _at_least("steps", self.steps, 1)
        if self.warmup is None and self.device != "auto":
            object.__setattr__(self, "warmup", default_warmup(self.strategy, self.device, self.steps))
        warmup = DEFAULT_WARMUP if self.warmup is None else self.warmup
        _at_least("warmup", warmup, 0)
        if self.steps <= warmup:
            raise SpecError(
                f"steps must be above warmup (steps counts the warm-up too); "
                f"got steps={self.steps}, warmup={warmup}"
            )
        if self.strategy == "ddp" and warmup < 1:
            raise SpecError(
                "warmup must be at least 1 for ddp: DDP's first iteration builds its buckets "
                "and is never representative"
            )
        if self.strategy == "local" and self.world_size != 1:
            raise SpecError(
                f"strategy local is one process on one device; got nproc={self.nproc}, "
                f"nnodes={self.nnodes} (use ddp for more)"
            )
        if self.strategy in ("fsdp2", "replicate") and self.warmup is not None and self.warmup < 1:
            raise SpecError(f"warmup must be at least 1 for {self.strategy}: its first step initialises it lazily")
        _at_least("profile_wait", self.profile_wait, 0)
        _at_least("profile_warmup", self.profile_warmup, 0)
        _at_least("profile_active", self.profile_active, 1)
        if self.no_sync_steps is not None:
            _at_least("no_sync_steps", self.no_sync_steps, 0)
        if (self.no_sync_steps or 0) > self.timed_steps:
            raise SpecError(
                f"no_sync_steps replays timed steps, so it can be at most steps - warmup = "
                f"{self.timed_steps}; got {self.no_sync_steps}"
            )
        if self.threads_per_rank is not None:
            _at_least("threads_per_rank", self.threads_per_rank, 1)
        _at_least("num_workers", self.num_workers, 0)
        if not isinstance(self.pg_timeout_s, int | float) or self.pg_timeout_s <= 0:
            raise SpecError(f"pg_timeout_s must be a number > 0; got {self.pg_timeout_s!r}")
        if self.device == "cpu" and self.precision == "fp16":
            raise SpecError(
                "precision fp16 needs a GPU (CPU autocast has no fp16 GradScaler path); " "on cpu use fp32 or bf16"
            )
        if self.nnodes > 1:
            if self.strategy not in TORCHRUN_STRATEGIES:
                raise SpecError(f"nnodes > 1 needs a strategy launched by torchrun ({', '.join(TORCHRUN_STRATEGIES)})")
            # Under slurm the launcher picks them on the step's first node when the run starts.
            if self.launcher != "slurm" and (not self.rdzv_endpoint or not self.rdzv_id):
                raise SpecError("nnodes > 1 needs rdzv_endpoint (host:port) and rdzv_id (or --launcher slurm)")
        if self.rdzv_endpoint is not None:
            host, _, port = self.rdzv_endpoint.rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise SpecError(f"rdzv_endpoint must be host:port; got {self.rdzv_endpoint!r}")
        if not isinstance(self.slowdown, int | float) or not 0 <= self.slowdown <= 1:
            raise SpecError(f"slowdown must be a fraction between 0 and 1; got {self.slowdown!r}")
        if self.fault is not None:
            check_fault_fits(
                Fault(**self.fault), self.processes, self.steps, self.strategy, self.ddp.comm_hook, self.compile
            )
        if self.rdzv_port is not None and not (isinstance(self.rdzv_port, int) and 0 < self.rdzv_port < 65536):
            raise SpecError(f"rdzv_port must be a port number 1..65535; got {self.rdzv_port!r}")
        if not 0 <= self.node_rank < self.nnodes:
            raise SpecError(f"node_rank must be in 0..{self.nnodes - 1}; got {self.node_rank}")

    @property
    def launched_by_torchrun(self) -> bool:
        """One process per device in one process group (ddp, fsdp2, replicate)."""
        return self.strategy in TORCHRUN_STRATEGIES

    @property
    def processes(self) -> int:
        return self.world_size if self.launched_by_torchrun else 1

    @property
    def uses_ddp_knobs(self) -> bool:
        """ddp and replicate build DDP's reducer from the knobs; the others ignore them."""
        return self.strategy in ("ddp", "replicate")

    @property
    def strategy_name(self) -> str:
        """The strategy as tables and the history name it: `ddp`, or `ddp+compile` when compiled."""
        return strategy_name(self.strategy, self.compile)

    @property
    def timed_steps(self) -> int:
        return self.steps - (DEFAULT_WARMUP if self.warmup is None else self.warmup)

    @property
    def no_sync_replays(self) -> int:
        """How many timed steps the no_sync phase replays (ddp only)."""
        if self.strategy != "ddp" or self.compile != "off":
            return 0  # the replay is eager DDP's: no_sync and the reducer's timers
        return min(10, self.timed_steps) if self.no_sync_steps is None else self.no_sync_steps

    def replace(self, **changes: Any) -> RunSpec:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSpec:
        known = {f.name for f in dataclasses.fields(cls) if f.init}  # world_size, backend are derived
        values = {k: v for k, v in data.items() if k in known}
        values["ddp"] = DDPKnobs(**values.get("ddp", {}))
        if values.get("script") is not None:
            values["script"] = ScriptSpec(**values["script"])
        return cls(**values)


# RunSpec's fields that say what a run measures on one node, beside its workload: the options
# `ddpbench run` offers for them, and what `gate --confirm-with` reruns from a record.
CONFIGURATION_FIELDS = (
    "strategy",
    "compile",
    "nproc",
    "device",
    "size",
    "batch_size",
    "steps",
    "warmup",
    "precision",
    "threads_per_rank",
    "num_workers",
    "data_dir",
    "seed",
    "pg_timeout_s",
)
MEASUREMENT_FIELDS = ("profile", "profile_active", "no_sync_steps")
