"""A metric is defined once, in the registry, and appears in the runs frame, the scaling table,
the HTML report and the pytest-benchmark export without touching any of them."""

import json
import os
import re

import pandas as pd
import pytest
from conftest import FIXTURES

import ddpbench
from ddpbench.analysis import registry
from ddpbench.analysis.frames import scaling_table
from ddpbench.report.export import pytest_benchmark_json
from ddpbench.report.html import build_report

SWEEP = os.path.join(FIXTURES, "sweeps", "cpu-mlp-with-failure")


def epochs_per_second(record):
    """A throwaway metric: epochs rank 0 started per second of timed window."""
    return record.ranks[0].epochs_started / record.metrics.window_s


@pytest.fixture
def throwaway_metric():
    metric = registry.register(
        registry.Metric("epochs_per_s", "epoch rate", epochs_per_second, "epochs/s", "{:.3f}", "higher")
    )
    yield metric
    registry.unregister("epochs_per_s")


def test_one_registry_entry_reaches_table_report_and_export(throwaway_metric, tmp_path):
    runs = ddpbench.load(SWEEP)
    ok = runs[runs["status"] == "ok"].set_index("run_id")
    raw = json.load(open(os.path.join(SWEEP, "runs", "mlp-local-n1.json")))
    expected = raw["ranks"][0]["epochs_started"] / raw["metrics"]["window_s"]
    assert ok.loc["mlp-local-n1", "epochs_per_s"] == pytest.approx(expected)
    table = scaling_table(runs)
    assert "epochs_per_s" in table.columns and table["epochs_per_s"].notna().all()

    page = open(build_report(SWEEP, str(tmp_path / "index.html"))).read()
    assert "epoch rate (epochs/s)" in page
    shown = f"{ok.loc['mlp-ddp-n2', 'epochs_per_s']:.3f}"
    assert shown in re.findall(r"<td[^>]*>([^<]*)</td>", page)

    exported = pytest_benchmark_json(SWEEP)
    by_run = {b["extra_info"]["run_id"]: b["extra_info"] for b in exported["benchmarks"]}
    assert by_run["mlp-ddp-n2"]["epochs_per_s"] == pytest.approx(ok.loc["mlp-ddp-n2", "epochs_per_s"])


def test_unregistered_metrics_are_gone_again_and_names_are_unique(throwaway_metric):
    with pytest.raises(ValueError, match="already registered"):
        registry.register(throwaway_metric)
    registry.unregister("epochs_per_s")
    assert "epochs_per_s" not in ddpbench.load(SWEEP).columns
    with pytest.raises(KeyError, match="registered: throughput"):
        registry.metric("epochs_per_s")


def test_every_metric_reads_real_records():
    runs = ddpbench.load(SWEEP)
    ok = runs[runs["status"] == "ok"]
    for metric in registry.METRICS:
        assert metric.name in runs.columns
        if metric.name.startswith(("throughput", "iteration", "window")):
            assert ok[metric.name].notna().all(), metric.name


def test_the_profiled_steps_own_time_stands_beside_the_timed_one(tmp_path):
    """Overlap and the trace's exposed time come from the profiled steps; the profiler slows them,
    so the report's overlap table shows their p50 next to the timed iteration p50."""
    import statistics

    from ddpbench.analysis.frames import overlap_table

    raw = json.load(open(os.path.join(SWEEP, "runs", "mlp-ddp-n2.json")))
    spans = [{step["step"]: step["span_us"] for step in rank["steps"]} for rank in raw["overlap"]["trace"]["by_rank"]]
    assert len(spans) == 2 and spans[0].keys() == spans[1].keys()
    expected = statistics.median(max(rank[n] for rank in spans) for n in spans[0]) / 1e6
    runs = ddpbench.load(SWEEP)
    table = overlap_table(runs).set_index("world_size")
    assert table.loc[2, "profiled_step_p50_s"] == pytest.approx(expected)
    assert table.loc[2, "profiled_step_p50_s"] != pytest.approx(table.loc[2, "iteration_p50_s"])
    page = open(build_report(SWEEP, str(tmp_path / "index.html"))).read()
    assert "profiled step p50 (ms)" in page and f"{expected * 1000:,.2f}" in re.findall(r"<td[^>]*>([^<]*)</td>", page)
    # A run that failed before its profiled phase has no trace, and no value.
    assert pd.isna(runs.set_index("run_id").loc["broken-ddp-n2", "profiled_step_p50_s"])
