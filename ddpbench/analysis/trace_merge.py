"""Every rank's trace in one timeline: one gzipped Chrome trace that Perfetto opens, one process
per rank named by rank and host, everything on one clock. No torch.

The clock is rank 0's: its events keep their timestamps, and every other rank's are moved by what
`collectives.match_job` found (the difference of the traces' base times, and across hosts the
offset read from the ends of matched collectives, with its interval in the file's `otherData`).

Memory stays at one trace: the ranks are read and written one at a time, straight into the gzip
stream; what must be known before the first byte (the clocks) comes from the reduced traces,
which are small. Each rank's own processes (its CPU process, its GPUs) become threads of the rank's
one process, named after what they were ("CPU thread 812", "GPU 0 stream 7"), and each rank gets
a `critical path` thread showing the stretches of each step's critical path it held.
"""

from __future__ import annotations

import msgspec

try:
    from isal import igzip as gzip_writer  # ISA-L: the same gzip, several times faster at level 1
except ImportError:
    import gzip as gzip_writer

from ddpbench.analysis.collectives import CrossRankJob
from ddpbench.analysis.critical_path import StepPath
from ddpbench.analysis.traces import read_trace

_ANY = msgspec.json.Decoder()
_ENCODER = msgspec.json.Encoder()
PROCESS_METADATA = {"process_name", "process_labels", "process_sort_index"}
THREAD_METADATA = {"thread_name", "thread_sort_index"}
ENCODE_SLICE = 5000
"""Events encoded at a time."""
CRITICAL_PATH_THREAD = 0
"""The thread id of each rank's critical-path track, first in the rank's process."""


def _process_label(event: dict) -> str | None:
    args = event.get("args") or {}
    return args.get("labels") if event.get("name") == "process_labels" else None


def _rank_events(trace: dict, rank: int, host: str | None, shift_us: float, world: int, path_rows: list) -> list:
    """One rank's events moved onto the job's clock and into the rank's one process."""
    events = trace.get("traceEvents") or []
    labels = {}
    thread_names = {}
    for event in events:
        if event.get("ph") == "M":
            label = _process_label(event)
            if label is not None:
                labels[event.get("pid")] = label
            elif event.get("name") == "thread_name":
                thread_names[(event.get("pid"), event.get("tid"))] = (event.get("args") or {}).get("name")
    threads: dict[tuple, int] = {}
    out = [
        {"ph": "M", "name": "process_name", "pid": rank, "tid": 0, "args": {"name": _process_name(rank, host)}},
        {"ph": "M", "name": "process_sort_index", "pid": rank, "tid": 0, "args": {"sort_index": rank}},
        {"ph": "M", "name": "thread_name", "pid": rank, "tid": CRITICAL_PATH_THREAD, "args": {"name": "critical path"}},
    ]
    for event in events:
        phase = event.get("ph")
        name = event.get("name")
        if phase == "M" and (name in PROCESS_METADATA or name in THREAD_METADATA):
            continue  # replaced by the rank's own process and the threads' names below
        key = (event.get("pid"), event.get("tid"))
        tid = threads.get(key)
        if tid is None:
            tid = threads[key] = len(threads) + 1
            out.append(
                {
                    "ph": "M",
                    "name": "thread_name",
                    "pid": rank,
                    "tid": tid,
                    "args": {"name": _thread_name(key, labels, thread_names)},
                }
            )
            out.append({"ph": "M", "name": "thread_sort_index", "pid": rank, "tid": tid, "args": {"sort_index": tid}})
        event["pid"], event["tid"] = rank, tid
        if isinstance(event.get("ts"), int | float):
            event["ts"] = round(event["ts"] + shift_us, 3)
        if "id" in event and phase in ("s", "t", "f"):
            # Flow ids (CPU launch -> GPU kernel) are per trace: made unique across ranks.
            flow = event["id"]
            event["id"] = flow * world + rank if isinstance(flow, int) else f"{rank}:{flow}"
        out.append(event)
    for segment in path_rows:
        out.append(
            {
                "ph": "X",
                "cat": "critical_path",
                "name": segment.phase,
                "pid": rank,
                "tid": CRITICAL_PATH_THREAD,
                "ts": round(segment.start_us, 3),
                "dur": round(segment.us, 3),
            }
        )
    return out


def _process_name(rank: int, host: str | None) -> str:
    return f"rank {rank}" + (f" ({host})" if host else "")


def _thread_name(key: tuple, labels: dict, thread_names: dict) -> str:
    pid, tid = key
    label = labels.get(pid) or f"process {pid}"
    own = thread_names.get(key)
    if label.startswith("GPU"):
        return f"{label} {str(own).strip()}" if own else f"{label} stream {tid}"
    return f"{label} {own}" if own else f"{label} thread {tid}"


def write_merged(job: CrossRankJob, paths: list[StepPath], out_path: str) -> dict:
    """Write the merged trace; returns what it wrote (events per rank, the clocks)."""
    first = job.timelines[0]
    by_rank: dict[int, list] = {t.rank: [] for t in job.timelines}
    for path in paths:
        for segment in path.segments:
            by_rank[segment.rank].append(segment)
    other = {
        "merged_by": "ddpbench trace merge",
        "clock": f"rank {first.rank}'s trace ({first.path})",
        "clocks": [offset.as_dict() for offset in job.offsets.values()],
        "world_size": job.world_size or job.ranks,
        "missing_ranks": job.missing,
        "ranks": [
            {"rank": t.rank, "host": t.host, "path": t.path, "shift_us": shift}
            for t, shift in zip(job.timelines, job.shifts_us)
        ],
    }
    head = {"displayTimeUnit": "ms", "baseTimeNanoseconds": first.base_ns, "otherData": other}
    counts = {}
    with gzip_writer.open(out_path, "wb", compresslevel=1) as stream:
        stream.write(_ENCODER.encode(head)[:-1] + b',"traceEvents":[')
        separator = b""
        for timeline, shift in zip(job.timelines, job.shifts_us):
            trace = read_trace(timeline.path, _ANY)
            # Flow ids made unique over the whole job's ranks, the ones not given too.
            world = max(job.world_size, max(t.rank for t in job.timelines) + 1)
            events = _rank_events(trace, timeline.rank, timeline.host, shift, world, by_rank[timeline.rank])
            del trace
            counts[timeline.rank] = len(events)
            # In slices: the encoded text of a whole trace would be a second trace's worth of memory.
            for first in range(0, len(events), ENCODE_SLICE):
                stream.write(separator + _ENCODER.encode(events[first : first + ENCODE_SLICE])[1:-1])
                separator = b","
            del events
        stream.write(b"]}")
    return {"path": out_path, "events_by_rank": counts, **other}
