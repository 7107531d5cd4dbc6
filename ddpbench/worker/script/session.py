"""One rank's measurement of a user's script, driven from the step boundaries the observer sees.

The schedule is the worker's, counted in the script's optimizer steps:
- steps 1 .. warmup are never timed (the second one is counted by torch's FlopCounterMode, for MFU);
- at the end of warm-up every rank drains its device and meets the others at a barrier, and the
  timed window starts; it ends after `steps - warmup` more steps, at another barrier;
- then the checks (parameter digests, what the samplers handed out), gathered on rank 0, which
  writes the record at once: a later failure never loses the measurements;
- then, with profiling on, a profiled phase of wait + warmup + active steps of the script's own
  loop, one trace per rank, and the record again with the trace's overlap;
- then every rank stops at the same step boundary (StopScript), unless the script is to run to
  its end.
Barriers inside the optimizer's hook are safe: DDP keeps the ranks in lockstep, so every rank
reaches step k's hook, and nothing else of the script is waiting on a collective there.
"""

from __future__ import annotations

import os
import socket
import statistics
import time
from collections import Counter

import msgspec
import torch
import torch.distributed as dist

from ddpbench.analysis.metrics import run_metrics
from ddpbench.analysis.peaks import model_flops_utilisation
from ddpbench.config.spec import COMM_HOOKS, DDPKnobs, RunSpec
from ddpbench.host.cpu_denied import CpuCounters
from ddpbench.host.facts import host_facts
from ddpbench.records.schema import Check, Metrics, Overlap, Record, RunError, ScriptRun
from ddpbench.records.store import new_record, utc_now, write_record
from ddpbench.worker import checks, phases
from ddpbench.worker.clock import StepClock
from ddpbench.worker.environment import tf32_allowed, torch_facts, where_this_rank_ran
from ddpbench.worker.probe import process_probe
from ddpbench.worker.script.observer import Observer, StopScript
from ddpbench.worker.window_load import WindowLoad, add_ranks, start_up, window_cpu

NOT_REPLAYED = "not measured for a script: its loop is its own, so ddpbench cannot replay its steps under no_sync()"
NOT_RECOMPUTED = "a script's loss is its own, so ddpbench cannot recompute the local gradients"


class Session:
    def __init__(self, spec: RunSpec, observer: Observer, beat=None, counters: CpuCounters | None = None):
        self.spec, self.observer, self.script, self.beat = spec, observer, spec.script, beat
        self.counters = counters
        """The kernel's counters of this rank's CPU (built on the thread that runs the script)."""
        self.started_up: dict | None = None
        self.run_to_end = spec.script.run_to_end
        self.warmup = spec.warmup if spec.warmup is not None else 5
        self.started_at = utc_now()
        self.flops = None
        self.flops_per_sample: float | None = None
        self.conv_flops_share: float | None = None
        self.window_start = self.window_s = self.window_cpu_start = self.machine_load = None
        self.clock: StepClock | None = None
        self.record: Record | None = None
        self.profiler = None
        self.profiled_steps = 0
        self.done = False
        self.probe: dict = {}

    # -- the schedule ----------------------------------------------------------------------------
    def step_ended(self, steps: int) -> None:
        if self.done:
            return
        if steps == 1:
            self._first_step_done()
            self._probe("before")
            self._count_flops_start()
        elif steps == 2:
            self._count_flops_end()
        if steps == self.warmup:
            self._open_window()
        elif steps == self.spec.steps:
            self._close_window()
            if not self.spec.profile:
                self._stop()
            else:
                self._start_profiler()
        elif self.profiler is not None:
            self.profiler.step()
            self.profiled_steps += 1
            if self.profiled_steps == self.spec.profile_wait + self.spec.profile_warmup + self.spec.profile_active:
                self._end_profiler()
                self._stop()

    def _stop(self) -> None:
        self.done = True
        self.observer.uninstall()
        if not self.run_to_end:
            raise StopScript

    def _first_step_done(self) -> None:
        if self.beat is not None and dist.is_initialized():
            self.beat.watch_collectives(dist.distributed_c10d._get_default_group(), dist.get_backend())
            self.observer.beat = self.beat
            self.beat.phase = "warm-up"

    def _probe(self, when: str) -> None:
        """The process's own speed on fixed work, as the built-in workloads' processes time it: a
        slow process, not a slow script, shows here. Before: after the script's first step, so that
        the rest of its warm-up takes up what the probe moved (on a GPU, the allocator's cache it
        empties). After: once the window has closed. A probe that fails (a GPU the script has
        filled) leaves that reading out; the run and its measurements go on."""
        try:
            self.probe[when] = process_probe(self.observer.device(), self.counters)
        except Exception:
            if self.observer.device().type == "cuda":
                torch.cuda.empty_cache()

    def _count_flops_start(self) -> None:
        from torch.utils.flop_counter import FlopCounterMode

        try:
            self.flops = FlopCounterMode(display=False)
            self.flops.__enter__()
        except Exception:  # FLOPs stay unknown; the run goes on
            self.flops = None

    def _count_flops_end(self) -> None:
        if self.flops is None:
            return
        try:
            self.flops.__exit__(None, None, None)
            total = self.flops.get_total_flops()
            by_op = self.flops.get_flop_counts().get("Global", {})
            conv = sum(count for op, count in by_op.items() if "convolution" in str(op))
            samples = self.observer.samples_per_step[-1]
            if total and samples:
                self.flops_per_sample, self.conv_flops_share = total / samples, conv / total
        except Exception:
            pass
        self.flops = None

    def _edge(self) -> None:
        """Drain the device, then meet every rank: the window's edges are the same on all."""
        device = self.observer.device()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        dist.barrier()

    def _open_window(self) -> None:
        if self.beat is not None:
            self.beat.enter("timed")
        device = self.observer.device()
        # The script's own threads; its loader workers, if any, are not known here.
        self.load = WindowLoad(int(os.environ.get("LOCAL_RANK", 0)), device, [device], torch.get_num_threads(), 0)
        self.load.start()  # before the barrier: no part of any rank's window
        if self.counters is not None:
            self.counters.refresh()  # the script's loader workers and the collective library's threads exist now
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        self.started_up = start_up(self.spec.rank_start, local_rank, True)
        self.observer.digesting = False  # the warm-up's gradient digests are the check's; timed steps pay nothing
        self._edge()
        self.clock = StepClock(self.observer.device(), self.counters)
        self.observer.clock, self.observer.timing = self.clock, True
        self.window_start, self.window_cpu_start = time.perf_counter(), time.process_time()
        self.clock.mark()

    def _close_window(self) -> None:
        self.observer.timing = False
        if self.beat is not None:
            self.beat.where = "barrier"
        self._edge()
        self.window_s = time.perf_counter() - self.window_start
        window_cpu_s = time.process_time() - self.window_cpu_start
        self.machine_load = self.load.finish()
        self._probe("after")
        if self.beat is not None:
            self.beat.enter("checks")
        result = self._rank_result(window_cpu_s)
        gathered = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
        dist.gather_object(result, gathered, dst=0)
        if dist.get_rank() == 0:
            self.record = build_record(self.spec, self.observer, sorted(gathered, key=lambda r: r["rank"]), self)
            write_record(self.record, self.spec.out_dir)

    def _rank_result(self, window_cpu_s: float) -> dict:
        observer, clock = self.observer, self.clock
        timed = observer.samples_per_step[self.warmup :]
        data = clock.data_times_s()
        log = observer.sampler_log
        sampler = log.samplers[0] if log.samplers else None
        return {
            "rank": dist.get_rank(),
            "local_rank": int(os.environ.get("LOCAL_RANK", 0)),
            "hostname": socket.gethostname(),
            **where_this_rank_ran(observer.device()),
            "device": str(observer.device()),
            "threads": torch.get_num_threads(),
            "step_times_s": clock.step_times_s(),
            "data_wait_mean_s": statistics.fmean(data) if data else None,
            "data_wait_p50_s": statistics.median(data) if data else None,
            "window_cpu_s": window_cpu_s,
            "window_s": self.window_s,
            "machine_load": self.machine_load,
            "cpu": window_cpu(clock, self.counters),
            "start_up": self.started_up,
            "probe": self.probe,
            "param_digest": checks.parameter_digest(observer.ddp.module),
            # read after the window: the digests stayed on the device through the warm-up
            "gradient_digests": [digest.tolist() for digest in observer.gradient_digests],
            "unsynced_steps": observer.unsynced_steps,
            "digest_error": observer.digest_error,
            "samples_per_step": timed,
            "forwards_per_step": observer.forwards_per_step[self.warmup :],
            "sampler_passes": log.passes(sampler) if sampler is not None else None,
            "partial_passes": log.partial_passes(sampler) if sampler is not None else 0,
            "loader": loader_summary(observer, sampler),
            "dataset_length": len(sampler.dataset) if sampler is not None else None,
            "samplers": len(log.samplers),
            "precision": observer.precision or "fp32",
            "device_name": torch.cuda.get_device_name(observer.device()) if observer.device().type == "cuda" else None,
            "tf32_allowed": tf32_allowed() if observer.device().type == "cuda" else {"matmul": False, "conv": False},
            "ddp_models": observer.ddp_count,
            "token_shape": observer.token_shape,
            "eval_forwards": observer.eval_forwards,
            "eval_steps": sorted(observer.eval_steps),
        }

    def _start_profiler(self) -> None:
        from torch.profiler import ProfilerActivity, profile, schedule

        if self.beat is not None:
            self.beat.enter("overlap phases")
        activities = [ProfilerActivity.CPU]
        if self.observer.device().type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        spec = self.spec
        self.profiler = profile(
            activities=activities,
            schedule=schedule(wait=spec.profile_wait, warmup=spec.profile_warmup, active=spec.profile_active, repeat=1),
        )
        self.profiler.start()

    def abandon_profiler(self) -> None:
        """Stop a profiled phase the script did not finish; its trace is dropped."""
        profiler, self.profiler = self.profiler, None
        if profiler is not None:
            profiler.stop()

    def _end_profiler(self) -> None:
        profiler, self.profiler = self.profiler, None
        profiler.stop()
        rank = dist.get_rank()
        path = phases.trace_path(self.spec.out_dir, self.spec.run_id, rank)
        phases.export_trace(profiler, path)
        from ddpbench.analysis.traces import analyze_trace

        try:
            summary = analyze_trace(path).summary()
        except Exception as exc:  # a trace we cannot read must not lose the run's measurements
            summary = {"error": f"{type(exc).__name__}: {exc}"}
        found = {"rank": rank, "trace_path": path, "trace_summary": summary}
        gathered = [None] * dist.get_world_size() if rank == 0 else None
        dist.gather_object(found, gathered, dst=0)
        if rank == 0 and self.record is not None:
            found = sorted(gathered, key=lambda f: f["rank"])
            self.record.overlap = msgspec.convert(
                {
                    "trace": {
                        "paths": [f["trace_path"] for f in found],
                        "by_rank": [f["trace_summary"] for f in found],
                    },
                    "no_sync": None,
                    "reducer": None,
                },
                Overlap,
            )
            for entry, extra in zip(self.record.ranks, found):
                entry.trace_path = extra["trace_path"]
            failed = [(f["rank"], f["trace_summary"]["error"]) for f in found if f["trace_summary"].get("error")]
            if failed and self.record.error is None:
                self.record.error = RunError(
                    message="trace analysis failed: " + "; ".join(f"rank {r}: {m}" for r, m in failed),
                    failed_ranks=[r for r, _ in failed],
                )
            self.record.ended_at = utc_now()
            write_record(self.record, self.spec.out_dir)
        if self.beat is not None:
            self.beat.stop("done")


def per_rank_batch(results: list[dict]) -> int:
    """The samples one rank trains per step: the most common count over the timed steps."""
    counts = Counter(n for r in results for n in r["samples_per_step"])
    return counts.most_common(1)[0][0] if counts else 0


def script_knobs(observer: Observer) -> tuple[DDPKnobs, str | None]:
    """The script's DDP options as the record's knobs, and a note where its comm hook is none of
    ddpbench's own (the record then names it in the note, and the knobs say allreduce)."""
    seen = observer.knobs()
    note = None
    if seen["comm_hook"] not in COMM_HOOKS:
        note = f"the script registers its own comm hook {seen['comm_hook']!r}"
        seen["comm_hook"] = "allreduce"
    return DDPKnobs(**seen), note


def loader_summary(observer: Observer, sampler) -> dict | None:
    """The training loader as the checks need it. With a DistributedSampler, whose passes the
    checks read, its indices stay here: gathering both to rank 0 would double what it receives."""
    loader = observer.loader_log.busiest()
    if loader is not None and sampler is not None:
        loader = {**loader, "passes": [], "full": []}
    return loader


def loader_checks(loaders: list[dict], world_size: int) -> dict:
    """Shard and reshuffle checks from the indices each rank's DataLoader drew, whatever sampler
    chose them (Accelerate's shard wrappers, a framework's own sampler, a custom one)."""
    first = loaders[0]
    found = {"reshuffled_each_epoch": checks.loader_reshuffled(first["passes"], first["sampler"])}
    if first["dataset_length"] is None:
        reason = "the loader's dataset has no length to check its shards against"
        found.update({name: checks.verdict(None, reason) for name in ("shards_disjoint", "shards_cover_dataset")})
        return found
    batch = first["batch_size"] or 1
    drawn = [loader["passes"][0][1] if loader["passes"] else [] for loader in loaders]
    whole = all(loader["full"] and loader["full"][0] for loader in loaders)
    # Loaders that give every rank as many batches pad with repeats, at the end of a pass only: a
    # pass the ranks have not read to its end may repeat nothing, unless together they have drawn as
    # many indices as the dataset holds (their last batches read, the loader not yet asked again).
    padding = -first["dataset_length"] % (world_size * batch)
    if not whole and sum(map(len, drawn)) < first["dataset_length"]:
        padding = 0
    found.update(
        checks.shard_checks(
            drawn,
            first["dataset_length"],
            world_size,
            padding=padding,
            padder=f"padding to whole batches on every rank ({first['sampler']})"
            if padding
            else "a pass not yet at its end (loaders pad only at the end)",
            # a drop_last loader leaves the last incomplete batch of each rank out
            missing_allowed=world_size * batch - 1 if first["drop_last"] else 0,
        )
    )
    if not whole:
        # The indices drawn so far must not overlap; whether the shards cover the data needs a whole pass.
        found["shards_disjoint"]["details"]["whole_pass"] = False
        found["shards_cover_dataset"] = checks.verdict(
            None, "no full pass of the loader on every rank before the window closed"
        )
    return found


def units_per_sample(script, token_shape: list[int] | None) -> tuple[int, str | None]:
    """Units per sample and what was done about tokens: counted where asked for and the inputs are
    token ids, else said; never a silent guess."""
    if script.units_per_sample is not None:
        return script.units_per_sample, None
    tokens = token_shape[1] if token_shape else None
    if script.sample_unit == "tokens":
        if tokens:
            return tokens, (
                f"tokens counted from the inputs: the forward's first tensor is token ids of shape "
                f"{tuple(token_shape)}, {tokens} tokens per sample (--units-per-sample sets it)"
            )
        return 1, (
            "--sample-unit tokens without --units-per-sample, and the forward's first tensor is not token ids "
            "(an integer batch x tokens tensor): counted 1 per sample; give --units-per-sample"
        )
    if tokens and script.sample_unit == "samples":
        return 1, (
            f"the forward's first tensor looks like token ids {tuple(token_shape)}: throughput counts samples "
            f"(sequences); --sample-unit tokens counts {tokens} tokens per sample"
        )
    return 1, None


def build_record(spec: RunSpec, observer: Observer, results: list[dict], session: Session) -> Record:
    first = results[0]
    batch = per_rank_batch(results)
    knobs, hook_note = script_knobs(observer)
    spec = spec.replace(batch_size=batch, precision=first["precision"], ddp=knobs)
    step_times = [r["step_times_s"] for r in results]
    window_s = max(r["window_s"] for r in results)
    units, unit_note = units_per_sample(session.script, first["token_shape"])
    metrics = run_metrics(step_times, window_s, batch, spec.world_size, units)
    metrics.update(
        {
            "sample_unit": session.script.sample_unit,
            "units_per_sample": units,
            "flops_per_sample": session.flops_per_sample,
        }
    )
    utilisation = model_flops_utilisation(
        session.flops_per_sample,
        metrics["throughput_samples_per_s_per_device"],
        first["device_name"],
        spec.precision,
        matmul_tf32=first["tf32_allowed"]["matmul"],
        conv_tf32=first["tf32_allowed"]["conv"],
        conv_flops_share=session.conv_flops_share,
    )
    metrics["mfu"], metrics["mfu_basis"] = utilisation["mfu"], utilisation["basis"]

    run_checks = {"replicas_in_sync": checks.replicas_in_sync([r["param_digest"] for r in results])}
    run_checks["gradients_averaged"] = checks.verdict(None, NOT_RECOMPUTED)
    unreadable = next((f"rank {r['rank']}: {r['digest_error']}" for r in results if r["digest_error"]), None)
    run_checks["gradients_in_sync"] = (
        checks.verdict(None, f"the gradients could not be digested ({unreadable})")
        if unreadable
        else checks.gradients_in_sync(
            [r["gradient_digests"] for r in results],
            [r["unsynced_steps"] for r in results],
            observer.knobs()["comm_hook"] if hook_note else None,
        )
    )
    repeats = first["loader"]["repeats"] if first["loader"] else None
    if all(r["sampler_passes"] for r in results):
        first_pass = [r["sampler_passes"][0][1] for r in results]
        run_checks.update(checks.shard_checks(first_pass, first["dataset_length"], spec.world_size))
        run_checks["reshuffled_each_epoch"] = checks.reshuffled_each_epoch(first["sampler_passes"])
    elif all(r["loader"] for r in results):
        run_checks.update(loader_checks([r["loader"] for r in results], spec.world_size))
    else:
        reason = "the script iterates no DataLoader over a map-style dataset (it makes its own batches)"
        for name in ("shards_disjoint", "shards_cover_dataset", "reshuffled_each_epoch"):
            run_checks[name] = checks.verdict(None, reason)
    if repeats:  # repeated augmentation: ranks overlap, and an epoch reads a fraction of the data, by design
        for name in ("shards_disjoint", "shards_cover_dataset"):
            run_checks[name] = checks.verdict(None, f"{repeats} (repeated augmentation): not a sharding of the data")

    record = new_record(spec, "ok", env={**host_facts(), **torch_facts()})
    record.started_at = session.started_at
    record.metrics = msgspec.convert(metrics, Metrics)
    record.checks = msgspec.convert(run_checks, dict[str, Check])
    record.overlap = msgspec.convert({"trace": None, "no_sync": None, "reducer": None}, Overlap)
    add_ranks(record, results)
    notes = [f"no_sync and reducer estimates {NOT_REPLAYED}"] + ([unit_note] if unit_note else [])
    if hook_note:
        notes.append(hook_note)
    if first["partial_passes"]:
        notes.append(
            f"{first['partial_passes']} pass(es) over the DistributedSampler were left before their end (a peek "
            "at one batch, a loop that broke off): not counted as epochs by the checks"
        )
    for result in results:
        if result["eval_forwards"]:
            steps = result["eval_steps"]
            shown = ", ".join(map(str, steps[:8])) + (", ..." if len(steps) > 8 else "")
            notes.append(
                f"rank {result['rank']} ran {result['eval_forwards']} evaluation forward(s) through the DDP model "
                f"(eval(), no_grad or inference_mode) after optimizer steps {shown}: not counted as training batch"
            )
    if first["ddp_models"] > 1:
        notes.append(f"the script built {first['ddp_models']} DDP models; the first is the one measured")
    if len({n for r in results for n in r["samples_per_step"]}) > 1:
        notes.append("the samples per step varied; the batch is the most common count")
    record.script = ScriptRun(steps_seen=observer.steps_done, notes=notes)
    return record
