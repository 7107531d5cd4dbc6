"""Ranks side by side on committed traces: the real 2-GPU trace merged with copies of itself (shifted
by a known clock offset, with a collective removed, with NCCL 2.19's kernel names, with sequence
numbers), the real 2-rank CPU run of the projection fixtures, and bad input refused in one line."""

import gzip
import json
import os

import msgspec
import pytest
from conftest import FIXTURES, REPO, ddpbench

from ddpbench.analysis.collectives import bucket_table, match_job, rank_summary
from ddpbench.analysis.critical_path import job_paths, path_summary
from ddpbench.analysis.rank_clocks import JobError
from ddpbench.analysis.rank_timeline import read_rank_timeline
from ddpbench.analysis.trace_merge import write_merged

REAL_GPU_TRACE = os.path.join(FIXTURES, "traces", "nccl-ddp-2gpu-rank0.json.gz")
CPU_TRACES = [os.path.join(FIXTURES, "projection", "traces", "mlp2", f"rank-{r}.pt.trace.json.gz") for r in (0, 1)]
CPU_RUN = os.path.join(FIXTURES, "sweeps", "cpu-mlp-with-failure", "runs", "mlp-ddp-n2.json")
SHIFT_US = 11_560_123.456
"""Rank 1's clock ahead of rank 0's by 11.56 s, the raw offset one public project saw between ranks."""
COLLECTIVES_PER_STEP = 7  # 2 buffer broadcasts and 5 bucket all-reduces, in each of the 2 analysed steps


@pytest.fixture(scope="module")
def real_trace() -> dict:
    with gzip.open(REAL_GPU_TRACE, "rt") as handle:
        return json.load(handle)


def write(path, trace: dict) -> str:
    with gzip.open(path, "wb", compresslevel=1) as handle:  # the fastest level: the tests write many
        handle.write(msgspec.json.encode(trace))
    return str(path)


def as_rank(trace: dict, rank: int, host: str, shift_us: float = 0.0, edit=None) -> dict:
    """The real trace as another rank's on another host, its clock moved by `shift_us`."""
    other = msgspec.json.decode(msgspec.json.encode(trace))  # a deep copy, several times faster
    other["distributedInfo"]["rank"] = rank
    other["host_name"] = host
    for event in other["traceEvents"]:
        if "ts" in event:
            event["ts"] += shift_us
    if edit:
        edit(other["traceEvents"])
    return other


def nccl_kernels(events: list) -> list:
    return sorted(
        (e for e in events if e.get("cat") == "kernel" and e["name"].startswith("nccl")), key=lambda e: e["ts"]
    )


@pytest.fixture(scope="module")
def shifted_pair(real_trace, tmp_path_factory) -> list[str]:
    folder = tmp_path_factory.mktemp("shifted")
    return [
        write(folder / "rank-0.json.gz", as_rank(real_trace, 0, "node-a")),
        write(folder / "rank-1.json.gz", as_rank(real_trace, 1, "node-b", SHIFT_US)),
    ]


@pytest.fixture(scope="module")
def shifted_job(shifted_pair):
    return match_job(shifted_pair, jobs=1)


def test_a_known_clock_offset_comes_back_within_10_us(shifted_job):
    offset = shifted_job.offsets["node-b"]
    assert offset.ranks == [1] and offset.collectives == 2 * COLLECTIVES_PER_STEP
    assert offset.offset_us == pytest.approx(-SHIFT_US, abs=10)
    assert offset.low_us <= offset.offset_us <= offset.high_us and offset.high_us - offset.low_us < 10
    assert shifted_job.offsets["node-a"].collectives == 0  # the reference clock


def test_the_merged_trace_has_a_process_per_rank_on_one_clock(shifted_job, tmp_path):
    out = str(tmp_path / "job.merged.json.gz")
    written = write_merged(shifted_job, job_paths(shifted_job), out)
    with gzip.open(out, "rt") as handle:
        merged = json.load(handle)
    names = {e["pid"]: e["args"]["name"] for e in merged["traceEvents"] if e.get("name") == "process_name"}
    assert names == {0: "rank 0 (node-a)", 1: "rank 1 (node-b)"}
    by_rank = [[e["ts"] for e in nccl_kernels(merged["traceEvents"]) if e["pid"] == r] for r in (0, 1)]
    assert len(by_rank[0]) == len(by_rank[1]) == 21  # every NCCL kernel, the dropped last step's too
    assert max(abs(a - b) for a, b in zip(*by_rank)) < 10
    assert merged["otherData"]["clocks"][1]["offset_us"] == pytest.approx(-SHIFT_US, abs=10)
    assert written["events_by_rank"][0] > 40_000
    threads = {e["args"]["name"] for e in merged["traceEvents"] if e.get("name") == "thread_name" and e["pid"] == 1}
    assert {"critical path", "GPU 0 stream 7", "CPU thread 2910249 (pt_main_thread)"} <= threads
    flows = {e["id"] for e in merged["traceEvents"] if e.get("ph") == "s"}
    assert all(isinstance(i, int) for i in flows) and {i % 2 for i in flows} == {0, 1}  # unique per rank


def test_an_identical_copy_has_no_waits_and_no_last_rank(shifted_job):
    table = bucket_table(shifted_job)
    assert [row["name"] for row in table] == ["broadcast"] * 2 + ["allreduce"] * 5
    assert all(row["spread_ms"] < 0.01 and row["last_arrival_share_by_rank"] == {} for row in table)
    assert all(max(row["wait_ms_by_rank"].values()) < 0.01 for row in table)
    # The transfer of the first all-reduce bucket: the shortest of its kernels, 2521 and 3307 us.
    assert table[2]["transfer_ms"] == pytest.approx(2.914, abs=0.001) and table[2]["elements"] == 2049000


def test_the_gpu_critical_path_sums_to_the_step_and_holds_the_gpu_idle_time(shifted_job):
    summary = path_summary(job_paths(shifted_job))
    assert summary["steps"] == 2 and summary["step_ms"] == pytest.approx(214.65, abs=0.05)
    held = {(row["rank"], row["phase"]): row["ms_per_step"] for row in summary["held"]}
    assert sum(held.values()) == pytest.approx(summary["step_ms"])
    # HTA 0.5.0 gives 338781 us idle over the two kernel spans of this trace: the GPU mostly waits.
    assert held[(0, "idle")] == pytest.approx(338.781 / 2, rel=0.02)
    assert held[(0, "backward")] > held[(0, "forward")] > held[(0, "optimizer")] > 0


def test_nccl_2_19_kernel_names_are_collectives_too(real_trace, tmp_path):
    def rename(events):
        for event in nccl_kernels(events):
            event["name"] = event["name"].replace("ncclKernel_", "ncclDevKernel_")
            del event["args"]["Collective name"]  # the name must come from the kernel's name

    timeline = read_rank_timeline(write(tmp_path / "rank-0.json.gz", as_rank(real_trace, 0, "a", edit=rename)))
    names = [c.name for c in timeline.collectives[4]]
    assert names == ["Broadcast"] * 2 + ["AllReduce"] * 5


def numbered(events):
    for number, event in enumerate(nccl_kernels(events)):
        event["args"]["Seq"] = number


def test_sequence_numbers_match_collectives_whatever_their_order(real_trace, tmp_path):
    def swapped(events):
        """Rank 1 ran step 4's two broadcasts the other way round: by order they would be paired wrong."""
        numbered(events)
        first, second = nccl_kernels(events)[:2]
        first["ts"] = second["ts"] + second["dur"] + 1

    paths = [
        write(tmp_path / "rank-0.json.gz", as_rank(real_trace, 0, "a", edit=numbered)),
        write(tmp_path / "rank-1.json.gz", as_rank(real_trace, 1, "b", 500.0, edit=swapped)),
    ]
    job = match_job(paths, jobs=1)
    assert len(job.collectives) == 14 and job.offsets["b"].offset_us == pytest.approx(-500.0, abs=0.01)
    first = job.collectives[0]
    assert first.step == 4 and first.elements == 53120
    assert first.durations.tolist() == pytest.approx([30.975, 30.975], abs=0.01)  # the same broadcast on both ranks

    def renumbered(events):
        numbered(events)
        nccl_kernels(events)[9]["args"]["Seq"] = 99  # step 5's first all-reduce

    write(tmp_path / "rank-1.json.gz", as_rank(real_trace, 1, "b", 500.0, edit=renumbered))
    with pytest.raises(JobError, match=r"^rank 1, step 5: group 0's collective with sequence number 9 does not"):
        match_job(paths, jobs=1)


def test_the_cpu_run_matches_its_all_reduces_and_crosses_ranks_on_the_path():
    job = match_job(CPU_TRACES, jobs=2)
    assert job.steps == [3, 4, 5] and len(job.collectives) == 3
    assert job.offsets["vm"].ranks == [0, 1] and job.offsets["vm"].offset_us == 0.0  # one host, one clock
    summary = rank_summary(job)
    assert sum(row["last_arrivals"] for row in summary) == 3
    for path in job_paths(job):
        phases = path.by_rank_phase()
        assert sum(phases.values()) == pytest.approx(path.length_us)
        assert any(phase == "communication" for _, phase in phases)  # the all-reduce is waited for
        # The chain ends where the step that ended last ended: its length is that rank's whole step.
        assert path.length_us > 0.9 * max(t.steps[path.step][1] - t.steps[path.step][0] for t in job.timelines)


def test_a_run_record_is_read_from_anywhere(tmp_path):
    done = ddpbench("trace", "collectives", CPU_RUN, "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    parsed = json.loads(done.stdout)
    assert [r["rank"] for r in parsed["ranks"]] == [0, 1] and len(parsed["buckets"]) == 1
    assert parsed["critical_path"]["steps"] == 3 and parsed["buckets"][0]["name"] == "gloo:all_reduce"
    done = ddpbench("trace", "merge", CPU_RUN, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert os.path.exists(tmp_path / "mlp-ddp-n2.merged.json.gz") and "clock vm (ranks 0, 1)" in done.stdout
    # A merged trace left in a folder of rank traces is not read as one of them.
    again = ddpbench("trace", "collectives", str(tmp_path), os.path.dirname(CPU_TRACES[0]))
    assert again.returncode == 0, again.stderr


def refused(*paths, cwd=REPO) -> str:
    done = ddpbench("trace", "collectives", *map(str, paths), cwd=cwd)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr
    return lines[0]


def test_bad_input_is_one_line_naming_the_rank_and_step(real_trace, shifted_pair, tmp_path):
    # One rank of two is a subset of the job, not bad input (tests/test_trace_subset.py).
    alone = ddpbench("trace", "collectives", shifted_pair[0])
    assert alone.returncode == 0 and alone.stdout.startswith(
        "missing: 1 of the job's 2 ranks have no trace here (rank 1); the 1 at hand are matched\n"
    )
    assert "rank 1: backend gloo where rank 0 has nccl: traces of different jobs" in refused(
        shifted_pair[0], CPU_TRACES[1]
    )
    other_run = os.path.join(
        FIXTURES, "sweeps", "cpu-mlp-with-failure", "traces", "mlp-ddp-n2", "rank-1.pt.trace.json.gz"
    )
    line = refused(CPU_TRACES[0], other_run)
    assert line.startswith("ddpbench trace collectives: error: rank 1, step ") and "traces of different jobs" in line

    def drop_bucket(events):
        events.remove(nccl_kernels(events)[10])  # step 5's second all-reduce

    short = write(tmp_path / "rank-1.json.gz", as_rank(real_trace, 1, "node-b", SHIFT_US, edit=drop_bucket))
    assert "rank 1, step 5: 6 collectives in group 0 where rank 0 has 7" in refused(shifted_pair[0], short)
    assert "rank 0: two traces" in refused(shifted_pair[0], shifted_pair[0])
    assert "cannot read" in refused(tmp_path / "none.json.gz", shifted_pair[0])


def test_the_report_tables_the_buckets_and_links_each_runs_merged_trace(tmp_path):
    from ddpbench.report.html import build_report

    page = open(build_report(os.path.dirname(os.path.dirname(CPU_RUN)), str(tmp_path / "index.html"))).read()
    section = page[page.index("Collectives across ranks") :]
    assert "gloo:all_reduce" in section[:5000] and "transfer ms" in section[:5000]
    assert 'href="merged-traces/mlp-ddp-n2.merged.json.gz"' in section and "held" in section[:8000]
    with gzip.open(tmp_path / "merged-traces" / "mlp-ddp-n2.merged.json.gz", "rt") as handle:
        events = json.load(handle)["traceEvents"]
    assert sorted(e["args"]["name"] for e in events if e.get("name") == "process_name") == [
        "rank 0 (vm)",
        "rank 1 (vm)",
    ]


def test_explain_prints_the_critical_path_of_runs_with_traces(tmp_path):
    done = ddpbench("explain", os.path.dirname(os.path.dirname(CPU_RUN)), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("critical path  ")]
    assert len(lines) == 1 and lines[0].startswith("critical path  mlp x2 (traces, 1 run): rank ")
    # This record has no in-process ablation: its wait for the slowest rank comes from its traces.
    assert "mlp x2: E(2) " in done.stdout


def test_a_trace_without_ddp_takes_its_forward_from_the_batch_to_backward():
    local = os.path.join(
        FIXTURES, "sweeps", "cpu-mlp-with-failure", "traces", "mlp-local-n1", "rank-0.pt.trace.json.gz"
    )
    timeline = read_rank_timeline(local)
    for step, phases in timeline.phases.items():
        (begin,), (end,) = phases["forward"]
        assert phases["data"][1][-1] <= begin < end == phases["backward"][0][0], step
    ddp = read_rank_timeline(CPU_TRACES[0])  # DDP's own annotation is kept as it is
    assert all(len(phases["forward"][0]) == 1 for phases in ddp.phases.values())


def test_many_clocks_are_summed_up_in_one_line_and_each_offset_comes_back(tmp_path):
    import sys

    sys.path.insert(0, os.path.join(REPO, "benchmarks"))
    import synthetic

    from ddpbench.analysis.collectives import format_bucket_table

    # 12 rank files of the real trace, rank r's clock (r % 7) x 20 us ahead; no host names, so
    # every rank is a clock of its own, aligned on collective ends.
    job = match_job(synthetic.build_traces(str(tmp_path), 12), jobs=2)
    for timeline in job.timelines:
        offset = job.offsets[f"rank {timeline.rank}"].offset_us
        assert offset == pytest.approx(-(timeline.rank % 7) * 20.0, abs=0.01)
    text = format_bucket_table(job).splitlines()
    assert text[1].startswith("12 clocks: the reference is rank 0 (ranks 0); 11 aligned on collective ends, ")
    assert "offsets -0.120 to +0.000 ms" in text[1] and len(text) < 20
    assert "a tie: every rank at once" in text[4] and any(line.startswith("last to arrive: nobody") for line in text)


def test_a_gloo_end_recorded_after_the_rank_went_on_is_still_the_wait_it_ended():
    """A real 2-rank gloo run whose rank 1 slept 20 ms inside every backward
    (`benchmarks/planted_causes.py`'s slow_backward): in steps 3 and 5 gloo closed rank 0's
    all-reduce record on its own thread after rank 0 had resumed, run its optimizer and ended its
    step. The wait is still followed to rank 1's backward, in every step."""
    folder = os.path.join(FIXTURES, "traces", "gloo-late-end")
    job = match_job([os.path.join(folder, f"rank-{r}.pt.trace.json.gz") for r in (0, 1)], jobs=1)
    late = [c.step for c in job.collectives if c.ends[0] > job.timelines[0].steps[c.step][1]]
    assert late == [3, 5]  # the fixture shows what it is kept for
    for path in job_paths(job):
        phases = path.by_rank_phase()
        assert sum(phases.values()) == pytest.approx(path.length_us)
        held = max(phases, key=phases.get)
        assert held == (1, "backward") and phases[held] > 0.8 * path.length_us, (path.step, phases)


def test_an_optimizer_step_that_holds_the_backward_is_not_optimizer_work():
    """A real 2-rank gloo run of Lightning 2.5.0's bug-report model (its automatic optimization
    calls `optimizer.step(closure)`: the forward, the backward and DDP's wait for its one bucket
    all run inside `Optimizer.step#SGD.step`). Read as optimizer work, that span hid every
    all-reduce (0.00 ms exposed, 100 % overlap); its ops count, the span does not."""
    from ddpbench.analysis.traces import analyze_trace, closure_steps

    folder = os.path.join(FIXTURES, "traces", "lightning-closure")
    paths = [os.path.join(folder, f"rank-{r}.pt.trace.json.gz") for r in (0, 1)]
    with gzip.open(paths[0], "rt") as handle:
        events = [e for e in json.load(handle)["traceEvents"] if e.get("ph") == "X"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events if e["name"].startswith("Optimizer.step#")]
    backward = [e["ts"] for e in events if e["name"].startswith("autograd::engine::evaluate_function")]
    assert len(closure_steps(steps, backward)) == len(steps) >= 3  # the fixture shows what it is kept for
    for path in paths:
        analysis = analyze_trace(path)
        comm = sum(step.comm_us for step in analysis.steps)
        exposed = sum(step.exposed_comm_us for step in analysis.steps)
        assert exposed > 0.5 * comm, (path, exposed, comm)
    for path in job_paths(match_job(paths, jobs=1)):
        optimizer = sum(us for (_, phase), us in path.by_rank_phase().items() if phase == "optimizer")
        assert optimizer < 0.05 * path.length_us, (path.step, path.by_rank_phase())
