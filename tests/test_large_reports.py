"""Reports of large runs: beyond a few ranks, summaries (heat map, bands, the slowest ranks and
nodes named, a straggler verdict in words) instead of a box per rank. Synthetic runs built in tmp
from the real fixture run by benchmarks/synthetic.py."""

import os
import re
import sys

from conftest import REPO

from ddpbench.analysis import ranks
from ddpbench.analysis.frames import step_time_frame
from ddpbench.records.store import load_record, write_record
from ddpbench.report.html import build_report

sys.path.insert(0, os.path.join(REPO, "benchmarks"))
import synthetic  # noqa: E402

BASE = synthetic.fixture_record("mlp-ddp-n2")


def test_the_verdict_names_the_slow_rank_and_its_host():
    record = synthetic.enlarge(BASE, 32, 40, "big", seed=3, slow_rank=21, slow_factor=1.4)
    verdict = ranks.straggler_verdict(ranks.rank_frame(record))
    assert verdict.straggler
    assert re.match(
        r"1 straggler rank\(s\): rank 21 on node-002 \(\+(3[5-9]|4[0-9]) %, slowest in 100 % of steps\)", verdict.text
    ), verdict.text
    assert "no_sync replay median" in verdict.basis


def test_no_straggler_is_said_in_words_too():
    record = synthetic.enlarge(BASE, 32, 40, "even", seed=3, slow_rank=None)
    verdict = ranks.straggler_verdict(ranks.rank_frame(record))
    assert not verdict.straggler and verdict.text.startswith("No straggler: every rank's no_sync replay median")


def test_a_slow_node_is_named_as_a_node():
    record = synthetic.enlarge(BASE, 32, 40, "node", seed=3, slow_rank=None)
    for rank in record.overlap.no_sync.by_rank[8:16]:  # every rank of node-001
        rank.no_sync_step_time_median_s *= 1.5
    verdict = ranks.straggler_verdict(ranks.rank_frame(record))
    assert re.match(
        r"1 slow node\(s\), every rank on them slow: node-001 \(\+(4[5-9]|5[0-5]) %\)", verdict.text
    ), verdict.text
    assert "straggler rank(s)" not in verdict.text


def test_heat_map_bins_average_whole_steps():
    matrix = synthetic.np.arange(2 * 10, dtype=float).reshape(2, 10)
    binned, width = ranks.heat_map_bins(matrix, max_columns=4)
    assert width == 3 and binned.tolist() == [[1.0, 4.0, 7.0], [11.0, 14.0, 17.0]]


def test_step_frame_from_the_sidecar_matches_the_lists(tmp_path):
    record = synthetic.enlarge(BASE, 12, 30, "big", seed=1)
    loaded = load_record(write_record(record, str(tmp_path), sidecar_min_values=100))
    from_lists, from_sidecar = step_time_frame([("", record)]), step_time_frame([("", loaded)])
    assert len(from_sidecar) == 12 * 30 and from_sidecar.equals(from_lists)
    row = from_sidecar[(from_sidecar["rank"] == 7) & (from_sidecar["step"] == 4)]
    assert row["step_time_s"].item() == record.ranks[7].step_times_s[4]


def figure_alts(html: str) -> list[str]:
    return re.findall(r'<img [^>]*alt="([^"]*)"', html)


def test_above_the_rank_limit_the_report_draws_a_heat_map_and_names_the_straggler(tmp_path):
    sweep = tmp_path / "sweep"
    synthetic.build_sweep(str(sweep), largest=32, steps=40, runs=8, sidecar_min_values=200)
    html = open(build_report(str(sweep), str(tmp_path / "report.html"))).read()
    alts = figure_alts(html)
    assert any(alt.startswith("Heat map of step time in milliseconds, 32 ranks by 40 timed steps") for alt in alts)
    assert any(alt.startswith("Band chart of step time") for alt in alts)
    # Box plots only for the runs small enough to read rank by rank.
    assert any(alt.startswith("Box plots of DDP step time") for alt in alts)
    assert "rank 20 on node-002" in html  # the slow rank synthetic.build_sweep plants at 5/8 of 32
    assert "The 4 slowest of 4 nodes" in html
    assert "trace files in" in html  # 32 trace links are one line, not 32 links


def test_at_or_below_the_rank_limit_there_is_no_heat_map(tmp_path):
    sweep = tmp_path / "sweep"
    synthetic.build_sweep(str(sweep), largest=ranks.RANK_DETAIL_LIMIT, steps=20, runs=6)
    html = open(build_report(str(sweep), str(tmp_path / "report.html"))).read()
    assert not any(alt.startswith("Heat map") for alt in figure_alts(html))
    assert any(alt.startswith("Box plots of DDP step time") for alt in figure_alts(html))
