"""Does `ddpbench bisect` find the commit that made a DDP step slower, and stay quiet where none
did? Real bisections on this machine (2 ranks, gloo, CPU) of a throwaway git repository.

The repository holds one workload file, `model.py` (an MLP of the shape of
tests/fixtures/planted_regressions.py's), over 16 commits numbered 0 (good) to 15 (bad):
- most commits change the file's code without changing what it trains (a constant, a comment, a
  helper, the order of its blocks' construction);
- commit 7 rewrites how the model is built (a loop instead of a list) without changing its speed;
- commit 11 makes the DDP step slower with one fixed change, the same in every trial: rank 0 blocks
  for --report-ms milliseconds (default 1.5) in every forward, as a per-step report to a metrics
  service would (a sleep stands for the call, so that the change is the same on every trial and
  machine). The other rank waits for it at the gradients' all-reduce, so the expected cause is
  waiting for the slowest rank, and the rank that held the other back is rank 0, in forward.
  1.5 ms on this model's 3.6 ms DDP step here is about a 30 % slowdown as bisect states one (1 - the
  throughput ratio); an A/B of 6 rounds at 1 ms read 19.4 %. The page gives the slowdown measured.
  (A first plant, 250,000 more gradient floats that enter the loss through one element, slowed
  the step 26 % but spread it over compute, DDP overhead and communication, none beyond its noise
  over 12 rounds: bisect found the commit and rightly named no single cause.)
The null repository, bisected beside it in every trial (--only planted or --only null runs one),
is the same without the report: no commit changes the speed.

Each trial is `ddpbench bisect --good <commit 0> --bad <commit 15> --threshold 15% -- --workload
model.py:net --nproc 2 --steps S --warmup 5` from the repository's folder, with records of its own
(no trial reads another's), timed from outside. The margin, 15 %, lies about halfway between no
change and the planted 30 % on the log scale, so that a step can answer both "bad" for the planted commit
and "good" for the others with the rounds this machine's noise allows.

Why 400 steps a run and 6 to 24 rounds a step: a step of this model takes about 3.5 ms, so 40 steps
time 0.12 s of a 7 s run. Six runs of commit 0 at 40 steps ran 14,746-21,433 samples/s here, and
identical code then read as different as the planted change (a step said "cannot tell" after 16
rounds). At 400 steps (1.2 s timed, 1 s more a run) six runs of commit 0 ran 16,765-20,510 and
of commit 11 with the first plant (below) 10,624-15,108: the rounds' log ratios spread about 0.11,
so a step's interval clears the margin at about 12 rounds on either side, and 24 leave room for a
noisier hour. Judged:
- planted: exit 0 (or 4: named, with a run on a busy machine), the first bad commit is commit 11,
  the first cause named is waiting for the slowest rank, rank 0 the one that held the other back,
  in at most 6 steps;
- null: exit 1 and "no commit slower beyond noise".

The whole measurement holds /tmp/ddpbench-bench.lock. Prints the page and writes it to --page
(docs/measurements/bisect.md; --no-page only prints). --quick is a smoke check of the script itself
(1 trial of each, 12 steps a run, 2-4 rounds a step): its figures are not a measurement, and it
writes no page.

    python benchmarks/bisect_commits.py --out /tmp/bisect-bench          # 3 planted and 3 null trials
    python benchmarks/bisect_commits.py --out /tmp/bisect-smoke --quick --no-page
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, REPO)

from bench_lock import LOCK, bench_lock  # noqa: E402
from measurement_page import add_page_options, command_line, commit_of, utc_now, write_page  # noqa: E402

from ddpbench.host.facts import cpu_model, project_git, usable_cores  # noqa: E402

PAGE = os.path.join(REPO, "docs", "measurements", "bisect.md")
COMMITS = 16
PLANTED_COMMIT = 11
NEUTRAL_COMMIT = 7
MAX_STEPS = 6
EXPECTED_CAUSE = "straggler_wait"

TEMPLATE = '''"""A model of a user's own repository (written by benchmarks/bisect_commits.py). {note}"""

import time

import torch
import torch.distributed as dist
from torch import nn

from ddpbench import SyntheticDataset, Workload, default_optimizer

WIDTH = 256
HIDDEN_LAYERS = 2
NUM_CLASSES = 10
BATCH_SIZE = 32
LABEL = "revision {number}"
REPORT_S = {report}


def _sample(generator):
    return torch.randn(WIDTH, generator=generator), int(torch.randint(NUM_CLASSES, (1,), generator=generator))
{helpers}

class Net(nn.Module):
    def __init__(self):
        super().__init__()
{build}
        self.head = nn.Linear(WIDTH, NUM_CLASSES)

    def forward(self, x):
        if REPORT_S and dist.is_initialized() and dist.get_rank() == 0:
            time.sleep(REPORT_S)  # rank 0 reports a metric every step, a blocking call
        return self.head(self.hidden(x))


def net(size, data_dir=None):
    return Workload(
        model=Net(),
        make_dataset=lambda length: SyntheticDataset(length, _sample),
        loss=nn.functional.cross_entropy,
        batch_size=BATCH_SIZE,
        make_optimizer=default_optimizer,
    )
'''

BUILD_LIST = """        blocks = []
        for _ in range(HIDDEN_LAYERS):
            blocks += [nn.Linear(WIDTH, WIDTH), nn.ReLU()]
        self.hidden = nn.Sequential(*blocks)"""
BUILD_LOOP = """        self.hidden = nn.Sequential(*(layer for _ in range(HIDDEN_LAYERS) for layer in _block()))"""
BLOCK_HELPER = """

def _block():
    return [nn.Linear(WIDTH, WIDTH), nn.ReLU()]
"""


def source(number: int, plant: bool, report_ms: float) -> str:
    """commit `number`'s model.py: its code changes at every commit but a few, its speed at commit
    11 only (planted), and its construction at commit 7 (the same layers, built another way)."""
    planted = plant and number >= PLANTED_COMMIT
    helpers = "".join(f"\n\ndef helper_{i}(x):\n    return x * {i}\n" for i in range(number // 2))
    return TEMPLATE.format(
        note="Its speed changes at commit 11." if plant else "Its speed never changes.",
        number=number if number % 5 else number - 1,  # commits 5 and 10 change nothing in the code
        report=report_ms / 1000 if planted else 0,
        helpers=helpers + (BLOCK_HELPER if number >= NEUTRAL_COMMIT else ""),
        build=BUILD_LOOP if number >= NEUTRAL_COMMIT else BUILD_LIST,
    )


def git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True, text=True).stdout.strip()


def build_repository(folder: str, plant: bool, report_ms: float) -> list[str]:
    """The 16 commits' shas, commit 0 first."""
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    git(folder, "init", "-q")
    git(folder, "config", "user.email", "bench@example.com")
    git(folder, "config", "user.name", "benchmarks/bisect_commits.py")
    shas = []
    for number in range(COMMITS):
        with open(os.path.join(folder, "model.py"), "w", encoding="utf-8") as handle:
            handle.write(source(number, plant, report_ms))
        subject = {
            PLANTED_COMMIT: "Report a metric from rank 0 every step" if plant else "Reword a comment",
            NEUTRAL_COMMIT: "Build the hidden blocks in a loop",
        }.get(number, f"Change {number}")
        git(folder, "add", "-A")
        git(folder, "commit", "-q", "--allow-empty", "-m", f"commit {number}: {subject}")
        shas.append(git(folder, "rev-parse", "HEAD"))
    return shas


def trial(out: str, name: str, plant: bool, args) -> dict:
    repo = os.path.join(out, name, "repo")
    shas = build_repository(repo, plant, args.report_ms)
    answer_file = os.path.join(out, name, "answer.json")
    command = [
        sys.executable, "-m", "ddpbench", "bisect", "--good", shas[0], "--bad", shas[-1],
        "--rounds", str(args.rounds), "--max-rounds", str(args.max_rounds), "--threshold", args.threshold,
        "--records", os.path.join(out, name, "records"), "--json-file", answer_file, "--",
        "--workload", "model.py:net", "--nproc", "2", "--steps", str(args.steps), "--warmup", "5",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    started = time.monotonic()
    done = subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True)
    minutes = (time.monotonic() - started) / 60
    with open(os.path.join(out, name, "output.txt"), "w", encoding="utf-8") as handle:
        handle.write(done.stdout + "\n--- stderr ---\n" + done.stderr)
    answer = json.load(open(answer_file, encoding="utf-8")) if os.path.exists(answer_file) else {}
    first_bad = answer.get("first_bad")
    why = answer.get("why") or []
    named = [n for entry in why if isinstance(entry, dict) for n in entry.get("named", [])]
    straggler = next((entry["straggler"] for entry in why if isinstance(entry, dict) and entry.get("straggler")), {})
    found = {
        "name": name,
        "planted": plant,
        "exit": done.returncode,
        "first_bad": shas.index(first_bad) if first_bad in shas else None,
        "steps": len(answer.get("steps", [])),
        "new_runs": answer.get("new_runs"),
        "minutes": minutes,
        "named": named,
        "rank": straggler.get("rank"),
        "phase": straggler.get("phase"),
        "slowdown": next((s for s in answer.get("steps", []) if s["sha"] == first_bad), {}).get("slowdown"),
        "said_none": "no commit slower beyond noise" in done.stdout,
        "answer": [line for line in done.stdout.splitlines() if line.strip()],
    }
    found["ok"] = (
        done.returncode in (0, 4)
        and found["first_bad"] == PLANTED_COMMIT
        and bool(named)
        and named[0] == EXPECTED_CAUSE
        and found["rank"] == 0
        and found["steps"] <= MAX_STEPS
        if plant
        else done.returncode == 1 and found["said_none"]
    )
    print(
        f"{name}: exit {done.returncode}, first bad {found['first_bad']}, {found['steps']} steps, "
        f"{minutes:.1f} min, named {named}, rank {found['rank']} ({found['phase']}): "
        f"{'as expected' if found['ok'] else 'NOT as expected'}",
        file=sys.stderr,
        flush=True,
    )
    return found


def dash(value) -> str:
    return "-" if value is None else str(value)


OPTIONS_SHOWN = ("report_ms", "steps", "rounds", "max_rounds", "threshold")
"""The options the page states, kept with the answers for --analyse-only."""


def per_run(result: dict) -> str:
    """The trial's minutes of bisection over the runs it started: start-up, steps and judging."""
    return f"{60 * result['minutes'] / result['new_runs']:.1f}" if result["new_runs"] else "-"


def seconds_per_run(results: list[dict]) -> str:
    runs = sum(r["new_runs"] for r in results)
    return f"{60 * sum(r['minutes'] for r in results) / runs:.1f} s" if runs else "no run"


def page(results: list[dict], args, facts: dict) -> str:
    planted = [r for r in results if r["planted"]]
    null = [r for r in results if not r["planted"]]
    lines = [
        "# Bisect: a planted slowdown in a repository of 16 commits, and one without",
        "",
        "Written by `benchmarks/bisect_commits.py`, which built the repositories, bisected them and judged the",
        "answers; rerun it to measure again. How bisect decides: [bisect](../bisect.md).",
        "",
        f"- **Commit**: {commit_of(facts['git_sha'], facts['git_dirty'])}.",
        f"- **Machine**: {usable_cores()} cores ({cpu_model()}), no GPU used; page written {utc_now()}.",
        f"- **Command**: `{facts['command']}` ({sum(r['minutes'] for r in results):.1f} minutes of bisection, holding "
        f"`flock {LOCK}` throughout).",
        f"- **Planted**: from commit {PLANTED_COMMIT} rank 0 blocks for {args.report_ms:g} ms in every forward (a "
        "per-step report to a metrics service; a sleep stands for the call). Expected cause: waiting for the "
        f"slowest rank, rank 0 the one that held the other back. Commit {NEUTRAL_COMMIT} builds the same layers "
        "another way; most other commits change code that does not run in the step.",
        f"- **Each bisection**: `--nproc 2 --steps {args.steps} --warmup 5`, `--rounds {args.rounds} --max-rounds "
        f"{args.max_rounds} --threshold {args.threshold}` (the margin about halfway between no change and a 30 % "
        "slowdown on the log scale), the default error rate (1 % a step), records of its own.",
        "",
        "| trial | repository | exit | first bad commit | steps | new runs | minutes | seconds per new run | slowdown "
        "| first cause named | rank that held the other back | its phase | as expected |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for r in results:
        slowdown = f"{100 * r['slowdown']:.1f} %" if r["slowdown"] is not None else "-"
        lines.append(
            f"| {r['name']} | {'planted' if r['planted'] else 'null'} | {r['exit']} | "
            f"{r['first_bad'] if r['first_bad'] is not None else '-'} | {r['steps']} | {r['new_runs']} | "
            f"{r['minutes']:.1f} | {per_run(r)} | {slowdown} | {(r['named'] or ['-'])[0]} | {dash(r['rank'])} | "
            f"{dash(r['phase'])} | "
            f"{'yes' if r['ok'] else 'no'} |"
        )
    lines += [
        "",
        f"- Planted: {sum(r['ok'] for r in planted)} of {len(planted)} trials named commit {PLANTED_COMMIT} and "
        "waiting for the slowest rank first, with rank 0 the one that held the other back, in at most "
        f"{MAX_STEPS} steps, in {seconds_per_run(planted)} of bisection per new run over the trials.",
        *(
            [
                f"- Null: {sum(r['ok'] for r in null)} of {len(null)} trials ended \"no commit slower beyond noise\" "
                "(exit 1)."
            ]
            if null
            else ["- Null: not bisected in this measurement (`--only planted`)."]
        ),
        "",
    ]
    for r in results:
        lines += [f"### {r['name']}", "", "```text", *r["answer"], "```", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the repositories, records and answers go here")
    parser.add_argument("--trials", type=int, default=3, help="bisections of each repository (default 3)")
    parser.add_argument("--only", choices=("planted", "null"), default=None, help="one repository only")
    parser.add_argument(
        "--report-ms", type=float, default=1.5, help="how long rank 0 blocks in each forward from commit 11 (1.5)"
    )
    parser.add_argument("--steps", type=int, default=400, help="steps a run, 5 of them warm-up (default 400)")
    parser.add_argument("--rounds", type=int, default=6, help="bisect --rounds (default 6)")
    parser.add_argument("--max-rounds", type=int, default=24, help="bisect --max-rounds (default 24)")
    parser.add_argument(
        "--threshold",
        default="15%",
        help="bisect's margin (default 15%%: about halfway between no change and the planted 30%% on the log scale)",
    )
    parser.add_argument("--quick", action="store_true", help="a smoke check: 1 trial, 12 steps, 2-4 rounds")
    parser.add_argument(
        "--analyse-only", action="store_true", help="write the page from the answers kept in --out (results.json)"
    )
    add_page_options(parser, PAGE)
    args = parser.parse_args(argv)
    if args.quick:
        args.trials, args.steps, args.rounds, args.max_rounds = 1, 12, 2, 4
    saved = os.path.join(args.out, "results.json")
    if args.analyse_only:  # the page again from a measurement's answers (its commit and command kept)
        with open(saved, encoding="utf-8") as handle:
            kept = json.load(handle)
        results, facts = kept["results"], kept["facts"]
        vars(args).update(kept["options"])
    else:
        facts = {**project_git(), "command": command_line("bisect_commits.py", argv)}
        kinds = [kind for kind in (True, False) if args.only in (None, "planted" if kind else "null")]
        results = []
        with bench_lock():
            for number in range(1, args.trials + 1):
                for plant in kinds:
                    name = f"{'planted' if plant else 'null'}-{number}"
                    results.append(trial(args.out, name, plant, args))
                    with open(saved, "w", encoding="utf-8") as handle:  # kept after every trial
                        options = {key: getattr(args, key) for key in OPTIONS_SHOWN}
                        json.dump({"results": results, "facts": facts, "options": options}, handle, indent=1)
    text = page(results, args, facts)
    print(text)
    if not args.quick:
        write_page(args, text)
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
