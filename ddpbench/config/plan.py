"""Sweep plans: which runs a scaling study is made of. No torch.

A plan is a list of RunSpec: for every workload, `local` (the X(1) reference), then `ddp` and `dp`
(and fsdp2, replicate where asked) at world sizes 1, 2, 4, ... up to N (and N itself when it is not
a power of two; the CPU suite starts at 2), each in every compile mode asked that it supports. The
whole list runs `--repeat` times (3 unless told), in rounds: one run of every configuration, then
the next round. Run ids are stable names inside a sweep (`mlp-ddp-n2-r1`), which is what `--resume`
matches on.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ddpbench.config.faults import fault_applies
from ddpbench.config.ids import plain_name
from ddpbench.config.options import comma_list, flag, node_counts, positive_int, same_flag
from ddpbench.config.spec import (
    COMPILE_MODES,
    DEFAULT_STRATEGIES,
    SCALING_MODES,
    STRATEGIES,
    TORCHRUN_STRATEGIES,
    DDPKnobs,
    Launcher,
    Precision,
    RankStart,
    RunSpec,
    ScalingMode,
    ScriptSpec,
    Size,
    SpecError,
    check_compile_fits,
    check_launchable,
    compile_fits,
    strategy_name,
    threads_per_process,
)
from ddpbench.config.workloads import check_names_apart, check_workload_name, short_workload_name


@dataclass(frozen=True)
class Suite:
    """A named set of workloads with the settings that suit one kind of device."""

    workloads: dict[str, int]
    """workload name -> per-device batch size."""
    size: str
    precision: str
    steps: int
    warmup: int
    description: str
    strategies: tuple[str, ...] = DEFAULT_STRATEGIES
    """What --strategies means when not given."""
    smallest_world_size: int = 1
    """The smallest world size of the strategies other than `local` (whose one device is X(1))."""


DEFAULT_REPEATS = 3
"""Runs of every configuration a sweep makes unless told otherwise: one run is one sample."""

SUITES: dict[str, Suite] = {
    # On CPU the suite holds what teaches something there, repeated: a communication-bound MLP, a
    # transformer and a convolutional network with BatchNorm's buffers, each as the one-device
    # reference and as DDP at 2 processes and up. DDP at one process measures only DDP's overhead,
    # which the in-process ablation at two measures too; DataParallel on CPU is one process with N
    # times the threads, nothing replicated (`--strategies local,ddp,dp` adds it back).
    "cpu": Suite(
        workloads={"mlp": 8, "gpt2": 8, "resnet50": 8},
        size="tiny",
        precision="fp32",
        steps=60,
        warmup=5,
        description="tiny workloads on CPU processes over gloo: local, and ddp at 2 processes and up",
        strategies=("local", "ddp"),
        smallest_world_size=2,
    ),
    # warm-up 11: DDP host-synchronises its first 10 iterations on GPUs (runtime logging).
    "gpu": Suite(
        workloads={"resnet50": 128, "vit_b_16": 64, "gpt2": 8, "mlp": 32},
        size="full",
        precision="bf16",
        steps=60,
        warmup=11,
        description="full-size workloads on GPUs, bf16 autocast",
    ),
    "smoke": Suite(
        workloads={"mlp": 8},
        size="tiny",
        precision="fp32",
        steps=12,
        warmup=2,
        description="one tiny workload, for a quick check that everything runs",
    ),
}


def world_sizes(largest: int) -> list[int]:
    """1, 2, 4, ... up to `largest`, plus `largest` itself when it is not a power of two."""
    sizes, size = [], 1
    while size <= largest:
        sizes.append(size)
        size *= 2
    if sizes[-1] != largest:
        sizes.append(largest)
    return sizes


@dataclass(frozen=True)
class SweepOptions:
    """What the user asked of a sweep, already resolved to a device and a largest world size."""

    device: str
    """cuda or cpu (auto is resolved by the caller)."""
    max_world_size: int
    """Largest world size: GPUs, or CPU processes."""
    cores: int
    """CPU cores usable by the sweep; each rank gets cores // max_world_size threads."""
    suite: str
    workloads: tuple[str, ...] = flag("comma-separated workloads instead of the suite's", type=comma_list, default=())
    """Overrides the suite's workloads when given."""
    strategies: tuple[str, ...] = flag(
        f"subset of {','.join(STRATEGIES)} (default: the suite's; gpu {','.join(DEFAULT_STRATEGIES)}, cpu local,ddp)",
        type=comma_list,
        default=(),
    )
    """Empty: the suite's strategies."""
    compile: tuple[str, ...] = flag(
        f"comma-separated compile modes, each strategy run in each it supports: {','.join(COMPILE_MODES)} "
        "(default off)",
        type=comma_list,
        default=("off",),
    )
    """torch.compile modes; every strategy runs in each mode it supports (dp only eager, fsdp2
    not under compiled autograd). The local reference runs eager too: the eager runs' X(1), as the
    compiled local runs are the compiled runs' (docs/concepts.md, X(1))."""
    size: Size | None = flag("workload size for every workload (default: the suite's)", default=None)
    steps: int | None = flag("steps per run, warm-up included (default: the suite's)", default=None)
    warmup: int | None = flag("leading steps of every run never timed (default: the suite's)", default=None)
    batch_size: int | None = flag("per-device batch for every workload (weak scaling)", default=None)
    """Per-device batch (weak scaling) for every workload, overriding the suite's."""
    scaling: ScalingMode = flag("weak: fixed per-device batch (default); strong: fixed global batch", default="weak")
    """weak: fixed per-device batch; strong: fixed global batch split over the devices."""
    global_batch: int | None = flag("strong scaling's global batch", default=None)
    """Strong scaling's fixed global batch; default: per-device batch x max_world_size."""
    precision: Precision | None = flag("fp32, or autocast to bf16 or fp16 (default: the suite's)", default=None)
    ddp: DDPKnobs = field(default_factory=DDPKnobs)
    num_workers: int = same_flag(RunSpec, "num_workers")
    """DataLoader workers per rank, in every run (what explain's advice on data loading names)."""
    data_dir: str | None = same_flag(RunSpec, "data_dir")
    """An image folder every run reads instead of synthetic data (the image workloads)."""
    profile: bool = flag("skip the profiled phase of every run", flags=("--no-profile",), default=True)
    """Every run gets a profiled phase and writes traces."""
    profile_active: int = same_flag(RunSpec, "profile_active")
    """Profiled steps kept in every run's traces: a script's only source for the wait for the
    slowest rank (it has no in-process ablation), so more of them narrow that wait's interval."""
    fault: dict | None = same_flag(RunSpec, "fault")
    """Testing aid: injected into every run that has the fault's rank and step."""
    slowdown: float = same_flag(RunSpec, "slowdown")
    """Testing aid: real extra work in every timed step of every run (the sweep took the option and
    dropped it before)."""
    repeat: int = flag(
        f"run every configuration K times, one round of every configuration after another (default {DEFAULT_REPEATS}): "
        "each figure is pooled over them, with an interval that holds the run-to-run spread",
        type=positive_int,
        default=DEFAULT_REPEATS,
    )
    """Runs of every configuration, in rounds (run ids end in -r1, -r2, ... when above 1)."""
    launcher: Launcher = same_flag(RunSpec, "launcher")
    """local: every run on this machine; slurm: every run started with srun in an allocation."""
    rank_start: RankStart | None = same_flag(RunSpec, "rank_start")
    """fork (default) or exec: how torchrun's agent starts every run's ranks."""
    nodes: tuple[int, ...] = flag(
        "with --launcher slurm: node counts to sweep, e.g. 1,2,4 (whole nodes above 1; default 1, 2, 4, ... up to "
        "the allocation's nodes)",
        flags=("--node-counts",),
        metavar="COUNTS",
        type=node_counts,
        default=(),
    )
    """Node counts to sweep (slurm); max_world_size is then the devices per node. Empty: one node."""
    script: ScriptSpec | None = None
    """A user's training script swept in place of the suite's workloads (ddp only: its DDP x1 run
    is the reference, since a script has no run without DDP)."""

    def __post_init__(self) -> None:
        if self.suite not in SUITES:
            raise SpecError(f"unknown suite {self.suite!r}; valid: {', '.join(SUITES)}")
        if not isinstance(self.max_world_size, int) or self.max_world_size < 1:
            raise SpecError(f"the largest world size must be an integer >= 1; got {self.max_world_size!r}")
        if not self.strategies:
            object.__setattr__(self, "strategies", SUITES[self.suite].strategies)
        for strategy in self.strategies:
            if strategy not in STRATEGIES:
                raise SpecError(f"unknown strategy {strategy!r}; valid: {', '.join(STRATEGIES)}")
        for mode in self.compile:
            if mode not in COMPILE_MODES:
                raise SpecError(f"unknown compile mode {mode!r}; valid: {', '.join(COMPILE_MODES)}")
        if not self.compile:
            raise SpecError("compile must name at least one of: " + ", ".join(COMPILE_MODES))
        if not any(compile_fits(s, m) for s in self.strategies for m in self.compile):
            check_compile_fits(self.strategies[0], self.compile[0])  # says why in one line
        if self.scaling not in SCALING_MODES:
            raise SpecError(f"scaling must be one of {', '.join(SCALING_MODES)}; got {self.scaling!r}")
        for name in self.workloads:
            check_workload_name(name)
        if not isinstance(self.repeat, int) or self.repeat < 1:
            raise SpecError(f"repeat must be an integer >= 1; got {self.repeat!r}")
        if any(not isinstance(n, int) or n < 1 for n in self.nodes):
            raise SpecError(f"node counts must be whole numbers >= 1; got {', '.join(map(str, self.nodes))}")
        if self.launcher != "slurm" and any(n > 1 for n in self.nodes):
            raise SpecError("several nodes need --launcher slurm (or ddpbench run --nnodes on each node)")
        if self.global_batch is not None and self.scaling != "strong":
            raise SpecError("global_batch applies to strong scaling only (add --scaling strong)")
        if self.script is not None:
            if self.workloads:
                raise SpecError("--script sweeps the script in place of workloads: drop --workloads")
            if self.compile != ("off",):
                raise SpecError("--compile applies to workloads: a script compiles (or not) as it is written")
            if "ddp" not in self.strategies:
                raise SpecError(
                    "a script is swept with ddp (its DDP x1 run is the reference): keep ddp in --strategies"
                )
            if self.scaling != "weak" or self.batch_size is not None:
                raise SpecError("a script keeps its own per-rank batch: weak scaling only, no --batch-size")


def layouts(options: SweepOptions, strategy: str) -> list[tuple[int, int]]:
    """(nodes, devices per node) of a strategy's runs: world sizes 1, 2, 4, ... on one node (from
    the suite's smallest, and never above the largest), then whole nodes for every node count above 1
    (ddp only: DataParallel is one process)."""
    if strategy == "local":
        return [(1, 1)]
    # A script's DDP x1 run is its X(1): a script sweep starts at one device, whatever the suite.
    smallest = 1 if options.script else min(SUITES[options.suite].smallest_world_size, options.max_world_size)
    one_node = [(1, size) for size in world_sizes(options.max_world_size) if size >= smallest]
    if not options.nodes:
        return one_node
    across = [(nodes, options.max_world_size) for nodes in sorted(set(options.nodes)) if nodes > 1]
    return one_node if strategy not in TORCHRUN_STRATEGIES else ([] if 1 not in options.nodes else one_node) + across


def _largest_world_size(options: SweepOptions) -> int:
    return max(nodes * per_node for nodes, per_node in layouts(options, "ddp"))


def _per_device_batch(options: SweepOptions, default_batch: int | None, world_size: int) -> int | None:
    per_device = options.batch_size or default_batch
    if options.scaling == "weak":
        return per_device
    if options.global_batch is None and per_device is None:
        raise SpecError("strong scaling of a user workload needs --global-batch or --batch-size")
    global_batch = options.global_batch or per_device * _largest_world_size(options)
    if global_batch % world_size:
        raise SpecError(
            f"strong scaling: global batch {global_batch} does not split evenly over "
            f"{world_size} devices; pick a multiple of every world size in the sweep"
        )
    return global_batch // world_size


# Placeholders a script's own arguments may hold, filled per run of a sweep: a Lightning script's
# `--trainer.devices {nproc}` must change with the world size.
SCRIPT_PLACEHOLDERS = ("{nproc}", "{world_size}", "{nnodes}")


def script_for(script: ScriptSpec | None, nproc: int, world_size: int, nnodes: int) -> ScriptSpec | None:
    if script is None or not any(p in arg for arg in script.args for p in SCRIPT_PLACEHOLDERS):
        return script
    values = {"{nproc}": str(nproc), "{world_size}": str(world_size), "{nnodes}": str(nnodes)}
    args = []
    for arg in script.args:
        for placeholder, value in values.items():
            arg = arg.replace(placeholder, value)
        args.append(arg)
    return dataclasses.replace(script, args=tuple(args))


def plan_sweep(options: SweepOptions, out_dir: str) -> list[RunSpec]:
    """Every run of the sweep, in the order they run: per workload, the local reference first."""
    suite = SUITES[options.suite]
    workloads = {name: suite.workloads.get(name) for name in options.workloads} or dict(suite.workloads)
    check_names_apart(workloads)
    strategies = options.strategies
    if options.script is not None:  # the script's own batch; DDP only (DataParallel is measured with workloads)
        workloads, strategies = {options.script.workload_name: None}, ("ddp",)
    # Every run of the sweep gets the same slice of cores per device, the one its largest world
    # size allows, so X(1) and X(N) are measured on equal devices.
    common = dict(
        device=options.device,
        size=None if options.script else options.size or suite.size,
        steps=options.steps or suite.steps,
        warmup=options.warmup if options.warmup is not None else suite.warmup,
        precision=options.precision or suite.precision,
        ddp=options.ddp,
        num_workers=options.num_workers,
        data_dir=options.data_dir,
        profile=options.profile,
        profile_active=options.profile_active,
        out_dir=out_dir,
        launcher=options.launcher,
        rank_start=options.rank_start,
        script=options.script,
        slowdown=options.slowdown,
    )
    configurations: list[RunSpec] = []
    for workload, default_batch in workloads.items():
        name = plain_name(short_workload_name(workload))  # a user's file may be named anything: ids are plain
        # local is the reference X(1): eager always (dp's and eager runs'), compiled too where asked
        modes = [
            (s, m)
            for s in STRATEGIES
            if s in strategies
            for m in COMPILE_MODES
            if m in options.compile or (s == "local" and m == "off")
        ]
        for strategy, compile_mode in [(s, m) for s, m in modes if compile_fits(s, m)]:
            label = strategy_name(strategy, compile_mode).replace("+", "-")
            for nodes, per_node in layouts(options, strategy):
                world_size = nodes * per_node
                processes = world_size if strategy in TORCHRUN_STRATEGIES else 1
                fault = (
                    options.fault
                    if options.fault
                    and fault_applies(options.fault, processes, common["steps"], strategy, compile_mode)
                    else None
                )
                configurations.append(
                    RunSpec(
                        fault=fault,
                        scaling=options.scaling,
                        workload=workload,
                        strategy=strategy,
                        compile=compile_mode,
                        nproc=per_node,
                        nnodes=nodes,
                        batch_size=_per_device_batch(options, default_batch, world_size),
                        threads_per_rank=threads_per_process(strategy, per_node, options.cores, options.max_world_size),
                        run_id=f"{name}-{label}-n{world_size}",
                        **{**common, "script": script_for(options.script, per_node, world_size, nodes)},
                    )
                )
    # Rounds: every configuration once, then every configuration again, so that a slow stretch of
    # the machine falls on all of them alike (X(1) pools the reference runs of every round).
    plan = [
        spec.replace(repeat=repeat, run_id=f"{spec.run_id}-r{repeat}" if options.repeat > 1 else spec.run_id)
        for repeat in range(1, options.repeat + 1)
        for spec in configurations
    ]
    for spec in plan:
        check_launchable(spec)  # before any run starts, not as one failed run after another
    return plan
