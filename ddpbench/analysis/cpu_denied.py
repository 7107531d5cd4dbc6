"""CPU denied: how long each rank's training thread waited for a core in the timed window, whose the
core was, and whether a CPU quota held the rank back, from what the kernel counted per step
(`ddpbench.host.cpu_denied`, the record's ranks' `cpu`). No torch.

The training thread's step is its time on a core, its time runnable but waiting for one, and its time
blocked (in a collective, at a barrier, in a sleep). The kernel counts the first two exactly, so the
waiting is a measurement, not a difference of two noisy step times. The rank's other threads (its
intra-op pool) are shown apart: while the training thread waits at the end of a parallel region for a
pool thread that waits for a core, the training thread spins on its core, and its step is longer by
time on a core, not by waiting. The collective library's threads' waiting belongs to communication.

Whose the core was is an estimate, and labelled so: the kernel says how long a thread waited, not who
ran meanwhile. The waiting is split between the job's own processes and the machine's other
processes by their CPU time over the same window (`MachineLoad`: the CPUs' busy time from /proc/stat
less the job's own process tree): of the CPU time that was not this rank's, the share other processes
used.

A rank waited beyond noise where its mean waiting per step, over the window's steps, has a 95 %
interval whose lower end lies above MATERIAL_SHARE of its step: waiting that small is the harness's and
the kernel's own (a timer tick, a woken thread). Other processes harmed a run where the part of that
waiting they took is beyond MATERIAL_SHARE too; the run is then marked busy, with how much.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from ddpbench.analysis.estimates import Estimate, t_975
from ddpbench.records.schema import MachineLoad, RankResult, Record

MATERIAL_SHARE = 0.02
"""Waiting under 2 % of a step is not named: a quiet machine's own (the job's gloo threads waking,
the kernel's ticks). docs/measurements/cpu-denied.md measures a quiet baseline against it."""


def _estimate(values: list[float]) -> Estimate:
    """A mean over steps with its t interval (one run's steps)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return Estimate(mean, None, None, len(values), "steps", None)
    se = statistics.stdev(values) / math.sqrt(len(values))
    half = t_975(len(values) - 1) * se
    return Estimate(mean, mean - half, mean + half, len(values), "steps", se)


def _mean(values: list[float | None]) -> float | None:
    found = [value for value in values if value is not None]
    return statistics.fmean(found) if found else None


@dataclass
class RankCpu:
    """One rank over its timed window, seconds per step."""

    rank: int
    host: str
    step_s: float
    """The rank's mean step."""
    waited: Estimate
    """Its training thread's waiting for a core per step, with its interval over the steps."""
    others_share: float | None
    """Of the CPU time that was not this rank's, the share other processes used (an estimate);
    None where the machine's load was not read on the rank's host."""
    on_core_s: float
    """Its training thread's time on a core per step."""
    threads_waited_s: float
    """Its other threads' (intra-op pool's) waiting per step, summed over them."""
    comm_waited_s: float
    """The collective library's threads' waiting per step, summed (communication's)."""
    loader_waited_s: float
    throttled_s: float | None
    """Its cgroup throttled by a CPU quota per step; None where no quota applied."""
    quota_cores: float | None

    @property
    def share(self) -> Estimate:
        """The waiting as a fraction of the rank's step."""
        return self.waited.scaled(1 / self.step_s) if self.step_s > 0 else self.waited

    @property
    def beyond_noise(self) -> bool:
        share = self.share
        return share.low is not None and share.low > MATERIAL_SHARE

    @property
    def others_s(self) -> float | None:
        """The waiting other processes took, per step (an estimate)."""
        return None if self.others_share is None else self.waited.value * self.others_share

    @property
    def harmed_by_others(self) -> bool:
        """Other processes took a part of its waiting beyond noise."""
        if not self.beyond_noise or self.others_share is None or self.step_s <= 0:
            return False
        return self.share.low * self.others_share > MATERIAL_SHARE

    @property
    def throttled(self) -> bool:
        """Its CPU quota held it back more than MATERIAL_SHARE of its step (the mean over the steps): a
        pod's limit that throttles it now and then for a moment names no rank."""
        return throttled_beyond(self.throttled_s if self.quota_cores is not None else None, self.step_s)

    def words(self) -> str:
        """`rank 1 waited for a core 12 % of its step (4.1 ms); other processes took about 9 of those 12`."""
        share = self.share
        said = (
            f"rank {self.rank} waited for a core {100 * share.value:.0f} % of its step "
            f"({1e3 * self.waited.value:.2f} ± {1e3 * (self.waited.half or 0):.2f} ms)"
        )
        if self.others_share is not None:
            said += (
                f"; other processes took about {100 * share.value * self.others_share:.0f} of those "
                f"{100 * share.value:.0f} (an estimate, from their CPU time)"
            )
        if self.throttled:
            said += f"; its CPU quota ({self.quota_cores:.2f} cores) held it back {1e3 * self.throttled_s:.2f} ms"
        return said

    def as_dict(self) -> dict:
        return {
            "rank": self.rank,
            "host": self.host,
            "step_s": self.step_s,
            "waited_s": self.waited.as_dict(),
            "waited_share": self.share.as_dict(),
            "beyond_noise": self.beyond_noise,
            "others_share": self.others_share,
            "others_s": self.others_s,
            "harmed_by_others": self.harmed_by_others,
            "on_core_s": self.on_core_s,
            "threads_waited_s": self.threads_waited_s,
            "comm_waited_s": self.comm_waited_s,
            "loader_waited_s": self.loader_waited_s,
            "throttled_s": self.throttled_s,
            "quota_cores": self.quota_cores,
        }


def throttled_beyond(throttled_s: float | None, step_s: float | None) -> bool:
    """Throttled per step beyond MATERIAL_SHARE of the step: the one rule for a rank and a configuration."""
    return throttled_s is not None and bool(step_s) and throttled_s / step_s > MATERIAL_SHARE


def _node_loads(record: Record) -> dict[str, MachineLoad]:
    """Host name -> the load its local rank 0 read over the window."""
    found = {}
    for rank in record.ranks:
        if rank.machine_load is not None:
            found[rank.machine_load.hostname] = rank.machine_load
    if not found and record.machine_load is not None:
        found[record.machine_load.hostname] = record.machine_load
    return found


def others_share(load: MachineLoad | None, rank_cores: float | None) -> float | None:
    """Of the CPU time on the rank's host that was not the rank's own, the share other processes
    used: others / (busy - the rank's), from the window's /proc readings."""
    if load is None or load.own_cores is None or rank_cores is None:
        return None
    not_mine = load.busy_cores - rank_cores
    if not_mine <= 1e-9:
        return 0.0
    return min(1.0, max(0.0, load.others_cores / not_mine))


def rank_cpu(record: Record, rank: RankResult, loads: dict[str, MachineLoad] | None = None) -> RankCpu | None:
    """One rank's CPU over its window; None where the kernel's counters were not read."""
    cpu = rank.cpu
    if cpu is None or not cpu.waited_s or any(value is None for value in cpu.waited_s) or not rank.step_times_s:
        return None  # no counters, or no timed step to divide by
    loads = _node_loads(record) if loads is None else loads
    host = rank.hostname or record.env.hostname or "?"
    load = loads.get(host) or (next(iter(loads.values())) if len(loads) == 1 else None)
    window_s = load.window_s if load is not None else None
    rank_cores = rank.window_cpu_s / window_s if rank.window_cpu_s is not None and window_s else None
    steps = list(rank.step_times_s)
    throttled = _mean(cpu.throttled_s)
    return RankCpu(
        rank=rank.rank,
        host=host,
        step_s=statistics.fmean(steps) if steps else 0.0,
        waited=_estimate(list(cpu.waited_s)),
        others_share=others_share(load, rank_cores),
        on_core_s=_mean(cpu.cpu_s) or 0.0,
        threads_waited_s=_mean(cpu.threads_waited_s) or 0.0,
        comm_waited_s=_mean(cpu.comm_waited_s) or 0.0,
        loader_waited_s=_mean(cpu.loader_waited_s) or 0.0,
        throttled_s=throttled if cpu.quota_cores is not None else None,
        quota_cores=cpu.quota_cores,
    )


@dataclass
class RunCpu:
    """One run's CPU denied: every rank's, and the host's pressure."""

    ranks: list[RankCpu]
    pressure_share: float | None
    """The host's CPU pressure over the window (time some task waited for a CPU) per step, as a share
    of the step: the whole host's, the job's own threads included."""
    steal_cores: float | None

    @property
    def most_waiting(self) -> RankCpu:
        return max(self.ranks, key=lambda rank: rank.share.value)

    @property
    def waited_beyond_noise(self) -> list[RankCpu]:
        return [rank for rank in self.ranks if rank.beyond_noise]

    @property
    def harmed_by_others(self) -> list[RankCpu]:
        return [rank for rank in self.ranks if rank.harmed_by_others]

    @property
    def throttled(self) -> list[RankCpu]:
        return [rank for rank in self.ranks if rank.throttled]

    def sentence(self) -> str:
        """The run's CPU denied in one line, or that no rank waited beyond noise."""
        said = []
        waited = self.waited_beyond_noise
        if waited:
            said.append(max(waited, key=lambda rank: rank.share.value).words())
            if len(waited) > 1:
                more = len(waited) - 1
                said[-1] += f" (and {more} other {'rank' if more == 1 else 'ranks'} beyond noise)"
        for rank in self.throttled:
            if rank not in waited[:1]:
                said.append(
                    f"rank {rank.rank}'s CPU quota ({rank.quota_cores:.2f} cores) held it back "
                    f"{1e3 * rank.throttled_s:.2f} ms per step"
                )
        if not said:
            worst = self.most_waiting
            return (
                f"no rank waited for a core beyond noise (the most, rank {worst.rank}, "
                f"{100 * worst.share.value:.1f} % of its step)"
            )
        return "; ".join(said)

    def busy_words(self) -> str | None:
        """Why the run is marked busy from the kernel's counters, or None where it is not."""
        harmed = self.harmed_by_others
        if not harmed:
            return None
        worst = max(harmed, key=lambda rank: rank.others_s or 0.0)
        return (
            f"other processes took about {1e3 * (worst.others_s or 0.0):.2f} ms per step of rank {worst.rank}'s "
            f"{1e3 * worst.step_s:.2f} ms step on {worst.host} ({100 * worst.share.value * worst.others_share:.0f} %), "
            "as its waiting for a core"
        )

    def as_dict(self) -> dict:
        return {
            "ranks": [rank.as_dict() for rank in self.ranks],
            "pressure_share": self.pressure_share,
            "steal_cores": self.steal_cores,
            "sentence": self.sentence(),
            "busy": self.busy_words(),
        }


def run_cpu(record: Record) -> RunCpu | None:
    """A run's CPU denied; None where its ranks' counters were not read (older records: not
    measured, never zero)."""
    loads = _node_loads(record)
    found = [rank_cpu(record, rank, loads) for rank in sorted(record.ranks, key=lambda r: r.rank)]
    if not found or any(rank is None for rank in found):
        return None
    pressure = [
        statistics.fmean([value for value in rank.cpu.pressure_s if value is not None])
        for rank in record.ranks
        if rank.cpu is not None and any(value is not None for value in rank.cpu.pressure_s)
    ]
    steps = [rank.step_s for rank in found if rank.step_s > 0]
    pressure_share = max(pressure) / statistics.fmean(steps) if pressure and steps else None
    steal = [load.steal_cores for load in loads.values() if load.steal_cores is not None]
    return RunCpu(found, pressure_share, max(steal) if steal else None)


def judge_busy(record: Record) -> dict[str, str | None] | None:
    """The busy mark from the kernel's counters, per host: why, where other processes took a part of
    some rank's waiting for a core beyond noise, else None. None where the counters were not read
    (the machine_load's own rule then stands)."""
    found = run_cpu(record)
    if found is None:
        return None
    verdict: dict[str, str | None] = {}
    for host in {rank.host for rank in found.ranks}:
        on_host = RunCpu([rank for rank in found.ranks if rank.host == host], None, None)
        verdict[host] = on_host.busy_words()
    return verdict


@dataclass
class ConfigurationCpu:
    """A configuration's CPU denied, pooled over its runs like every figure: per rank, the mean of
    the runs' waiting shares with a t interval over the runs (one run: over its steps)."""

    runs: int
    shares: dict[int, Estimate]
    """Rank -> its training thread's waiting for a core, as a fraction of its step."""
    waited_s: dict[int, Estimate]
    """Rank -> the same in seconds per step."""
    others_shares: dict[int, float]
    """Rank -> the share of the CPU not its own that other processes used, mean over the runs (an
    estimate); missing where the machine's load was not read."""
    throttled_s: dict[int, float]
    """Rank -> seconds per step its CPU quota throttled it, mean over the runs that had a quota."""
    quota_cores: dict[int, float]
    hosts: dict[int, str]
    step_s: dict[int, float]
    """Rank -> its mean step over the runs, seconds."""

    def beyond_noise(self, rank: int) -> bool:
        share = self.shares[rank]
        return share.low is not None and share.low > MATERIAL_SHARE

    def ranks_beyond_noise(self) -> list[int]:
        return [rank for rank in sorted(self.shares) if self.beyond_noise(rank)]

    def most_waiting(self) -> tuple[int, Estimate, float | None] | None:
        """The rank that waited most beyond noise, its share of its step, and of that share what other
        processes took (an estimate; None where the machine's load was not read); None where no rank
        waited beyond noise. What every output says of the configuration's waiting."""
        waited = self.ranks_beyond_noise()
        if not waited:
            return None
        rank = max(waited, key=lambda r: self.shares[r].value)
        share = self.shares[rank]
        others = self.others_shares.get(rank)
        return rank, share, None if others is None else share.value * others

    def throttled_ranks(self) -> list[int]:
        """Ranks whose CPU quota held them back beyond MATERIAL_SHARE of their step."""
        held = self.throttled_s
        return [rank for rank in sorted(held) if throttled_beyond(held[rank], self.step_s.get(rank))]

    def words(self) -> str | None:
        """`rank 1 waited for a core 12 % ± 3 of its step (3 runs); other processes took about 9 of
        those 12 (an estimate)`, for the rank that waited most beyond noise, and any quota that held a
        rank back; None where neither."""
        said = []
        most = self.most_waiting()
        if most is not None:
            rank, share, others = most
            runs = f"{self.runs} runs" if self.runs > 1 else "1 run"
            text = (
                f"rank {rank} waited for a core {100 * share.value:.0f} % ± {100 * (share.half or 0):.0f} of its "
                f"step ({1e3 * self.waited_s[rank].value:.2f} ms, {runs})"
            )
            if others is not None:
                took, of = 100 * others, 100 * share.value
                text += f"; other processes took about {took:.0f} of those {of:.0f} (an estimate)"
            more = len(self.ranks_beyond_noise()) - 1
            if more:
                text += f"; {more} other {'rank' if more == 1 else 'ranks'} waited beyond noise too"
            said.append(text)
        for rank in self.throttled_ranks():
            said.append(
                f"rank {rank}'s CPU quota ({self.quota_cores[rank]:.2f} cores) held it back "
                f"{1e3 * self.throttled_s[rank]:.2f} ms per step"
            )
        return "; ".join(said) or None

    def as_dict(self) -> dict:
        return {
            "runs": self.runs,
            "ranks": {
                str(rank): {
                    "host": self.hosts.get(rank),
                    "waited_share": self.shares[rank].as_dict(),
                    "waited_s": self.waited_s[rank].as_dict(),
                    "beyond_noise": self.beyond_noise(rank),
                    "others_share": self.others_shares.get(rank),
                    "throttled_s": self.throttled_s.get(rank),
                    "quota_cores": self.quota_cores.get(rank),
                }
                for rank in sorted(self.shares)
            },
            "words": self.words(),
        }


def configuration_cpu(records: list[Record]) -> ConfigurationCpu | None:
    """A configuration's CPU denied over its runs; None where any run's counters were not read."""
    runs = [run_cpu(record) for record in records]
    if not runs or any(run is None for run in runs):
        return None
    by_rank: dict[int, list[RankCpu]] = {}
    for run in runs:
        for rank in run.ranks:
            by_rank.setdefault(rank.rank, []).append(rank)
    shares, waited, others, throttled, quotas, hosts, steps = {}, {}, {}, {}, {}, {}, {}
    for rank, found in by_rank.items():
        if len(found) == 1:
            shares[rank], waited[rank] = found[0].share, found[0].waited
        else:
            shares[rank] = Estimate.of_runs([item.share.value for item in found])
            waited[rank] = Estimate.of_runs([item.waited.value for item in found])
        known = [item.others_share for item in found if item.others_share is not None]
        if known:
            others[rank] = statistics.fmean(known)
        quota = [item for item in found if item.quota_cores is not None]
        if quota:
            throttled[rank] = statistics.fmean(item.throttled_s or 0.0 for item in quota)
            quotas[rank] = min(item.quota_cores for item in quota)
        hosts[rank] = found[0].host
        steps[rank] = statistics.fmean(item.step_s for item in found)
    return ConfigurationCpu(len(runs), shares, waited, others, throttled, quotas, hosts, steps)


def iteration_waiting(record: Record) -> Estimate | None:
    """The job's waiting for a core per step: in each timed step the most any rank waited (the
    slowest rank sets the pace, as the iteration time is the slowest rank's step), with its interval
    over the steps. None where the counters were not read."""
    rows = [rank.cpu.waited_s for rank in record.ranks if rank.cpu is not None and rank.cpu.waited_s]
    if not rows or len(rows) != len(record.ranks) or any(None in row for row in rows):
        return None
    steps = min(len(row) for row in rows)
    return _estimate([max(row[i] for row in rows) for i in range(steps)])
