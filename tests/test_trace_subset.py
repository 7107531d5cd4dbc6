"""Some of a job's ranks, as people profile a few ranks of a large job: two real rank traces made
ranks 0 and 1 of a 128-rank job (their distributedInfo says so, as a real 128-rank job's would).
`trace merge` writes a trace of the two at hand and names the 126 missing in one line; `trace
collectives` still puts them on one clock and says which collectives it could not analyse, and
why."""

from __future__ import annotations

import gzip
import json
import os

import msgspec
import pytest
from conftest import FIXTURES, ddpbench

from ddpbench.analysis.collectives import match_job, rank_ranges
from ddpbench.analysis.rank_clocks import JobError

CPU_TRACES = [os.path.join(FIXTURES, "projection", "traces", "mlp2", f"rank-{r}.pt.trace.json.gz") for r in (0, 1)]
GPU_TRACE = os.path.join(FIXTURES, "traces", "nccl-ddp-2gpu-rank0.json.gz")
WORLD = 128
SHIFT_US = 11_560_123.456


def read(path: str) -> dict:
    with gzip.open(path, "rb") as handle:
        return msgspec.json.decode(handle.read())


def of_a_large_job(trace: dict, rank: int, host: str | None = None, shift_us: float = 0.0) -> dict:
    """The trace as rank `rank` of a 128-rank job, on `host` with its clock moved by `shift_us`."""
    info = trace["distributedInfo"]
    info["rank"], info["world_size"] = rank, WORLD
    for group in info.get("pg_config") or []:
        group["pg_size"], group["ranks"] = WORLD, list(range(WORLD))
    if host is not None:
        trace["host_name"] = host
    for event in trace["traceEvents"]:
        if "ts" in event:
            event["ts"] += shift_us
    return trace


def write(path, trace: dict) -> str:
    with gzip.open(path, "wb", compresslevel=1) as handle:
        handle.write(msgspec.json.encode(trace))
    return str(path)


@pytest.fixture(scope="module")
def cpu_pair(tmp_path_factory) -> list[str]:
    folder = tmp_path_factory.mktemp("cpu-of-128")
    return [write(folder / f"rank-{r}.json.gz", of_a_large_job(read(path), r)) for r, path in enumerate(CPU_TRACES)]


@pytest.fixture(scope="module")
def gpu_pair(tmp_path_factory) -> list[str]:
    """The real 2-GPU trace as ranks 0 and 1 of a 128-rank job on two hosts, rank 1's clock 11.56 s
    ahead: their clocks must still be aligned on the collectives they share."""
    folder = tmp_path_factory.mktemp("gpu-of-128")
    return [
        write(folder / "rank-0.json.gz", of_a_large_job(read(GPU_TRACE), 0, "node-a")),
        write(folder / "rank-1.json.gz", of_a_large_job(read(GPU_TRACE), 1, "node-b", SHIFT_US)),
    ]


def test_ranks_0_and_1_of_128_merge_into_a_trace_of_two_processes(cpu_pair, tmp_path):
    out = tmp_path / "two.merged.json.gz"
    done = ddpbench("trace", "merge", *cpu_pair, "-o", str(out))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"wrote {out}: 2 ranks, ")
    missing = [line for line in lines if "no trace" in line]
    assert missing == ["missing: 126 of the job's 128 ranks have no trace here (ranks 2-127); the 2 at hand are merged"]
    assert "critical path: not drawn, it needs every rank's trace" in lines
    with gzip.open(out, "rt") as handle:
        merged = json.load(handle)
    names = {e["pid"]: e["args"]["name"] for e in merged["traceEvents"] if e.get("name") == "process_name"}
    assert sorted(names) == [0, 1] and all(name.startswith(f"rank {pid}") for pid, name in names.items())
    assert merged["otherData"]["world_size"] == WORLD and merged["otherData"]["missing_ranks"] == list(range(2, WORLD))
    # Both ranks' own events are all there, each in its rank's process.
    assert {e["pid"] for e in merged["traceEvents"]} == {0, 1}


def test_the_collectives_of_an_incomplete_group_are_named_with_why(cpu_pair):
    done = ddpbench("trace", "collectives", *cpu_pair)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "missing: 126 of the job's 128 ranks have no trace here (ranks 2-127); the 2 at hand are matched"
    (reason,) = [line for line in lines if line.startswith("not analysed: ")]
    assert "its 128 ranks' traces are needed (a collective's transfer is its shortest duration" in reason
    assert reason.endswith("missing: 126 ranks, 2-127")
    assert "no collective could be analysed" in lines[1]
    summary = json.loads(ddpbench("trace", "collectives", *cpu_pair, "--json").stdout)
    assert summary["missing_ranks"] == list(range(2, WORLD)) and summary["collectives"] == []
    assert summary["critical_path"] is None and len(summary["not_analysed"]) == 1


def test_two_hosts_of_a_large_job_are_still_aligned_on_the_collectives_they_share(gpu_pair):
    job = match_job(gpu_pair, jobs=1, subset=True)
    assert job.missing == list(range(2, WORLD)) and job.collectives == []
    offset = job.offsets["node-b"]
    assert offset.offset_us == pytest.approx(-SHIFT_US, abs=10) and offset.collectives == 14
    assert job.unmatched == [
        "group 0: 14 collectives over 2 steps: its 128 ranks' traces are needed (a collective's "
        "transfer is its shortest duration over all of them, the waits and the last to arrive are read against "
        "it); missing: 126 ranks, 2-127"
    ]


def test_without_subset_a_missing_rank_is_still_refused_where_every_rank_is_needed(cpu_pair):
    with pytest.raises(JobError, match="rank 2 \\(and 125 more\\): no trace among the 2 given for world size 128"):
        match_job(cpu_pair, jobs=1)


def test_a_subset_of_a_complete_job_is_the_whole_job(tmp_path):
    job = match_job(CPU_TRACES, jobs=1, subset=True)
    assert job.missing == [] and job.unmatched == [] and job.collectives


def test_rank_ranges():
    assert rank_ranges([5, 0, 1, 2, 9, 10, 127]) == "0-2, 5, 9-10, 127"
