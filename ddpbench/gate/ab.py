"""Same-job A/B: one configuration run in two environments, alternating A, B, A, B for K rounds,
gated with a paired test on the per-round log ratios. No torch in this process: each run is a
`ddpbench run` started with the environment's own Python.

On a shared machine the load drifts between jobs more than it moves within a minute, so a run of
B compared with the run of A just before it cancels most of that drift; what is left (the
spread of the per-round ratios) is the noise, measured in the same job.

An environment is either a Python executable (a virtual environment with another torch, say),
which then runs this ddpbench checkout, or a working tree of ddpbench (its own code), run with
this Python unless told otherwise.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ddpbench.config.secrets import redact_text
from ddpbench.gate import stats
from ddpbench.gate.compare import Comparison, GateError, finish, usable, why_unusable
from ddpbench.gate.values import describe, run_key, side_values, to_log
from ddpbench.host.own_tree import OWN_TREE_ENV, USER_CHECKOUT_ENV
from ddpbench.records.schema import Record
from ddpbench.records.store import UnreadableRecord, load_record, record_path, write_atomic

HERE_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MIN_ROUNDS = 2
AB_MEASURES = ("throughput", "exposed_share")  # efficiency needs a local run per round: not an A/B question


@dataclass(frozen=True)
class Side:
    name: str
    """A or B."""
    given: str
    """What the user passed."""
    python: str
    code: str
    """The ddpbench checkout it runs (put first on PYTHONPATH)."""
    tree: str | None = None
    """A commit of the user's repository: its worktree (`gate.user_tree`), where the run starts and
    which comes first on the import path; None: the user's code is wherever the run options say."""
    checkout: str | None = None
    """The user's main checkout, from which nothing of theirs may be imported (with `tree`)."""
    before_round: Callable[[], None] | None = field(default=None, compare=False)
    """What makes `tree` clean before each round (a worktree made for this command is reset to its
    commit, and what an earlier round wrote is removed); None for a tree that is not the command's
    own (the user's checkout), which is left as it is."""

    def environ(self) -> dict:
        path = os.environ.get("PYTHONPATH")
        first = [self.code]
        own = {}
        if self.tree is not None:
            src = os.path.join(self.tree, "src")
            first = [self.tree, *([src] if os.path.isdir(src) else []), self.code]
            own = {OWN_TREE_ENV: self.tree, USER_CHECKOUT_ENV: self.checkout or self.tree}
        return {**os.environ, **own, "PYTHONPATH": os.pathsep.join(first + ([path] if path else []))}

    @property
    def cwd(self) -> str:
        return self.tree or self.code


def resolve_side(name: str, given: str, python: str | None = None) -> Side:
    path = os.path.abspath(given)
    if os.path.isdir(path) and os.path.isfile(os.path.join(path, "ddpbench", "__init__.py")):
        return Side(name, given, python or sys.executable, path)
    if os.path.isfile(path) and os.access(path, os.X_OK):
        return Side(name, given, path, HERE_REPO)
    raise GateError(
        f"{name} = {given!r} is neither a Python executable nor a ddpbench working tree "
        f"(a folder with ddpbench/__init__.py)"
    )


@dataclass(frozen=True)
class Software:
    """What a side's Python runs, as far as its rounds' speed may depend on it."""

    torch: str
    """torch.__version__"""
    cuda: str | None
    """torch.version.cuda: the CUDA torch was built with; None for a build without it."""


def check_imports(side: Side) -> Software:
    """The torch the side would run; a side that cannot import torch and ddpbench is bad input."""
    code = "import json, torch, ddpbench; print(json.dumps([torch.__version__, torch.version.cuda]))"
    try:
        done = subprocess.run(
            [side.python, "-c", code], env=side.environ(), capture_output=True, text=True, timeout=300, cwd=side.code
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GateError(f"{side.name} = {side.given!r} cannot run Python: {exc}") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise GateError(f"{side.name} = {side.given!r} cannot import torch and ddpbench: {last}")
    torch, cuda = json.loads(done.stdout.strip().splitlines()[-1])
    return Software(torch, cuda)


# A round is one `ddpbench run`, which ends itself at its own run timeout when one is given; this
# is the backstop for a side whose ddpbench never gets that far (a base tree that hangs importing,
# say): its round then has no record and is not comparable, and the job goes on. Generous by
# default (big GPU rounds run long); --run-timeout S among the run options sets it to S + 10 min.
ROUND_TIMEOUT_S = 4 * 3600.0
ROUND_TIMED_OUT = 124
# After SIGTERM, `ddpbench run` ends its runs (torchrun and the ranks, in a session of their own)
# and exits; a process that does not is killed.
ROUND_GRACE_S = 60.0


def round_timeout(run_args: list[str]) -> float:
    run_args = run_args[: run_args.index("--")] if "--" in run_args else run_args  # after it: the script's
    for index, arg in enumerate(run_args):
        name, equals, value = arg.partition("=")
        if name == "--run-timeout":
            given = value if equals else (run_args[index + 1] if index + 1 < len(run_args) else "")
            try:
                return float(given) + 600.0
            except ValueError:
                break
    return ROUND_TIMEOUT_S


def end_round(process: subprocess.Popen) -> None:
    """SIGTERM, which `ddpbench run` answers by ending everything it started; SIGKILL after the grace."""
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=ROUND_GRACE_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def before_script_arguments(run_args: list[str], options: list[str]) -> list[str]:
    """`run_args` with `options` added where `ddpbench run` reads them: before a `--`, after which
    the words are a training script's own arguments (`--script train.py -- --epochs 1`)."""
    if "--" not in run_args:
        return [*run_args, *options]
    split = run_args.index("--")
    return [*run_args[:split], *options, *run_args[split:]]


def sets_out_or_run_id(run_args: list[str]) -> bool:
    """Whether the run options (before a `--`: after it, a script's own words) set what each round sets."""
    own = run_args[: run_args.index("--")] if "--" in run_args else run_args
    return any(arg.split("=")[0] in ("--out", "--run-id") for arg in own)


def script_from(folder: str, run_args: list[str]) -> list[str] | None:
    """The run options of a script's run with the script's path from `folder` (an absolute path
    stays as it is); None for a run of a workload. The words after a `--` are the script's own."""
    args = list(run_args)
    end = args.index("--") if "--" in args else len(args)
    for index, arg in enumerate(args[:end]):
        name, equals, value = arg.partition("=")
        if name == "--script" and (equals or index + 1 < end):
            at = index if equals else index + 1
            found = os.path.join(folder, value if equals else args[at])
            args[at] = f"--script={found}" if equals else found
            return args
    return None


def run_round(side: Side, run_args: list[str], out_dir: str, round_index: int) -> tuple[str, int]:
    """One `ddpbench run` of a side. A commit's tree made for this command is reset and cleaned
    first (`before_round`). An environment's run of a script starts in an empty folder of the
    round's own, removed after it, the script found from the environment's tree as before (the
    record names it by its absolute path either way): a script that writes where it runs (a
    checkpoint it resumes from) then finds nothing of an earlier round, nor of the other side, and
    writes nothing into a ddpbench checkout. A workload file's run starts in the environment's tree,
    where its relative path is found and kept as given in the record, which names the configuration."""
    run_id = f"{side.name.lower()}-r{round_index:02d}"
    out_dir = os.path.abspath(out_dir)  # the round starts in the side's own folder
    own = ["--out", os.path.join(out_dir, side.name.lower()), "--run-id", run_id]
    scratch = None
    script_args = script_from(side.code, run_args) if side.tree is None else None
    if script_args is not None:
        scratch, run_args = tempfile.mkdtemp(prefix=f"ddpbench-{run_id}-"), script_args
    elif side.before_round is not None:
        side.before_round()
    command = [side.python, "-m", "ddpbench", "run", *before_script_arguments(run_args, own)]
    # What the round says on stderr is kept beside its record: a run refused before it started (the
    # commit's workload file does not parse, say) writes no record, and this is then its reason.
    side_dir = os.path.join(out_dir, side.name.lower())
    os.makedirs(side_dir, exist_ok=True)
    try:
        with open(os.path.join(side_dir, f"{run_id}.stderr"), "w", encoding="utf-8") as said:
            # Same process group as this one: a Ctrl-C at the terminal reaches the round too.
            process = subprocess.Popen(
                command,
                env=side.environ(),
                cwd=scratch or side.cwd,
                stdout=subprocess.DEVNULL,
                stderr=said,
            )
        try:
            code = process.wait(timeout=round_timeout(run_args))
        except subprocess.TimeoutExpired:
            end_round(process)
            code = ROUND_TIMED_OUT
        except BaseException:  # SIGTERM of the gate (Ctrl-C reaches the round itself): leave no round behind
            end_round(process)
            raise
        finally:
            hide_secrets(said.name)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    return record_path(os.path.join(out_dir, side.name.lower()), run_id), code


def hide_secrets(path: str) -> None:
    """What a round said, with the secrets of its script's arguments hidden (an error message can
    quote them): the file is kept with the records and its last line is shown as a reason."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return
    hidden = redact_text(text)
    if hidden != text:
        write_atomic(path, hidden)


def round_said(record_file: str) -> str:
    """The last line the round printed on stderr (see `run_round`), or "" where there is none."""
    run_id = os.path.splitext(os.path.basename(record_file))[0]
    side_dir = os.path.dirname(os.path.dirname(record_file))
    try:
        with open(os.path.join(side_dir, f"{run_id}.stderr"), encoding="utf-8", errors="replace") as said:
            lines = [line.strip() for line in said if line.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""


def load_round(path: str) -> Record | None:
    try:
        return load_record(path)
    except UnreadableRecord:
        return None


def paired_comparisons(
    rounds: list[tuple[Record | None, Record | None]],
    settings: stats.GateSettings,
    allow_failed: bool,
    measures: tuple[str, ...] = AB_MEASURES,
) -> tuple[list[Comparison], list[str]]:
    """Gate the rounds: a paired one-sided test per measure on the per-round log ratios B/A.
    Only `measures` are tested, so the family's alpha is shared by them alone."""
    failures, notes, kept = [], [], []
    for index, (a, b) in enumerate(rounds, start=1):
        problems = [
            f"{name} {why_unusable(r) if r else 'wrote no record'}"
            for name, r in (("A", a), ("B", b))
            if r is None or not usable(r)
        ]
        if problems:
            reason = f"round {index}: " + "; ".join(problems)
            if allow_failed:
                notes.append(f"left out (allowed): {reason}")
            else:
                failures.append(
                    Comparison(describe(run_key(a or b)) if (a or b) else "?", "run", "not comparable", note=reason)
                )
            continue
        kept.append((a, b))
    if len(kept) < MIN_ROUNDS:
        notes.append(f"only {len(kept)} usable round(s): a paired test needs {MIN_ROUNDS}")
        return failures, notes
    configuration = describe(run_key(kept[0][0]))
    pending = []
    for measure in measures:
        pairs = [(side_values([a]), side_values([b])) for a, b in kept]
        values = [(va[run_key(a)].get(measure), vb[run_key(b)].get(measure)) for (va, vb), (a, b) in zip(pairs, kept)]
        if any(x is None or y is None for x, y in values):
            continue
        logs_a = np.array([to_log(measure, x[0]) for x, _ in values])
        logs_b = np.array([to_log(measure, y[0]) for _, y in values])
        evidence, noise = stats.paired(logs_a, logs_b)
        comparison = Comparison(
            configuration,
            measure,
            "pass",
            float(np.median([x[0] for x, _ in values])),
            float(np.median([y[0] for _, y in values])),
            float(np.exp(evidence.change)),
            len(values),
            len(values),
            noise=noise.sigma,
            noise_source=noise.source,
        )
        pending.append((comparison, evidence, noise))
    return failures + finish(pending, settings, paired=True), notes


def run_ab(a: Side, b: Side, run_args: list[str], rounds: int, out_dir: str, progress=print) -> list[tuple]:
    """A, B, A, B, ... for `rounds` rounds; returns (record A, record B) per round (None: no record)."""
    results = []
    for index in range(1, rounds + 1):
        pair = []
        for side in (a, b):
            path, code = run_round(side, run_args, out_dir, index)
            record = load_round(path)
            pair.append(record)
            status = record.status if record else f"no record (exit {code})"
            speed = f", {record.metrics.throughput_units_per_s:,.1f}/s" if record and record.metrics else ""
            progress(f"round {index}/{rounds} {side.name}: {status}{speed}")
        results.append(tuple(pair))
    return results


def validate_rounds(rounds: int) -> None:
    if rounds < MIN_ROUNDS:
        raise GateError(f"--rounds must be at least {MIN_ROUNDS} (a paired test needs two rounds); got {rounds}")
