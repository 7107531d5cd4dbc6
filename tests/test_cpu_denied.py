"""CPU denied, read from records (`ddpbench.analysis.cpu_denied`): a committed record of the slow-rank
sweep given the kernel's counters by hand, so every figure is known. A rank's waiting is a mean over
its steps with Student's t; whose the core was splits it by the CPU time other processes used; a run
is busy only where other processes took a part beyond noise; a quota that throttled a rank names
that rank; host contention's two parts add up to it in every round; the speed check takes a probe's
waiting out. The real kernel's counters: tests/test_cpu_counters.py; real runs with a hog, a quota
and a quiet machine: docs/measurements/cpu-denied.md."""

# chance: reference computation: every figure below is recomputed by hand over fixed numbers.

import math
import os
import statistics

import msgspec
import pytest
from conftest import FIXTURES
from msgspec.structs import replace
from scipy import stats

from ddpbench.analysis.ablation import read_ablation
from ddpbench.analysis.answers import answer_run, pool_runs
from ddpbench.analysis.cpu_denied import (
    MATERIAL_SHARE,
    configuration_cpu,
    iteration_waiting,
    judge_busy,
    run_cpu,
)
from ddpbench.analysis.probes import on_core, probe_flags
from ddpbench.records.schema import CpuWindow, MachineLoad, ProbeReading, ProcessProbe, StepCpu
from ddpbench.records.store import read_records

SWEEP = os.path.join(FIXTURES, "sweeps", "slow-rank")


@pytest.fixture(scope="module")
def records():
    found, unreadable = read_records(SWEEP)
    assert not unreadable
    return found


def _with_cpu(
    record, waited: dict[int, list[float]], quota: dict[int, float] | None = None, others=0.5, throttled_s=0.002
):
    """The record with each rank's counters: its waiting per step as given, its cgroup's quota and
    throttling (`throttled_s` a step) where given, and a machine load on rank 0 where other processes
    used `others` cores."""
    ranks = []
    for rank in record.ranks:
        steps = len(rank.step_times_s)
        values = waited[rank.rank]
        throttled = [throttled_s] * steps if quota and rank.rank in quota else [None] * steps
        cpu = CpuWindow(
            cpu_s=[0.003] * steps,
            waited_s=values,
            threads_cpu_s=[0.0] * steps,
            threads_waited_s=[0.0] * steps,
            comm_cpu_s=[0.001] * steps,
            comm_waited_s=[0.0005] * steps,
            loader_cpu_s=[0.0] * steps,
            loader_waited_s=[0.0] * steps,
            throttled_s=throttled,
            pressure_s=[0.001] * steps,
            quota_cores=(quota or {}).get(rank.rank),
        )
        load = None
        if rank.rank == 0:
            load = MachineLoad(
                hostname=rank.hostname, window_s=1.0, cores=2, busy_cores=2.0, own_cores=2.0 - others,
                others_cores=others, steal_cores=0.0, wanted_cores=2, busy=False,
            )  # fmt: skip
        ranks.append(replace(rank, cpu=cpu, machine_load=load, window_cpu_s=0.75))
    return replace(record, ranks=ranks)


def _slow2(records):
    return next(r for _, r in records if r.run_id == "slow2")


def test_a_rank_s_waiting_is_its_mean_over_the_steps_with_student_s_interval(records):
    base = _slow2(records)
    steps = len(base.ranks[0].step_times_s)
    rising = [0.001 * (i % 5) for i in range(steps)]
    record = _with_cpu(base, {0: [0.0] * steps, 1: rising})
    found = run_cpu(record)
    rank = found.ranks[1]
    half = stats.t.ppf(0.975, steps - 1) * statistics.stdev(rising) / math.sqrt(steps)
    assert rank.waited.value == pytest.approx(statistics.fmean(rising))
    assert rank.waited.half == pytest.approx(half, rel=0.05)  # beyond 30 degrees of freedom ddpbench takes 1.96
    step = statistics.fmean(base.ranks[1].step_times_s)
    assert rank.share.value == pytest.approx(statistics.fmean(rising) / step)
    # Other processes used 0.5 of the 2 busy cores; this rank used 0.75: of the 1.25 cores not its
    # own, 0.5 were others' (an estimate), so they took 40 % of its waiting.
    assert rank.others_share == pytest.approx(0.5 / 1.25)
    assert rank.comm_waited_s == pytest.approx(0.0005)  # the collective library's: shown apart


def test_waiting_beyond_noise_is_named_and_a_busy_run_says_how_much(records):
    base = _slow2(records)
    steps = len(base.ranks[0].step_times_s)
    step = statistics.fmean(base.ranks[1].step_times_s)
    # Rank 1 waits 20 % of its step, give or take a little; rank 0 half of MATERIAL_SHARE.
    heavy = [0.2 * step * (1 + 0.05 * ((-1) ** i)) for i in range(steps)]
    light = [0.5 * MATERIAL_SHARE * step] * steps
    found = run_cpu(_with_cpu(base, {0: light, 1: heavy}))
    assert [rank.rank for rank in found.waited_beyond_noise] == [1]
    assert [rank.rank for rank in found.harmed_by_others] == [1]
    said = found.sentence()
    assert said.startswith("rank 1 waited for a core 20 % of its step")
    assert "other processes took about 8 of those 20 (an estimate" in said
    assert judge_busy(_with_cpu(base, {0: light, 1: heavy})) == {"vm": found.busy_words()}
    assert "other processes took about" in found.busy_words() and "rank 1" in found.busy_words()
    # No other process on the machine: the waiting is the job's own, named, but nothing is busy.
    alone = run_cpu(_with_cpu(base, {0: light, 1: heavy}, others=0.0))
    assert alone.waited_beyond_noise and not alone.harmed_by_others and alone.busy_words() is None
    # The job's waiting per step is the most any rank waited, step by step.
    assert iteration_waiting(_with_cpu(base, {0: light, 1: heavy})).value == pytest.approx(statistics.fmean(heavy))


def test_a_quiet_run_names_no_rank_and_an_old_record_reads_not_measured(records):
    base = _slow2(records)
    steps = len(base.ranks[0].step_times_s)
    quiet = run_cpu(_with_cpu(base, {0: [0.0001] * steps, 1: [0.0002] * steps}))
    assert quiet.waited_beyond_noise == [] and quiet.sentence().startswith("no rank waited for a core beyond noise")
    assert run_cpu(base) is None and judge_busy(base) is None and iteration_waiting(base) is None


def test_a_cpu_quota_that_throttled_a_rank_names_that_rank(records):
    base = _slow2(records)
    steps = len(base.ranks[0].step_times_s)
    found = run_cpu(_with_cpu(base, {0: [0.0] * steps, 1: [0.0] * steps}, quota={1: 0.5}))
    assert [rank.rank for rank in found.throttled] == [1]
    assert "rank 1's CPU quota (0.50 cores) held it back 2.00 ms per step" in found.sentence()
    # A quota that throttled a rank for a moment (well under MATERIAL_SHARE of its step) names no rank.
    step_s = min(statistics.fmean(rank.step_times_s) for rank in base.ranks)
    brief = 0.2 * MATERIAL_SHARE * step_s
    barely = run_cpu(_with_cpu(base, {0: [0.0] * steps, 1: [0.0] * steps}, quota={1: 0.5}, throttled_s=brief))
    assert barely.throttled == [] and "quota" not in barely.sentence()
    pooled = configuration_cpu([_with_cpu(base, {0: [0.0] * steps, 1: [0.0] * steps}, quota={1: 0.5})] * 2)
    assert pooled.throttled_ranks() == [1] and "rank 1's CPU quota" in pooled.words()


def test_a_configuration_pools_its_runs_waiting_over_the_runs(records):
    base = _slow2(records)
    steps = len(base.ranks[0].step_times_s)
    step = statistics.fmean(base.ranks[1].step_times_s)
    shares = [0.10, 0.14, 0.18]
    runs = [_with_cpu(base, {0: [0.0] * steps, 1: [share * step] * steps}) for share in shares]
    pooled = configuration_cpu(runs)
    half = stats.t.ppf(0.975, 2) * statistics.stdev(shares) / math.sqrt(3)
    assert pooled.shares[1].value == pytest.approx(0.14) and pooled.shares[1].half == pytest.approx(half, rel=1e-3)
    assert pooled.ranks_beyond_noise() == [1]
    assert pooled.words().startswith("rank 1 waited for a core 14 % ± ")
    assert "(3 runs)" not in pooled.words() and "3 runs" in pooled.words()
    assert configuration_cpu([base]) is None  # not measured
    # The answer carries it: explain, the report and the closing screen read this one figure.
    answer = pool_runs([answer_run(run, records) for run in runs], {})
    assert answer.cpu.words() == pooled.words()


def test_host_contention_s_two_parts_add_up_to_it_in_every_round(records):
    """The alone rank's waiting for a core with every rank computing, against alone: the part the
    kernel counted; the rest is its step running slower on a core."""
    base = _slow2(records)
    by_rank = []
    for rank in base.timeline.by_rank:

        def counted(steps, waited):
            return [replace(step, cpu=StepCpu(waited_s=waited + 0.0001 * step.block)) for step in steps]

        by_rank.append(
            replace(rank, unwrapped=counted(rank.unwrapped, 0.004), alone=counted(rank.alone, 0.001),
                    solo=counted(rank.solo, 0.0), with_ddp=counted(rank.with_ddp, 0.0))
        )  # fmt: skip
    record = replace(base, timeline=replace(base.timeline, by_rank=by_rank))
    rounds = read_ablation(record).rounds
    assert rounds["contention:waiting"] and set(rounds["contention:waiting"]) == set(rounds["contention"])
    for round_, value in rounds["contention:waiting"].items():
        assert value == pytest.approx(0.003)
        assert value + rounds["contention:on_core"][round_] == pytest.approx(rounds["contention"][round_])
    parts = answer_run(record, records).parts
    assert parts["contention_waiting"].seconds.value == pytest.approx(0.003)
    # An older record has no parts: they were not measured.
    assert answer_run(base, records).parts == {}


def test_the_speed_check_takes_a_probe_s_waiting_out(records):
    reading = ProbeReading(matmul_gflops=20.0, copy_gbps=4.0, seconds=0.1, waited_s=0.05)
    assert on_core(reading, "matmul_gflops") == pytest.approx(40.0)
    assert on_core(replace(reading, waited_s=None), "matmul_gflops") == 20.0
    # Three runs' processes probe alike; one probed half as fast, but it waited half its probe for a
    # core: on a core it ran as fast as the others, so the speed check does not flag it.
    base = [r for _, r in records if r.status == "ok"][:3]
    assert len(base) == 3

    def probed(record, rate, waited):
        probe = ProcessProbe(before=ProbeReading(matmul_gflops=rate, copy_gbps=rate / 10, seconds=0.1,
                                                 waited_s=waited), after=None)  # fmt: skip
        return replace(record, ranks=[replace(rank, probe=probe) for rank in record.ranks])

    runs = [probed(base[0], 20.0, 0.05), *(probed(r, 40.0 * (1 + 0.01 * i), 0.0) for i, r in enumerate(base[1:]))]
    assert probe_flags(runs) == []
    slow = [probed(base[0], 20.0, 0.0), *runs[1:]]
    assert [flag.run_id for flag in probe_flags(slow)] == [base[0].run_id]
    # Where the process's timed steps waited too (its quota throttled it all along), its probe's
    # waiting is the run's: the reading stands as it came, and the run is flagged.
    steps = {rank.rank: len(rank.step_times_s) for rank in base[0].ranks}
    held = _with_cpu(base[0], {r: [0.0] * n for r, n in steps.items()}, quota=dict.fromkeys(steps, 0.25),
                     throttled_s=0.5 * min(statistics.fmean(rank.step_times_s) for rank in base[0].ranks))  # fmt: skip
    assert all(rank.throttled for rank in run_cpu(held).ranks)
    throttled = [probed(held, 20.0, 0.05), *runs[1:]]
    assert [flag.run_id for flag in probe_flags(throttled)] == [base[0].run_id]
    assert msgspec.json.decode(msgspec.json.encode(reading), type=ProbeReading) == reading
