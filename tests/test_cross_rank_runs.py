"""Collectives matched across ranks and the critical path, on real 2-rank gloo runs: a planted slow
rank (rank 1's forward sleeps 10 ms, tests/fixtures/planted_causes.py), and the same model without
the sleep on a plain and on a shaped loopback (a network namespace, tc tbf). One run per case, every
assertion of the case on it.

Each check on a measured amount goes through tests/chance.py at 1 in 10,000, over the profiled
steps of one run (or two runs' steps for the shaped network, whose effect is tens of
milliseconds); the verdicts that name the slow rank come from those steps, each with its chance of
going wrong computed from them (tests/straggler_samples.py). How long the ablation's wait for the
slowest rank is against the sleep, and the rank and phase it names, are measured on
docs/measurements/planted-causes.md (benchmarks/planted_causes.py)."""

import json
import os
import statistics
import subprocess
import sys

import pytest
from chance import Known, difference_at_least, difference_at_most, mean_at_least, mean_at_most, verdict
from conftest import FIXTURES, cpu_environment, ddpbench, shaped_loopback
from straggler_samples import held_the_path, named_in_traces, phase_in_traces

from ddpbench.analysis.collectives import bucket_table, match_job, rank_summary
from ddpbench.analysis.critical_path import job_paths, path_summary
from ddpbench.analysis.trace_merge import write_merged
from ddpbench.commands.trace_ranks import run_trace_paths

pytestmark = pytest.mark.launches

PLANTED = os.path.join(FIXTURES, "planted_causes.py")
PROFILED_STEPS = 40
"""Enough steps for each check below to catch its effect missing with a power of at least 0.99 at 1
in 10,000, beside the other test worker's processes. At 12 steps, held alone, one run's waits spread
so far (a standard error of 1.3 ms for a 10 ms sleep) that rank 0's wait had a power of 0.20; at 40,
beside a neighbour, every power read 1.0000 (docs/measurements/test-suite.md lists each)."""
SHAPED_RATE = "200mbit"
"""Slow enough that the 0.5 MB all-reduce takes tens of milliseconds on the wire."""


def launch(out, factory: str, run_id: str, prefix: tuple = ()) -> list[str]:
    """One 2-rank DDP run with a long profiled phase; returns its rank traces."""
    done = subprocess.run(
        [
            *prefix,
            sys.executable,
            "-m",
            "ddpbench",
            "run",
            "--workload",
            f"{PLANTED}:{factory}",
            "--strategy",
            "ddp",
            "--nproc",
            "2",
            "--threads-per-rank",
            "1",
            "--steps",
            "8",
            "--warmup",
            "4",
            "--no-sync-steps",
            "0",
            "--profile-steps",
            str(PROFILED_STEPS),
            "--out",
            str(out),
            "--run-id",
            run_id,
        ],
        cwd=out,
        capture_output=True,
        text=True,
        timeout=240,
        env=cpu_environment(GLOO_SOCKET_IFNAME="lo", PLANTED_SLEEP_LOG=os.path.join(out, f"{run_id}-slept.txt")),
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    return run_trace_paths(os.path.join(out, "runs", f"{run_id}.json"))[1]


@pytest.fixture(scope="module")
def slow_rank(tmp_path_factory):
    out = tmp_path_factory.mktemp("slow-rank")
    paths = launch(out, "slow_rank_one", "slow")
    with open(out / "slow-slept.txt") as handle:
        slept_ms = statistics.median(float(line) for line in handle) * 1000
    job = match_job(paths, jobs=2)
    return out, job, slept_ms


def planted_s(slept_ms: float) -> float:
    """The planted effect a verdict's chance is computed at: the sleep, in seconds (the waits read
    11-12 ms for 10 ms here; a rival on the path, 4.29 ms a step at most in a suite run, is held to
    half of it: tests/straggler_samples.py).

    The verdicts are the traces' (40 profiled steps). The in-process ablation names the same rank
    and phase from its 5 rounds, which cannot show that at 1 in 10,000 on this machine: computed
    from their samples beside the suite's other processes, its chance of missing the sleep read
    0.01 to 0.8, and one run's ablation missed it. The ablation's naming is measured on
    docs/measurements/planted-causes.md (benchmarks/planted_causes.py, held alone)."""
    return slept_ms / 1000


def waits_ms(collectives, rank: int) -> list[float]:
    """The rank's longest wait in each step, ms: where the sleep falls decides which collective waits."""
    longest: dict[int, float] = {}
    for c in collectives:
        longest[c.step] = max(longest.get(c.step, 0.0), c.waits_us[rank] / 1000)
    return list(longest.values())


def test_the_slow_rank_arrives_last_and_the_other_waits_for_its_sleep(slow_rank):
    _, job, slept_ms = slow_rank
    # not chance: counts of profiled steps and their collectives
    assert len(job.steps) == PROFILED_STEPS and len(job.collectives) >= PROFILED_STEPS
    summary = {row["rank"]: row for row in rank_summary(job)}
    shown = f"slept {slept_ms:.2f} ms\n{summary}"
    # Rank 1 arriving last is rank 0 waiting for it: the waits below. (A share of last arrivals over
    # the profiled steps is not asserted: 12 of them could not be told from a coin's at 1 in 10,000;
    # the waits can.)
    mean_at_most(waits_ms(job.collectives, 1), 0.2 * slept_ms, missing=slept_ms, what="rank 1's wait, ms\n" + shown)
    # Rank 0 waits for rank 1's sleep (and for what else delays rank 1 after it: on this shared
    # 2-core VM a woken rank also computes late, 14.8 ms waited for a 10.3 ms sleep at load 3).
    mean_at_least(waits_ms(job.collectives, 0), 0.5 * slept_ms, missing=0.0, what="rank 0's wait, ms\n" + shown)
    first_bucket = [c for c in job.collectives if (c.group, c.index) == (job.collectives[0].group, 0)]
    mean_at_least([c.spread_us / 1000 for c in first_bucket], 0.5 * slept_ms, missing=0.0, what="spread, ms")
    table = bucket_table(job)
    assert table[0]["steps"] == len(first_bucket), table  # not chance: a count of steps


def test_the_critical_path_puts_the_sleep_on_rank_1s_forward(slow_rank):
    _, job, slept_ms = slow_rank
    summary = path_summary(job_paths(job))
    # The extra step time is the sleep; what rank 1's forward holds beyond a forward without it
    # (rank 0's own, measured in the same step) is what the path put there, step by step.
    own_forward_ms = [
        sum(b - a for a, b in zip(*job.timelines[0].phases[step]["forward"])) / 1000 for step in job.steps
    ]
    put_there = [
        sum(row["ms"] for row in path["held"] if (row["rank"], row["phase"]) == (1, "forward")) - own
        for path, own in zip(summary["by_step"], own_forward_ms)
    ]
    steps = "\n".join(
        f"  step {path['step']}: {path['length_ms']:.2f} ms, {path['held']}" for path in summary["by_step"]
    )
    # Most of the sleep is on rank 1's forward, step by step (issue 43). Not all of it in every
    # step: a step in which rank 0 itself was held back longer than the sleep (one suite run put
    # 4.29 ms per step on rank 0's "other", beside the other test worker's processes) was really
    # held by rank 0, and the path says so.
    mean_at_least(put_there, 0.5 * slept_ms, missing=0.0, what=f"on rank 1's forward, ms\n{steps}")
    held = summary["held"][0]
    verdict(
        (held["rank"], held["phase"]) == (1, "forward"),
        rate=1e-4,
        shown=held_the_path(job, 1, "forward", planted_s(slept_ms)),
        what=f"rank 1's forward holds the path most\n{steps}",
    )


def test_explain_json_carries_the_critical_path(slow_rank, tmp_path):
    out, job, slept_ms = slow_rank
    done = ddpbench("explain", str(out), "--json-file", str(tmp_path / "why.json"))
    assert done.returncode == 0, done.stdout + done.stderr
    (slow,) = json.load(open(tmp_path / "why.json"))["configurations"]
    path = slow["critical_path"]["slow"]
    assert path["steps"] == PROFILED_STEPS and len(path["by_step"]) == PROFILED_STEPS, path
    printed = next(line for line in done.stdout.splitlines() if line.startswith("critical path  "))
    # The printed line says the same rank and phase first (explain reads the same traces).
    named = (path["held"][0]["rank"], path["held"][0]["phase"]) == (1, "forward")
    verdict(
        named and "rank 1" in printed and "forward" in printed,
        rate=1e-4,
        shown=held_the_path(job, 1, "forward", planted_s(slept_ms)),
        what=f"explain: rank 1's forward holds the path most\n{done.stdout}",
    )
    # The run's straggler verdict is there as the analysis reaches it (that it names rank 1's forward
    # is held below, on the traces and the ablation alike).
    from ddpbench.analysis.answers import answer_run
    from ddpbench.records.store import load_record

    record = load_record(os.path.join(out, "runs", "slow.json"))
    found = answer_run(record, [("slow.json", record)]).straggler
    (run,) = slow["by_run"]
    shown = (run["straggler"]["named"], run["straggler"]["rank"], run["straggler"]["phase"])
    assert shown == (found.named, found.rank, found.phase), run["straggler"]  # not chance: one answer, two outputs


def test_the_run_merges_into_one_timeline_with_the_path_on_it(slow_rank):
    import gzip

    out, job, _ = slow_rank
    written = write_merged(job, job_paths(job), str(out / "slow.merged.json.gz"))
    with gzip.open(written["path"], "rt") as handle:
        events = json.load(handle)["traceEvents"]
    host = job.timelines[0].host
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    # not chance: ddpbench names each rank's process in the merged trace by its rank and host
    assert names == {0: f"rank 0 ({host})", 1: f"rank 1 ({host})"}
    path = [e for e in events if e.get("cat") == "critical_path"]
    assert {e["pid"] for e in path if e["name"] == "forward"} >= {1}
    # One host: one clock, nothing shifted.
    assert written["clocks"] == [
        {"clock": host, "ranks": [0, 1], "offset_us": 0.0, "low_us": 0.0, "high_us": 0.0, "collectives": 0}
    ]


@pytest.fixture(scope="module")
def shaped_pair(tmp_path_factory):
    """steady_ranks' run on the plain loopback, then inside a namespace whose loopback is shaped."""
    out = tmp_path_factory.mktemp("shaped")
    with shaped_loopback(f"ddpbench-cross-rank-{os.getpid()}", SHAPED_RATE) as name:
        plain = match_job(launch(out, "steady_ranks", "plain"), jobs=2)
        shaped = match_job(launch(out, "steady_ranks", "shaped", prefix=("ip", "netns", "exec", name)), jobs=2)
    return plain, shaped


@pytest.mark.alone  # two runs compared: a drift of a neighbour's load between them is not in their spread
def test_a_shaped_network_grows_the_transfer_and_not_the_waits(shaped_pair):
    plain, shaped = ([c for c in job.collectives if c.index == 0] for job in shaped_pair)
    transfers = [[c.transfer_us / 1000 for c in job] for job in (plain, shaped)]
    grown = difference_at_least(transfers[1], transfers[0], 10.0, missing=0.0, what="the transfer grew, ms")
    # The waits (the longer of the two ranks' in each step) take none of it.
    waits = [[max(c.waits_us) / 1000 for c in job] for job in (plain, shaped)]
    difference_at_most(waits[1], waits[0], 0.25 * grown.estimate, missing=grown.estimate, what="the waits grew, ms")


def test_the_traces_name_the_straggler_with_its_phase(slow_rank):
    """The one definition from the collectives matched across the traces (the median rank's waits
    beyond the slowest's, chosen on half the steps); its other source, the in-process ablation, is
    read from the same run, and names the same rank and phase on docs/measurements/planted-causes.md
    (see `planted_s`)."""
    from ddpbench.analysis.answers import answer_run
    from ddpbench.analysis.straggler import from_collectives
    from ddpbench.records.store import load_record

    out, job, slept_ms = slow_rank
    record = load_record(os.path.join(out, "runs", "slow.json"))
    traced = from_collectives(record, job)
    ablation = answer_run(record, [("slow.json", record)]).straggler
    # How long the wait is, against the sleep, is the collectives' waits above.
    effect = planted_s(slept_ms)
    verdict(
        traced.named and (traced.rank, traced.phase) == (1, "forward"),
        rate=1e-4,
        shown=[*named_in_traces(job, 1, effect), *phase_in_traces(job, 1, "forward", effect)],
        what=f"the traces name rank 1's forward\n{traced.sentence()}\n(the ablation: {ablation.sentence()})",
    )
    assert traced.source == "collectives" and ablation.source == "ablation"


@pytest.fixture(scope="module")
def slow_backward(tmp_path_factory):
    out = tmp_path_factory.mktemp("slow-backward")
    paths = launch(out, "slow_backward_rank_one", "bwd")
    with open(out / "bwd-slept.txt") as handle:
        slept_ms = statistics.median(float(line) for line in handle) * 1000
    return out, match_job(paths, jobs=2), slept_ms


def test_a_sleep_inside_backward_is_on_rank_1s_backward_on_the_path_and_in_the_verdict(slow_backward):
    """DDP's all-reduce makes both ranks' backward look as long: only the wait, followed across ranks,
    finds it. The path over the profiled steps is held most by rank 1's backward (a step where the
    shared machine held rank 0 back longer than the sleep was held by rank 0, and says so), rank 0
    waits for the sleep, and the traces' verdict names rank 1's backward (the ablation's, on
    docs/measurements/planted-causes.md: see `planted_s`)."""
    from ddpbench.analysis.straggler import from_collectives
    from ddpbench.records.store import load_record

    out, job, slept_ms = slow_backward
    summary = path_summary(job_paths(job))
    tops = [(path["held"][0]["rank"], path["held"][0]["phase"]) for path in summary["by_step"]]
    assert len(tops) == PROFILED_STEPS, tops
    mean_at_least(waits_ms(job.collectives, 0), 0.5 * slept_ms, missing=0.0, what="rank 0's wait, ms")
    straggler = from_collectives(load_record(os.path.join(out, "runs", "bwd.json")), job)
    held = (summary["held"][0]["rank"], summary["held"][0]["phase"]) == (1, "backward")
    named = straggler.named and (straggler.rank, straggler.phase) == (1, "backward")
    effect = planted_s(slept_ms)
    verdict(
        held and named,
        rate=1e-4,
        shown=[
            *held_the_path(job, 1, "backward", effect),
            *named_in_traces(job, 1, effect),
            *phase_in_traces(job, 1, "backward", effect),
        ],
        what=f"rank 1's backward holds the path and is named\n{straggler.sentence()}\n{tops}",
    )


def test_two_hosts_clocks_aligned_on_real_gloo_ends_contain_the_true_offset(slow_rank, tmp_path):
    """Rank 1's real trace as another host's, its clock 3 s ahead: the offset read from the
    all-reduces' ends must hold the truth in its interval, which on CPU is milliseconds wide."""
    import gzip

    import msgspec

    _, job, _ = slow_rank
    shift_us = 3_000_000.0
    with gzip.open(job.timelines[1].path, "rb") as handle:
        trace = msgspec.json.decode(handle.read())
    trace["host_name"] = "other-host"
    for event in trace["traceEvents"]:
        if "ts" in event:
            event["ts"] += shift_us
    moved = tmp_path / "rank-1.pt.trace.json.gz"
    with gzip.open(moved, "wb", compresslevel=1) as handle:
        handle.write(msgspec.json.encode(trace))
    offset = match_job([job.timelines[0].path, str(moved)], jobs=1).offsets["other-host"]
    assert offset.collectives == len(job.collectives)
    # The interval is the range of the end differences: it misses the truth only where every
    # collective ended in the same rank order, were each one's order a coin.
    verdict(
        offset.low_us <= -shift_us <= offset.high_us,
        rate=1e-4,
        shown=Known(
            2 * 0.5 ** len(job.collectives), f"{len(job.collectives)} collectives all ending in one rank order"
        ),
        what=str(offset),
    )
    # Here: -3003.2 ms within [-3006.9, -2997.2] ms; gloo's ends of one all-reduce are ms apart.
    # An offset not read from the ends (the 3 s shift itself) is three times a second.
    # not chance: a second is a hundred times the widest interval seen (9.7 ms)
    assert offset.high_us - offset.low_us < 1_000_000, offset
