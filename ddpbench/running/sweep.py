"""Run a sweep plan: one run after another, a manifest that says where things stand, resume.

Folder: `<out>/<sweep-id>/manifest.json`, `runs/<run-id>.json`, `logs/<run-id>/`, `scaling.csv`.
A run that fails or times out is recorded with its status and the sweep goes on; `--resume`
skips runs that have an ok record and reruns the rest, from the plan stored in the manifest.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from dataclasses import dataclass

from ddpbench.config.plan import script_for
from ddpbench.config.secrets import has_hidden, redact_args, redact_spec_dict
from ddpbench.config.spec import RunSpec, SpecError, compile_allowance_s
from ddpbench.host.facts import host_facts
from ddpbench.records.schema import Record, RunError
from ddpbench.records.store import (
    UnreadableRecord,
    load_record,
    new_record,
    record_path,
    utc_now,
    write_atomic,
    write_record,
)
from ddpbench.running.canary import canary_wanted, run_canary, sweep_shape
from ddpbench.running.launch import launch_with_oom_backoff
from ddpbench.running.resolve import check_output_folder, resolve

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1
# Per-run timeout: start-up allowance plus generous headroom over the expected step time, taken
# from this workload's local run earlier in the sweep. Before any such run, a fixed ceiling.
STARTUP_ALLOWANCE_S = 180.0
STEP_TIME_HEADROOM = 20.0
TIMEOUT_WITHOUT_REFERENCE_S = 1200.0
# Process-group timeout: how long a collective may wait before a hang is declared. Generous over
# the expected step time (the first iteration and DDP's bucket rebuild are slower), never tiny.
PG_TIMEOUT_STEPS = 50
MIN_PG_TIMEOUT_S = 60.0
# A compiled run's timeouts get COMPILE_ALLOWANCE_S on top (config.spec, where a lone run's default
# gets it too): the reference step is the eager `local` run's, and ranks compiling at once finish
# minutes apart.


def manifest_path(sweep_dir: str) -> str:
    return os.path.join(sweep_dir, MANIFEST)


def write_manifest(sweep_dir: str, manifest: dict) -> None:
    write_atomic(manifest_path(sweep_dir), json.dumps(manifest, indent=1, sort_keys=True) + "\n")


def read_manifest(sweep_dir: str) -> dict:
    try:
        with open(manifest_path(sweep_dir), encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError) as exc:
        raise SpecError(f"{sweep_dir!r} has no readable {MANIFEST}: {exc}") from None


def prepare(
    sweep_dir: str,
    plan: list[RunSpec] | None,
    options: dict,
    resume: bool,
    script_args: tuple[str, ...] = (),
    sweep_id: str | None = None,
) -> tuple[dict, list[RunSpec]]:
    """A new sweep folder with its manifest, or (resume) the stored one with its stored plan.
    Refuses to touch an existing sweep without `resume`, before anything runs. The manifest keeps a
    script's arguments with their secrets hidden; a resume gets them again as `script_args`.
    `sweep_id`: the id as given, sub-folders included (default: the folder's name)."""
    exists = os.path.exists(manifest_path(sweep_dir))
    if exists and not resume:
        raise SpecError(
            f"sweep folder {sweep_dir!r} already exists; add --resume to carry on with it, "
            "or choose another --sweep-id"
        )
    if resume and not exists:
        raise SpecError(f"nothing to resume: {sweep_dir!r} holds no sweep")
    if resume:
        manifest = read_manifest(sweep_dir)
        # The folder may have moved since it was planned: runs belong where the manifest is now.
        plan = [RunSpec.from_dict(spec).replace(out_dir=sweep_dir) for spec in manifest["plan"]]
        plan = [with_script_args(spec, script_args) for spec in plan]
        manifest["resumed_at"] = manifest.get("resumed_at", []) + [utc_now()]
    else:
        manifest = {
            "manifest_version": MANIFEST_VERSION,
            "sweep_id": sweep_id or os.path.basename(os.path.normpath(sweep_dir)),
            "options": redact_spec_dict(options),
            "plan": [redact_spec_dict(spec.to_dict()) for spec in plan],
            "machine": host_facts(),
            "started_at": utc_now(),
            "runs": {},
        }
    check_output_folder(sweep_dir)
    manifest.update(state="running", ended_at=None)
    write_manifest(sweep_dir, manifest)
    return manifest, plan


def with_script_args(spec: RunSpec, given: tuple[str, ...]) -> RunSpec:
    """A resumed run of a script: the arguments given again after `--` where the manifest hid secrets
    (filled per run as the plan filled them); the stored ones otherwise."""
    script = spec.script
    if script is None or not (given or has_hidden(script.args)):
        return spec
    if not given:
        raise SpecError(
            "this sweep's script arguments hold secrets, which its manifest does not keep: resume it with the "
            "same arguments after --"
        )
    filled = script_for(dataclasses.replace(script, args=tuple(given)), spec.nproc, spec.world_size, spec.nnodes)
    if redact_args(filled.args) != redact_args(script.args):
        raise SpecError(
            f"the arguments after -- differ from the ones this sweep ran with ({' '.join(script.args)}, "
            "secrets hidden): resume it with the same arguments"
        )
    return spec.replace(script=filled)


def ok_record(sweep_dir: str, run_id: str) -> Record | None:
    path = record_path(sweep_dir, run_id)
    if not os.path.exists(path):
        return None
    try:
        record = load_record(path)
    except UnreadableRecord:
        return None
    return record if record.status == "ok" else None


def expected_step_s(spec: RunSpec, reference_step_s: dict[str, float]) -> float | None:
    """A generous guess of this run's step time from the workload's local run (None before it).
    Weak scaling keeps the work per device; communication grows with the world size."""
    step_s = reference_step_s.get(spec.workload)
    return None if step_s is None else step_s * max(1, spec.world_size / 2)


def run_timeout_s(spec: RunSpec, reference_step_s: dict[str, float], fixed: float | None) -> float:
    if fixed:
        return fixed
    step_s = expected_step_s(spec, reference_step_s)
    if step_s is None:
        return TIMEOUT_WITHOUT_REFERENCE_S + compile_allowance_s(spec.compile)
    return STARTUP_ALLOWANCE_S + STEP_TIME_HEADROOM * spec.steps * step_s + compile_allowance_s(spec.compile)


def pg_timeout_s(spec: RunSpec, reference_step_s: dict[str, float], fixed: float | None) -> float:
    if fixed:
        return fixed
    step_s = expected_step_s(spec, reference_step_s)
    if step_s is None:
        return spec.pg_timeout_s + compile_allowance_s(spec.compile)
    return max(MIN_PG_TIMEOUT_S, PG_TIMEOUT_STEPS * step_s) + compile_allowance_s(spec.compile)


def _clock(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes}:{seconds:02d}"


@dataclass
class Progress:
    """How far the sweep is. On a terminal, one line that updates in place (done/total, the last run,
    elapsed and ETA), with a run that did not end ok kept above it; in a log without a terminal (CI),
    one line per run."""

    total: int
    started: float

    def __post_init__(self):
        from tqdm import tqdm

        self.done = 0
        self.run_seconds: list[float] = []
        self.live = sys.stderr.isatty()
        self.bar = tqdm(
            total=self.total,
            unit="run",
            desc="sweep",
            file=sys.stderr,
            leave=False,
            disable=not self.live,
            bar_format="{desc} {n_fmt}/{total_fmt} [{elapsed}<{remaining}]",
        )

    def finished(self, line: str, wall_s: float | None, ok: bool = True) -> None:
        self.done += 1
        if wall_s is not None:
            self.run_seconds.append(wall_s)
        elapsed = time.perf_counter() - self.started
        remaining = self.total - self.done
        mean = sum(self.run_seconds) / len(self.run_seconds) if self.run_seconds else 0.0
        eta = f"ETA {_clock(mean * remaining)}" if remaining and self.run_seconds else ""
        said = f"[{self.done}/{self.total}] {line}  (elapsed {_clock(elapsed)}{', ' + eta if eta else ''})"
        if not self.live:
            print(said, file=sys.stderr, flush=True)
            return
        if not ok:
            self.bar.write(said, file=sys.stderr)  # stays on the screen above the live line
        self.bar.set_description_str(" ".join(line.split())[:70], refresh=False)
        self.bar.update()

    def close(self) -> None:
        self.bar.close()


def _status_line(record: Record, wall_s: float) -> str:
    spec = record.spec
    what = f"{spec.workload} {spec.strategy_name} x{spec.world_size}"
    if record.status == "ok":
        metrics = record.metrics
        failed = record.failed_checks()
        checks = f"  CHECKS FAILED: {', '.join(failed)}" if failed else ""
        late_error = f"  ({record.error.message})" if record.error else ""
        return (
            f"ok      {what:<28} {metrics.throughput_units_per_s:>12,.1f} {metrics.sample_unit}/s"
            f"  {wall_s:5.1f} s{checks}{late_error}"
        )
    logs = record.launch.logs if record.launch else None
    return f"{record.status.upper():<7} {what:<28} {record.error.message if record.error else ''}" + (
        f"\n        logs: {logs}" if logs else ""
    )


def _run_one(spec: RunSpec, timeout_s: float, oom_backoff: bool, verbose: bool) -> tuple[Record, float]:
    """Launch one planned run. A configuration this machine cannot run (say, a workload file
    that has gone) becomes a failed record instead of stopping the sweep."""
    started = time.perf_counter()
    try:
        resolved = resolve(spec)
    except SpecError as exc:
        record = new_record(spec, "failed", env=host_facts())
        record.error = RunError(message=f"not started: {exc}")
        write_record(record, spec.out_dir)
        return record, time.perf_counter() - started
    # The sweep's own bar and status lines stand for the run's progress.
    result = launch_with_oom_backoff(
        resolved, timeout_s=timeout_s, verbose=verbose, oom_backoff=oom_backoff, show_progress=False
    )
    return load_record(result.record_path), result.wall_s


def run_sweep(
    sweep_dir: str,
    manifest: dict,
    plan: list[RunSpec],
    fixed_timeout_s: float | None = None,
    oom_backoff: bool = False,
    fixed_pg_timeout_s: float | None = None,
    verbose: bool = False,
) -> dict:
    """Run every planned run that has no ok record yet; `verbose` streams what the processes
    print (otherwise only in each run's logs folder). Returns the final manifest.

    The machine canary runs before the first run and after the last (a resumed sweep adds its own
    pair): the gate compares it with the baseline's to tell a slower machine from slower code.
    DDPBENCH_CANARY=off leaves it out (quick loops, test suites): the sweep then gates as one
    from before the canary."""
    progress = Progress(total=len(plan), started=time.perf_counter())
    reference_step_s: dict[str, float] = {}
    try:
        if canary_wanted():
            manifest.setdefault("canary", []).append(run_canary("start", shape=sweep_shape(plan)))
            write_manifest(sweep_dir, manifest)
        for spec in plan:
            done = ok_record(sweep_dir, spec.run_id)
            if done is not None:
                manifest["runs"][spec.run_id] = "ok"
                progress.finished(f"done    {spec.run_id:<28} kept the ok record from {done.ended_at}", None)
            else:
                spec = spec.replace(pg_timeout_s=pg_timeout_s(spec, reference_step_s, fixed_pg_timeout_s))
                done, wall_s = _run_one(
                    spec, run_timeout_s(spec, reference_step_s, fixed_timeout_s), oom_backoff, verbose
                )
                manifest["runs"][spec.run_id] = done.status
                progress.finished(
                    _status_line(done, wall_s), wall_s, ok=done.status == "ok" and not done.failed_checks()
                )
            # the workload's local run, or a script's DDP x1 (a script has no run without DDP)
            if done.status == "ok" and (
                done.spec.strategy == "local" or (done.spec.script and done.spec.world_size == 1)
            ):
                reference_step_s[spec.workload] = done.metrics.iteration_time_s.p50
            write_manifest(sweep_dir, manifest)
    except BaseException as exc:
        state = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
        manifest.update(state=state, ended_at=utc_now())
        write_manifest(sweep_dir, manifest)
        raise
    finally:
        progress.close()
    if canary_wanted():
        manifest["canary"].append(run_canary("end", shape=sweep_shape(plan)))
    manifest.update(state="finished", ended_at=utc_now())
    write_manifest(sweep_dir, manifest)
    return manifest
