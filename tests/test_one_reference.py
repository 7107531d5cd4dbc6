"""One reference and one set of runs: every view (the table, explain, the report's figures, the gate
and the history) divides by the same X(1) and pools the same runs. A compiled configuration's X(1)
is the compiled local runs (docs/concepts.md), a script's its DDP x1 runs with the same DDP options,
a run that failed a correctness check counts nowhere (and the table says so), and E(N) over one
local run gets the interval its DDP runs allow. Saved records, changed in known ways: every assert
is exact arithmetic (no false-failure rate)."""

import dataclasses
import math
import os
import statistics

import pytest
from conftest import FIXTURES
from msgspec.structs import replace

from ddpbench.analysis.answers import answer_sweep
from ddpbench.analysis.estimates import standard_error
from ddpbench.analysis.frames import format_side_by_side, runs_frame, scaling_table
from ddpbench.config.spec import ScriptSpec
from ddpbench.gate.history import values_by_run
from ddpbench.gate.values import run_key, side_values
from ddpbench.records.schema import Check
from ddpbench.records.store import read_records

DEFAULT_SUITE = os.path.join(FIXTURES, "sweeps", "cpu-default-suite")


def mlp(records):
    return [(path, record) for path, record in records if record.spec.workload == "mlp"]


def changed(record, factor: float = 1.0, run_id: str | None = None, checks=None, **spec):
    """The record with its throughput `factor` times and its spec changed (a new run id too)."""
    run_id = run_id or record.run_id
    metrics = replace(
        record.metrics,
        throughput_units_per_s=record.metrics.throughput_units_per_s * factor,
        throughput_samples_per_s=record.metrics.throughput_samples_per_s * factor,
    )
    found = replace(
        record,
        run_id=run_id,
        metrics=metrics,
        spec=dataclasses.replace(record.spec, run_id=run_id, **spec),
    )
    return replace(found, checks=checks) if checks is not None else found


@pytest.fixture(scope="module")
def compiled_sweep():
    """The default suite's mlp runs, and each again compiled: the compiled local runs 1.5 times as
    fast as the eager ones, the compiled DDP runs 1.2 times."""
    records = mlp(read_records(DEFAULT_SUITE)[0])
    compiled = [
        (path, changed(r, 1.5 if r.spec.strategy == "local" else 1.2, r.run_id + "-compiled", compile="default"))
        for path, r in records
    ]
    return records + compiled


def test_a_compiled_configurations_e_is_the_printed_x_over_n_times_the_printed_compiled_x1(compiled_sweep):
    table = scaling_table(runs_frame(compiled_sweep))
    rows = table.set_index("strategy")
    x1 = rows.loc["local+compile", "throughput"]
    x_n, n = rows.loc["ddp+compile", "throughput"], rows.loc["ddp+compile", "world_size"]
    assert rows.loc["ddp+compile", "efficiency"] == pytest.approx(x_n / (n * x1), rel=1e-12)
    # Eager DDP keeps the eager local runs as its X(1).
    assert rows.loc["ddp", "efficiency"] == pytest.approx(
        rows.loc["ddp", "throughput"] / (2 * rows.loc["local", "throughput"]), rel=1e-12
    )
    # explain: the same E.
    answers, _ = answer_sweep(compiled_sweep)
    answer = next(a for a in answers if a.record.spec.compile == "default")
    assert answer.efficiency.value == pytest.approx(x_n / (n * x1), rel=1e-12)
    assert answer.reference_throughput.value == pytest.approx(x1, rel=1e-12)
    # The gate (its per-run E, whose mean is the configuration's) and the history: the same X(1).
    records = [record for _, record in compiled_sweep]
    compiled_ddp = next(r for r in records if r.spec.strategy == "ddp" and r.spec.compile == "default")
    gate_e = side_values(records)[run_key(compiled_ddp)]["efficiency"]
    assert statistics.fmean(gate_e) == pytest.approx(x_n / (n * x1), rel=1e-12)
    history_e = [values["efficiency"] for r, values in values_by_run(records) if r.spec.compile == "default"]
    assert sorted(v for v in history_e if v is not None) == pytest.approx(sorted(gate_e), rel=1e-12)


def scripted(record, bucket_cap_mb: float = 25.0):
    script = ScriptSpec("/work/train.py", ("--epochs", "1"))
    ddp = dataclasses.replace(record.spec.ddp, bucket_cap_mb=bucket_cap_mb)
    return changed(
        record,
        run_id=record.run_id.replace("mlp", "train"),
        workload=script.workload_name,
        script=script,
        strategy="ddp",
        size=None,
        ddp=ddp,
    )


def test_a_scripts_x1_is_its_ddp_x1_run_with_the_same_ddp_options_in_the_table_and_the_gate_alike():
    """The table took any DDP x1 run of the script as X(1), the gate only one with the same DDP
    options: a DDP x1 run's step holds DDP's own work (its hooks and bucket copies), which the
    options change. One rule: the same options. A x1 run with other options is no X(1), in both."""
    records = mlp(read_records(DEFAULT_SUITE)[0])
    x2 = [r for _, r in records if r.spec.strategy == "ddp"]
    # The x1 runs: the local runs' measurements as the script's DDP x1 runs.
    x1 = [r for _, r in records if r.spec.strategy == "local"]
    for options, has_e in ((25.0, True), (5.0, False)):
        sweep = [("", scripted(r)) for r in x2] + [
            ("", scripted(changed(r, strategy="ddp"), bucket_cap_mb=options)) for r in x1
        ]
        table = scaling_table(runs_frame(sweep))
        row = table[table["world_size"] == 2].iloc[0]
        gate = side_values([r for _, r in sweep])[run_key(sweep[0][1])]
        assert (not math.isnan(row["efficiency"])) == has_e == ("efficiency" in gate), (options, row["reference"])
        if has_e:
            assert statistics.fmean(gate["efficiency"]) == pytest.approx(row["efficiency"], rel=1e-12)
        else:
            assert "same DDP options" in row["reference"], row["reference"]


def test_a_run_that_failed_a_correctness_check_counts_nowhere_and_the_table_says_so():
    """Runs that failed a check counted in the table, explain and the report, not in the gate or the
    history, and the speed check flagged over two different sets. One rule: left out everywhere."""
    records = mlp(read_records(DEFAULT_SUITE)[0])
    failed = {"gradients_averaged": Check(ok=False, reason="planted")}
    sweep = [
        (path, changed(r, checks={**r.checks, **failed}) if r.run_id == "mlp-ddp-n2-r2" else r) for path, r in records
    ]
    kept = [r for _, r in sweep if r.spec.strategy == "ddp" and r.run_id != "mlp-ddp-n2-r2"]
    x_n = statistics.fmean(r.metrics.throughput_units_per_s for r in kept)
    table = scaling_table(runs_frame(sweep))
    row = table[table["strategy"] == "ddp"].iloc[0]
    assert row["throughput"] == pytest.approx(x_n, rel=1e-12) and row["runs"] == 2
    answers, _ = answer_sweep(sweep)
    assert [a.throughput.value for a in answers] == pytest.approx([x_n], rel=1e-12)
    assert "mlp-ddp-n2-r2" not in answers[0].run_ids
    records_only = [r for _, r in sweep]
    gate = side_values([r for r in records_only if not r.failed_checks()])[run_key(kept[0])]
    assert statistics.fmean(gate["efficiency"]) == pytest.approx(row["efficiency"], rel=1e-12)
    printed = format_side_by_side(table)
    assert "left out: mlp-ddp-n2-r2 (failed correctness check: gradients_averaged)" in printed, printed


def test_e_over_one_local_run_gets_the_interval_its_ddp_runs_allow():
    """Three DDP runs over one local run printed E(N) with no interval, as "(1 runs)": the DDP runs'
    spread gives one, with that local run's own steps' spread (its run-to-run spread it cannot)."""
    from ddpbench.analysis.answer_text import percent

    records = [
        (p, r) for p, r in mlp(read_records(DEFAULT_SUITE)[0]) if r.run_id not in ("mlp-local-n1-r2", "mlp-local-n1-r3")
    ]
    answers, _ = answer_sweep(records)
    efficiency = answers[0].efficiency
    assert efficiency.has_interval and efficiency.samples == 3 and efficiency.over == "runs", efficiency
    x = [r.metrics.throughput_units_per_s for _, r in records if r.spec.strategy == "ddp"]
    x1 = next(r.metrics.throughput_units_per_s for _, r in records if r.spec.strategy == "local")
    assert efficiency.value == pytest.approx(statistics.fmean(x) / (2 * x1), rel=1e-12)
    # At least the DDP runs' own spread: their standard error over their mean.
    assert efficiency.se >= efficiency.value * standard_error(x) / statistics.fmean(x)
    assert "(1 runs)" not in percent(efficiency)
    table = scaling_table(runs_frame(records))
    row = table[table["strategy"] == "ddp"].iloc[0]
    assert (row["efficiency_low"], row["efficiency_high"]) == pytest.approx((efficiency.low, efficiency.high))
    assert "X(1) ran once" in format_side_by_side(table)
