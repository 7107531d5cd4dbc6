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

Prints each round, then writes docs/measurements/cross-rank-speed.md (--page elsewhere, --no-page
only prints it): the commit, the machine with its 1-minute load average before and after, the
command, every round and the medians, all from this run. Run it under `flock
/tmp/ddpbench-bench.lock`, never beside another benchmark.

    .venv/bin/python benchmarks/cross_rank_speed.py [--ranks 8] [--rounds 3] [--hta-python .venv-hta/bin/python]
"""

import argparse
import gzip
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, REPO)

import synthetic  # noqa: E402
from measurement_page import add_page_options, command_line, utc_now, write_page  # noqa: E402

from ddpbench.host.facts import cpu_model, project_git  # noqa: E402

PAGE = os.path.join(REPO, "docs", "measurements", "cross-rank-speed.md")

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


def load_1min() -> float:
    return os.getloadavg()[0]


def commit() -> str:
    found = project_git()
    if not found["git_sha"]:
        return "not recorded"
    return found["git_sha"][:7] + (" with uncommitted changes to tracked files" if found["git_dirty"] else "")


def machine() -> str:
    memory_kib = next(int(line.split()[1]) for line in open("/proc/meminfo") if line.startswith("MemTotal"))
    return (
        f"{os.cpu_count()} cores ({cpu_model()}), {memory_kib / 2**20:.0f} GiB, "
        f"{platform.system()} {platform.release()}, Python {platform.python_version()}"
    )


def hta_version(hta_python: str) -> str:
    done = subprocess.run(
        [hta_python, "-c", "import importlib.metadata as m; print(m.version('HolisticTraceAnalysis'))"],
        capture_output=True,
        text=True,
    )
    return done.stdout.strip() or "version unknown"


def mib_above(peak_kb: int, found: dict) -> float:
    return (peak_kb - found["imports_kb"]) / 1024


def wrapped(line: str) -> str:
    """Prose at 100 columns, as on the other pages; a list item's lines indented under it."""
    if not line or line.startswith(("|", "#")):
        return line
    indent = "  " if line.startswith("- ") else ""
    return textwrap.fill(line, width=100, subsequent_indent=indent, break_on_hyphens=False, break_long_words=False)


def page(result: dict) -> str:
    """The measurement page, every figure from `result` (this run)."""
    rounds, memory, trace = result["rounds"], result["memory"], result["trace"]
    hta = [r["hta_s"] for r in rounds]
    analysis = [r["analysis_s"] for r in rounds]
    merge = [r["merge_s"] for r in rounds]
    ratios = [h / a for h, a in zip(hta, analysis)]
    hta_median, analysis_median, merge_median = map(statistics.median, (hta, analysis, merge))
    with_merge = hta_median / (analysis_median + merge_median)
    one = mib_above(memory["one"]["peak_kb"], memory["one"])
    analysed = mib_above(memory["all"]["analysis_peak_kb"], memory["all"])
    merged = mib_above(memory["all"]["merge_peak_kb"], memory["all"])
    ranks = result["ranks"]
    lines = [
        "# Cross-rank analysis against HTA",
        "",
        f"- **Commit**: {result['commit']}.",
        f"- **Machine**: {result['machine']}; 1-minute load average {result['load_before']:.2f} before, "
        f"{result['load_after']:.2f} after.",
        f"- **Date**: {result['date']}.",
        f"- **Command**: `{result['command']}` ({result['took_s']:.0f} s); HolisticTraceAnalysis "
        f"{result['hta_version']} in its own environment (`make hta-venv`).",
        "",
        f"The traces: the committed real 2-GPU trace (`{trace['source']}`) written as {ranks} rank files, "
        f"each with its own clock offset: {trace['events']:,} events and {trace['gzip_mb']:.2f} MB gzipped "
        f"({trace['json_mb']:.1f} MB of JSON) per rank. They name no host, so every rank is aligned on "
        "collective ends, the slowest path.",
        "",
        f"- **HTA load**: `TraceAnalysis(trace_dir=...)`, which parses the traces into DataFrames "
        f"(HTA forks {result['hta_workers']} for them) and analyses nothing.",
        f"- **ddpbench analysis**: the whole cross-rank analysis, {result['jobs']} workers: read and reduce "
        f"every trace, check the job, match the collectives ({result['collectives']:,} here), align the "
        "clocks, the per-bucket table and every step's critical path.",
        "- **ddpbench merge**: then the merged timeline of all ranks written to one gzipped file "
        f"({result['merged_mb']:.1f} MB).",
        "",
        "Each side runs in a fresh process that times itself, imports excluded; in each round HTA runs "
        "first, then ddpbench.",
        "",
        "| round | HTA load s | ddpbench analysis s | ddpbench merge s | HTA / analysis |",
        "|---|---|---|---|---|",
    ]
    for index, (row, ratio) in enumerate(zip(rounds, ratios), 1):
        lines.append(
            f"| {index} | {row['hta_s']:.2f} | {row['analysis_s']:.2f} | {row['merge_s']:.2f} | {ratio:.1f}x |"
        )
    lines += [
        f"| median | {hta_median:.2f} | {analysis_median:.2f} | {merge_median:.2f} | "
        f"{hta_median / analysis_median:.1f}x |",
        "",
        f"HTA took {hta_median / analysis_median:.1f} times as long to load the {ranks} traces as ddpbench took "
        f"to analyse them (median against median; {min(ratios):.1f}x to {max(ratios):.1f}x over the "
        f"{len(rounds)} rounds), and {with_merge:.1f} times as long as the analysis and the merge together.",
        "",
        "## Memory",
        "",
        "The peak resident size (`VmHWM`) of a process above what it holds after its imports. The analysis "
        "runs with one worker, in that process, so its peak is the analysis's own.",
        "",
        "| process | peak above imports | against one trace |",
        "|---|---|---|",
        f"| one trace decoded (one trace's worth) | {one:.0f} MiB | 1.0x |",
        f"| all {ranks} ranks analysed | {analysed:.0f} MiB | {analysed / one:.1f}x |",
        f"| then the merged file written | {merged:.0f} MiB | {merged / one:.1f}x |",
        "",
        f"One trace's worth is what reading one rank's file and decoding all of its JSON into Python "
        f"objects (`msgspec`, every field) takes: {trace['events']:,} events here. The analysis and the merge "
        f"read the {ranks} ranks one at a time; holding every decoded trace at once would take about {ranks} "
        f"times one ({ranks * one:.0f} MiB).",
    ]
    return "\n".join(wrapped(line) for line in lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=None, help="ddpbench's workers (default: its own choice)")
    parser.add_argument("--hta-python", default=os.path.join(REPO, ".venv-hta", "bin", "python"))
    add_page_options(parser, PAGE)
    args = parser.parse_args(argv)
    if not os.path.exists(args.hta_python):
        sys.exit(f"no HTA interpreter at {args.hta_python}; run `make hta-venv` or pass --hta-python")
    jobs = args.jobs or min(4, len(os.sched_getaffinity(0)))
    result = {
        "commit": commit(),
        "machine": machine(),
        "command": command_line("cross_rank_speed.py", argv),
        "date": utc_now(),
        "hta_version": hta_version(args.hta_python),
        "ranks": args.ranks,
        "jobs": jobs,
        # HTA 0.5.0's parser forks min(cpu_count, ranks) processes up to 8 ranks, beyond that as many
        # as its memory estimate allows (hta/common/trace.py).
        "hta_workers": f"{min(os.cpu_count() or 1, args.ranks)} processes"
        if args.ranks <= 8
        else "its own number of processes",
    }
    started = time.time()
    result["load_before"] = load_1min()
    print(f"before: 1-minute load average {result['load_before']:.2f} on {os.cpu_count()} cores", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        traces = os.path.join(folder, "traces")
        paths = synthetic.build_traces(traces, args.ranks)
        out = os.path.join(folder, "job.merged.json.gz")
        rounds = []
        for index in range(args.rounds):
            hta_s = run_json([args.hta_python, "-c", HTA_PROGRAM, traces])["seconds"]
            ours = run_json([sys.executable, "-c", OURS_PROGRAM, REPO, json.dumps(paths), str(jobs), out])
            rounds.append({"hta_s": hta_s, **ours})
            print(
                f"round {index + 1}: HTA load {hta_s:.2f} s; ddpbench analysis {ours['analysis_s']:.2f} s "
                f"({hta_s / ours['analysis_s']:.1f}x), then the merged trace {ours['merge_s']:.2f} s",
                flush=True,
            )
        one = run_json([sys.executable, "-c", MEMORY_PROGRAM, REPO, json.dumps(paths), "one", out])
        every = run_json([sys.executable, "-c", MEMORY_PROGRAM, REPO, json.dumps(paths), "all", out])
        with open(paths[0], "rb") as handle:
            packed = handle.read()
        result["trace"] = {
            "source": os.path.relpath(synthetic.FIXTURE_TRACE, REPO),
            "events": one["events"],
            "gzip_mb": len(packed) / 1e6,
            "json_mb": len(gzip.decompress(packed)) / 1e6,
        }
        result["merged_mb"] = os.path.getsize(out) / 1e6
    result["load_after"] = load_1min()
    result["took_s"] = time.time() - started
    result.update(rounds=rounds, memory={"one": one, "all": every}, collectives=rounds[-1]["collectives"])
    print(f"after: 1-minute load average {result['load_after']:.2f}")
    print(f"critical path's largest holder: {rounds[-1]['held']}\n")
    text = page(result)
    print(text)
    write_page(args, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
