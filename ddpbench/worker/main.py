"""The process that trains, one per device: `python -m ddpbench.worker --spec-json JSON`.

Under torchrun (strategy ddp) it does DDP the textbook way: init_process_group (nccl on GPUs,
gloo on CPU), device from LOCAL_RANK, DDP(model, device_ids=[local_rank]), a DistributedSampler
with set_epoch every epoch; fsdp2 and replicate are launched the same way and wrap the model
their own way (`ddpbench.worker.sharding`). Started plainly (strategy local) it runs the same loop
on one device with no wrapper. Phases: (compile warm-up, with --compile) -> warm-up (never
timed) -> timed window -> checks -> gather to rank 0, which alone writes the record.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import sys
import time
from datetime import timedelta

import msgspec
import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record as record_errors_for_torchrun
from torch.utils.data.dataloader import default_collate

from ddpbench.analysis.metrics import run_metrics
from ddpbench.analysis.peaks import model_flops_utilisation
from ddpbench.config.spec import RunSpec
from ddpbench.host.cpu_denied import CpuCounters, name_this_rank
from ddpbench.host.facts import host_facts
from ddpbench.host.own_tree import check_own_tree
from ddpbench.records.schema import (
    Check,
    CompileStats,
    HostSync,
    Metrics,
    Overlap,
    Record,
    RunError,
)
from ddpbench.records.store import new_record, utc_now, write_record
from ddpbench.worker import checks, compiling, model_state, phases, sharding
from ddpbench.worker.ablation import ablation_rounds
from ddpbench.worker.clock import StepClock
from ddpbench.worker.data import RecordingSampler, endless_batches, make_loader
from ddpbench.worker.environment import tf32_allowed, torch_facts, where_this_rank_ran
from ddpbench.worker.faults import install_in_step_fault, maybe_inject
from ddpbench.worker.grad_timeline import timeline_phase, timeline_record
from ddpbench.worker.heartbeat import HEARTBEAT_ENV, Heartbeat
from ddpbench.worker.memory import PeakMemory
from ddpbench.worker.probe import process_probe
from ddpbench.worker.training import (
    UNTRACKED,
    flops_per_sample,
    host_synchronisation,
    make_precision,
    to_device,
    train_step,
    wrap_data_parallel,
    wrap_ddp,
)
from ddpbench.worker.window_load import WindowLoad, add_ranks, start_up, window_cpu
from ddpbench.worker.workload import build_workload


class Rank:
    """Where this process sits in the job: from torchrun's environment variables under ddp; a
    lone process otherwise."""

    def __init__(self, spec: RunSpec):
        self.distributed = spec.launched_by_torchrun
        self.data_parallel_devices = spec.nproc if spec.strategy == "dp" else 1
        if self.distributed:
            if "RANK" not in os.environ:
                raise RuntimeError(f"strategy {spec.strategy} must be launched by torchrun (RANK is not set)")
            self.rank = int(os.environ["RANK"])
            self.local_rank = int(os.environ.get("LOCAL_RANK", 0))
            self.world_size = int(os.environ["WORLD_SIZE"])
        else:
            # local and dp are one process of their own: RANK, WORLD_SIZE or LOCAL_RANK left by a
            # surrounding launcher (a torchrun or SLURM job running ddpbench) describe that job.
            self.rank, self.local_rank, self.world_size = 0, 0, 1
        if spec.device == "cuda":
            # One process per GPU: the device comes from LOCAL_RANK, set before any CUDA work.
            # (DataParallel's one process uses LOCAL_RANK 0 = its first device, where outputs gather.)
            torch.cuda.set_device(self.local_rank)
            self.device = torch.device("cuda", self.local_rank)
            self.devices = [torch.device("cuda", self.local_rank + i) for i in range(self.data_parallel_devices)]
        else:
            self.device = torch.device("cpu")
            self.devices = [self.device]

    @property
    def is_writer(self) -> bool:
        return self.rank == 0


def sync_device(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def window_edge(rank: Rank) -> None:
    """Align all ranks at a window edge. Sync point: drain queued GPU work first so the window's
    wall time covers exactly the timed steps, then a barrier so every rank starts and ends together."""
    sync_device(rank.device)
    if rank.distributed:
        dist.barrier()


def progress_bar(spec: RunSpec, rank: Rank):
    from tqdm import tqdm

    # Rank 0 only, and only when the launcher saw a terminal: no bar noise in logs and CI.
    show = rank.is_writer and os.environ.get("DDPBENCH_PROGRESS") == "1"
    return tqdm(
        total=spec.steps,
        desc=f"{spec.strategy} {spec.workload} x{spec.world_size}",
        unit="step",
        mininterval=0.5,
        disable=not show,
        file=sys.stderr,
        leave=False,
    )


class Trainer:
    """One rank's model, optimizer and data, and the step that every phase runs."""

    def __init__(self, spec: RunSpec, rank: Rank):
        torch.set_num_threads(spec.threads_per_rank)
        torch.manual_seed(spec.seed)  # same initial weights everywhere; DDP also broadcasts rank 0's
        self.workload = build_workload(spec.workload, spec.size, spec.data_dir)
        check_own_tree()  # one commit of the user's repository: its code, not the checkout's
        self.spec = spec.replace(batch_size=spec.batch_size or self.workload.batch_size)
        self.device = rank.device
        # DataParallel takes the global batch in one forward and splits it across its devices.
        loader_batch = self.spec.batch_size * rank.data_parallel_devices
        # One epoch holds exactly the warm-up and the timed steps, as in a long training epoch: no
        # epoch boundary (a new loader iterator, set_epoch, a reshuffle) inside the timed window.
        # The first batch after the window starts the second epoch, so set_epoch is still
        # exercised and checked, outside the window. (A real data folder has its own length.)
        self.dataset = self.workload.make_dataset(loader_batch * rank.world_size * spec.steps)
        loader, self.sampler = make_loader(
            self.dataset,
            loader_batch,
            rank.world_size,
            rank.rank,
            spec.seed,
            spec.num_workers,
            pin_memory=rank.device.type == "cuda",
            sampler_class=RecordingSampler,
        )
        model = self.workload.model.to(rank.device)
        flops_inputs, flops_targets = to_device(default_collate([self.dataset[0], self.dataset[1]]), rank.device)
        self.flops_per_sample, self.conv_flops_share = flops_per_sample(
            model, self.workload.loss, flops_inputs, flops_targets
        )
        compiling.prepare(spec.compile)  # before DDP is built: it reads the reducer mode then
        units = None  # fsdp2's shard units: compiled one by one
        if spec.strategy == "ddp":
            model = wrap_ddp(model, rank.device, spec.ddp)
        elif spec.strategy == "dp":
            model = wrap_data_parallel(model, rank.device, spec.nproc)
        elif spec.strategy == "fsdp2":
            units = sharding.shard_units(model, self.workload.shard_units)
            model = sharding.wrap_fsdp2(model, units)
        elif spec.strategy == "replicate":
            model = sharding.wrap_replicate(model, rank.device, spec.ddp)
        # The DDP whose reducer holds gradient buckets (replicate runs one too): model state counts them.
        self.reducer_owner = None
        if spec.strategy == "ddp":
            self.reducer_owner = model
        elif spec.strategy == "replicate":
            self.reducer_owner = sharding.replicate_ddp(model)
        # The module whose parameters train: inside DDP's wrapper, or the model itself (fsdp2 and
        # replicate attach to it; local has none).
        self.module = model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model
        self.model = compiling.compile_model(model, spec.compile, units)
        self.step_context = compiling.step_context(spec.compile)
        self.optimizer = self.workload.make_optimizer(model.parameters())
        self.precision = make_precision(spec.precision, rank.device)
        self.host_synchronisation = host_synchronisation(
            spec.strategy, rank.device, spec.warmup, self.precision, self.optimizer
        )
        self.epochs_seen: list[int] = []
        self.batches = endless_batches(loader, self.sampler, self.epochs_seen)

        self.extra_work_units = 0  # --slowdown: real matrix products in every step after the warm-up
        self.progress = UNTRACKED  # the heartbeat, once main() hands it over

    def step_on(self, batch) -> torch.Tensor:
        return self.step_with(self.model, batch, self.step_context)

    def planted_work(self):
        """--slowdown's work for one step (None without it): the same in every kind of step."""
        if not self.extra_work_units:
            return None
        return lambda: extra_work(self.extra_work_units, self.device)

    def calibrate_slowdown(self, fraction: float, warmup_step_s: list[float]) -> None:
        """Size the extra work to `fraction` of a warm-up step, measured here, on this device."""
        if fraction <= 0 or not warmup_step_s:
            return
        extra_work(20, self.device)  # warm the kernel up
        sync_device(self.device)
        started = time.perf_counter()
        extra_work(100, self.device)
        sync_device(self.device)
        per_unit_s = (time.perf_counter() - started) / 100
        self.extra_work_units = max(1, round(fraction * statistics.median(warmup_step_s) / per_unit_s))

    def step(self) -> torch.Tensor:
        return self.step_on(next(self.batches))

    def fixed_batch(self):
        """One batch from the dataset's first samples, drawn outside the loader (its epochs stay
        whole): the compile warm-up steps it until nothing recompiles."""
        return default_collate([self.dataset[i] for i in range(min(len(self.dataset), self.spec.batch_size))])

    def reference_model(self) -> torch.nn.Module:
        """A plain copy of the workload's model on this device, for the gradient check of fsdp2 and
        replicate (the check loads the trained parameters into it)."""
        return build_workload(self.spec.workload, self.spec.size, self.spec.data_dir).model.to(self.device)

    def step_with(self, model, batch, context=contextlib.nullcontext) -> torch.Tensor:
        """One step through `model`: the run's own (`step_on`), or another wrapper of the same
        module, or none (the in-process ablation's DDP on one rank and its unwrapped module); --slowdown's work in
        every one alike."""
        inputs, targets = to_device(batch, self.device)
        return train_step(
            model,
            self.optimizer,
            self.workload.loss,
            self.precision,
            inputs,
            targets,
            self.progress,
            context,
            self.planted_work(),
        )


EXTRA_WORK_SIZE = 128


def extra_work(units: int, device: torch.device) -> None:
    """Real work that takes time the way training does: matrix products on the training device."""
    matrix = torch.full((EXTRA_WORK_SIZE, EXTRA_WORK_SIZE), 1.0 / EXTRA_WORK_SIZE, device=device)
    for _ in range(units):
        matrix = matrix @ matrix


def measure(
    spec: RunSpec, rank: Rank, trainer: Trainer, beat: Heartbeat, counters: CpuCounters
) -> tuple[dict, dict, list]:
    """Warm-up, the timed window, and the checks. Returns this rank's results, what all ranks
    share, and the first timed batches (for the no_sync replay)."""
    clock = StepClock(rank.device, counters)
    # The process's own speed on fixed work, before anything of the workload's runs (and again
    # after the window): a slow process, not slow code, shows here.
    probe = {"before": process_probe(rank.device, counters)}
    memory = PeakMemory(rank.devices)
    replay: list = []
    compiled = None
    if spec.compile != "off":
        memory.start("compile")
        beat.enter("compile warm-up", batch_size=spec.batch_size)
        batch = trainer.fixed_batch()
        compiled = compiling.warm_until_stable(
            lambda: trainer.step_on(batch), lambda: sync_device(rank.device), spec.compile
        )
        memory.end()
    with progress_bar(spec, rank) as bar:
        memory.start("warm-up")
        beat.enter("warm-up", batch_size=spec.batch_size)
        warmup_step_s = []
        unsharded_bytes = None
        for step in range(spec.warmup):
            beat.step, beat.where = step, "data"
            if spec.fault:
                maybe_inject(spec.fault, rank.rank, step)
            started = time.perf_counter()
            batch = next(trainer.batches)
            if spec.strategy == "fsdp2" and step == spec.warmup - 1:
                # The unsharded parameters and gradients are held only inside a step: measured on the
                # last warm-up step, never on a timed one.
                with model_state.UnshardedPeak(trainer.module) as unsharded:
                    trainer.step_on(batch)
                unsharded_bytes = unsharded.peak_bytes
            else:
                trainer.step_on(batch)
            if spec.slowdown:
                sync_device(rank.device)  # warm-up only: a wall time per step to size --slowdown's work
                warmup_step_s.append(time.perf_counter() - started)
            bar.update()
        trainer.calibrate_slowdown(spec.slowdown, warmup_step_s[1:] or warmup_step_s)
        beat.where = "barrier"
        sync_device(rank.device)  # warm-up's GPU work is done: the timed peak starts clean
        memory.end()
        memory.start("timed")
        beat.enter("timed")  # writes its file now, not inside the first timed step
        load = WindowLoad(rank.local_rank, rank.device, rank.devices, spec.threads_per_rank, spec.num_workers)
        load.start()  # before the barrier: the reading is no part of any rank's window
        counters.refresh()  # the DataLoader's workers and the collective library's threads exist now
        started_up = start_up(spec.rank_start, rank.local_rank, rank.distributed)
        before_window = compiling.counts() if compiled is not None else None
        # Nothing between this barrier and the first mark: the ranks' windows start together.
        window_edge(rank)
        window_start = time.perf_counter()
        window_cpu_start = time.process_time()
        clock.mark()
        for step in range(spec.warmup, spec.steps):
            # Plain stores: the heartbeat thread does the reading and writing (train_step sets
            # where = forward, backward, optimizer).
            beat.step, beat.where = step, "data"
            if spec.fault:
                maybe_inject(spec.fault, rank.rank, step)
            batch = next(trainer.batches)
            # No sync: on GPUs an event on the current stream. It precedes the copy to the device,
            # which step_on makes (to_device): the wait is for the loader alone, the copy is step work.
            clock.mark_data()
            if len(replay) < spec.no_sync_replays:
                replay.append(batch)
            loss = trainer.step_on(batch)
            clock.mark()
            bar.update()
        beat.where = "barrier"
        window_edge(rank)
        window_s = time.perf_counter() - window_start
        window_cpu_s = time.process_time() - window_cpu_start
        machine = load.finish()
        timed_memory = memory.end()
        device_memory = memory.device_used()  # NVML, after the closing barrier: in no timed step
    probe["after"] = process_probe(rank.device, counters)
    if compiled is not None:
        # Compiles in the window would put compile time into its step times: the record says how many.
        compiled["recompiles_in_window"] = compiling.compiled_between(before_window, compiling.counts())

    memory.start("checks")
    beat.enter("checks")
    # Starts the second epoch (after the window): the reshuffle check compares it with the first.
    after_window = next(trainer.batches)
    result = {
        "rank": rank.rank,
        "local_rank": rank.local_rank,
        "hostname": socket.gethostname(),
        **where_this_rank_ran(rank.device),
        "device": str(rank.device),
        "threads": torch.get_num_threads(),
        "probe": probe,
        "step_times_s": clock.step_times_s(),
        **data_wait(clock.data_times_s()),
        "window_cpu_s": window_cpu_s,
        "window_s": window_s,
        "machine_load": machine,
        "start_up": started_up,
        "cpu": window_cpu(clock, counters),
        "final_loss": float(loss),  # sync point, after the window
        "epochs_started": len(trainer.epochs_seen),
    }
    state = model_state.state_bytes(trainer.module, trainer.optimizer, trainer.reducer_owner, unsharded_bytes)
    result["model_state_bytes"] = state.pop("total")
    result["model_state_by_part"] = state
    # DDP's check needs other ranks (one rank's gradient is its own mean); the others' compare with
    # a plain copy of the model, which one rank can do.
    if rank.distributed and (rank.world_size > 1 or spec.strategy != "ddp"):
        inputs, targets = to_device(after_window, rank.device)
        if spec.strategy == "ddp":
            result["gradients_averaged"] = checks.gradients_averaged(
                trainer.model,
                inputs,
                targets,
                trainer.workload.loss,
                rank.world_size,
                spec.ddp.comm_hook,
                trainer.step_context,
            )
        else:
            result["gradients_averaged"] = checks.gradients_match_reference(
                trainer.module,
                trainer.model,
                trainer.reference_model(),
                inputs,
                targets,
                trainer.workload.loss,
                rank.world_size,
                trainer.step_context,
                spec.ddp.comm_hook if spec.uses_ddp_knobs else "allreduce",
            )
    if spec.strategy == "fsdp2":
        result["shard_layout"] = sharding.shard_layout(trainer.module)
    # fsdp2 has no replicas to compare: gathering its whole model for a digest would cost memory for nothing
    result["param_digest"] = None if spec.strategy == "fsdp2" else checks.parameter_digest(trainer.module)
    result["sampler_passes"] = trainer.sampler.passes
    sync_device(rank.device)
    memory.end()
    result["peak_memory_bytes"] = timed_memory["peak_bytes"]  # the timed window, largest device
    result["peak_memory_kind"] = timed_memory["kind"]
    result["peak_memory_bytes_by_device"] = timed_memory["by_device"]
    result["peak_memory_reserved_bytes"] = timed_memory.get("reserved_bytes")
    result["peak_memory_by_phase"] = memory.by_phase
    result.update(device_memory)
    shared = {
        "window_s": window_s,
        "dataset_length": len(trainer.dataset),
        "host_synchronisation": trainer.host_synchronisation,
        "device_name": torch.cuda.get_device_name(rank.device) if rank.device.type == "cuda" else None,
        "tf32_allowed": tf32_allowed() if rank.device.type == "cuda" else {"matmul": False, "conv": False},
        "flops_per_sample": trainer.flops_per_sample,
        "conv_flops_share": trainer.conv_flops_share,
        "sample_unit": trainer.workload.sample_unit,
        "units_per_sample": trainer.workload.units_per_sample,
        "compile": compiled,
    }
    return result, shared, replay


def data_wait(data_times_s: list[float]) -> dict:
    """The record's summary of a rank's data waits: the per-step list stays here (1,024 ranks'
    lists would swell the record)."""
    if not data_times_s:
        return {"data_wait_mean_s": None, "data_wait_p50_s": None}
    return {"data_wait_mean_s": statistics.fmean(data_times_s), "data_wait_p50_s": statistics.median(data_times_s)}


def overlap_phases(spec: RunSpec, rank: Rank, trainer: Trainer, replay: list, counters: CpuCounters) -> dict:
    """The profiled phase, then the replay with and without all-reduce and DDP's reducer timers
    over the same batches (last: no_sync lets replicas drift apart)."""
    found: dict = {"rank": rank.rank}
    if spec.profile:
        path = phases.trace_path(spec.out_dir, spec.run_id, rank.rank)
        found["trace_path"] = phases.profiled_phase(
            trainer.step, rank.device, spec.profile_wait, spec.profile_warmup, spec.profile_active, path
        )
        found["trace_summary"] = summarize_own_trace(path)
    if replay:
        found["replay_step_times_s"], found["no_sync_step_times_s"] = phases.replay_phase(
            trainer.model, trainer.step_on, replay, rank.device
        )
        found["reducer"] = phases.reducer_phase(trainer.model, trainer.step_on, replay)
    if spec.profile and ablation_applies(spec):  # last: like no_sync, it lets replicas drift apart
        solo = None
        if rank.world_size > 1:
            # DDP over a group of this rank alone, same module and knobs: every step of DDP's own
            # work (copies into and out of buckets, the hook's casts, finalizing) without the
            # network. new_group is collective: every rank creates every rank's group, in order.
            alone_groups = [dist.new_group([other]) for other in range(rank.world_size)]
            solo = wrap_ddp(trainer.model.module, rank.device, spec.ddp, process_group=alone_groups[rank.rank])
        # And the same module with no wrapper at all (the optimizer holds its very parameters):
        # the ablation's first two steps, alone and with every rank at once.
        unwrapped = trainer.model.module
        found["timeline"] = timeline_phase(
            trainer.model,
            trainer.optimizer,
            trainer.step_on,
            trainer.batches,
            rank.device,
            ablation_rounds(spec.steps - spec.warmup),
            rank.rank,
            rank.world_size,
            solo_step_on=None if solo is None else (lambda batch: trainer.step_with(solo, batch)),
            unwrapped_step_on=lambda batch: trainer.step_with(unwrapped, batch),
            counters=counters,
        )
    return found


def ablation_applies(spec: RunSpec) -> bool:
    """The gradient timeline and its in-process ablation rebuild eager DDP around the same module (DDP
    on one rank, no wrapper); compiled and FSDP2/replicate runs have no such steps (their records say
    why)."""
    return spec.strategy == "ddp" and spec.compile == "off"


def summarize_own_trace(path: str) -> dict:
    """Overlap from this rank's trace, analysed right here so the record carries it."""
    from ddpbench.analysis.traces import analyze_trace

    try:
        return analyze_trace(path).summary()
    except Exception as exc:  # a trace we cannot read must not lose the run's measurements
        return {"error": f"{type(exc).__name__}: {exc}"}


def gather_to_writer(result: dict, rank: Rank) -> list[dict]:
    if not rank.distributed:
        return [result]
    gathered = [None] * rank.world_size if rank.is_writer else None
    dist.gather_object(result, gathered, dst=0)
    return gathered


def build_record(spec: RunSpec, results: list[dict], shared: dict, started_at: str) -> Record:
    step_times = [r["step_times_s"] for r in results]
    # The job's window is the longest rank's own: ranks leave the opening barrier a fraction of a
    # millisecond apart, so only each rank's own window is sure to hold all of its timed steps.
    window_s = max([r.get("window_s") or 0.0 for r in results] + [shared["window_s"]])
    metrics = run_metrics(step_times, window_s, spec.batch_size, spec.world_size, shared["units_per_sample"])
    metrics.update({key: shared[key] for key in ("sample_unit", "units_per_sample", "flops_per_sample")})
    metrics["final_loss"] = results[0]["final_loss"]
    utilisation = model_flops_utilisation(
        shared["flops_per_sample"],
        metrics["throughput_samples_per_s_per_device"],
        shared["device_name"],
        spec.precision,
        matmul_tf32=shared["tf32_allowed"]["matmul"],
        conv_tf32=shared["tf32_allowed"]["conv"],
        conv_flops_share=shared["conv_flops_share"],
    )
    metrics["mfu"], metrics["mfu_basis"] = utilisation["mfu"], utilisation["basis"]

    first_pass = [r["sampler_passes"][0][1] for r in results]
    run_checks = checks.shard_checks(first_pass, shared["dataset_length"], spec.world_size)
    run_checks["reshuffled_each_epoch"] = checks.reshuffled_each_epoch(results[0]["sampler_passes"])
    if spec.strategy == "fsdp2":
        run_checks["parameters_sharded"] = checks.parameters_sharded([r["shard_layout"] for r in results])
        run_checks["replicas_in_sync"] = checks.no_replicas()
    elif spec.launched_by_torchrun:
        run_checks["replicas_in_sync"] = checks.replicas_in_sync([r["param_digest"] for r in results])
    if spec.launched_by_torchrun:
        # DDP's check compares the ranks' gradients: nothing to compare at one rank. fsdp2's and
        # replicate's compare the strategy's gradient with a plain copy's, which one rank can do
        # (compiled or sharded code that computes a wrong gradient fails it there too).
        run_checks["gradients_averaged"] = (
            checks.one_rank()
            if spec.world_size == 1 and spec.strategy == "ddp"
            else checks.all_ranks([r["gradients_averaged"] for r in results], worst="relative_error")
        )

    record = new_record(spec, "ok", env={**host_facts(), **torch_facts()})
    record.started_at = started_at
    record.metrics = msgspec.convert(metrics, Metrics)
    record.checks = msgspec.convert(run_checks, dict[str, Check])
    record.host_sync = msgspec.convert(shared["host_synchronisation"], HostSync)
    add_ranks(record, results)
    record.compile = msgspec.convert(shared["compile"], CompileStats | None)
    record.overlap = overlap_estimates(spec, results, None)
    return record


def overlap_estimates(spec: RunSpec, results: list[dict], found: list[dict] | None) -> Overlap:
    """The three views of communication overlap, per rank, side by side. `found` holds what the
    overlap phases measured; None while they have not run yet."""
    estimates: dict = {"trace": None, "no_sync": None, "reducer": None}
    if found is not None:
        found = sorted(found, key=lambda f: f["rank"])
        if spec.profile:
            estimates["trace"] = {
                "paths": [f["trace_path"] for f in found],
                "by_rank": [f["trace_summary"] for f in found],
            }
        if spec.strategy == "ddp" and spec.no_sync_replays:
            by_rank = [phases.exposed_from_no_sync(f["replay_step_times_s"], f["no_sync_step_times_s"]) for f in found]
            estimates["no_sync"] = {
                "by_rank": by_rank,
                "method": phases.NO_SYNC_METHOD,
                "exposed_comm_s_max": max(e["exposed_comm_s"] for e in by_rank),
            }
            estimates["reducer"] = {
                "by_rank": [f["reducer"] for f in found],
                "note": "DDP reducer timers over the replayed steps; their overlap runs from the "
                "first all-reduce's start to backward's end, not a true intersection",
            }
    return msgspec.convert(estimates, Overlap)


def add_overlap(record: Record, spec: RunSpec, results: list[dict], found: list[dict]) -> None:
    record.overlap = overlap_estimates(spec, results, found)
    failed = [(f["rank"], f["trace_summary"]["error"]) for f in found if (f.get("trace_summary") or {}).get("error")]
    if failed and record.error is None:
        # The measurements stand; the run still says (and exits 1) that its trace view is missing.
        record.error = RunError(
            message="trace analysis failed: "
            + "; ".join(f"rank {rank}: {message}" for rank, message in sorted(failed)),
            failed_ranks=sorted(r for r, _ in failed),
        )
    record.ended_at = utc_now()
    by_rank = {f["rank"]: f for f in found}
    for entry in record.ranks:
        extra = by_rank[entry.rank]
        entry.trace_path = extra.get("trace_path")
        entry.no_sync_step_times_s = extra.get("no_sync_step_times_s")
        entry.replay_step_times_s = extra.get("replay_step_times_s")
    record.timeline = timeline_record(found)


@record_errors_for_torchrun
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--spec-json", required=True, help="the RunSpec as JSON (written by ddpbench run)")
    spec = RunSpec.from_dict(json.loads(parser.parse_args(argv).spec_json))
    started_at = utc_now()
    rank = Rank(spec)
    name_this_rank(rank.rank)
    # Evidence is dumped when nothing moved for half the process-group timeout: before the
    # timeout tears the run down, and long enough that a slow step is not mistaken for a hang.
    beat = Heartbeat(
        os.environ.get(HEARTBEAT_ENV), rank.rank, stall_after_s=spec.pg_timeout_s / 2 if rank.distributed else None
    )
    if rank.distributed:
        # device_id binds NCCL to this rank's GPU: communicators start eagerly and barriers know
        # their device (without it every NCCL barrier warns that it guesses the device).
        device_id = rank.device if spec.backend == "nccl" else None
        dist.init_process_group(backend=spec.backend, timeout=timedelta(seconds=spec.pg_timeout_s), device_id=device_id)
        beat.watch_collectives(dist.distributed_c10d._get_default_group(), spec.backend)
    try:
        trainer = Trainer(spec, rank)
        spec = trainer.spec
        trainer.progress = beat
        install_in_step_fault(spec.fault, rank.rank, trainer, beat)
        # Built here, on the training thread: the kernel's counters it reads are this thread's.
        counters = CpuCounters()
        result, shared, replay = measure(spec, rank, trainer, beat, counters)
        results = sorted(gather_to_writer(result, rank) or [], key=lambda r: r["rank"])
        if rank.is_writer:  # only rank 0 writes files (and each rank its own trace)
            record = build_record(spec, results, shared, started_at)
            # On disk before the overlap phases: should they fail, the measurements are kept.
            write_record(record, spec.out_dir)
        beat.enter("overlap phases")
        found = gather_to_writer(overlap_phases(spec, rank, trainer, replay, counters), rank)
        if rank.is_writer:
            add_overlap(record, spec, results, found)
            write_record(record, spec.out_dir)
        beat.stop("done")
    finally:
        beat.close()  # its thread reads the group's sequence number: not while the group goes
        if spec.compile != "off":
            # Compiled autograd's traced collectives keep state that aborts the process
            # ("terminate called without an active exception") when the group goes first.
            torch._dynamo.reset()
        if rank.distributed:
            dist.destroy_process_group()
    return 0
