"""The gate and the history's hosts (`ddpbench.gate.suspect_hosts`): where a regression's culprit rank
ran on a host the history store names as the slowest beyond chance, the gate says the host is
likely, not the code, and how to confirm it; where the history does not name it, or names another
host, it says nothing of the kind. On the committed gate-why sweeps (rank 1 sleeps inside backward in
the candidate), their ranks' host names set to two nodes, against constructed histories in a real
SQLite store."""

# chance: reference computation: the records are committed and the histories constructed; the
# gate's own verdict on the fixture is tested in tests/test_gate_why.py.

import json
import shutil
from types import SimpleNamespace

import pytest
from conftest import FIXTURES, ddpbench

from ddpbench.gate.suspect_hosts import culprit
from ddpbench.history import HistoryRun, open_store
from ddpbench.history.ranks import RankRow
from ddpbench.records.store import read_records

BASELINE = f"{FIXTURES}/sweeps/gate-why-baseline"
CANDIDATE = f"{FIXTURES}/sweeps/gate-why-backward"
PLANTED = "tests/fixtures/planted_regressions.py:backward/tiny ddp x2 b32 fp32 cpu"


def on_two_nodes(tmp_path, source: str, name: str) -> str:
    """A copy of a sweep whose rank r ran on node-r."""
    folder = tmp_path / name
    shutil.copytree(source, folder)
    for path in (folder / "runs").glob("*.json"):
        record = json.loads(path.read_text())
        for rank in record["ranks"]:
            rank["hostname"] = f"node-{rank['rank']}"
        path.write_text(json.dumps(record))
    return str(folder)


def history(url: str, node_1_votes: int, sweeps: int = 13, also: tuple[str, ...] = ()) -> None:
    """`sweeps` nightly sweeps of a 2-node job whose node rank 0 alternates between the nodes; node-1
    held the slowest rank in the first `node_1_votes`, node-0 in the others. `also`: sweep ids of
    more sweeps where node-1 was slowest."""
    runs = []
    for number, sweep in enumerate([f"nightly-{i}" for i in range(sweeps)] + list(also)):
        hosts = ("node-0", "node-1") if number % 2 == 0 else ("node-1", "node-0")
        slow = hosts.index("node-1" if number < node_1_votes or sweep in also else "node-0")
        wait = {"value": 0.012, "low": 0.010, "high": 0.014, "samples": 8, "over": "rounds", "se": 0.001}
        ranks = tuple(
            RankRow(
                rank,
                2,
                host=host,
                slowest=rank == slow,
                straggler={"wait": wait, "named": True, "source": "ablation", "halves_agree": True, "phase": "backward"}
                if rank == slow
                else None,
            )
            for rank, host in enumerate(hosts)
        )
        runs.append(
            HistoryRun(
                "cpu-test-2c",
                "nightly",
                ("mlp", "tiny", "ddp", 2),
                "mlp/tiny ddp x2",
                sweep,
                "mlp-ddp-n2",
                "abc",
                f"2026-12-{1 + number:02d}T00:00:00",
                {"throughput": 100.0},
                ranks,
            )
        )
    with open_store(url) as store:
        store.add_sweep(runs)


def gate(tmp_path, url: str, candidate: str):
    done = ddpbench(
        "gate",
        "--baseline",
        BASELINE,
        "--candidate",
        candidate,
        "--store",
        url,
        "--json-file",
        str(tmp_path / "verdict.json"),
        "--summary-md",
        str(tmp_path / "summary.md"),
        env={"DDPBENCH_OTAVA_PYTHON": "/nonexistent/python"},
    )
    return done, json.loads((tmp_path / "verdict.json").read_text())


@pytest.fixture(scope="module")
def candidate(tmp_path_factory):
    return on_two_nodes(tmp_path_factory.mktemp("sweeps"), CANDIDATE, "gate-why-backward")


def test_the_gate_says_the_host_is_likely_where_the_history_names_it(tmp_path, candidate):
    url = f"sqlite:///{tmp_path}/history.sqlite"
    # The candidate's own sweep is in the store too: it is left out, 12 of 13 remain.
    history(url, 12, also=("gate-why-backward",))
    done, verdict = gate(tmp_path, url, candidate)
    assert done.returncode in (1, 4), done.stdout + done.stderr
    said = f"{PLANTED}: node-1 has been slowest in 12 of 13 sweeps: likely the host, not the code (rank 1 ran there; "
    assert said in done.stdout and "this sweep left out" in done.stdout, done.stdout
    assert "same-job A/B on other hosts" in done.stdout and "--avoid-hosts node-1" in done.stdout
    (found,) = verdict["suspect_hosts"]
    assert (found["configuration"], found["rank"], found["name"], found["votes"], found["sweeps"]) == (
        PLANTED,
        1,
        "node-1",
        12,
        13,
    )
    assert found["corrected_p_value"] == pytest.approx(2 * 14 / 8192)
    assert any(said in note for note in verdict["notes"]) and said in (tmp_path / "summary.md").read_text()


@pytest.mark.parametrize("node_1_votes", [9, 0])
def test_the_gate_says_nothing_of_a_host_the_history_does_not_name(tmp_path, candidate, node_1_votes):
    # node-1 slowest in 9 of 13 is within chance; in 0 of 13 node-0 is named, not the culprit's host.
    url = f"sqlite:///{tmp_path}/history.sqlite"
    history(url, node_1_votes)
    done, verdict = gate(tmp_path, url, candidate)
    assert "likely the host" not in done.stdout and "suspect_hosts" not in verdict, done.stdout
    # Without a store (or with an empty one) there is nothing to say either.
    done, verdict = gate(tmp_path, f"sqlite:///{tmp_path}/none.sqlite", candidate)
    assert done.returncode in (1, 4) and "likely the host" not in done.stdout and "suspect_hosts" not in verdict


def test_where_the_waits_growth_is_within_noise_the_culprit_is_the_candidates_own_straggler(candidate):
    """A slow host makes its rank its sweep's slowest beyond noise, but the growth of the wait for it,
    two runs a side, need not be beyond noise: node-1 at half a core was the slowest in 14 of 15
    planted sweeps, while the gate on one of them named no straggler (+1.5 ms, p = 0.05;
    docs/measurements/recurring-hosts.md). The culprit is then the candidate's own slowest rank beyond
    noise; where the wait did grow, the rank whose wait grew; where the wait's interval rules out
    growth, none (an always-slow host is no cause of a regression its rank's wait did not share)."""
    records = [record for _, record in read_records(candidate)[0]]

    def compared(high: float, straggler=None) -> SimpleNamespace:
        wait = SimpleNamespace(name="straggler_wait", seconds=SimpleNamespace(high=high))
        return SimpleNamespace(configuration=PLANTED, changes=[wait], straggler=straggler, min_seconds=0.001)

    within_noise = compared(high=0.004)  # +1.5 ms, its interval reaching 4 ms: not shown, not ruled out
    assert culprit(PLANTED, records, [within_noise]) == culprit(PLANTED, records, None) == (1, "node-1")
    assert culprit(PLANTED, records, [compared(high=0.0005)]) is None  # ruled out: below the 1 ms named
    grew = compared(high=0.004, straggler={"named": True, "rank": 0})
    assert culprit(PLANTED, records, [grew]) == (0, "node-0")
