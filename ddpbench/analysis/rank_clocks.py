"""A job's rank traces read side by side: read in parallel workers, checked to be one job, and put
on one clock. No torch.

One clock: ranks whose traces name the same host share that host's clock (torch.profiler's
timestamps there are one clock for every process). Across hosts, clocks are aligned on the ends of
matched collectives: every rank leaves an all-reduce at nearly the same moment, so the offset that
brings a host's collective ends onto the reference host's is its clock offset. Each offset comes
with the interval its collectives allow (the smallest and largest end difference): on this VM two
ranks' `gloo:all_reduce` annotations of one bucket end up to ~4.6 ms apart, so CPU traces aligned
this way carry milliseconds of uncertainty, where NCCL kernels carry microseconds. A trace that
names no host gets a clock of its own (it may or may not share one: aligning is the safe guess).

Bad input is refused in one line naming the rank and step (`JobError`, a `TraceError`): traces of
different jobs, a missing or repeated rank, steps that do not match. A subset of a job's ranks is
refused unless the caller takes one (`check_job(..., subset=True)`): merging ranks for viewing
needs only the ranks at hand, and their clocks align on the collectives they share.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from ddpbench.analysis.rank_timeline import RankTimeline, read_rank_timeline
from ddpbench.analysis.trace_job import usable_jobs
from ddpbench.analysis.traces import TraceError


class JobError(TraceError):
    """The rank traces given are not one job's, or disagree; the message names rank and step."""


@dataclass
class ClockOffset:
    """What a clock domain's timestamps need added (beyond the bases) to read on the reference clock."""

    clock: str
    """The host name, or `rank N` for a trace that names no host."""
    ranks: list[int]
    offset_us: float
    low_us: float
    high_us: float
    """The interval the matched collectives allow: the smallest and largest end difference."""
    collectives: int
    """How many matched collectives the offset was read from (0: the reference clock itself)."""

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def run_traces(record_path: str, record) -> list[str]:
    """A run record's rank traces, found as recorded or under the sweep folder the record lies in."""
    trace = record.overlap.trace if record.overlap else None
    sweep = os.path.dirname(os.path.dirname(os.path.abspath(record_path)))
    folders: dict[str, list[str]] = {}  # a run's traces share a folder: search it once
    return [_locate(path, sweep, folders) for path in (trace.paths if trace else []) if path]


def _locate(path: str, sweep: str, folders: dict[str, list[str]]) -> str:
    """Paths are recorded as the run was given them (relative to where it ran): try them as they
    are, then each of their tails under the sweep folder, longest first. `folders` keeps, per
    recorded folder, the tails' folders that exist, so that a thousand ranks' traces cost one
    search of the folders and one look per file."""
    if os.path.exists(path):
        return path
    folder, name = os.path.split(os.path.normpath(path))
    if folder not in folders:
        parts = folder.split(os.sep) if folder else []
        tails = [os.path.join(sweep, *parts[cut:]) for cut in range(len(parts) + 1)]
        folders[folder] = [tail for tail in tails if os.path.isdir(tail)]
    for tail in folders[folder]:
        candidate = os.path.join(tail, name)
        if os.path.exists(candidate):
            return candidate
    return path  # missing: the reader names it


def _read(path: str) -> RankTimeline | str:
    try:
        return read_rank_timeline(path)
    except TraceError as exc:
        return str(exc)


def read_timelines(paths: list[str], jobs: int | None = None) -> list[RankTimeline]:
    """Every trace reduced, one worker process per trace at a time; sorted by rank. The first file
    that cannot be read is refused: matching across ranks needs every rank."""
    workers = usable_jobs(jobs, len(paths))
    if workers == 1:
        results = [_read(path) for path in paths]
    else:
        methods = multiprocessing.get_all_start_methods()
        context = multiprocessing.get_context("fork" if "fork" in methods else None)
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            results = list(pool.map(_read, paths, chunksize=1))
    for result in results:
        if isinstance(result, str):
            raise TraceError(result)
    return sorted(results, key=lambda timeline: timeline.rank)


def job_ranks(timelines: list[RankTimeline]) -> tuple[int, list[int]]:
    """The job's world size (as the traces say, else the highest rank + 1) and the ranks with no trace."""
    first = timelines[0]
    given = {timeline.rank for timeline in timelines}
    world_size = first.world_size if first.world_size is not None else max(given) + 1
    return world_size, sorted(set(range(world_size)) - given)


def check_job(timelines: list[RankTimeline], subset: bool = False) -> list[int]:
    """Refuse traces that are not one job's; returns the profiled steps every rank has. With
    `subset`, ranks of the job may be missing (`job_ranks` names them)."""
    if not timelines:
        raise JobError("no rank traces given")
    seen: dict[int, str] = {}
    for timeline in timelines:
        if timeline.rank in seen:
            raise JobError(f"rank {timeline.rank}: two traces ({seen[timeline.rank]} and {timeline.path})")
        seen[timeline.rank] = timeline.path
    first = timelines[0]
    for timeline in timelines[1:]:
        for what in ("world_size", "backend", "kind"):
            if getattr(timeline, what) != getattr(first, what):
                raise JobError(
                    f"rank {timeline.rank}: {what.replace('_', ' ')} {getattr(timeline, what)} where rank "
                    f"{first.rank} has {getattr(first, what)}: traces of different jobs"
                )
    world_size, missing = job_ranks(timelines)
    if missing and not subset:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise JobError(
            f"rank {missing[0]}{more}: no trace among the {len(timelines)} given for world size {world_size}"
        )
    outside = sorted(set(seen) - set(range(world_size)))
    if outside:
        raise JobError(f"rank {outside[0]}: outside world size {world_size}: traces of different jobs")
    steps = sorted(first.steps)
    for timeline in timelines[1:]:
        for step in sorted(set(steps) ^ set(timeline.steps)):
            has, lacks = (timeline, first) if step in timeline.steps else (first, timeline)
            raise JobError(
                f"rank {lacks.rank}, step {step}: no such profiler step, where rank {has.rank} has one "
                f"(traces of different jobs, or of different profiler schedules)"
            )
    _check_shared_clocks(timelines, steps)
    return steps


def _check_shared_clocks(timelines: list[RankTimeline], steps: list[int]) -> None:
    """Ranks on one host ran each step at the same time, on one clock: a step that does not overlap
    in time across them means the traces come from different runs."""
    by_host: dict[str, RankTimeline] = {}
    for timeline in timelines:
        if timeline.host is None:
            continue
        reference = by_host.setdefault(timeline.host, timeline)
        if reference is timeline:
            continue
        shift_us = (timeline.base_ns - reference.base_ns) / 1000.0
        for step in steps:
            start, end = (t + shift_us for t in timeline.steps[step])
            ref_start, ref_end = reference.steps[step]
            if start >= ref_end or end <= ref_start:
                raise JobError(
                    f"rank {timeline.rank}, step {step}: does not overlap rank {reference.rank}'s step {step} "
                    f"on host {timeline.host} (one clock): traces of different jobs"
                )


def clock_of(timeline: RankTimeline) -> str:
    return timeline.host if timeline.host is not None else f"rank {timeline.rank}"


def base_shift_us(timeline: RankTimeline, origin_ns: int) -> float:
    """What puts a trace's `ts` on the job's clock before any alignment: its base against the origin."""
    return (timeline.base_ns - origin_ns) / 1000.0


def align_clocks(timelines: list[RankTimeline], collective_ends: dict[int, list[float]]) -> dict[str, ClockOffset]:
    """Each clock's offset from rank 0's. `collective_ends` holds, per rank, the ends of the matched
    collectives in one order (the same collectives for every rank), on the base-shifted clock."""
    origin = clock_of(timelines[0])
    by_clock: dict[str, list[int]] = {}
    for timeline in timelines:
        by_clock.setdefault(clock_of(timeline), []).append(timeline.rank)
    reference = _median_ends([collective_ends[r] for r in by_clock[origin]])
    offsets = {}
    for clock, ranks in by_clock.items():
        if clock == origin:
            offsets[clock] = ClockOffset(clock, ranks, 0.0, 0.0, 0.0, 0)
            continue
        ends = _median_ends([collective_ends[r] for r in ranks])
        differences = [ref - own for ref, own in zip(reference, ends)]
        if not differences:
            raise JobError(
                f"rank {ranks[0]}: on clock {clock} but no collective matched with rank "
                f"{timelines[0].rank} to align it on"
            )
        offsets[clock] = ClockOffset(
            clock,
            ranks,
            float(statistics.median(differences)),
            float(min(differences)),
            float(max(differences)),
            len(differences),
        )
    return offsets


def _median_ends(per_rank: list[list[float]]) -> list[float]:
    if len(per_rank) == 1:
        return per_rank[0]
    return [statistics.median(values) for values in zip(*per_rank)]


CLOCKS_LISTED = 8
"""Clocks printed one per line; beyond, a summary (--json lists every one)."""


def format_offsets(offsets: dict[str, ClockOffset]) -> list[str]:
    if len(offsets) > CLOCKS_LISTED:
        aligned = [o for o in offsets.values() if o.collectives]
        widest = max(aligned, key=lambda o: o.high_us - o.low_us)
        reference = next(o for o in offsets.values() if not o.collectives)
        return [
            f"{len(offsets)} clocks: the reference is {reference.clock} (ranks {_rank_list(reference.ranks)}); "
            f"{len(aligned)} aligned on collective ends, offsets "
            f"{min(o.offset_us for o in aligned) / 1000:+.3f} to {max(o.offset_us for o in aligned) / 1000:+.3f} ms, "
            f"the widest interval {(widest.high_us - widest.low_us) / 1000:.3f} ms ({widest.clock}); --json lists each"
        ]
    lines = []
    for offset in offsets.values():
        ranks = _rank_list(offset.ranks)
        if offset.collectives == 0:
            lines.append(f"clock {offset.clock} (ranks {ranks}): the reference clock")
        else:
            lines.append(
                f"clock {offset.clock} (ranks {ranks}): offset {offset.offset_us / 1000:+.3f} ms, "
                f"within [{offset.low_us / 1000:+.3f}, {offset.high_us / 1000:+.3f}] ms "
                f"(collective ends, {offset.collectives} matched)"
            )
    return lines


def _rank_list(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks)) if len(ranks) <= 8 else f"{ranks[0]}..{ranks[-1]} ({len(ranks)})"
