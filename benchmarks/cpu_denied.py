"""Does the kernel's count of CPU denied match what the machine took? Real runs at 2 CPU ranks (gloo)
of the planted workloads in tests/fixtures/planted_causes.py, written as docs/measurements/cpu-denied.md:

- quiet: steady_ranks with nothing else on the machine: no rank should wait for a core beyond noise;
- hog: the same, with a `while True` held to CPU 0 for the whole run (benchmarks/background_load.py).
  The waiting it adds (the job's waiting for a core per step, `analysis.cpu_denied.iteration_waiting`,
  against the quiet runs') should match the slowdown it causes, measured independently: the
  iteration time with it against without it, over the runs, within HOG_TOLERANCE, its interval's
  half-width within HOG_TOLERANCE too. The quiet and hog runs alternate, one run each at a time;
- quota: rank 1 moved, as soon as it starts, into a cgroup with half a core of quota (cgroup v1's cpu
  controller; ddpbench is not told): throttling should be named on rank 1 and on no other rank;
- greedy: greedy_forward, whose forward runs a 2-thread matrix product: host contention, pooled over
  the DDP runs, against what two one-device runs started at once lose against one alone, over as many
  pairs: they should agree on Welch's t at 95 % and within GREEDY_TOLERANCE;
- cost: what one reading of the counters costs, timed in a real rank of a 2-rank gloo job (its gloo
  threads listed), against the default CPU suite's mean step (a `ddpbench sweep` of it, one round).

Everything runs under the benchmark lock; --analyse-only reads the runs in --out again.

    python benchmarks/cpu_denied.py --out /tmp/cpu-denied
    python benchmarks/cpu_denied.py --out /tmp/cpu-denied --analyse-only
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time

from scipy.stats import t as student_t

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, REPO)

from background_load import pinned_hog  # noqa: E402
from bench_lock import bench_lock  # noqa: E402
from measurement_page import add_page_options, analysis_facts, command_line, commit_of, write_page  # noqa: E402

from ddpbench.analysis.answers import answer_sweep  # noqa: E402
from ddpbench.analysis.cpu_denied import MATERIAL_SHARE, iteration_waiting, run_cpu  # noqa: E402
from ddpbench.analysis.estimates import Estimate  # noqa: E402
from ddpbench.host.cpu_denied import RANK_NAME  # noqa: E402
from ddpbench.host.facts import host_facts  # noqa: E402
from ddpbench.records.store import read_records  # noqa: E402

PAGE = os.path.join(REPO, "docs", "measurements", "cpu-denied.md")
PLANTED = os.path.join(REPO, "tests", "fixtures", "planted_causes.py")
MEASUREMENT = "measurement.json"
CPU_CGROUP = "/sys/fs/cgroup/cpu"
HOG_TOLERANCE = 0.20
GREEDY_TOLERANCE = 0.25
COST_LIMIT = 0.01
"""A reading per step may cost at most 1 % of the default CPU suite's mean step."""

COST_SCRIPT = """
import os, time, statistics
import torch.distributed as dist
from ddpbench.host.cpu_denied import CpuCounters
dist.init_process_group("gloo")
dist.barrier()
counters = CpuCounters()
counters.refresh()
reads = []
for _ in range(5):
    started = time.perf_counter()
    for _ in range(2000):
        counters.read()
    reads.append((time.perf_counter() - started) / 2000)
if dist.get_rank() == 0:
    print("COST", statistics.median(reads), counters.counts)
dist.barrier()
dist.destroy_process_group()
"""


# --- measuring ------------------------------------------------------------------------------------


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=REPO, CUDA_VISIBLE_DEVICES="", DDPBENCH_BUSY_WARNING="off")


HOG_BATCHES = {"": 32, "512": 512}
"""The hog's two cases of steady_ranks, by sweep-id suffix: its own batch of 32, where a step is mostly
the all-reduce's wait (communication-bound), and a batch of 512, where it is mostly compute."""
JUDGED_HOG = "512"
"""The hog case judged: where the training thread is on the step's critical path most of the time."""
GREEDY = {"": "greedy_forward", "heavy": "greedy_heavy_forward"}
"""The greedy case's two workloads, by sweep-id suffix: the planted 512 x 512 product, about half the
step, and a 1024 x 1024 one, most of it."""


def sweep(
    out: str, sweep_id: str, workload: str, strategies: str, steps: int, warmup: int, batch: int | None = None
) -> bool:
    command = [sys.executable, "-m", "ddpbench", "sweep", "--device", "cpu", "--max-nproc", "2"]
    command += ["--workloads", workload, "--strategies", strategies, "--repeat", "1"]
    command += ["--batch-size", str(batch)] if batch else []
    command += ["--steps", str(steps), "--warmup", str(warmup), "--out", out, "--sweep-id", sweep_id]
    started = time.time()
    done = subprocess.run(command, env=_env(), cwd=out, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(f"  [{time.time() - started:5.0f} s] {sweep_id}: exit {done.returncode}", file=sys.stderr)
    if done.returncode:
        print(done.stdout[-2000:], file=sys.stderr)
    return done.returncode == 0


def two_at_once(out: str, name: str, workload: str, steps: int, warmup: int) -> bool:
    """Two one-device runs of a greedy workload started at once."""
    folder = os.path.join(out, name)
    command = [sys.executable, "-m", "ddpbench", "run", "--workload", f"{PLANTED}:{workload}"]
    command += ["--strategy", "local", "--threads-per-rank", "1", "--steps", str(steps), "--warmup", str(warmup)]
    both = [
        subprocess.Popen(
            [*command, "--out", folder, "--run-id", f"local-{i}"],
            env=_env(),
            cwd=out,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        for i in range(2)
    ]
    return not any(run.wait() for run in both)


class HoldRank:
    """Moves every worker process of rank `rank` whose command line names `marker` (its run's output
    folder) into a cgroup with `cores` of CPU quota, as soon as it appears: ddpbench is not told. A
    rank is known by the name it gives its training thread (`ddpbench.host.cpu_denied.RANK_NAME`):
    a forked rank's command line and environment are its agent's."""

    def __init__(self, rank: int, cores: float, marker: str):
        self.rank, self.marker = rank, marker
        self.group = os.path.join(CPU_CGROUP, f"ddpbench-bench-quota-{os.getpid()}")
        os.makedirs(self.group)
        with open(os.path.join(self.group, "cpu.cfs_period_us"), "w") as handle:
            handle.write("100000")
        with open(os.path.join(self.group, "cpu.cfs_quota_us"), "w") as handle:
            handle.write(str(int(cores * 100000)))
        self.moved: list[int] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        while not self.stopping.wait(0.02):
            for name in os.listdir("/proc"):
                if not name.isdigit() or int(name) in self.moved:
                    continue
                try:
                    with open(f"/proc/{name}/cmdline", "rb") as handle:
                        line = handle.read().replace(b"\0", b" ").decode("utf-8", "replace")
                    if "ddpbench.worker" not in line or self.marker not in line:
                        continue
                    with open(f"/proc/{name}/comm", encoding="utf-8") as handle:
                        comm = handle.read().strip()
                except OSError:
                    continue
                if comm == RANK_NAME.format(rank=self.rank):
                    try:
                        with open(os.path.join(self.group, "cgroup.procs"), "w") as handle:
                            handle.write(name)
                        self.moved.append(int(name))
                    except OSError:
                        pass

    def close(self) -> None:
        self.stopping.set()
        self.thread.join()
        for _ in range(50):  # the group's processes have ended; the kernel lets it go once they are reaped
            try:
                os.rmdir(self.group)
                return
            except OSError:
                time.sleep(0.1)


def read_cost(out: str) -> dict:
    """One reading's cost in a real rank of a 2-rank gloo job, median of five timings of 2,000."""
    script = os.path.join(out, "read_cost.py")
    with open(script, "w", encoding="utf-8") as handle:
        handle.write(COST_SCRIPT)
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", script],
        env=_env(), cwd=out, capture_output=True, text=True,
    )  # fmt: skip
    for line in done.stdout.splitlines():
        if line.startswith("COST "):
            _, seconds, counts = line.split(" ", 2)
            return {"read_s": float(seconds), "threads": counts}
    return {"error": done.stderr[-1000:]}


def measure(out: str, repeats: int, steps: int, warmup: int, command: str) -> dict:
    started = time.time()
    failed, planted, moved = [], [], []
    steady = f"{PLANTED}:steady_ranks"
    with bench_lock() as locked_by:
        for suffix, batch in HOG_BATCHES.items():
            for i in range(1, repeats + 1):
                if not sweep(out, f"quiet{suffix}-{i}", steady, "ddp", steps, warmup, batch):
                    failed.append(f"quiet{suffix}-{i}")
                with pinned_hog(0) as hog:
                    if not sweep(out, f"hog{suffix}-{i}", steady, "ddp", steps, warmup, batch):
                        failed.append(f"hog{suffix}-{i}")
                    planted.append(hog.stop())
        for suffix, workload in GREEDY.items():
            for i in range(1, repeats + 1):
                if not sweep(out, f"greedy{suffix}-{i}", f"{PLANTED}:{workload}", "local,ddp", steps, warmup):
                    failed.append(f"greedy{suffix}-{i}")
                if not two_at_once(out, f"together{suffix}-{i}", workload, steps, warmup):
                    failed.append(f"together{suffix}-{i}")
        for i in range(1, 3):
            holder = HoldRank(1, 0.5, os.path.join(out, f"quota-{i}"))
            try:
                if not sweep(out, f"quota-{i}", steady, "ddp", steps, warmup):
                    failed.append(f"quota-{i}")
            finally:
                holder.close()
            moved.append(len(holder.moved))
        cost = read_cost(out)
        if not sweep(out, "suite", "mlp,gpt2,resnet50", "ddp", 60, 5):
            failed.append("suite")
    return {"command": command, "seconds": time.time() - started, "locked_by": locked_by, "repeats": repeats,
            "failed": failed, "hog": planted, "quota_moved": moved, "cost": cost, "machine": host_facts()}  # fmt: skip


# --- judging --------------------------------------------------------------------------------------


def welch(a: Estimate, b: Estimate) -> tuple[float, float]:
    """(the difference's standard error, Student's t at Welch's degrees of freedom, 95 %). Each side
    needs 2 or more samples and a standard error (the callers keep sides of fewer out)."""
    if a.se is None or b.se is None or a.samples < 2 or b.samples < 2:
        raise ValueError("Welch's t needs two or more samples a side")
    se = math.hypot(a.se, b.se)
    df = se**4 / (a.se**4 / (a.samples - 1) + b.se**4 / (b.samples - 1))
    return se, float(student_t.ppf(0.975, df))


def difference(a: Estimate, b: Estimate) -> Estimate:
    se, t = welch(a, b)
    value = a.value - b.value
    return Estimate(value, value - t * se, value + t * se, min(a.samples, b.samples), "runs", se)


def _folders(out: str, prefix: str) -> list[str]:
    """Sweep folders named `<prefix><n>` (prefix with its dash), in order."""
    found = [n for n in os.listdir(out) if n.startswith(prefix) and n[len(prefix) :].isdigit()]
    return [os.path.join(out, n) for n in sorted(found, key=lambda n: int(n[len(prefix) :]))]


def _ok_records(out: str, prefix: str) -> list:
    return [r for folder in _folders(out, prefix) for _, r in read_records(folder)[0] if r.status == "ok"]


def _window_cpu_ms(records: list, field: str) -> float | None:
    """The training threads' mean per step of one counter (ms), over the records' ranks."""
    found = [v for r in records for rank in r.ranks if rank.cpu for v in getattr(rank.cpu, field) if v is not None]
    return 1e3 * statistics.fmean(found) if found else None


def judge_hog(out: str, suffix: str) -> dict:
    # Runs whose counters were not read (not Linux) have no waiting to compare: left out.
    quiet = [r for r in _ok_records(out, f"quiet{suffix}-") if iteration_waiting(r) is not None]
    hog = [r for r in _ok_records(out, f"hog{suffix}-") if iteration_waiting(r) is not None]
    if len(quiet) < 2 or len(hog) < 2:
        return {}
    sides = (("quiet", quiet), ("hog", hog))
    iteration = {name: Estimate.of_runs([r.metrics.iteration_time_s.mean for r in runs]) for name, runs in sides}
    waiting = {name: Estimate.of_runs([iteration_waiting(r).value for r in runs]) for name, runs in sides}
    slowdown = difference(iteration["hog"], iteration["quiet"])
    added = difference(waiting["hog"], waiting["quiet"])
    return {
        "batch": HOG_BATCHES[suffix],
        "iteration_ms": {k: 1e3 * v.value for k, v in iteration.items()},
        "waiting_ms": {k: 1e3 * v.value for k, v in waiting.items()},
        "comm_waited_ms": {name: _window_cpu_ms(runs, "comm_waited_s") for name, runs in sides},
        "slowdown": slowdown,
        "added": added,
        "runs": (len(quiet), len(hog)),
        "busy": {name: sum(bool(r.machine_load and r.machine_load.busy) for r in runs) for name, runs in sides},
        "ok": abs(added.value - slowdown.value) <= HOG_TOLERANCE * abs(slowdown.value)
        and added.half <= HOG_TOLERANCE * abs(added.value),
    }


def judge_greedy(out: str, suffix: str) -> dict:
    greedy = [pair for folder in _folders(out, f"greedy{suffix}-") for pair in read_records(folder)[0]]
    answers = [a for a in answer_sweep(greedy)[0] if a.world_size == 2] if greedy else []
    alone_runs = [r for _, r in greedy if r.spec.strategy == "local" and r.metrics]
    alone = [r.metrics.iteration_time_s.mean for r in alone_runs]
    pairs, together_runs = [], []
    for folder in _folders(out, f"together{suffix}-"):
        runs = [r for _, r in read_records(folder)[0] if r.metrics] if os.path.isdir(folder + "/runs") else []
        if len(runs) == 2:
            pairs.append(statistics.fmean(r.metrics.iteration_time_s.mean for r in runs))
            together_runs += runs
    if not answers or len(alone) < 2 or len(pairs) < 2:
        return {}
    contention = answers[0].causes["contention"].seconds
    if contention.se is None or contention.samples < 2:
        return {}  # one DDP run with too few rounds: no interval to judge
    together = Estimate.of_runs(pairs)
    lost = Estimate(together.value - statistics.fmean(alone), None, None, together.samples, "runs",
                    math.hypot(together.se, statistics.stdev(alone) / math.sqrt(len(alone))))  # fmt: skip
    se, t = welch(contention, lost)
    parts = answers[0].parts
    ddp = [run.record for run in answers[0].runs]
    return {
        "workload": GREEDY[suffix],
        "contention": contention,
        "lost": lost,
        "alone_ms": 1e3 * statistics.fmean(alone),
        "together_ms": [1e3 * p for p in pairs],
        "waiting": parts.get("contention_waiting"),
        "on_core": parts.get("contention_on_core"),
        # The training thread's time on a core and waiting, per step: alone, two at once, and in the
        # DDP run's timed steps (where the ranks step in lockstep, as the ablation's steps do).
        "threads": {
            name: (_window_cpu_ms(runs, "cpu_s"), _window_cpu_ms(runs, "waited_s"))
            for name, runs in (("alone", alone_runs), ("two at once", together_runs), ("DDP's timed steps", ddp))
        },
        "welch": abs(contention.value - lost.value) <= t * se,
        "within": abs(contention.value - lost.value) <= GREEDY_TOLERANCE * lost.value,
        "t": t,
        "se": se,
    }


def judge(out: str) -> dict:
    found: dict = {"quiet": [], "quota": []}
    for record in _ok_records(out, "quiet-") + _ok_records(out, "quiet512-"):
        cpu = run_cpu(record)
        found["quiet"].append({
            "run": record.run_id, "batch": record.spec.batch_size,
            "sentence": cpu.sentence() if cpu else "not measured",
            "beyond": [r.rank for r in cpu.waited_beyond_noise] if cpu else None,
            "harmed": [r.rank for r in cpu.harmed_by_others] if cpu else None,
            "busy": bool(record.machine_load and record.machine_load.busy),
        })  # fmt: skip
    found["hog"] = {suffix: judged for suffix in HOG_BATCHES if (judged := judge_hog(out, suffix))}
    found["greedy"] = {suffix: judged for suffix in GREEDY if (judged := judge_greedy(out, suffix))}
    for record in _ok_records(out, "quota-"):
        cpu = run_cpu(record)
        throttled = [r.rank for r in cpu.throttled] if cpu else None
        found["quota"].append({"run": record.run_id, "throttled": throttled,
                               "sentence": cpu.sentence() if cpu else "not measured"})  # fmt: skip
    return found


# --- the page -------------------------------------------------------------------------------------


def ms(estimate: Estimate | None) -> str:
    if estimate is None:
        return "n/a"
    half = f" ± {1e3 * estimate.half:.2f}" if estimate.has_interval else ""
    return f"{1e3 * estimate.value:.2f}{half}"


def suite_step(out: str) -> float | None:
    runs = _ok_records(out, "suite") or [r for _, r in read_records(os.path.join(out, "suite"))[0] if r.status == "ok"]
    steps = [statistics.fmean(rank.step_times_s) for run in runs for rank in run.ranks if rank.step_times_s]
    return statistics.fmean(steps) if steps else None


def hog_lines(hog: dict, planted: list[dict]) -> list[str]:
    used = [p["used_cores"] for p in planted]
    lines = [
        "## A hog held to one core",
        "",
        "Runs of steady_ranks with nothing else (quiet) and with a `while True` held to CPU 0 (hog), alternating,"
        + (f" the hog using {min(used):.2f}-{max(used):.2f} cores" if used else "")
        + ". The slowdown is the iteration time with the hog less without it; the waiting added is the job's",
        "waiting for a core per step (in each step the most any rank's training thread waited) with the hog",
        "less without it; both ± 95 %, Welch's t over the runs.",
        "",
        "| batch | runs (quiet, hog) | iteration ms (quiet, hog) | the slowdown | waiting ms (quiet, hog) "
        "| the waiting added | gloo threads' waiting ms (quiet, hog) | runs marked busy (quiet, hog) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for suffix in HOG_BATCHES:
        case = hog.get(suffix)
        if not case:
            continue
        comm = case["comm_waited_ms"]
        lines.append(
            f"| {case['batch']} | {case['runs'][0]}, {case['runs'][1]} | {case['iteration_ms']['quiet']:.2f}, "
            f"{case['iteration_ms']['hog']:.2f} | {ms(case['slowdown'])} | {case['waiting_ms']['quiet']:.2f}, "
            f"{case['waiting_ms']['hog']:.2f} | {ms(case['added'])} | {comm['quiet']:.2f}, {comm['hog']:.2f} | "
            f"{case['busy']['quiet']}, {case['busy']['hog']} |"
        )
    lines += [
        "",
        f"At batch {HOG_BATCHES[JUDGED_HOG]} a step is mostly compute on the training thread, the step's critical "
        "path, and the criterion is judged there. At batch 32 a step is mostly the wait for the all-reduce: the "
        "hog takes the core while a rank would wait on its collective anyway, so the waiting it adds need not "
        "lengthen the step; the rank's waiting is still what the kernel counted, and the busy mark (last column) "
        "reads it.",
        "",
    ]
    return lines


def greedy_lines(greedy: dict) -> list[str]:
    lines = [
        "## The greedy case: host contention against two one-device runs at once",
        "",
        "Host contention pooled over the DDP runs of a sweep each (one round of local and ddp), against what two "
        "one-device runs of the same workload started at once lose against one alone, over as many pairs. Beside "
        "it, each training thread's time on a core and waiting for one per step, from the kernel's counters.",
        "",
    ]
    for suffix in GREEDY:
        case = greedy.get(suffix)
        if not case:
            continue
        threads = ", ".join(
            f"{name} {cpu:.2f} on a core and {waited:.2f} waiting"
            for name, (cpu, waited) in case["threads"].items()
            if cpu is not None and waited is not None
        )
        waiting = ms(case["waiting"].seconds) if case["waiting"] else "n/a"
        on_core = ms(case["on_core"].seconds) if case["on_core"] else "n/a"
        lines += [
            f"**{case['workload']}**: host contention {ms(case['contention'])} ms per step over "
            f"{case['contention'].samples} runs (waiting for a core {waiting}, slower on a core {on_core}). Two at "
            f"once, {case['lost'].samples} pairs: {', '.join(f'{v:.2f}' for v in case['together_ms'])} ms per step "
            f"against {case['alone_ms']:.2f} alone, so they lose {1e3 * case['lost'].value:.2f} ms per step "
            f"(standard error {1e3 * case['lost'].se:.2f}). Difference "
            f"{1e3 * (case['contention'].value - case['lost'].value):+.2f} ms; Welch's t at 95 % allows "
            f"{1e3 * case['t'] * case['se']:.2f}. Training threads, ms per step: {threads}.",
            "",
        ]
    lines += [
        "The ablation's every-rank step starts all ranks together, as DDP's steps start; two processes started "
        "at once drift apart, and a greedy product on one then meets the other's single-threaded work, where an "
        "OpenMP thread spins at its barrier for a partner that waits for a core: their threads' time on a core "
        "grows, which in step it does far less. The DDP run's own timed steps show how its ranks fared.",
        "",
    ]
    return lines


def page(out: str, measured: dict | None, analysed: dict, found: dict) -> str:
    records = [r for name in os.listdir(out) if os.path.isdir(os.path.join(out, name, "runs"))
               for _, r in read_records(os.path.join(out, name))[0]]  # fmt: skip
    shas = sorted({commit_of(r.env.git_sha, r.env.git_dirty) for r in records})
    machine = (measured or {}).get("machine") or {}
    lines = [
        "# CPU denied, measured by the kernel, against what the machine took",
        "",
        "Written by `benchmarks/cpu_denied.py`, which ran the cases below and judged them; rerun it to measure",
        "again. What the figures are: [Concepts](../concepts.md#the-machine).",
        "",
        f"- **Commit**: the runs: {', '.join(shas) or 'none'}; the analysis: "
        f"{commit_of(analysed.get('git_sha'), analysed.get('git_dirty'))}.",
        f"- **Machine**: {machine.get('cpu_cores', '?')} cores ({machine.get('cpu_model', '?')}), "
        f"{machine.get('system', '')} {machine.get('release', '')}; page written {analysed['date']}.",
        f"- **Command**: `{(measured or {}).get('command', analysed['command'])}`"
        + (f", {measured['seconds'] / 60:.0f} minutes under the benchmark lock" if measured else "")
        + ".",
        "- **Runs**: 2 CPU ranks over gloo, one thread each, of `tests/fixtures/planted_causes.py` (a 256-wide",
        "  MLP; greedy_forward adds a 2-thread 512 x 512 matrix product to every forward, greedy_heavy_forward",
        "  a 1024 x 1024 one).",
        "",
    ]
    criteria = []
    hog = found.get("hog") or {}
    if hog:
        lines += hog_lines(hog, (measured or {}).get("hog") or [])
        judged = hog.get(JUDGED_HOG)
        if judged:
            ratio = judged["added"].value / judged["slowdown"].value if judged["slowdown"].value else math.nan
            width = judged["added"].half / abs(judged["added"].value) if judged["added"].value else math.inf
            criteria.append(
                (f"hog, batch {judged['batch']}: the waiting added within {HOG_TOLERANCE:.0%} of the slowdown, its "
                 f"half-width within {HOG_TOLERANCE:.0%} (ratio {ratio:.2f}, half-width {width:.0%})", judged["ok"])
            )  # fmt: skip
        cases = [case for case in hog.values() if case.get("busy")]
        if cases:
            criteria.append(("hog: every run beside the hog marked busy, at both batches",
                             all(case["busy"]["hog"] == case["runs"][1] for case in cases)))  # fmt: skip
    quota = found.get("quota") or []
    if quota:
        lines += ["## One rank held to half a core by a CPU quota", "",
                  "Rank 1 moved into a cgroup with a quota of half a core as soon as it started",
                  "(ddpbench is not told).", "",
                  "| run | ranks named throttled | what ddpbench says |", "|---|---|---|"]  # fmt: skip
        lines += [f"| {q['run']} | {q['throttled']} | {q['sentence']} |" for q in quota]
        lines.append("")
        criteria.append(("quota: throttling named on rank 1 and no other, in every run",
                         all(q["throttled"] == [1] for q in quota)))  # fmt: skip
    greedy = found.get("greedy") or {}
    if greedy:
        lines += greedy_lines(greedy)
        for case in greedy.values():
            criteria.append((f"greedy ({case['workload']}): host contention agrees with two runs at once on "
                             "Welch's t at 95 %", case["welch"]))  # fmt: skip
            criteria.append((f"greedy ({case['workload']}): and within {GREEDY_TOLERANCE:.0%}", case["within"]))
    quiet = found.get("quiet") or []
    if quiet:
        lines += ["## A quiet baseline", "",
                  "The hog case's quiet runs: nothing else on the machine. A rank's waiting beyond noise here is its",
                  "job's own (two ranks' training and gloo threads on two cores); the share other processes took is",
                  "what the busy mark reads.", "",
                  "| run | batch | ranks that waited beyond noise | of it, other processes' beyond noise | busy "
                  "| what ddpbench says |", "|---|---|---|---|---|---|"]  # fmt: skip
        lines += [f"| {q['run']} | {q['batch']} | {q['beyond']} | {q['harmed']} | {'yes' if q['busy'] else 'no'} "
                  f"| {q['sentence']} |" for q in quiet]  # fmt: skip
        lines.append("")
        criteria.append(("quiet: no run marked busy, no rank's waiting taken by other processes beyond noise",
                         all(not q["busy"] and q["harmed"] == [] for q in quiet)))  # fmt: skip
        criteria.append((f"quiet: no rank waited beyond {MATERIAL_SHARE:.0%} of its step at all",
                         all(q["beyond"] == [] for q in quiet)))  # fmt: skip
    cost = (measured or {}).get("cost") or {}
    step = suite_step(out)
    if "read_s" in cost and step:
        share = cost["read_s"] / step
        lines += [
            "## What the readings cost",
            "",
            f"One reading (every step mark reads once) took {1e6 * cost['read_s']:.1f} us in a rank of a 2-rank gloo "
            f"job ({cost['threads']}), median of five timings of 2,000; the default CPU suite's mean step, "
            f"from one round of it: {1e3 * step:.2f} ms. The readings cost {share:.3%} of a step.",
            "",
        ]
        criteria.append((f"cost: at most {COST_LIMIT:.0%} of the default suite's mean step", share <= COST_LIMIT))
    lines += ["## Against the criteria", "", "| criterion | met |", "|---|---|"]
    lines += [f"| {text} | {'yes' if met else 'no'} |" for text, met in criteria]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="results/cpu-denied")
    parser.add_argument("--repeats", type=int, default=5, help="runs per case (quiet, hog, greedy, two at once)")
    parser.add_argument("--steps", type=int, default=60, help="steps per run, warm-up included")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--analyse-only", action="store_true", help="use the runs already in --out")
    add_page_options(parser, PAGE)
    args = parser.parse_args(argv)
    command = command_line("cpu_denied.py", argv)
    out = os.path.abspath(args.out)
    kept = os.path.join(out, MEASUREMENT)
    if args.analyse_only:
        measured = json.load(open(kept, encoding="utf-8")) if os.path.exists(kept) else None
    else:
        if os.path.exists(kept):
            parser.error(f"{out} already holds runs: use --analyse-only, or a new --out")
        os.makedirs(out, exist_ok=True)
        measured = measure(out, args.repeats, args.steps, args.warmup, command)
        with open(kept, "w", encoding="utf-8") as handle:
            json.dump(measured, handle, indent=1)
    text = page(out, measured, analysis_facts(command, args.analyse_only), judge(out))
    print(text)
    write_page(args, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
