"""Trace analysis speed against HolisticTraceAnalysis 0.5.0, on the same file, in one run.

HTA pulls in jupyterlab and friends, so it lives in its own virtual environment
(`make hta-venv` makes .venv-hta); this script runs it there in a subprocess that times itself
(imports excluded), alternating with ddpbench's analysis in this process, and prints the numbers
both produce and the speed ratio.

    .venv/bin/python benchmarks/trace_speed.py [TRACE] [--hta-python .venv-hta/bin/python] [--rounds 5]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

from ddpbench.analysis.traces import analyze_trace  # noqa: E402

DEFAULT_TRACE = os.path.join(REPO, "tests", "fixtures", "traces", "nccl-ddp-2gpu-rank0.json.gz")

# Runs inside the HTA environment: load the folder, compute overlap and the temporal breakdown.
HTA_PROGRAM = r"""
import json, logging, sys, time
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
folder, repeats = sys.argv[1], int(sys.argv[2])
seconds = []
for _ in range(repeats):
    start = time.perf_counter()
    analysis = TraceAnalysis(trace_dir=folder)
    overlap = analysis.get_comm_comp_overlap(visualize=False)
    breakdown = analysis.get_temporal_breakdown(visualize=False)
    seconds.append(time.perf_counter() - start)
row = breakdown.iloc[0]
print(json.dumps({"seconds": seconds, "overlap_pct": float(overlap["comp_comm_overlap_pctg"].iloc[0]),
                  "compute_us": float(row["compute_time(us)"]), "non_compute_us": float(row["non_compute_time(us)"]),
                  "idle_us": float(row["idle_time(us)"]), "kernel_span_us": float(row["kernel_time(us)"])}))
"""


def hta_times(hta_python: str, folder: str, repeats: int) -> dict:
    done = subprocess.run([hta_python, "-c", HTA_PROGRAM, folder, str(repeats)], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"HTA failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def ours(trace: str, repeats: int) -> tuple[list[float], dict]:
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = analyze_trace(trace, mode="hta")
        seconds.append(time.perf_counter() - start)
    return seconds, result.hta


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace", nargs="?", default=DEFAULT_TRACE)
    parser.add_argument("--hta-python", default=os.path.join(REPO, ".venv-hta", "bin", "python"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3, help="analyses per side per round (median kept)")
    args = parser.parse_args()
    if not os.path.exists(args.hta_python):
        sys.exit(f"no HTA interpreter at {args.hta_python}; run `make hta-venv` or pass --hta-python")
    with tempfile.TemporaryDirectory() as folder:
        shutil.copy(args.trace, folder)  # HTA analyses a folder of traces
        ratios = []
        for round_index in range(args.rounds):
            hta = hta_times(args.hta_python, folder, args.repeats)
            our_seconds, our_numbers = ours(args.trace, args.repeats)
            hta_s, our_s = statistics.median(hta["seconds"]), statistics.median(our_seconds)
            ratios.append(hta_s / our_s)
            print(
                f"round {round_index + 1}: HTA {hta_s * 1000:.0f} ms, ddpbench {our_s * 1000:.1f} ms, "
                f"ddpbench is {ratios[-1]:.1f}x faster",
                flush=True,
            )
    print(
        f"median speed-up over {args.rounds} rounds: {statistics.median(ratios):.1f}x "
        f"(min {min(ratios):.1f}x, max {max(ratios):.1f}x)"
    )
    for key in ("overlap_pct", "compute_us", "non_compute_us", "idle_us", "kernel_span_us"):
        print(f"  {key:<16} HTA {hta[key]:>12.2f}   ddpbench {our_numbers[key]:>12.2f}")


if __name__ == "__main__":
    main()
