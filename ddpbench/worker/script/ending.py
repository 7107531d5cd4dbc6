"""What a rank does once the user's script has returned: the script either was stopped at a step
boundary after the measurements, ran to its end after them, or ended before ddpbench saw what it
needs — which is said in one line naming what was missing."""

from __future__ import annotations

import os

import msgspec
import torch.distributed as dist

from ddpbench.config.spec import RunSpec
from ddpbench.host.facts import host_facts
from ddpbench.records.schema import RankResult, RunError, ScriptRun
from ddpbench.records.store import new_record, utc_now, write_record
from ddpbench.worker.script.observer import Observer, ScriptNotMeasurable


def end_of_script(spec: RunSpec, observer: Observer, session, stopped: bool) -> int:
    try:
        if stopped or session.done:
            return 0
        if observer.ddp is None:
            raise ScriptNotMeasurable(
                "the script never wrapped a model in DistributedDataParallel: --script measures DDP training"
            )
        if observer.steps_done == 0:
            raise ScriptNotMeasurable(
                "the script never called step() on an optimizer holding the DDP model's parameters: "
                "ddpbench counts steps at the optimizer"
            )
        if session.window_s is not None:
            # The script ended during the profiled phase: the measurements are on disk already;
            # only the trace view is missing, and the record says why. A profiler left running
            # at exit brings the process down (SIGSEGV in its teardown): stop it first.
            session.abandon_profiler()
            if session.record is not None:  # rank 0
                session.record.script.notes.append(
                    f"the script ended after {observer.steps_done} optimizer steps, inside the profiled phase: "
                    "no trace (give it more steps, or --no-profile)"
                )
                write_record(session.record, spec.out_dir)
            return 0
        if int(os.environ.get("RANK", 0)) == 0:
            write_record(ended_early(spec, observer, session), spec.out_dir)
        return 0
    finally:
        session.beat.close()  # its thread reads the group's sequence number: not while the group goes
        if dist.is_initialized():
            dist.destroy_process_group()


def ended_early(spec: RunSpec, observer: Observer, session):
    """The record of a script that ended before the window closed: the steps it saw, and why."""
    warmup = session.warmup
    record = new_record(spec, "failed", env=host_facts())
    record.started_at, record.ended_at = session.started_at, utc_now()
    record.error = RunError(
        message=f"the script ended after {observer.steps_done} optimizer steps, before the {spec.steps} "
        f"ddpbench needs ({warmup} warm-up + {spec.steps - warmup} timed): lower --steps or let the "
        "script train longer",
        failed_ranks=[],
    )
    if session.clock is not None and len(session.clock.marks) > 1:
        record.ranks = [
            msgspec.convert(
                {
                    "rank": 0,
                    "local_rank": 0,
                    "hostname": "",
                    "device": str(observer.device()),
                    "threads": 0,
                    "step_times_s": session.clock.step_times_s(),
                },
                RankResult,
            )
        ]
    record.script = ScriptRun(steps_seen=observer.steps_done)
    return record
