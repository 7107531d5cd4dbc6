"""How long the history takes at scale: adding a 1,024-rank sweep to a store, gating against a year
of nights, and opening the history page in a browser.

In a temporary folder (or --keep DIR), the script builds a synthetic sweep (benchmarks/synthetic.py:
local, DDP at every power of two up to --ranks, DataParallel at 1-8) and a store holding --nights
nightly sweeps of --configurations configurations of that sweep's machine class and suite (the
sweep's own configurations, then others at other batch sizes; a 10 % step down in the middle of
the year, a little noise every night, one transaction per night as `history add` makes). Then it
times, each as a fresh `ddpbench` process the way a nightly job runs it:

- `ddpbench history add SWEEP --store` into an empty store;
- `ddpbench gate --baseline history --candidate SWEEP --store` over the year (exit 0 or 1: history
  configurations the sweep lacks make it not comparable; its time is what is measured);
- `ddpbench history report --store` over the year, and the page's load in headless Chromium
  (Debian's chromium through playwright; skipped, with the reason, where either is missing).

    flock /tmp/ddpbench-bench.lock .venv/bin/python benchmarks/history_speed.py [--ranks 1024]
        [--steps 1000] [--nights 365] [--configurations 20] [--keep DIR]
"""

from __future__ import annotations

import argparse
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import synthetic  # noqa: E402

from ddpbench.gate.values import describe  # noqa: E402
from ddpbench.history import HistoryRun, open_store  # noqa: E402
from ddpbench.history.sweeps import sweep_runs  # noqa: E402

FIRST_NIGHT = datetime(2026, 1, 1, 2, 0, tzinfo=UTC)
STEP_DOWN = 0.9
"""the year's one change: every configuration 10 % slower from the middle night on"""
NOISE = 0.02


def ddpbench(*args: str, cwd: str, allowed: tuple[int, ...] = (0,)) -> tuple[float, str]:
    """Wall time and output of one `ddpbench` command in a fresh process."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "ddpbench", *args], cwd=cwd, capture_output=True, text=True, env=dict(os.environ)
    )
    seconds = time.perf_counter() - started
    if done.returncode not in allowed:
        raise SystemExit(f"ddpbench {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return seconds, done.stdout


def configurations(runs: list[HistoryRun], wanted: int) -> list[tuple[tuple, dict]]:
    """`wanted` configuration keys with a night's values: the sweep's own (one run each), then
    copies of them at other batch sizes until there are enough."""
    own: dict[tuple, dict] = {}
    for run in runs:
        own.setdefault(tuple(run.key), dict(run.values))
    chosen = list(own.items())[:wanted]
    batch = 2
    while len(chosen) < wanted:
        for key, values in list(own.items()):
            if len(chosen) == wanted:
                break
            other = (*key[:4], key[4] * batch, *key[5:])
            chosen.append((other, {m: (v * batch if m == "throughput" else v) for m, v in values.items()}))
        batch *= 2
    return chosen


def build_year(url: str, machine: str, suite: str, chosen: list[tuple[tuple, dict]], nights: int) -> None:
    rng = random.Random(0)
    with open_store(url) as store:
        for night in range(nights):
            slower = STEP_DOWN if night >= nights // 2 else 1.0
            sha = f"{night // 7:08x}".ljust(40, "0")  # a new commit every week
            ended = (FIRST_NIGHT + timedelta(days=night)).isoformat()
            runs = []
            for number, (key, values) in enumerate(chosen):
                factor = slower * math.exp(rng.gauss(0.0, NOISE))
                measured = {
                    "throughput": values["throughput"] * factor,
                    "efficiency": None if values.get("efficiency") is None else values["efficiency"] * factor,
                    "exposed_share": values.get("exposed_share"),
                }
                runs.append(
                    HistoryRun(
                        machine, suite, key, describe(key), f"night-{night:03d}", f"run-{number}", sha, ended, measured
                    )
                )
            store.add_sweep(runs)


def page_load(page: str) -> str:
    """The page's load in headless Chromium, in words."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        return "not measured: needs Debian's chromium (apt-get install chromium)"
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return "not measured: needs the playwright package (test extra)"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        view = browser.new_page(viewport={"width": 1366, "height": 800})
        started = time.perf_counter()
        view.goto("file://" + os.path.abspath(page), wait_until="load")
        wall = time.perf_counter() - started
        load_ms = view.evaluate("performance.getEntriesByType('navigation')[0].loadEventEnd")
        elements = view.evaluate("document.getElementsByTagName('*').length")
        browser.close()
    return f"{load_ms / 1000:.2f} s to the load event ({wall:.2f} s wall for goto), {elements} elements"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=1024, help="largest world size of the sweep")
    parser.add_argument("--steps", type=int, default=1000, help="timed steps per rank")
    parser.add_argument("--nights", type=int, default=365, help="nightly sweeps in the store")
    parser.add_argument("--configurations", type=int, default=20, help="configurations each night")
    parser.add_argument("--keep", default=None, help="work in this folder and keep it (default: a temporary one)")
    args = parser.parse_args()
    if args.nights < 1 or args.configurations < 1 or args.ranks < 1:
        parser.error("--ranks, --nights and --configurations must be at least 1")
    work = args.keep or tempfile.mkdtemp(prefix="ddpbench-history-speed-")
    os.makedirs(work, exist_ok=True)
    sweep = os.path.join(work, f"sweep-{args.ranks}")
    if not os.path.isdir(os.path.join(sweep, "runs")):
        synthetic.build_sweep(sweep, args.ranks, args.steps)
    print(
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; a sweep up to {args.ranks} ranks, "
        f"{args.steps} steps; {args.nights} nights x {args.configurations} configurations; in {work}"
    )

    added = os.path.join(work, "added.sqlite")
    if os.path.exists(added):
        os.remove(added)
    add_s, add_out = ddpbench("history", "add", sweep, "--store", f"sqlite:///{added}", cwd=work)
    print(f"history add of the {args.ranks}-rank sweep: {add_s:.2f} s ({add_out.strip().splitlines()[-1]})")

    year = os.path.join(work, "year.sqlite")
    if os.path.exists(year):
        os.remove(year)
    machine, suite, runs, _ = sweep_runs(sweep)
    started = time.perf_counter()
    build_year(f"sqlite:///{year}", machine, suite, configurations(runs, args.configurations), args.nights)
    print(f"store of {args.nights} nights built in process: {time.perf_counter() - started:.2f} s")

    gate_s, gate_out = ddpbench(
        "gate", "--baseline", "history", "--candidate", sweep, "--store", f"sqlite:///{year}", cwd=work, allowed=(0, 1)
    )
    print(f"gate --baseline history over {args.nights} nightly rows per configuration: {gate_s:.2f} s")
    print("  " + (gate_out.strip().splitlines() or ["(no output)"])[-1])

    report_s, report_out = ddpbench("history", "report", "--store", f"sqlite:///{year}", "--out", "page", cwd=work)
    page = os.path.join(work, "page", "index.html")
    print(f"history report: {report_s:.2f} s, page {os.path.getsize(page) / 1e6:.2f} MB ({report_out.strip()})")
    print(f"history page in headless Chromium: {page_load(page)}")


if __name__ == "__main__":
    main()
