"""Figures shown side by side reproduce each other, on the default suite's stored records: E(N) is
the printed X(N) over N times the printed X(1), a cause's points are its milliseconds over the step
beside them, and no cause has points and milliseconds of opposite signs. Saved records only; every
assert is exact arithmetic on one stored sweep (no false-failure rate)."""

import dataclasses
import html
import json
import math
import os
import re
import shutil
import statistics

import msgspec
import pytest
from conftest import FIXTURES, ddpbench
from msgspec.structs import replace

from ddpbench.analysis.answers import answer_sweep
from ddpbench.analysis.causes import LABELS
from ddpbench.analysis.frames import runs_frame, scaling_table
from ddpbench.config.spec import ScriptSpec
from ddpbench.gate.compare import compare
from ddpbench.gate.history import sweep_rows
from ddpbench.gate.stats import GateSettings
from ddpbench.gate.values import describe, run_key
from ddpbench.records.store import read_records
from ddpbench.report.html import build_report

DEFAULT_SUITE = os.path.join(FIXTURES, "sweeps", "cpu-default-suite")


@pytest.fixture(scope="module")
def records():
    found, unreadable = read_records(DEFAULT_SUITE)
    assert not unreadable
    return found


def test_e_is_the_printed_x_over_n_times_the_printed_x1(records):
    table = scaling_table(runs_frame(records))
    local = table[table["strategy"] == "local"].set_index("workload")["throughput"]
    ddp = table[table["strategy"] == "ddp"]
    assert len(ddp) == 3
    for _, row in ddp.iterrows():
        x_n, x_1, n = row["throughput"], local[row["workload"]], row["world_size"]
        assert row["efficiency"] == x_n / (n * x_1), row["workload"]
        printed = round(x_n, 1) / (n * round(x_1, 1))
        assert abs(100 * (row["efficiency"] - printed)) < 0.1, row["workload"]


def test_explain_gives_the_tables_figures(records):
    table = scaling_table(runs_frame(records)).query("strategy == 'ddp'").set_index("workload")
    answers, problems = answer_sweep(records)
    assert problems == [] and len(answers) == 3
    for answer in answers:
        row = table.loc[answer.workload]
        assert answer.throughput.value == row["throughput"]
        assert answer.efficiency.value == row["efficiency"]
        assert answer.in_process.value == row["in_process_efficiency"]


def test_every_causes_points_are_its_milliseconds_over_the_step(records):
    answers, _ = answer_sweep(records)
    checked = 0
    for answer in answers:
        step = answer.step.value
        lost = 0.0
        for name, cause in answer.causes.items():
            assert abs(cause.points.value - 100 * cause.seconds.value / step) < 0.1, (answer.name, name)
            # Never of opposite signs.
            assert cause.points.value * cause.seconds.value >= 0, name
            lost += cause.points.value
            checked += 1
        # The causes add up to the in-process loss.
        assert lost == pytest.approx(100 * (1 - answer.in_process.value), abs=1e-6)
    assert checked == 3 * 7


# --- one set of stored records, every output -------------------------------------------------------

SLOW_RANK = os.path.join(FIXTURES, "sweeps", "slow-rank")
FLAGGED = os.path.join(FIXTURES, "sweeps", "gate-why-backward")


def _script_sweep(folder) -> str:
    """The slow-rank sweep's DDP runs as a script's sweep, in three rounds: its x1 run is the
    reference, and without the in-process ablation every figure takes the labelled path (the
    straggler from the no_sync replay). Assembled from the stored records, nothing launched."""
    records = {r.run_id: r for _, r in read_records(SLOW_RANK)[0]}
    (folder / "runs").mkdir(parents=True)
    for repeat, factor in enumerate((1.0, 1.04, 0.97), start=1):
        for run_id in ("ddp1", "slow2"):
            record = records[run_id]
            name = f"{run_id}-r{repeat}"
            spec = dataclasses.replace(
                record.spec,
                run_id=name,
                repeat=repeat,
                workload="script:train.py",
                script=ScriptSpec(path="train.py"),
            )
            metrics = replace(record.metrics, throughput_units_per_s=record.metrics.throughput_units_per_s * factor)
            timeline = replace(record.timeline, ladder=None) if record.timeline else None
            changed = replace(record, run_id=name, spec=spec, metrics=metrics, timeline=timeline)
            (folder / "runs" / f"{name}.json").write_bytes(msgspec.json.encode(changed))
    return str(folder)


def _one_set(folder) -> str:
    """Every case above in one sweep folder: the slow-rank runs (a named straggler), the runs the
    speed check flagged, the default suite and a script's sweep, so that each output reads them
    all at once, as a user's mixed results folder would be read."""
    script = _script_sweep(folder / "script-part")
    (folder / "runs").mkdir(parents=True)
    for source in (SLOW_RANK, FLAGGED, DEFAULT_SUITE, script):
        for name in os.listdir(os.path.join(source, "runs")):
            shutil.copy(os.path.join(source, "runs", name), folder / "runs" / name)
    shutil.rmtree(folder / "script-part")
    return str(folder)


def row_of(table, answer: dict, spec):
    """The table's row of one explained configuration."""
    rows = table[(table["strategy"] == answer["strategy"]) & (table["world_size"] == spec.world_size)]
    rows = rows[rows["workload"] == (spec.workload if spec.script else answer["configuration"].split(" ")[0])]
    assert len(rows) == 1, answer["configuration"]
    return rows.iloc[0]


def _verdict_rows(page: str) -> dict[str, list[str]]:
    rows = {}
    for row in re.findall(r"<tr>(.*?)</tr>", page, flags=re.S):
        cells = [html.unescape(c.strip()) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, flags=re.S)]
        if len(cells) == 8 and cells[0] not in rows:
            rows[cells[0]] = cells
    return rows


@pytest.mark.parametrize("which", ["one-set", "straggler", "flagged", "default-suite", "script"])
def test_table_explain_report_gate_and_history_give_one_figure_per_configuration(which, tmp_path):
    """Over one set of stored records (a named straggler, runs the speed check flagged, the default
    suite, a script's sweep): the table, explain's JSON, the report's first screen, the gate of the
    sweep against itself and its history rows give the same E(N), in-process efficiency, largest
    cause and straggler for every configuration they show."""
    if which == "one-set":
        sweep = _one_set(tmp_path / "one-set")
    else:
        sweep = {
            "straggler": SLOW_RANK,
            "flagged": FLAGGED,
            "default-suite": DEFAULT_SUITE,
            "script": None,
        }[which] or _script_sweep(tmp_path / "script-sweep")
    records = read_records(sweep)[0]
    done = ddpbench("explain", sweep, "--json-file", str(tmp_path / "explain.json"))
    assert done.returncode == 0, done.stdout + done.stderr
    explained = json.loads((tmp_path / "explain.json").read_text())["configurations"]
    table = scaling_table(runs_frame(records))
    page = open(build_report(sweep, str(tmp_path / "report.html"))).read()
    verdicts = _verdict_rows(page)
    ok = [r for _, r in records if r.status == "ok"]
    gate = {
        c.configuration: c
        for c in compare(ok, ok, GateSettings(), ("efficiency",), allow_failed=True)[0]
        if c.measure == "efficiency"
    }
    _, history, _ = sweep_rows(sweep)
    if which in ("flagged", "one-set"):
        assert any(answer["left_out"] for answer in explained), "the fixture should have a flagged run"
    if which in ("straggler", "one-set"):
        assert any(answer["straggler"]["named"] for answer in explained)
    if which == "one-set":  # every case is in it: a script's configuration and the default suite's
        assert any(answer["configuration"].startswith("train x") for answer in explained)
        assert {"gpt2", "mlp", "resnet50"} <= {answer["configuration"].split(" ")[0] for answer in explained}
        assert len(explained) == 8
    checked = 0
    for answer in explained:
        efficiency = answer["efficiency"]["value"]
        in_process = (answer["in_process_efficiency"] or {}).get("value")
        runs = [r for _, r in records if r.run_id in answer["runs"]]
        spec = runs[0].spec
        row = row_of(table, answer, spec)
        # explain's own figures reproduce each other: E(N) is its X over N times its X(1).
        if answer["reference_throughput"] is not None:
            x_n, x_1 = answer["throughput"]["value"], answer["reference_throughput"]["value"]
            assert efficiency == pytest.approx(x_n / (spec.world_size * x_1), rel=1e-12)
            assert row_of(table, answer, spec)["throughput"] == pytest.approx(x_n, rel=1e-12)
        # The table: the same unrounded figures.
        assert row["efficiency"] == pytest.approx(efficiency, rel=1e-12)
        if in_process is None:
            assert math.isnan(row["in_process_efficiency"])
        else:
            assert row["in_process_efficiency"] == pytest.approx(in_process, rel=1e-12)
        # The gate of the sweep against itself: its E(N) is the mean of its per-run values, the same.
        # The gate of the sweep against itself shows the mean of its per-run values, and the history
        # stores those values: both that E(N). (Both keep E(N) from 2 devices on.)
        key = run_key(runs[0])
        if spec.world_size > 1:
            assert gate[describe(key)].baseline == pytest.approx(efficiency, rel=1e-12)
            values = [row_["efficiency"] for key_, row_ in history if key_ == key and row_["efficiency"] is not None]
            assert statistics.fmean(values) == pytest.approx(efficiency, rel=1e-12)
            # One run's E(N) is one figure too: explain's by-run detail and the history row agree.
            stored = {row_["run_id"]: row_["efficiency"] for key_, row_ in history if key_ == key}
            for run in answer["by_run"]:
                if stored.get(run["run_id"]) is not None:
                    assert run["efficiency"]["value"] == pytest.approx(stored[run["run_id"]], rel=1e-12), run["run_id"]
        # The report's first screen: the headline configuration of each workload.
        shown = verdicts.get(f"{answer['configuration'].rsplit(' x', 1)[0]} x{spec.world_size}")
        if shown is not None and spec.world_size == max(
            r.spec.world_size for r in ok if r.spec.workload == spec.workload
        ):
            assert shown[1].startswith(f"{100 * efficiency:.1f} %"), (shown, efficiency)
            if answer["largest"]:
                assert shown[3].startswith(LABELS[answer["largest"][0]]), shown
            else:
                assert shown[3].startswith(("within noise", "not measured in place")), shown
            straggler = answer["straggler"]
            if straggler and straggler["named"]:
                phase = f"in its {straggler['phase']}" if straggler["phase"] else "phase unclear"
                assert f"rank {straggler['rank']}" in shown[4] and phase in shown[4], shown
            else:
                assert "rank " not in shown[4] or "no rank" in shown[4], shown
            # CPU denied: records from before the kernel's counters say so, never "none".
            if answer["cpu_denied"] is None:
                assert shown[5] == "not measured", shown
            checked += 1
    assert checked >= 1
