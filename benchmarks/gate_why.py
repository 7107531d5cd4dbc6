"""Does `ddpbench gate` say why? Planted regressions and A/A pairs: real sweeps on this machine (2
ranks, gloo, CPU) of the workloads in tests/fixtures/planted_regressions.py.

- baseline: one sweep of the cases' workloads and steady, nothing planted;
- candidate: the same sweep with DDPBENCH_PLANTED naming the cases (--cases; default all three):
  forward (more work in every rank's forward), gradients (more gradient bytes with little compute),
  backward (rank 1 delayed inside backward);
- A/A: --aa-sweeps unplanted sweeps in all (the baseline is the first), gated in disjoint pairs.

Then `python -m ddpbench.gate.ci -- ddpbench gate` on baseline and candidate and on every A/A pair,
timed from outside, and judged:
- planted: every planted DDP configuration regresses on some measure, its DDP step at least 30 %
  slower, and the first cause the gate names is the planted one: the model's own compute (forward),
  a communication cause (gradients: exposed communication, or backward slowed by communication),
  waiting for the slowest rank, naming rank 1 and its backward (backward);
- unplanted: steady's DDP configuration names no cause in the same sweeps;
- A/A: no comparison fails, and at most 1 configuration comparison in 20 names a cause;
- cost: every gate answers in under 5 s, and the sweeps hold as many records after it as before;
  timed too on two default-sized sweeps (synthetic: this measurement's steady runs relabelled as the
  CPU suite's mlp, gpt2 and resnet50, each DDP record's per-parameter gradient times repeated to that
  model's count of parameter tensors; building them imports torch to count them).

Every sweep is `ddpbench sweep --device cpu --nproc 2 --strategies local,ddp --repeat R`, run from
the repository's folder with the workload file's relative path, so the command the gate gives to
reproduce a regression names that folder. The whole measurement holds /tmp/ddpbench-bench.lock: it
takes the lock itself, or runs under the caller's (`flock /tmp/ddpbench-bench.lock python ...`).

Prints the page and writes it to --page (docs/measurements/gate-why.md; --no-page only prints).
--analyse-only gates the sweeps in --out again with this checkout (the cost figures stay the
measuring command's, kept in OUT/measurement.json) and measures nothing.

    python benchmarks/gate_why.py --out /tmp/gate-why
    python benchmarks/gate_why.py --out /tmp/gate-why --analyse-only
    python benchmarks/gate_why.py --out /tmp/gate-why-check --cases backward --repeat 2 --steps 20 --aa-sweeps 2
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, REPO)

from bench_lock import LOCK, bench_lock  # noqa: E402
from measurement_page import add_page_options, analysis_facts, command_line, write_page  # noqa: E402

from ddpbench.records.store import read_records  # noqa: E402

PAGE = os.path.join(REPO, "docs", "measurements", "gate-why.md")
WORKLOADS = "tests/fixtures/planted_regressions.py"
"""Relative to the repository, where every sweep runs."""
CASES = ("forward", "gradients", "backward")
UNPLANTED = "steady"
EXPECTED = {
    "forward": ("compute",),
    "gradients": ("exposed_comm", "overlap_slowdown"),
    "backward": ("straggler_wait",),
}
"""The cause each planted regression should be named by first."""
PLANTED_FILE = os.path.join(REPO, WORKLOADS)
# The fixture's amounts, read from its text (importing it needs torch).
AMOUNTS = {}
with open(PLANTED_FILE, encoding="utf-8") as source:
    for line in source:
        name, _, value = line.partition(" = ")
        if name in ("FORWARD_SIZE", "FORWARD_PRODUCTS", "GRADIENT_FLOATS", "BACKWARD_DELAY_S"):
            AMOUNTS[name] = float(value.replace("_", ""))
MIN_SLOWDOWN_PCT = 30.0
MAX_GATE_S = 5.0
AA_RATE = 1 / 20
MEASUREMENT = "measurement.json"
GATES = "gates"
WIDTH = 100


# --- measuring ------------------------------------------------------------------------------------


def sweep(out: str, sweep_id: str, cases: list[str], repeat: int, steps: int, warmup: int, planted: str) -> bool:
    workloads = ",".join(f"{WORKLOADS}:{name}" for name in [*cases, UNPLANTED])
    env = dict(os.environ, PYTHONPATH=REPO, CUDA_VISIBLE_DEVICES="", GLOO_SOCKET_IFNAME="lo")
    env.pop("DDPBENCH_PLANTED", None)
    if planted:
        env["DDPBENCH_PLANTED"] = planted
    command = [sys.executable, "-m", "ddpbench", "sweep", "--device", "cpu", "--nproc", "2"]
    command += ["--workloads", workloads, "--strategies", "local,ddp", "--repeat", str(repeat)]
    command += ["--steps", str(steps), "--warmup", str(warmup), "--out", out, "--sweep-id", sweep_id]
    started = time.time()
    # The sweep writes its HTML report under the folder it runs in: moved out of the repository.
    report = os.path.join(REPO, "reports", sweep_id)
    with open(os.path.join(out, f"{sweep_id}.log"), "w", encoding="utf-8") as log:
        done = subprocess.run(command, env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    if os.path.isdir(report):
        shutil.move(report, os.path.join(out, sweep_id, "report"))
    print(f"  [{time.time() - started:5.0f} s] sweep {sweep_id}: exit {done.returncode}", file=sys.stderr)
    return os.path.isdir(os.path.join(out, sweep_id, "runs"))


def record_count(folder: str) -> int:
    runs = os.path.join(folder, "runs")
    return len([name for name in os.listdir(runs) if name.endswith(".json")]) if os.path.isdir(runs) else 0


def gate(out: str, name: str, baseline: str, candidate: str) -> dict:
    """The gate through ddpbench.gate.ci, as `make gate` and the documented CI job run it: exit
    code, output, verdict and wall time, kept in OUT/gates/NAME.json."""
    folder = os.path.join(out, GATES)
    os.makedirs(folder, exist_ok=True)
    verdict_path = os.path.join(folder, f"{name}.verdict.json")
    summary_path = os.path.join(folder, f"{name}.md")
    env = dict(os.environ, PYTHONPATH=REPO, DDPBENCH_HISTORY=os.path.join(folder, "no-history.sqlite"))
    command = [sys.executable, "-m", "ddpbench.gate.ci", "--", sys.executable, "-m", "ddpbench", "gate"]
    command += ["--baseline", os.path.join(out, baseline), "--candidate", os.path.join(out, candidate)]
    command += ["--json", verdict_path, "--summary-md", summary_path]
    before = record_count(os.path.join(out, baseline)) + record_count(os.path.join(out, candidate))
    started = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = record_count(os.path.join(out, baseline)) + record_count(os.path.join(out, candidate))
    verdict = None
    if os.path.exists(verdict_path):
        with open(verdict_path, encoding="utf-8") as handle:
            verdict = json.load(handle)
    found = {
        "name": name,
        "baseline": baseline,
        "candidate": candidate,
        "code": done.returncode,
        "stdout": done.stdout,
        "stderr": done.stderr,
        "wall_s": wall,
        "records_before": before,
        "records_after": after,
        "verdict": verdict,
    }
    with open(os.path.join(folder, f"{name}.json"), "w", encoding="utf-8") as handle:
        json.dump(found, handle, indent=1)
    print(f"  [{wall:5.1f} s] gate {name}: exit {done.returncode}", file=sys.stderr)
    return found


def aa_pairs(aa_sweeps: int) -> list[tuple[str, str]]:
    names = ["baseline", *[f"aa-{i}" for i in range(2, aa_sweeps + 1)]]
    return [(names[i], names[i + 1]) for i in range(0, len(names) - 1, 2)]


SUITE = ("mlp", "gpt2", "resnet50")
"""The CPU suite's workloads, the shape of a default sweep (ddpbench.config.plan.SUITES["cpu"])."""


def parameter_tensors(workload: str) -> int:
    """How many parameter tensors the workload's tiny model has: each gets a gradient time per step
    in a DDP record's timeline. Builds the model, so it imports torch."""
    from ddpbench.worker.workload import build_workload

    return sum(1 for p in build_workload(workload, "tiny", None).model.parameters() if p.requires_grad)


def stretch(values: list, count: int) -> list:
    return [values[i % len(values)] for i in range(count)] if values else values


def default_sized(out: str, source: str, name: str, counts: dict[str, int]) -> str:
    """A sweep shaped like a default CPU sweep, for timing only: for each of the suite's workloads,
    the source sweep's steady runs (local and ddp x2, every round) relabelled as it, each DDP
    record's per-parameter gradient times repeated to that workload's count of parameter tensors."""
    target = os.path.join(out, name)
    os.makedirs(os.path.join(target, "runs"), exist_ok=True)
    shutil.copy(os.path.join(out, source, "manifest.json"), target)
    runs = os.path.join(out, source, "runs")
    steady = [f for f in sorted(os.listdir(runs)) if f.startswith(f"planted_regressions.{UNPLANTED}-")]
    for workload, count in counts.items():
        for file in steady:
            with open(os.path.join(runs, file), encoding="utf-8") as handle:
                record = json.load(handle)
            run_id = file.removesuffix(".json").replace(f"planted_regressions.{UNPLANTED}", workload)
            record["run_id"] = record["spec"]["run_id"] = run_id
            record["spec"]["workload"] = workload
            timeline = record.get("timeline")
            if timeline:
                timeline["param_names"] = [f"parameter{i}" for i in range(count)]
                timeline["param_bytes"] = stretch(timeline.get("param_bytes") or [], count)
                for rank in timeline.get("by_rank") or []:
                    for steps in rank.values():
                        for step in steps if isinstance(steps, list) else []:
                            if isinstance(step, dict) and "grad_ready_s" in step:
                                step["grad_ready_s"] = stretch(step["grad_ready_s"], count)
            with open(os.path.join(target, "runs", f"{run_id}.json"), "w", encoding="utf-8") as handle:
                json.dump(record, handle)
    return name


def time_default_sized(out: str) -> dict:
    counts = {workload: parameter_tensors(workload) for workload in SUITE}
    baseline = default_sized(out, "baseline", "default-sized-baseline", counts)
    candidate = default_sized(out, "candidate", "default-sized-candidate", counts)
    found = gate(out, "default-sized", baseline, candidate)
    return {"parameters": counts, "records": record_count(os.path.join(out, candidate)), "wall_s": found["wall_s"]}


def gate_all(out: str, aa_sweeps: int) -> dict:
    found = {"planted": gate(out, "planted", "baseline", "candidate")}
    for first, second in aa_pairs(aa_sweeps):
        found[f"aa {first} {second}"] = gate(out, f"aa-{first}-{second}", first, second)
    return found


def measure(out: str, args, command: str) -> dict:
    started = time.time()
    failed = []
    with bench_lock() as locked_by:
        plan = [("baseline", ""), ("candidate", ",".join(args.cases))]
        plan += [(f"aa-{i}", "") for i in range(2, args.aa_sweeps + 1)]
        for sweep_id, planted in plan:
            if not sweep(out, sweep_id, args.cases, args.repeat, args.steps, args.warmup, planted):
                failed.append(sweep_id)
        gates = gate_all(out, args.aa_sweeps)
        sized = time_default_sized(out)
    return {
        "default_sized": sized,
        "command": command,
        "seconds": time.time() - started,
        "locked_by": locked_by,
        "failed": failed,
        "settings": {
            "cases": args.cases,
            "repeat": args.repeat,
            "steps": args.steps,
            "warmup": args.warmup,
            "aa_sweeps": args.aa_sweeps,
        },
        "gate_wall_s": {name: found["wall_s"] for name, found in gates.items()},
        "records": {name: [found["records_before"], found["records_after"]] for name, found in gates.items()},
    }


# --- judging --------------------------------------------------------------------------------------


def ddp_configuration(case: str) -> str:
    return f"{WORKLOADS}:{case}/tiny ddp x2 b32 fp32 cpu"


def why_of(verdict: dict | None, configuration: str) -> dict | None:
    return next((why for why in (verdict or {}).get("why") or [] if why["configuration"] == configuration), None)


def regressed_measures(verdict: dict | None, configuration: str) -> list[str]:
    return [
        c["measure"]
        for c in (verdict or {}).get("comparisons", [])
        if c["configuration"] == configuration and c["verdict"] == "regression"
    ]


def judge_planted(found: dict, cases: list[str]) -> dict:
    verdict = found["verdict"]
    judged = {}
    for case in cases:
        configuration = ddp_configuration(case)
        why = why_of(verdict, configuration) or {}
        slowdown = why.get("ddp_slowdown_pct") or {}
        named = why.get("named") or []
        straggler = why.get("straggler") or {}
        first = named[0] if named else None
        ok_cause = first in EXPECTED[case]
        if case == "backward":
            ok_cause = ok_cause and straggler.get("rank") == 1 and straggler.get("phase") == "backward"
        causes = why.get("causes") or []
        largest = max(causes, key=lambda cause: cause["seconds"]["value"]) if causes else None
        judged[case] = {
            "largest": largest,
            "regressed": regressed_measures(verdict, configuration),
            "slowdown": slowdown,
            "named": named,
            "first": first,
            "straggler": straggler,
            "headline": why.get("headline"),
            "lines": why.get("lines") or [],
            "needs": why.get("needs") or [],
            "reproduce": (why.get("reproduce") or {}).get("command"),
            "ok_fails": bool(regressed_measures(verdict, configuration)),
            "ok_slowdown": bool(slowdown) and slowdown.get("value", 0) >= MIN_SLOWDOWN_PCT,
            "ok_cause": ok_cause,
        }
    steady = why_of(verdict, ddp_configuration(UNPLANTED)) or {}
    judged[UNPLANTED] = {
        "named": steady.get("named") or [],
        "compared": bool(steady.get("causes")),
        "needs": steady.get("needs") or [],
        # Only a comparison that ran can name nothing: a configuration never compared judges nothing.
        "ok": bool(steady.get("causes")) and not steady.get("named"),
    }
    return judged


def judge_aa(gates: dict) -> dict:
    pairs = []
    for name, found in gates.items():
        if not name.startswith("aa "):
            continue
        verdict = found["verdict"] or {}
        failing = [
            f"{c['configuration']} {c['measure']}: {c['verdict']}"
            for c in verdict.get("comparisons", [])
            if c["verdict"] in ("regression", "not comparable")
        ]
        compared = [why for why in verdict.get("why") or [] if why["causes"]]
        named = {why["configuration"]: why["named"] for why in compared if why["named"]}
        flagged = [flag for flags in (verdict.get("probe_flagged_runs") or {}).values() for flag in flags]
        pairs.append(
            {"name": name, "code": found["code"], "failing": failing, "compared": len(compared), "named": named,
             "flagged": flagged}
        )  # fmt: skip
    compared = sum(pair["compared"] for pair in pairs)
    named = sum(len(pair["named"]) for pair in pairs)
    return {
        "pairs": pairs,
        "compared": compared,
        "named": named,
        "ok_fails_nothing": bool(pairs) and not any(pair["failing"] for pair in pairs),
        # Exit 4 is a failed CI job too (a run the speed check flagged, or too few runs to see the
        # target): fails nothing only where every pair passed outright.
        "ok_passes": bool(pairs) and all(pair["code"] == 0 for pair in pairs),
        "ok_rate": compared > 0 and named <= AA_RATE * compared,
    }


# --- the page -------------------------------------------------------------------------------------


def wrap(text: str, indent: str = "  ") -> str:
    return textwrap.fill(text, WIDTH, break_long_words=False, break_on_hyphens=False, subsequent_indent=indent)


def yes(flag: bool) -> str:
    return "yes" if flag else "no"


def pct_cell(estimate: dict) -> str:
    if not estimate:
        return "n/a"
    if estimate.get("low") is None:
        return f"{estimate['value']:+.0f} %"
    return f"{estimate['value']:+.0f} % ({estimate['low']:+.0f} to {estimate['high']:+.0f})"


def why_block(stdout: str) -> list[str]:
    """The gate's cause lines as it printed them (each `why` line and the indented lines under it,
    and the level they were named at), and its last line: what its exit code means."""
    lines = stdout.strip().splitlines()
    kept, inside = [], False
    for line in lines:
        inside = line.startswith("why") or (inside and line.startswith("  "))
        if inside or line.startswith("(a cause is named"):
            kept.append(line)
    return kept + lines[-1:]


def minute(iso: str) -> str:
    return iso[:16].replace("T", " ")


def header(records: list, measured: dict | None, analysed: dict) -> list[str]:
    shas = sorted({(r.env.git_sha or "not recorded")[:7] + (" (dirty)" if r.env.git_dirty else "") for r in records})
    machines = sorted({f"{r.env.cpu_cores} cores ({r.env.cpu_model or 'model not recorded'})" for r in records})
    starts = sorted(r.started_at for r in records if r.started_at)
    ends = sorted(r.ended_at for r in records if r.ended_at)
    settings = (measured or {}).get("settings") or {}
    busy = sum(1 for r in records if r.machine_load is not None and r.machine_load.busy)
    took = "not kept beside the runs"
    if measured:
        took = (
            f"`{measured['command']}` (measured in {measured['seconds'] / 60:.1f} minutes, holding `flock {LOCK}` "
            f"throughout, taken by {measured['locked_by']})"
        )
        if analysed["analyse_only"]:
            took += f"; gated again for this page by `{analysed['command']}`"
    return [
        f"- **Commit**: the runs: {', '.join(shas) or 'not recorded'}; the analysis: "
        f"{(analysed.get('git_sha') or 'not recorded')[:7]}"
        + (" with uncommitted changes to tracked files" if analysed.get("git_dirty") else "")
        + ".",
        f"- **Machine**: {'; '.join(machines) or 'not recorded'}, no GPU used; the runs ran from "
        f"{minute(starts[0]) if starts else '?'} to {minute(ends[-1]) if ends else '?'} UTC; page written "
        f"{analysed['date']}.",
        f"- **Command**: {took}.",
        f"- **Sweeps**: `ddpbench sweep --device cpu --nproc 2 --strategies local,ddp --repeat "
        f"{settings.get('repeat', '?')} --steps {settings.get('steps', '?')} --warmup {settings.get('warmup', '?')}` "
        f"of `{WORKLOADS}` ({', '.join(settings.get('cases', []))} and {UNPLANTED}), from the repository's folder: "
        f"a baseline, a candidate with DDPBENCH_PLANTED={','.join(settings.get('cases', []))}, and "
        f"{settings.get('aa_sweeps', '?')} unplanted sweeps in all for the A/A pairs (the baseline the first).",
        f"- **Planted**: forward, {AMOUNTS['FORWARD_PRODUCTS']:.0f} products of {AMOUNTS['FORWARD_SIZE']:.0f} x "
        f"{AMOUNTS['FORWARD_SIZE']:.0f} matrices in every training forward; gradients, a parameter of "
        f"{AMOUNTS['GRADIENT_FLOATS']:,.0f} floats ({4 * AMOUNTS['GRADIENT_FLOATS'] / 2**20:.1f} MiB more to "
        f"all-reduce) entering the loss through one element; backward, rank 1 sleeps "
        f"{1e3 * AMOUNTS['BACKWARD_DELAY_S']:.0f} ms inside every backward (as `{WORKLOADS}` is at the analysis's "
        "commit).",
        f"- **Load**: {busy} of {len(records)} runs were measured while other processes took cores they wanted "
        "(the records' machine_load); the gate answers 4, not 1, where every regression has such a run.",
    ]


def planted_table(judged: dict, cases: list[str]) -> list[str]:
    lines = [
        "| case | planted | DDP step (95 %) | regressed on | largest growth, ms per step (95 %), p | named first "
        "| expected | fails, ≥ 30 %, named right |",
        "|---|---|---|---|---|---|---|---|",
    ]
    planted = {
        "forward": "more work in every rank's forward",
        "gradients": "more gradient bytes, little compute",
        "backward": "rank 1 sleeps inside backward",
    }
    for case in cases:
        found = judged[case]
        first = found["first"] or "none"
        if case == "backward" and found["straggler"]:
            first += f" (rank {found['straggler'].get('rank')}, {found['straggler'].get('phase')})"
        lines.append(
            f"| {case} | {planted[case]} | {pct_cell(found['slowdown'])} | "
            f"{', '.join(found['regressed']) or 'nothing'} | {growth_cell(found['largest'])} | {first} | "
            f"{' or '.join(EXPECTED[case])} | "
            f"{yes(found['ok_fails'])}, {yes(found['ok_slowdown'])}, {yes(found['ok_cause'])} |"
        )
    return lines


def growth_cell(cause: dict | None) -> str:
    if cause is None:
        return "not compared"
    seconds = cause["seconds"]
    return (
        f"{cause['name']} {1e3 * seconds['value']:+.2f} ({1e3 * seconds['low']:+.2f} to {1e3 * seconds['high']:+.2f}), "
        f"{cause['p_value']:.2g}"
    )


def aa_table(aa: dict) -> list[str]:
    lines = [
        "| pair | gate exit | failing comparisons | DDP configurations compared | naming a cause |",
        "|---|---|---|---|---|",
    ]
    for pair in aa["pairs"]:
        named = "; ".join(f"{name}: {', '.join(causes)}" for name, causes in pair["named"].items()) or "none"
        lines.append(
            f"| {pair['name'][3:]} | {pair['code']} | {'; '.join(pair['failing']) or 'none'} | {pair['compared']} "
            f"| {named} |"
        )
    return lines


def page(out: str, measured: dict | None, analysed: dict, gates: dict) -> tuple[str, dict]:
    settings = (measured or {}).get("settings") or {}
    cases = settings.get("cases") or list(CASES)
    records = []
    for name in sorted(os.listdir(out)):
        if os.path.isdir(os.path.join(out, name, "runs")) and not name.startswith("default-sized"):
            records += [record for _, record in read_records(os.path.join(out, name))[0]]
    planted = gates["planted"]
    judged = judge_planted(planted, cases)
    steady = judged[UNPLANTED]
    if steady["named"]:
        unplanted = f"names {', '.join(steady['named'])}"
    else:
        unplanted = "names no cause" + ("" if steady["compared"] else f" (not compared: {'; '.join(steady['needs'])})")
    aa = judge_aa(gates)
    walls = (measured or {}).get("gate_wall_s") or {}
    counts = (measured or {}).get("records") or {}
    sized = (measured or {}).get("default_sized")
    slowest = max([*walls.values(), *([sized["wall_s"]] if sized else [])], default=None)
    planted_s = walls.get("planted", planted["wall_s"])  # the measuring command's, timed under the lock
    unchanged = all(before == after for before, after in counts.values()) if counts else None
    kept = {True: "the same", False: "not the same", None: "not counted"}[unchanged]
    verdicts = {
        "planted fail": all(judged[c]["ok_fails"] for c in cases),
        "planted ≥ 30 %": all(judged[c]["ok_slowdown"] for c in cases),
        "planted named right": all(judged[c]["ok_cause"] for c in cases),
        "unplanted name none": judged[UNPLANTED]["ok"],
        "A/A fails no comparison": aa["ok_fails_nothing"],
        "A/A exits 0 in every pair": aa["ok_passes"],
        "A/A names at most 1 in 20": aa["ok_rate"],
        "gate under 5 s": slowest is not None and slowest < MAX_GATE_S,
    }
    reduced = bool(settings) and (
        set(cases) != set(CASES) or settings.get("repeat", 3) < 3 or settings.get("aa_sweeps", 6) < 6
    )
    lines = [
        "# The gate says why: planted regressions and A/A pairs",
        "",
        "Written by `benchmarks/gate_why.py`, which ran the sweeps below, gated them and judged what the",
        "gate said; rerun it to measure again. What the gate prints and how it decides: [the CI gate](../gate.md).",
        "",
        *(wrap(line) for line in header(records, measured, analysed)),
    ]
    if reduced:
        lines += [
            "",
            wrap(
                "- **A reduced check**, not the measurement: fewer cases, repeats or A/A sweeps than the criteria "
                "ask for (`--cases forward,gradients,backward --repeat 3 --aa-sweeps 6`, the defaults, measure them)."
            ),
        ]
    lines += [
        "",
        f"### The gate on the planted candidate (exit {planted['code']}, {planted_s:.1f} s)",
        "",
        "```text",
        *why_block(planted["stdout"]),
        "```",
        "",
        "### Each planted regression",
        "",
        *planted_table(judged, cases),
        "",
        wrap(f"- **Unplanted** (`{UNPLANTED}`, ddp x2, in the same sweeps): {unplanted}."),
        "",
        "### A/A: unplanted sweeps gated in pairs",
        "",
        *aa_table(aa),
        "",
        wrap(
            f"- {aa['named']} of {aa['compared']} configuration comparisons named a cause (at most 1 in 20 "
            f"allowed: {yes(aa['ok_rate'])}); comparisons that failed: "
            f"{sum(len(pair['failing']) for pair in aa['pairs'])}; pairs whose gate exited other than 0: "
            + (
                "; ".join(
                    f"{pair['name'].removeprefix('aa ')} exit {pair['code']}"
                    for pair in aa["pairs"]
                    if pair["code"] != 0
                )
                or "none"
            )
            + ("" if aa["ok_passes"] else " (the runs the speed check flagged, if any, follow)")
            + "."
        ),
        *(
            wrap(f"  - flagged in {pair['name'].removeprefix('aa ')}: {flag}", "    ")
            for pair in aa["pairs"]
            for flag in pair["flagged"]
        ),
        "",
        "### Cost",
        "",
        wrap(
            "- The gate's wall time through `python -m ddpbench.gate.ci`, a fresh interpreter each: "
            + (", ".join(f"{name} {seconds:.2f} s" for name, seconds in walls.items()) or "not measured")
            + (
                f"; on two default-sized sweeps ({sized['records']} records a side, synthetic: this measurement's "
                f"{UNPLANTED} runs relabelled as the CPU suite's {', '.join(sized['parameters'])} with their "
                f"{', '.join(map(str, sized['parameters'].values()))} parameter tensors' gradient times) "
                f"{sized['wall_s']:.2f} s"
                if sized
                else ""
            )
            + f"; the slowest {'under' if verdicts['gate under 5 s'] else 'not under'} 5 s. Records in the sweeps "
            f"before and after each gate: {kept} (attribution runs nothing)."
        ),
        "",
        "### Against the criteria",
        "",
        "| criterion | met |",
        "|---|---|",
        *(f"| {name} | {yes(flag)} |" for name, flag in verdicts.items()),
    ]
    if (measured or {}).get("failed"):
        lines += ["", wrap(f"- **Sweeps that failed**: {', '.join(measured['failed'])}.")]
    return "\n".join(lines) + "\n", verdicts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="results/gate-why")
    parser.add_argument("--cases", default=",".join(CASES), help=f"planted cases, a subset of {','.join(CASES)}")
    parser.add_argument("--repeat", type=int, default=3, help="runs of every configuration per sweep")
    parser.add_argument("--steps", type=int, default=60, help="steps per run, warm-up included")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--aa-sweeps", type=int, default=6, help="unplanted sweeps in all, the baseline among them")
    parser.add_argument("--analyse-only", action="store_true", help="gate the sweeps already in --out again")
    add_page_options(parser, PAGE)
    args = parser.parse_args(argv)
    args.cases = [case for case in args.cases.split(",") if case]
    unknown = [case for case in args.cases if case not in CASES]
    if unknown or not args.cases:
        parser.error(f"--cases takes a subset of {','.join(CASES)}; got {','.join(unknown) or 'nothing'}")
    if args.repeat < 2 or args.aa_sweeps < 2:
        parser.error("--repeat and --aa-sweeps must be at least 2 (one run a side cannot be attributed)")
    command = command_line("gate_why.py", argv)
    out = os.path.abspath(args.out)
    kept = os.path.join(out, MEASUREMENT)
    if args.analyse_only:
        measured = None
        if os.path.exists(kept):
            with open(kept, encoding="utf-8") as handle:
                measured = json.load(handle)
        aa_sweeps = ((measured or {}).get("settings") or {}).get("aa_sweeps", args.aa_sweeps)
        gates = gate_all(out, aa_sweeps)
    else:
        if os.path.exists(os.path.join(out, "baseline")):
            parser.error(f"{out} already holds sweeps: use --analyse-only, or a new --out")
        names = ["baseline", "candidate", *[f"aa-{i}" for i in range(2, args.aa_sweeps + 1)]]
        taken = [name for name in names if os.path.exists(os.path.join(REPO, "reports", name))]
        if taken:
            parser.error(f"reports/{taken[0]} exists: a sweep of this measurement would write its report there")
        os.makedirs(out, exist_ok=True)
        measured = measure(out, args, command)
        with open(kept, "w", encoding="utf-8") as handle:
            json.dump(measured, handle, indent=1)
        gates = {}
        for name in measured["gate_wall_s"]:
            file = "planted" if name == "planted" else "aa-" + "-".join(name.split()[1:])
            with open(os.path.join(out, GATES, f"{file}.json"), encoding="utf-8") as handle:
                gates[name] = json.load(handle)
    analysed = analysis_facts(command, args.analyse_only)
    text, verdicts = page(out, measured, analysed, gates)
    print(text)
    write_page(args, text)
    return 0 if all(verdicts.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
