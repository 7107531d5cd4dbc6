"""`make bench` on the CPU suite, written up: runs it once, then writes
docs/measurements/cpu-suite.md (commit, machine, command, everything the sweep printed) and the
README's first screen (the sweep's closing screen, between its markers) from that one run.

    python benchmarks/cpu_suite.py --fresh    # `make clean`, then `make bench`: the install is timed too
    python benchmarks/cpu_suite.py            # runs `make bench` with the .venv as it is
    python benchmarks/cpu_suite.py --check    # only says whether the README's block is the page's

Run it on a quiet machine, at the commit to be published: the page says the commit (and whether
the tree had changes), the load average before and after, and how long the sweep took.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(REPO, "docs", "measurements", "cpu-suite.md")
README = os.path.join(REPO, "README.md")
BEGIN, END = "<!-- cpu-suite:begin -->", "<!-- cpu-suite:end -->"
COMMAND = ["make", "bench"]
PROGRESS = re.compile(r"^\[\d+/\d+\] ")


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()


def machine() -> str:
    model = next(
        (line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?"
    )
    memory_kib = next(int(line.split()[1]) for line in open("/proc/meminfo") if line.startswith("MemTotal"))
    return f"{os.cpu_count()} cores ({model}), {memory_kib / 2**20:.0f} GiB, {platform.system()} {platform.release()}"


def load_average() -> str:
    return f"{os.getloadavg()[0]:.2f}"


PIP_INDEX_NOISE = re.compile(r"^WARNING: Location '.*' is ignored: it is neither a file nor a directory\.$")


def without_index_noise(output: str) -> str:
    """The output with pip's complaints about this machine's package index folded into one line:
    they say nothing about ddpbench."""
    lines = output.splitlines()
    noise = [line for line in lines if PIP_INDEX_NOISE.match(line)]
    if not noise:
        return output
    kept, said = [], False
    for line in lines:
        if not PIP_INDEX_NOISE.match(line):
            kept.append(line)
        elif not said:
            kept.append(f"(pip's {len(noise)} warnings about this machine's package index folded here)")
            said = True
    return "\n".join(kept) + "\n"


def closing_screen(output: str) -> str:
    """What the sweep printed after its last progress line: the scaling table, the findings, the
    report's path (the warnings a run prints on the way stay on the page)."""
    lines = output.rstrip("\n").splitlines()
    last = max((i for i, line in enumerate(lines) if PROGRESS.match(line)), default=-1)
    return "\n".join(lines[last + 1 :])


def readme_block(output: str) -> str:
    first = next((line for line in output.splitlines() if line.startswith("sweep ")), "")
    return f"{BEGIN}\n```text\n$ make bench\n{first}\n...\n{closing_screen(output)}\n```\n{END}"


def write_readme(block: str) -> None:
    text = open(README, encoding="utf-8").read()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"README.md has no {BEGIN} ... {END} block to write")
    start, end = text.index(BEGIN), text.index(END) + len(END)
    with open(README, "w", encoding="utf-8") as handle:
        handle.write(text[:start] + block + text[end:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare the README's block with the page")
    parser.add_argument("--fresh", action="store_true", help="`make clean` first, so that the install is timed too")
    args = parser.parse_args(argv)
    if args.check:
        page = open(PAGE, encoding="utf-8").read()
        output = page.split("```text\n", 1)[1].split("\n```", 1)[0]
        same = readme_block(output) in open(README, encoding="utf-8").read()
        print("the README's first screen is the page's run" if same else "the README's block differs from the page")
        return 0 if same else 1
    commit = git("rev-parse", "--short", "HEAD")
    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    before, started, date = load_average(), time.time(), time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    if args.fresh:
        subprocess.run(["make", "clean"], cwd=REPO, check=True, capture_output=True)
    done = subprocess.run(COMMAND, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    took, after = time.time() - started, load_average()
    output = without_index_noise(done.stdout)
    sys.stdout.write(output)
    counted = re.search(r"^sweep \S+: (\d+) runs", output, re.M)
    runs = f"{counted.group(1)} runs" if counted else "its runs (the count was not printed)"
    page = f"""# `make bench` on the CPU suite

Without a GPU, `make bench` runs the CPU suite: {runs} (3 tiny workloads, mlp, gpt2 and
resnet50, each as `local` and as `ddp` at 2 processes on 2 cores, in 3 rounds). What the sweep
prints: [Sweeps](../sweeps.md). Written by `benchmarks/cpu_suite.py`, which ran it once; the
README's first screen is this run's closing screen.

- **Commit**: {commit}{" with uncommitted changes to tracked files" if dirty else ""}.
- **Machine**: {machine()}; 1-minute load average {before} before the sweep, {after} after it;
  {date}.
- **Command**: `{"make clean && " if args.fresh else ""}{" ".join(COMMAND)}` (exit code {done.returncode},
  {took / 60:.1f} minutes{", the install included" if args.fresh else ", the .venv already installed"}).

```text
{output.rstrip()}
```
"""
    with open(PAGE, "w", encoding="utf-8") as handle:
        handle.write(page)
    write_readme(readme_block(output))
    print(f"wrote {PAGE} and the README's first screen", file=sys.stderr)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
