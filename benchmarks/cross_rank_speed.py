"""Ranks side by side, against HolisticTraceAnalysis 0.5.0 just loading the same traces.

The traces are the committed real 2-GPU trace as RANKS rank files, each with its own clock offset
(benchmarks/synthetic.py); they name no host, so every rank is aligned on collective ends, the
slowest path. One side is ddpbench's whole cross-rank analysis (read and reduce every trace in
worker processes, check the job, match the collectives, align the clocks, the per-bucket table and
the critical path of every step), and then the merged timeline written apart; the other is HTA's
`TraceAnalysis(trace_dir=...)`, which only parses the traces into DataFrames. Both run in fresh
processes that time themselves (imports excluded), alternating, in rounds.

Memory: the peak resident size above the imports of a process that analyses and then merges every
rank one trace at a time, against a process that only decodes one trace (one trace's worth).

    .venv/bin/python benchmarks/cross_rank_speed.py [--ranks 8] [--rounds 3] [--hta-python .venv-hta/bin/python]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import synthetic  # noqa: E402

HTA_PROGRAM = r"""
import json, logging, sys, time
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
start = time.perf_counter()
TraceAnalysis(trace_dir=sys.argv[1])
print(json.dumps({"seconds": time.perf_counter() - start}))
"""

OURS_PROGRAM = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from ddpbench.analysis.collectives import bucket_table, match_job
from ddpbench.analysis.critical_path import job_paths, path_summary
from ddpbench.analysis.trace_merge import write_merged
paths, jobs, out = json.loads(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
start = time.perf_counter()
job = match_job(paths, jobs=jobs)
steps = job_paths(job)
table, summary = bucket_table(job), path_summary(steps)
analysed = time.perf_counter()
write_merged(job, steps, out)
print(json.dumps({"analysis_s": analysed - start, "merge_s": time.perf_counter() - analysed,
                  "collectives": len(job.collectives), "held": summary["held"][0]}))
"""

# Memory from /proc/self/status: VmHWM is the peak of this process alone (ru_maxrss would carry
# over the parent's peak across fork and exec). Run with one worker, in this process, so the peak
# is the analysis's own: it must stay near one trace's worth however many ranks are read.
MEMORY_PROGRAM = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import msgspec
from ddpbench.analysis.collectives import match_job
from ddpbench.analysis.critical_path import job_paths
from ddpbench.analysis.trace_merge import write_merged
from ddpbench.analysis.traces import read_trace
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1])
paths, mode, out = json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
found = {"imports_kb": status("VmRSS")}
if mode == "one":
    trace = read_trace(paths[0], msgspec.json.Decoder())
    found["peak_kb"], found["events"] = status("VmHWM"), len(trace["traceEvents"])
else:
    job = match_job(paths, jobs=1)
    found["analysis_peak_kb"] = status("VmHWM")
    write_merged(job, job_paths(job), out)
    found["merge_peak_kb"] = status("VmHWM")
print(json.dumps(found))
"""


def run_json(command: list[str]) -> dict:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{command[0]} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def machine_load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} cores"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=None, help="ddpbench's workers (default: its own choice)")
    parser.add_argument("--hta-python", default=os.path.join(REPO, ".venv-hta", "bin", "python"))
    args = parser.parse_args()
    if not os.path.exists(args.hta_python):
        sys.exit(f"no HTA interpreter at {args.hta_python}; run `make hta-venv` or pass --hta-python")
    jobs = args.jobs or min(4, len(os.sched_getaffinity(0)))
    print(f"before: {machine_load()}")
    with tempfile.TemporaryDirectory() as folder:
        traces = os.path.join(folder, "traces")
        paths = synthetic.build_traces(traces, args.ranks)
        out = os.path.join(folder, "job.merged.json.gz")
        rounds = []
        for index in range(args.rounds):
            hta_s = run_json([args.hta_python, "-c", HTA_PROGRAM, traces])["seconds"]
            ours = run_json([sys.executable, "-c", OURS_PROGRAM, REPO, json.dumps(paths), str(jobs), out])
            rounds.append((hta_s, ours))
            print(
                f"round {index + 1}: HTA load {hta_s:.2f} s; ddpbench analysis {ours['analysis_s']:.2f} s "
                f"({hta_s / ours['analysis_s']:.1f}x faster), then the merged trace {ours['merge_s']:.2f} s",
                flush=True,
            )
        one = run_json([sys.executable, "-c", MEMORY_PROGRAM, REPO, json.dumps(paths), "one", out])
        every = run_json([sys.executable, "-c", MEMORY_PROGRAM, REPO, json.dumps(paths), "all", out])
        merged_mb = os.path.getsize(out) / 1e6
    hta_median = statistics.median(r[0] for r in rounds)
    ours_median = statistics.median(r[1]["analysis_s"] for r in rounds)
    last = rounds[-1][1]
    print(
        f"{args.ranks} ranks of {one['events']} events, {last['collectives']} collectives matched, {jobs} workers: "
        f"median HTA load {hta_median:.2f} s, ddpbench analysis {ours_median:.2f} s "
        f"({hta_median / ours_median:.1f}x faster); merge {statistics.median(r[1]['merge_s'] for r in rounds):.2f} s "
        f"({merged_mb:.1f} MB gzipped)"
    )

    def above(peak_kb: int, found: dict) -> str:
        return f"{(peak_kb - found['imports_kb']) / 1024:.0f} MB"

    print(
        f"memory above the imports (peak resident, one process, one trace at a time): one trace decoded "
        f"{above(one['peak_kb'], one)}; all {args.ranks} ranks analysed {above(every['analysis_peak_kb'], every)}, "
        f"then merged {above(every['merge_peak_kb'], every)}"
    )
    print(f"critical path's largest holder: {last['held']}")
    print(f"after: {machine_load()}")


if __name__ == "__main__":
    main()
