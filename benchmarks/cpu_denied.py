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


def sweep(out: str, sweep_id: str, workload: str, strategies: str, steps: int, warmup: int) -> bool:
    command = [sys.executable, "-m", "ddpbench", "sweep", "--device", "cpu", "--max-nproc", "2"]
    command += ["--workloads", workload, "--strategies", strategies, "--repeat", "1"]
    command += ["--steps", str(steps), "--warmup", str(warmup), "--out", out, "--sweep-id", sweep_id]
    started = time.time()
    done = subprocess.run(command, env=_env(), cwd=out, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(f"  [{time.time() - started:5.0f} s] {sweep_id}: exit {done.returncode}", file=sys.stderr)
    if done.returncode:
        print(done.stdout[-2000:], file=sys.stderr)
    return done.returncode == 0


def two_at_once(out: str, name: str, steps: int, warmup: int) -> bool:
    """Two one-device runs of greedy_forward started at once."""
    folder = os.path.join(out, name)
    command = [sys.executable, "-m", "ddpbench", "run", "--workload", f"{PLANTED}:greedy_forward"]
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
        for i in range(1, repeats + 1):
            if not sweep(out, f"quiet-{i}", steady, "ddp", steps, warmup):
                failed.append(f"quiet-{i}")
            with pinned_hog(0) as hog:
                if not sweep(out, f"hog-{i}", steady, "ddp", steps, warmup):
                    failed.append(f"hog-{i}")
                planted.append(hog.stop())
        for i in range(1, repeats + 1):
            if not sweep(out, f"greedy-{i}", f"{PLANTED}:greedy_forward", "local,ddp", steps, warmup):
                failed.append(f"greedy-{i}")
            if not two_at_once(out, f"together-{i}", steps, warmup):
                failed.append(f"together-{i}")
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


def _records(out: str, prefix: str) -> list:
    found = []
    for name in sorted(os.listdir(out)):
        folder = os.path.join(out, name)
        if name.startswith(prefix) and os.path.isdir(os.path.join(folder, "runs")):
            found += [record for _, record in read_records(folder)[0] if record.status == "ok"]
    return found


def welch(a: Estimate, b: Estimate) -> tuple[float, float]:
    """(the difference's standard error, Student's t at Welch's degrees of freedom, 95 %)."""
    se = math.hypot(a.se, b.se)
    df = se**4 / (a.se**4 / (a.samples - 1) + b.se**4 / (b.samples - 1))
    return se, float(student_t.ppf(0.975, df))


def difference(a: Estimate, b: Estimate) -> Estimate:
    se, t = welch(a, b)
    value = a.value - b.value
    return Estimate(value, value - t * se, value + t * se, min(a.samples, b.samples), "runs", se)


def judge(out: str) -> dict:
    quiet, hog = _records(out, "quiet-"), _records(out, "hog-")
    found: dict = {"quiet": [], "hog": {}, "quota": [], "greedy": {}}
    for record in quiet:
        cpu = run_cpu(record)
        found["quiet"].append({"run": record.run_id, "sentence": cpu.sentence() if cpu else "not measured",
                               "beyond": [r.rank for r in cpu.waited_beyond_noise] if cpu else None,
                               "harmed": [r.rank for r in cpu.harmed_by_others] if cpu else None})  # fmt: skip
    if quiet and hog:
        iteration = {name: Estimate.of_runs([r.metrics.iteration_time_s.mean for r in runs])
                     for name, runs in (("quiet", quiet), ("hog", hog))}  # fmt: skip
        waiting = {name: Estimate.of_runs([iteration_waiting(r).value for r in runs])
                   for name, runs in (("quiet", quiet), ("hog", hog))}  # fmt: skip
        slowdown = difference(iteration["hog"], iteration["quiet"])
        added = difference(waiting["hog"], waiting["quiet"])
        found["hog"] = {
            "iteration_ms": {k: 1e3 * v.value for k, v in iteration.items()},
            "waiting_ms": {k: 1e3 * v.value for k, v in waiting.items()},
            "slowdown": slowdown,
            "added": added,
            "runs": (len(quiet), len(hog)),
            "ok": abs(added.value - slowdown.value) <= HOG_TOLERANCE * slowdown.value
            and added.half <= HOG_TOLERANCE * abs(added.value),
        }
    for record in _records(out, "quota-"):
        cpu = run_cpu(record)
        throttled = [r.rank for r in cpu.throttled] if cpu else None
        found["quota"].append({"run": record.run_id, "throttled": throttled,
                               "sentence": cpu.sentence() if cpu else "not measured"})  # fmt: skip
    greedy = []
    for name in sorted(os.listdir(out)):
        if name.startswith("greedy-"):
            greedy += read_records(os.path.join(out, name))[0]
    answers = [a for a in answer_sweep(greedy)[0] if a.world_size == 2] if greedy else []
    alone = [r.metrics.iteration_time_s.mean for _, r in greedy if r.spec.strategy == "local" and r.metrics]
    pairs = []
    for name in sorted(os.listdir(out)):
        if name.startswith("together-") and os.path.isdir(os.path.join(out, name, "runs")):
            runs = [r for _, r in read_records(os.path.join(out, name))[0] if r.metrics]
            if len(runs) == 2:
                pairs.append(statistics.fmean(r.metrics.iteration_time_s.mean for r in runs))
    if answers and alone and len(pairs) >= 2:
        contention = answers[0].causes["contention"].seconds
        together = Estimate.of_runs(pairs)
        lost = Estimate(together.value - statistics.fmean(alone), None, None, together.samples, "runs",
                        math.hypot(together.se, statistics.stdev(alone) / math.sqrt(len(alone))))  # fmt: skip
        se, t = welch(contention, lost)
        parts = answers[0].parts
        found["greedy"] = {
            "contention": contention,
            "lost": lost,
            "alone_ms": 1e3 * statistics.fmean(alone),
            "together_ms": [1e3 * p for p in pairs],
            "waiting": parts.get("contention_waiting"),
            "on_core": parts.get("contention_on_core"),
            "welch": abs(contention.value - lost.value) <= t * se,
            "within": abs(contention.value - lost.value) <= GREEDY_TOLERANCE * lost.value,
            "t": t,
            "se": se,
        }
    return found


# --- the page -------------------------------------------------------------------------------------


def ms(estimate: Estimate | None) -> str:
    if estimate is None:
        return "n/a"
    half = f" ± {1e3 * estimate.half:.2f}" if estimate.has_interval else ""
    return f"{1e3 * estimate.value:.2f}{half}"


def suite_step(out: str) -> float | None:
    runs = _records(out, "suite")
    steps = [statistics.fmean(rank.step_times_s) for run in runs for rank in run.ranks if rank.step_times_s]
    return statistics.fmean(steps) if steps else None


def page(out: str, measured: dict | None, analysed: dict, found: dict) -> str:
    records = _records(out, "")
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
        "- **Runs**: 2 CPU ranks over gloo, one thread each, of `tests/fixtures/planted_causes.py` (a 256-wide MLP;",
        "  greedy_forward adds a 2-thread 512 x 512 matrix product to every forward).",
        "",
    ]
    criteria = []
    hog = found.get("hog")
    if hog:
        planted = (measured or {}).get("hog") or []
        used = [p["used_cores"] for p in planted]
        lines += [
            "## A hog held to one core",
            "",
            f"Runs with nothing else (quiet) and with a `while True` held to CPU 0 (hog), alternating, "
            f"{hog['runs'][0]} and {hog['runs'][1]} runs"
            + (f"; the hog used {min(used):.2f}-{max(used):.2f} cores" if used else "")
            + ".",
            "",
            "| | quiet | hog | hog - quiet (ms per step, ± 95 %, Welch) |",
            "|---|---|---|---|",
            f"| iteration time (ms) | {hog['iteration_ms']['quiet']:.2f} | {hog['iteration_ms']['hog']:.2f} | "
            f"{ms(hog['slowdown'])} (the slowdown) |",
            f"| waiting for a core (ms per step, the most any rank waited) | {hog['waiting_ms']['quiet']:.2f} | "
            f"{hog['waiting_ms']['hog']:.2f} | {ms(hog['added'])} (the waiting added) |",
            "",
        ]
        ratio = hog["added"].value / hog["slowdown"].value if hog["slowdown"].value else math.nan
        criteria.append(
            (
                f"hog: the waiting added within {HOG_TOLERANCE:.0%} of the slowdown, its half-width within "
                f"{HOG_TOLERANCE:.0%} (ratio {ratio:.2f}, half-width "
                f"{hog['added'].half / abs(hog['added'].value):.0%})",
                hog["ok"],
            )  # fmt: skip
        )
    quota = found.get("quota") or []
    if quota:
        lines += ["## One rank held to half a core by a CPU quota", "",
                  "Rank 1 moved into a cgroup with a quota of half a core as soon as it started",
                  "(ddpbench is not told).",
                  "", "| run | ranks named throttled | what ddpbench says |", "|---|---|---|"]  # fmt: skip
        lines += [f"| {q['run']} | {q['throttled']} | {q['sentence']} |" for q in quota]
        lines.append("")
        criteria.append(("quota: throttling named on rank 1 and no other, in every run",
                         all(q["throttled"] == [1] for q in quota)))  # fmt: skip
    greedy = found.get("greedy")
    if greedy:
        lines += [
            "## The greedy case: host contention against two one-device runs at once",
            "",
            f"Host contention, pooled over {greedy['contention'].samples} DDP runs: {ms(greedy['contention'])} ms per "
            f"step (waiting for a core {ms(greedy['waiting'].seconds) if greedy['waiting'] else 'n/a'}, slower on a "
            f"core {ms(greedy['on_core'].seconds) if greedy['on_core'] else 'n/a'}).",
            f"Two one-device runs at once, {greedy['lost'].samples} pairs: "
            f"{', '.join(f'{v:.2f}' for v in greedy['together_ms'])} ms per step against {greedy['alone_ms']:.2f} "
            f"alone: they lose {1e3 * greedy['lost'].value:.2f} ms per step "
            f"(standard error {1e3 * greedy['lost'].se:.2f}).",
            f"Difference {1e3 * (greedy['contention'].value - greedy['lost'].value):+.2f} ms, Welch's t at 95 % allows "
            f"{1e3 * greedy['t'] * greedy['se']:.2f}.",
            "",
        ]
        criteria.append(("greedy: host contention agrees with two runs at once on Welch's t at 95 %", greedy["welch"]))
        criteria.append((f"greedy: and within {GREEDY_TOLERANCE:.0%}", greedy["within"]))
    quiet = found.get("quiet") or []
    if quiet:
        lines += ["## A quiet baseline", "", "| run | ranks that waited beyond noise | what ddpbench says |",
                  "|---|---|---|"]  # fmt: skip
        lines += [f"| {q['run']} | {q['beyond']} | {q['sentence']} |" for q in quiet]
        lines.append("")
        criteria.append((f"quiet: no rank waited beyond {MATERIAL_SHARE:.0%} of its step in any run",
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
