"""Network profiles, the step replay and its what-ifs, on a saved 2-rank gloo record (mlp tiny)
with its traces and a profile fitted by `ddpbench comm` on this machine; plus one real `comm` run."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from conftest import FIXTURES, REPO, ddpbench

from ddpbench.analysis import network
from ddpbench.analysis.projection import (
    Contention,
    RunModel,
    WhatIf,
    contention_rates,
    project,
    rebucket,
)
from ddpbench.analysis.projection_validation import validation_cases
from ddpbench.analysis.trace_comm import allreduce_intervals_us, profile_vs_trace
from ddpbench.records.schema import ContentionProbe
from ddpbench.records.store import load_record

RECORD = os.path.join(FIXTURES, "projection", "mlp2.json")
PROFILE = os.path.join(FIXTURES, "projection", "gloo-profile.json")
MIB = 1024 * 1024


@pytest.fixture
def record(monkeypatch):
    monkeypatch.chdir(REPO)  # the record's trace paths are relative to the repository
    return load_record(RECORD)


def test_fit_recovers_a_planted_alpha_and_beta():
    sizes = [2**k for k in range(3, 27)]
    times = [50e-6 + s * 2e-9 for s in sizes]
    fit = network.fit_alpha_beta("all_reduce", 2, sizes, times)
    assert fit.alpha_s == pytest.approx(50e-6, rel=1e-6)
    assert fit.beta_s_per_byte == pytest.approx(2e-9, rel=1e-6)
    assert fit.band < 1e-6
    noisy = [t * (1.3 if i % 2 else 0.8) for i, t in enumerate(times)]
    assert network.fit_alpha_beta("all_reduce", 2, sizes, noisy).band > 0.15  # the band sees the noise


def test_predictions_use_the_fit_where_measured_and_the_fabric_elsewhere():
    profile = network.load_profile(PROFILE)
    fit = next(f for f in profile["fits"] if f["collective"] == "all_reduce")
    at_2 = network.predict(profile, "all_reduce", 2, 8 * MIB)
    assert at_2.basis == "fit"
    assert at_2.seconds == pytest.approx(fit["alpha_s"] + fit["beta_s_per_byte"] * 8 * MIB)
    assert at_2.low_s < at_2.seconds < at_2.high_s
    at_8 = network.predict(profile, "all_reduce", 8, 8 * MIB)
    assert at_8.basis == "fabric" and at_8.seconds > at_2.seconds  # 2(N-1)/N grows from 1 to 1.75
    assert network.predict(profile, "all_reduce", 1, 8 * MIB).seconds == 0.0
    doubled = network.predict(profile, "all_reduce", 2, 8 * MIB, bandwidth_scale=2.0)
    assert doubled.seconds == pytest.approx(fit["alpha_s"] + fit["beta_s_per_byte"] * 4 * MIB)


def test_presets_cross_nodes_at_the_slower_link():
    preset = network.load_profile("pcie4-8gpu")
    inside = network.predict(preset, "all_reduce", 8, 100 * MIB).seconds
    across = network.predict(preset, "all_reduce", 16, 100 * MIB).seconds
    assert across > 2 * inside  # 12.5 GB/s NIC against 32 GB/s PCIe


def test_rebucket_matches_ddps_own_assignment():
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    # Parameters that fill a 1 MiB bucket exactly (a bucket closes when it reaches its cap, not
    # beyond), then tiny-resnet-like sizes in gradient-ready order, some larger than the cap.
    sizes = [MIB // 2, MIB // 2, MIB // 4, MIB // 4, MIB // 2, MIB // 2] + [
        40,
        40960,
        4096,
        4194304,
        4096,
        4194304,
        256,
        1179648,
        256,
        256,
        65536,
        2359296,
        512,
    ] * 3
    tensors = [torch.empty(s // 4) for s in sizes]
    for cap in (1 * MIB, 5 * MIB, 25 * MIB):
        theirs, _ = dist._compute_bucket_assignment_by_size(
            tensors, [cap], [False] * len(tensors), list(range(len(tensors)))
        )
        assert rebucket(list(range(len(sizes))), sizes, cap) == [list(b) for b in theirs]
    theirs, _ = dist._compute_bucket_assignment_by_size(
        tensors, [MIB, 5 * MIB], [False] * len(tensors), list(range(len(tensors)))
    )
    assert rebucket(list(range(len(sizes))), sizes, 5 * MIB, first_cap_bytes=MIB) == [list(b) for b in theirs]


def test_the_runs_own_buckets_come_out_of_its_timeline(record):
    model = RunModel(record)
    sizes = [sum(model.param_bytes[i] for i in bucket) for bucket in model.buckets(model.source)]
    assert sizes == record.overlap.reducer.by_rank[0].rebuilt_bucket_sizes_bytes
    # Backward produces the last layer's gradient first.
    assert model.order[0] in (8, 9) and model.order[-1] in (0, 1)


def test_what_ifs_move_the_step_the_right_way(record):
    profile = network.load_profile(PROFILE)
    base = project(record, profile, WhatIf(world_size=2, bucket_cap_mb=25))
    assert base.measured_step_s == record.metrics.iteration_time_s.p50
    assert base.step_low_s <= base.step_s <= base.step_high_s
    faster_network = project(record, profile, WhatIf(world_size=2, bucket_cap_mb=25, bandwidth_scale=10))
    assert faster_network.step_s < base.step_s and faster_network.exposed_comm_s < base.exposed_comm_s
    small_buckets = project(record, profile, WhatIf(world_size=2, bucket_cap_mb=1))
    assert small_buckets.buckets > base.buckets == 1
    compressed = project(record, profile, WhatIf(world_size=2, bucket_cap_mb=25, comm_hook="fp16_compress"))
    assert compressed.comm_s < base.comm_s
    bigger = project(record, profile, WhatIf(world_size=64, bucket_cap_mb=25))
    assert bigger.throughput > base.throughput and bigger.efficiency < base.efficiency + 1e-9


def test_a_projection_is_the_runs_measured_step_plus_what_the_replay_says_changes(record):
    from msgspec.structs import replace

    profile = network.load_profile(PROFILE)
    measured = record.metrics.iteration_time_s.p50
    itself = project(record, profile, WhatIf(world_size=2, bucket_cap_mb=25))
    assert itself.step_s == pytest.approx(measured) != itself.modelled_step_s
    assert "its replay from parts gives" in itself.anchor
    small = project(record, profile, WhatIf(world_size=2, bucket_cap_mb=1))
    assert small.step_low_s <= small.step_s <= small.step_high_s
    # Plant a run measured 10 ms slower: every projection from it moves by those 10 ms, no more.
    timing = record.metrics.iteration_time_s
    slower = replace(record, metrics=replace(record.metrics, iteration_time_s=replace(timing, p50=timing.p50 + 0.010)))
    moved = project(slower, profile, WhatIf(world_size=2, bucket_cap_mb=1))
    assert moved.step_s - small.step_s == pytest.approx(0.010)
    assert moved.modelled_step_s == pytest.approx(small.modelled_step_s)


def test_no_anchor_where_what_the_replay_misses_does_not_carry_over(record):
    from msgspec.structs import replace

    profile = network.load_profile(PROFILE)
    other = project(record, network.load_profile("h100-nvswitch"), WhatIf(world_size=8, bucket_cap_mb=25))
    assert other.unexplained_s is None and other.step_s == other.modelled_step_s
    assert other.anchor.startswith("not anchored: the run is gloo and the profile nccl")
    unnamed = project(
        record, {k: v for k, v in profile.items() if k != "backend"}, WhatIf(world_size=2, bucket_cap_mb=25)
    )
    assert unnamed.unexplained_s is None and "does not say which backend" in unnamed.anchor
    alone = project(record, profile, WhatIf(world_size=1, bucket_cap_mb=25))
    assert alone.unexplained_s is None and "one device has no all-reduce" in alone.anchor
    timing = record.metrics.iteration_time_s
    tiny = replace(record, metrics=replace(record.metrics, iteration_time_s=replace(timing, p50=1e-6)))
    refused = project(tiny, profile, WhatIf(world_size=2, bucket_cap_mb=25))
    assert refused.unexplained_s is None and refused.step_s == refused.modelled_step_s > 0
    assert "less than half its replay's" in refused.anchor
    untimed = project(replace(record, metrics=None), profile, WhatIf(world_size=2, bucket_cap_mb=1))
    assert untimed.unexplained_s is None and "no timed steps" in untimed.anchor


def test_trace_allreduce_per_bucket_is_the_minimum_over_ranks(record):
    per_rank = [allreduce_intervals_us(path) for path in record.overlap.trace.paths]
    rows = profile_vs_trace(record, network.load_profile(PROFILE))
    assert len(rows) == 1 and rows[0]["bytes"] == 16834600
    shared = sorted(set(per_rank[0]) & set(per_rank[1]))
    expected = sorted(min(r[s][0][0] for r in per_rank) for s in shared)[len(shared) // 2] / 1e6
    assert rows[0]["trace_s"] == pytest.approx(expected)


def _chrome_trace(path, events) -> str:
    """A CPU trace as torch.profiler writes one: annotations (steps, gloo's collectives) and ops."""
    category = lambda name: "user_annotation" if name.startswith(("ProfilerStep#", "gloo:")) else "cpu_op"  # noqa: E731
    path.write_text(
        json.dumps(
            {
                "traceEvents": [
                    {"ph": "X", "cat": category(name), "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid}
                    for name, ts, dur, tid in events
                ]
            }
        )
    )
    return str(path)


def test_a_bucket_ran_alone_where_others_overlapped_it_for_under_a_tenth_of_the_profiles_time(
    record, tmp_path, monkeypatch
):
    from types import SimpleNamespace

    import msgspec
    from msgspec.structs import replace

    from ddpbench.analysis import trace_comm
    from ddpbench.analysis.registry import profiled_step_p50_s
    from ddpbench.analysis.traces import analyze_trace
    from ddpbench.records.schema import TraceSummary

    backward = "autograd::engine::evaluate_function: AddmmBackward0"
    # Step 1: backward covers 40 us of bucket 0 (100 us); bucket 1 starts while bucket 0 still runs
    # (gloo's second thread): they share 20 us. Step 2: a backward node that began in step 1 covers
    # 5 us of bucket 0; bucket 1 runs alone.
    rank0 = _chrome_trace(
        tmp_path / "rank-0.json",
        [
            ("ProfilerStep#1", 0, 1000, 1),
            (backward, 0, 140, 1),
            ("gloo:all_reduce", 100, 100, 2),
            ("gloo:all_reduce", 180, 50, 3),
            ("ProfilerStep#2", 1000, 1200, 1),
            (backward, 990, 115, 1),
            ("gloo:all_reduce", 1100, 80, 2),
            ("gloo:all_reduce", 1200, 40, 3),
        ],
    )
    # Rank 1 waits for rank 0 in every all-reduce (longer intervals) and nothing overlaps them.
    rank1 = _chrome_trace(
        tmp_path / "rank-1.json",
        [
            ("ProfilerStep#1", 0, 1100, 1),
            ("gloo:all_reduce", 50, 300, 2),
            ("gloo:all_reduce", 400, 60, 2),
            ("ProfilerStep#2", 1100, 1300, 1),
            ("gloo:all_reduce", 1150, 200, 2),
            ("gloo:all_reduce", 1400, 45, 2),
        ],
    )
    # Overlap is the union of what ran beside it: bucket 0 in step 1 is 40 (backward) + 20 (bucket 1).
    assert allreduce_intervals_us(rank0) == {1: [(100, 60), (50, 20)], 2: [(80, 5), (40, 0)]}
    # The record keeps each rank's trace analysed, as the worker does after its profiled phase.
    summaries = [msgspec.convert(analyze_trace(path).summary(), TraceSummary) for path in (rank0, rank1)]
    trace = replace(record.overlap.trace, paths=[rank0, rank1], by_rank=summaries)
    reducer = record.overlap.reducer
    two_buckets = replace(reducer, by_rank=[replace(reducer.by_rank[0], rebuilt_bucket_sizes_bytes=[4000, 2000])])
    traced = replace(record, overlap=replace(record.overlap, trace=trace, reducer=two_buckets))
    rows = trace_comm.bucket_times_s(traced)
    # The minimum over ranks per step, then the median over steps (of two: their mean).
    assert [row["trace_s"] for row in rows] == [pytest.approx(90e-6), pytest.approx(45e-6)]

    def alone_with_profile_time(seconds: float) -> list[tuple]:
        monkeypatch.setattr(trace_comm, "predict", lambda *args, **kwargs: SimpleNamespace(seconds=seconds))
        return [
            (row["alone_steps"], row["alone_s"])
            for row in trace_comm.profile_vs_trace(traced, network.load_profile(PROFILE))
        ]

    # The yardstick is the profile's time, not the step's interval: at 100 us, 10 us of overlap is
    # allowed (step 2 only); at 650 us, 65 us (both steps), though 60 of bucket 0's 100 us overlapped.
    assert alone_with_profile_time(100e-6) == [(1, pytest.approx(80e-6)), (1, pytest.approx(40e-6))]
    assert alone_with_profile_time(650e-6) == [(2, pytest.approx(90e-6)), (2, pytest.approx(45e-6))]
    assert profiled_step_p50_s(traced) == pytest.approx(1200e-6)  # the slower rank's: 1100 and 1300 us
    assert profiled_step_p50_s(replace(record, overlap=None)) is None


def test_validation_cases_compare_against_runs_with_the_knob(record):
    import dataclasses

    from msgspec.structs import replace

    cap1 = record.spec.replace(ddp=dataclasses.replace(record.spec.ddp, bucket_cap_mb=1.0))
    target = replace(record, run_id="mlp-cap1", spec=cap1)
    cases = validation_cases([record, target], network.load_profile(PROFILE))
    assert [c["kind"] for c in cases] == ["replay", "what-if"]
    # The replay is the model from its parts: anchored, it would be the measurement itself.
    assert cases[0]["projected_s"] != pytest.approx(cases[0]["measured_s"])
    assert cases[1]["anchored"] == 1 and cases[1]["projected_s"] != cases[1]["modelled_s"]
    assert cases[1]["case"] == "bucket cap 1 MB" and cases[1]["measured_s"] == target.metrics.iteration_time_s.p50
    assert cases[1]["sources"] == [record.run_id] and cases[1]["targets"] == ["mlp-cap1"]
    # A second run with the knob, three times as slow: measured is the median over the two runs.
    timing = target.metrics.iteration_time_s
    slower = replace(
        target,
        run_id="mlp-cap1-b",
        metrics=replace(target.metrics, iteration_time_s=replace(timing, p50=timing.p50 * 3)),
    )
    cases = validation_cases([record, target, slower], network.load_profile(PROFILE))
    assert len(cases) == 2 and cases[1]["targets"] == ["mlp-cap1", "mlp-cap1-b"]
    assert cases[1]["measured_s"] == pytest.approx(2 * timing.p50)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--world", "0", "--profile", "ib-100g"], "world size must be >= 1"),
        (["--world", "2", "--profile", "ib-100g", "--bucket-cap-mb", "0"], "bucket cap must be > 0"),
        (["--world", "2", "--profile", RECORD], "is not a network profile"),
        (["--world", "2", "--profile", "nonsense"], "neither a file nor a preset"),
    ],
)
def test_project_bad_input_is_one_line_and_exit_2(args, message):
    result = ddpbench("project", RECORD, *args)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_project_refuses_a_run_without_timeline_or_ddp(tmp_path):
    raw = json.load(open(RECORD))
    raw["timeline"] = None
    (tmp_path / "no-timeline.json").write_text(json.dumps(raw))
    result = ddpbench("project", str(tmp_path / "no-timeline.json"), "--world", "4", "--profile", "ib-100g")
    assert result.returncode == 2 and "no gradient timeline" in result.stderr
    raw["spec"]["strategy"] = "dp"
    (tmp_path / "local.json").write_text(json.dumps(raw))
    result = ddpbench("project", str(tmp_path / "local.json"), "--world", "4", "--profile", "ib-100g")
    assert result.returncode == 2 and "not a DDP run" in result.stderr


def test_project_prints_a_marked_projection():
    result = ddpbench("project", RECORD, "--world", "64", "--profile", "h100-nvswitch", "--comm-hook", "bf16_compress")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("PROJECTION (not a measurement)") and "world size 64" in result.stdout
    assert "DDP overhead     measured (steps through DDP over a one-rank group)" in result.stdout
    result = ddpbench("project", RECORD, "--world", "8", "--profile", "h100-nvswitch", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["what"]["world_size"] == 8 and data["step_low_s"] <= data["step_s"] <= data["step_high_s"]
    assert set(data["contention"]) == {"backward_rate", "comm_rate", "basis"}


def test_a_cpu_runs_contention_is_not_carried_to_another_fabric(record):
    from msgspec.structs import replace

    probe = ContentionProbe(
        probe_bytes=MIB,
        comm_alone_s=[0.02] * 3,
        backward_alone_s=[0.03] * 3,
        backward_with_comm_s=[0.05] * 3,
        comm_with_backward_s=[0.04] * 3,
    )
    probed = replace(
        record,
        timeline=replace(
            record.timeline, by_rank=[replace(rank, contention=probe) for rank in record.timeline.by_rank]
        ),
    )
    own = project(probed, network.load_profile(PROFILE), WhatIf(world_size=2, bucket_cap_mb=25))
    assert own.contention.basis.startswith("measured") and own.contention.backward_rate < 1
    other = project(probed, network.load_profile("h100-nvswitch"), WhatIf(world_size=8, bucket_cap_mb=25))
    assert other.contention.backward_rate == 1.0 and "not applied to a nccl profile" in other.contention.basis


def test_report_marks_the_projection_beyond_this_machine(tmp_path):
    import shutil

    from ddpbench.report.html import build_report

    os.makedirs(tmp_path / "runs")
    shutil.copy(RECORD, tmp_path / "runs" / "mlp2.json")
    page = open(build_report(str(tmp_path), str(tmp_path / "index.html"), "h100-nvswitch")).read()
    assert "Beyond this machine (projection)" in page and "PROJECTION, not measured." in page
    for world in ("8", "64", "512"):
        assert f" >{world}</td>" in page
    assert "the replay misses of the measured step" not in page  # a CPU gloo run on an NVSwitch preset
    own = open(build_report(str(tmp_path), str(tmp_path / "own.html"), PROFILE)).read()
    assert own.count("ms the replay misses of the measured step") == 3  # anchored at 8, 64 and 512
    without = open(build_report(str(tmp_path), str(tmp_path / "plain.html"))).read()
    assert "No network profile" in without


def test_inside_the_measured_range_predictions_follow_the_measured_curve():
    results = {
        "world_size": 2,
        "backend": "gloo",
        "device": "cpu",
        "env": {},
        "results": [
            {"collective": "all_reduce", "bytes": b, "p50_s": t}
            for b, t in ((1024, 1e-4), (1 << 20, 1e-3), (4 << 20, 8e-3), (16 << 20, 40e-3))
        ],
    }  # bends at 1 MiB, as caches do
    profile = network.profile_from_results(results, "bent")
    at_4m = network.predict(profile, "all_reduce", 2, 4 << 20)
    assert at_4m.basis == "measured" and at_4m.seconds == pytest.approx(8e-3)
    between = network.predict(profile, "all_reduce", 2, 2 << 20).seconds
    assert 1e-3 < between < 8e-3
    assert network.predict(profile, "all_reduce", 2, 64 << 20).basis == "fit"  # beyond what was measured
    alpha = profile["fits"][0]["alpha_s"]
    halved = network.predict(profile, "all_reduce", 2, 4 << 20, bandwidth_scale=2).seconds
    assert halved == pytest.approx(alpha + (8e-3 - alpha) / 2)


def two_jobs(backward_s: float, comm_s: float, backward_rate: float, comm_rate: float) -> tuple[float, float]:
    """Wall times of backward and an all-reduce started together, each at its rate while both run."""
    both = min(backward_s / backward_rate, comm_s / comm_rate)  # until the first one finishes
    backward_left, comm_left = backward_s - both * backward_rate, comm_s - both * comm_rate
    return both + max(0.0, backward_left), both + max(0.0, comm_left)


@pytest.mark.parametrize(
    "backward_s, comm_s, backward_rate, comm_rate",
    [
        (0.050, 0.030, 0.6, 0.5),  # the all-reduce finishes inside backward
        (0.004, 0.015, 0.8, 0.3),  # backward finishes first
        (0.020, 0.020, 1.0, 1.0),  # no interference
    ],
)
def test_contention_rates_recover_the_rates_of_a_probe(backward_s, comm_s, backward_rate, comm_rate):
    with_comm, with_backward = two_jobs(backward_s, comm_s, backward_rate, comm_rate)
    probe = ContentionProbe(
        probe_bytes=MIB,
        comm_alone_s=[comm_s] * 3,
        backward_alone_s=[backward_s] * 3,
        backward_with_comm_s=[with_comm] * 3,
        comm_with_backward_s=[with_backward] * 3,
    )
    # The other rank joined the all-reduce later (its interval is longer) and its backward was faster.
    late = ContentionProbe(
        probe_bytes=MIB,
        comm_alone_s=[comm_s * 1.5] * 3,
        backward_alone_s=[backward_s * 0.9] * 3,
        backward_with_comm_s=[with_comm * 0.9] * 3,
        comm_with_backward_s=[with_backward * 1.2] * 3,
    )
    rates = contention_rates([probe, late])
    assert rates.backward_rate == pytest.approx(backward_rate)
    assert rates.comm_rate == pytest.approx(comm_rate)
    assert rates.basis.startswith("measured: 2 ranks x 3 rounds")
    assert contention_rates([None]).basis.startswith("not measured")
    # One round thrown far off (a stall of the machine) moves nothing: the rates are per-round medians.
    stalled = ContentionProbe(
        probe_bytes=MIB,
        comm_alone_s=[comm_s] * 3,
        backward_alone_s=[backward_s] * 3,
        backward_with_comm_s=[with_comm * 1.9, with_comm, with_comm],
        comm_with_backward_s=[with_backward * 1.9, with_backward, with_backward],
    )
    assert contention_rates([stalled]).backward_rate == pytest.approx(backward_rate)


def test_contention_is_not_claimed_from_an_overlap_too_short_to_tell():
    # A 5 ms all-reduce against 50 ms of backward: 1 ms of jitter in backward would read as a
    # backward rate of 0.8, so the probe claims nothing.
    short = ContentionProbe(
        probe_bytes=MIB,
        comm_alone_s=[0.005] * 3,
        backward_alone_s=[0.050] * 3,
        backward_with_comm_s=[0.051] * 3,
        comm_with_backward_s=[0.005] * 3,
    )
    rates = contention_rates([short])
    assert (rates.backward_rate, rates.comm_rate) == (1.0, 1.0) and "overlapped too little" in rates.basis


def test_replay_slows_both_by_the_contention_rates_while_they_overlap(record):
    model = RunModel(record)
    what = WhatIf(world_size=2, bucket_cap_mb=1)  # buckets all-reduced while backward runs
    comm = lambda size, dtype: 2e-3 + size * 1e-9  # noqa: E731
    free = model.replay(what, comm, Contention(1.0, 1.0))
    shared = model.replay(what, comm, Contention(0.5, 0.25))
    assert free.overlapped_comm_s > 0 and shared.overlapped_comm_s > free.overlapped_comm_s
    _, work, _ = model.backward_work(what, model.buckets(what))
    start = model.with_ddp.backward_start_s  # backward starts where the DDP steps' forward ends
    for replay, rates in ((free, (1.0, 1.0)), (shared, (0.5, 0.25))):
        # Backward does its work at full speed except while overlapped, where it goes at its rate.
        assert replay.backward_end_s - start == pytest.approx(work + replay.overlapped_comm_s * (1 - rates[0]))
        busy = sum(row["end_s"] - row["start_s"] for row in replay.buckets)
        assert busy == pytest.approx(replay.comm_s + replay.overlapped_comm_s * (1 - rates[1]))
        starts = [row["start_s"] for row in replay.buckets]
        assert starts == sorted(starts) and all(row["start_s"] >= row["ready_s"] - 1e-12 for row in replay.buckets)
    assert shared.step_s > free.step_s and shared.backward_end_s > free.backward_end_s


def test_compression_uses_the_half_precision_curve_where_measured():
    def fit(dtype: str, beta: float) -> dict:
        return {
            "collective": "all_reduce",
            "world_size": 2,
            "dtype": dtype,
            "alpha_s": 0.0,
            "beta_s_per_byte": beta,
            "band": 0.1,
            "points": 10,
            "min_bytes": 8,
            "max_bytes": 64 * MIB,
        }

    fabric = {
        "devices_per_node": 2,
        "intra_busbw": 1e9,
        "intra_latency_s": 0.0,
        "inter_busbw": 1e9,
        "inter_latency_s": 0.0,
    }
    profile = {"kind": network.PROFILE_KIND, "name": "t", "fits": [fit("float32", 1e-9)], "fabric": fabric}
    with_half = dict(profile, fits=[fit("float32", 1e-9), fit("float16", 3e-9)])
    size = 4 * MIB
    plain = network.predict(with_half, "all_reduce", 2, size)
    half = network.predict(with_half, "all_reduce", 2, size, dtype="float16")
    assert half.seconds == pytest.approx(3 * plain.seconds) and half.basis == "fit"
    stand_in = network.predict(profile, "all_reduce", 2, size, dtype="float16")
    assert stand_in.seconds == pytest.approx(plain.seconds) and stand_in.basis == "fit, float32 rate"
    # Measured in float32 only at world size 4: float16's ratio from world size 2 carries over.
    at_4 = dict(with_half, fits=[*with_half["fits"], {**fit("float32", 2e-9), "world_size": 4}])
    half_4 = network.predict(at_4, "all_reduce", 4, size, dtype="float16")
    assert half_4.seconds == pytest.approx(3 * network.predict(at_4, "all_reduce", 4, size).seconds)
    assert half_4.basis == "fit, float16/float32 as measured"
    # At a world size only the fabric model covers, the measured float16/float32 ratio carries over.
    far = network.predict(with_half, "all_reduce", 16, size)
    far_half = network.predict(with_half, "all_reduce", 16, size, dtype="float16")
    assert far_half.seconds == pytest.approx(3 * far.seconds) and "float16/float32 as measured" in far_half.basis
    assert network.predict(profile, "all_reduce", 16, size, dtype="float16").basis == "fabric, float32 rate"


def test_one_rank_ddp_steps_carry_ddps_own_work_and_only_a_what_ifs_difference_is_added(record):
    import dataclasses

    from msgspec.structs import replace

    # Solo steps: the no_sync steps with DDP's work in them (+1 ms at every gradient, +3 ms after).
    def with_ddp_work(step):
        return replace(
            step,
            grad_ready_s=[t + 1e-3 for t in step.grad_ready_s],
            optimizer_start_s=step.optimizer_start_s + 3e-3,
            optimizer_end_s=step.optimizer_end_s + 3e-3,
            step_s=step.step_s + 3e-3,
        )

    ranks = [replace(rank, solo=[with_ddp_work(s) for s in rank.without_allreduce]) for rank in record.timeline.by_rank]
    solo_record = replace(record, timeline=replace(record.timeline, by_rank=ranks))
    model, older = RunModel(solo_record), RunModel(record)
    no_network = lambda size, dtype: 0.0  # noqa: E731
    free = Contention(1.0, 1.0)
    source = model.replay(model.source, no_network, free)
    base = model.solo
    # The run's own knobs: backward, finalizing and all, exactly as the one-rank DDP steps measured it.
    assert source.step_s == pytest.approx(
        model.with_ddp.data_s
        + model.with_ddp.backward_start_s
        + base.backward_span_s
        + base.tail_s
        + model.with_ddp.optimizer_s
        + model.with_ddp.after_s
    )
    assert source.step_s != pytest.approx(older.replay(older.source, no_network, free).step_s)
    # A what-if adds only its difference: gradient_as_bucket_view drops the copy back, and turns
    # the dividing copy into the bucket into an in-place divide (a plain pass over the bytes).
    view = model.replay(dataclasses.replace(model.source, gradient_as_bucket_view=True), no_network, free)
    costs, total = model.costs, sum(model.param_bytes)
    copy_back = costs.copy_s_per_byte * total + (costs.copy_call_s or 0.0) * len(model.param_bytes)
    lighter_copy_in = (costs.scaled_copy_s_per_byte - costs.copy_s_per_byte) * total
    assert source.step_s - view.step_s == pytest.approx(lighter_copy_in + min(copy_back, base.tail_s))


def test_the_replay_takes_forward_from_the_ddp_steps(record):
    """The replay's forward is the DDP steps' (the timeline's steps most like the timed ones; in
    the validation sets their forward took longer than the one-rank steps'): a longer forward there
    (everything after it later by as much) moves every replay by as much, and a longer forward in
    the one-rank steps, whose backward the replay takes, moves nothing."""
    from msgspec.structs import replace

    def longer_forward(kind: str, seconds: float):
        def later(step):
            return replace(
                step,
                backward_start_s=step.backward_start_s + seconds,
                grad_ready_s=[t + seconds for t in step.grad_ready_s],
                optimizer_start_s=step.optimizer_start_s + seconds,
                optimizer_end_s=step.optimizer_end_s + seconds,
                step_s=step.step_s + seconds,
            )

        ranks = [
            replace(rank, **{kind: [later(step) for step in getattr(rank, kind)]}) for rank in record.timeline.by_rank
        ]
        return replace(record, timeline=replace(record.timeline, by_rank=ranks))

    comm = lambda size, dtype: 2e-3 + size * 1e-9  # noqa: E731
    for what in (WhatIf(world_size=2, bucket_cap_mb=25), WhatIf(world_size=8, bucket_cap_mb=1)):
        before = RunModel(record).replay(what, comm).step_s
        assert RunModel(longer_forward("with_ddp", 0.005)).replay(what, comm).step_s == pytest.approx(before + 0.005)
        assert RunModel(longer_forward("solo", 0.005)).replay(what, comm).step_s == pytest.approx(before)


def test_projected_efficiency_divides_by_the_scaling_tables_x1(tmp_path, capsys):
    from ddpbench.analysis.frames import load, scaling_table
    from ddpbench.cli import main

    runs = tmp_path / "sweep" / "runs"
    runs.mkdir(parents=True)
    shutil.copy(RECORD, runs / "mlp2.json")
    local = os.path.join(FIXTURES, "sweeps", "cpu-mlp-with-failure", "runs", "mlp-local-n1.json")
    shutil.copy(local, runs / "mlp-local-n1.json")
    x1 = load_record(local).metrics.throughput_units_per_s
    assert main(["project", str(runs / "mlp2.json"), "--world", "2", "--profile", PROFILE, "--json"]) == 0
    projected = json.loads(capsys.readouterr().out)
    assert projected["efficiency_reference"] == "X(1) of the sweep's local run (mlp-local-n1)"
    assert projected["efficiency"] == pytest.approx(projected["throughput"] / (2 * x1))
    # The same X(1) as the scaling table's row for the run itself.
    row = scaling_table(load(str(tmp_path / "sweep"))).query("strategy == 'ddp'").iloc[0]
    assert row["throughput"] / (2 * row["efficiency"]) == pytest.approx(x1)

    os.remove(runs / "mlp-local-n1.json")  # no local run: the run's own no_sync steps, and said so
    assert main(["project", str(runs / "mlp2.json"), "--world", "2", "--profile", PROFILE]) == 0
    assert "(against one device without DDP from the run's own no_sync steps (no local run" in capsys.readouterr().out
