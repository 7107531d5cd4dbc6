"""Reports of large runs: beyond a few ranks, summaries (heat map, bands, the slowest ranks and
nodes named, a straggler verdict in words) instead of a box per rank. Synthetic runs built in tmp
from the real fixture run by benchmarks/synthetic.py."""

import os
import re
import sys

from conftest import REPO

from ddpbench.analysis import ranks
from ddpbench.analysis.frames import step_time_frame
from ddpbench.analysis.straggler import run_straggler
from ddpbench.records.store import load_record, write_record
from ddpbench.report.html import build_report

sys.path.insert(0, os.path.join(REPO, "benchmarks"))
import synthetic  # noqa: E402

BASE = synthetic.fixture_record("mlp-ddp-n2")


def test_the_straggler_of_a_large_run_is_named_with_its_host_from_its_replay():
    record = synthetic.enlarge(BASE, 32, 40, "big", seed=3, slow_rank=21, slow_factor=1.4)
    found = run_straggler(record)
    assert found.source == "replay" and found.named and found.rank == 21 and found.host == "node-002"
    own = record.overlap.no_sync.by_rank
    planted = own[21].no_sync_step_time_median_s - sorted(r.no_sync_step_time_median_s for r in own)[15]
    assert found.wait.low <= planted <= found.wait.high, (found.wait, planted)
    # The replay times whole steps: no phase's lead has an interval, so the phase is unclear.
    assert found.sentence().startswith("Rank 21 on node-002 held the others back (phase unclear): they wait ")


def _identical(seed: int):
    """A 32-rank run whose ranks replay from one distribution: no rank is slower than another."""
    record = synthetic.enlarge(BASE, 32, 40, "even", seed=seed)
    rng = synthetic.np.random.default_rng(seed)
    for rank in record.ranks:
        rank.no_sync_step_times_s = (0.02 * rng.lognormal(0.0, 0.02, size=10)).tolist()
    return record


def test_identical_ranks_name_no_straggler_in_18_of_20_runs():
    found = [run_straggler(_identical(seed)) for seed in range(20)]
    assert sum(straggler.named for straggler in found) <= 2, [s.sentence() for s in found]
    quiet = next(straggler for straggler in found if not straggler.named)
    assert quiet.sentence().startswith("No rank held the others back beyond noise")


def test_a_slow_node_leads_the_nodes_table():
    record = synthetic.enlarge(BASE, 32, 40, "node", seed=3, slow_rank=None)
    for rank in record.overlap.no_sync.by_rank[8:16]:  # every rank of node-001
        rank.no_sync_step_time_median_s *= 1.5
    nodes = ranks.node_frame(ranks.rank_frame(record))
    assert nodes.iloc[0]["host"] == "node-001" and 45 <= nodes.iloc[0]["above_median_pct"] <= 55


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
    # Rank by rank only where the largest run is small enough to read so: here the heat map stands for it.
    assert not any(alt.startswith("Box plots of DDP step time") for alt in alts)
    assert "Rank 20 on node-002 held the others back" in html  # the slow rank build_sweep plants at 5/8 of 32
    assert "The 4 slowest of 4 nodes" in html
    assert "trace files in" in html  # 32 trace links are one line, not 32 links


def test_at_or_below_the_rank_limit_there_is_no_heat_map(tmp_path):
    sweep = tmp_path / "sweep"
    synthetic.build_sweep(str(sweep), largest=ranks.RANK_DETAIL_LIMIT, steps=20, runs=6)
    html = open(build_report(str(sweep), str(tmp_path / "report.html"))).read()
    assert not any(alt.startswith("Heat map") for alt in figure_alts(html))
    assert any(alt.startswith("Box plots of DDP step time") for alt in figure_alts(html))
