"""Recurring culprits (`ddpbench.history.culprits`, `ddpbench history hosts`): the exact test's logic
on constructed histories with known answers, its level computed exactly, a slow rank told from a slow
host, and the command over a real store filled with `history add` from copies of a committed record.
How often it names a host by chance on real sweeps, and whether it finds a planted slow host, is
measured by benchmarks/recurring_hosts.py: docs/measurements/recurring-hosts.md."""

# chance: reference computation: every history here is constructed (or copied from one committed
# record), so nothing is drawn or measured; the binomial tails are checked against scipy's.

import itertools
import json
import math
import os
import shutil
import sys

import pytest
from conftest import FIXTURES, REPO, ddpbench
from scipy import stats

from ddpbench.analysis.estimates import Estimate
from ddpbench.analysis.straggler import Straggler
from ddpbench.history import open_store
from ddpbench.history.culprits import (
    FAMILY_ALPHA,
    SweepOutcome,
    Window,
    at_least,
    judge,
    store_verdict,
    units_tested,
)
from ddpbench.history.hosts_text import avoid_hosts, hosts_json, hosts_lines
from ddpbench.history.ranks import rank_rows, straggler_of
from ddpbench.records.store import load_record

SLOW_RANK = os.path.join(FIXTURES, "sweeps", "slow-rank", "runs", "slow2.json")
NO_OTAVA = {"DDPBENCH_OTAVA_PYTHON": "/nonexistent/python"}
TWO = ("node-0", "node-1")


@pytest.fixture(autouse=True)
def without_otava(monkeypatch):
    monkeypatch.setenv("DDPBENCH_OTAVA_PYTHON", "/nonexistent/python")


def sweep(number: int, hosts, slowest: int | None, wait_ms: float = 12.0, phase: str | None = "backward"):
    """Sweep `number` (a day each, from 2026-12-01), its ranks on `hosts` in order, its slowest rank
    beyond noise (None: it named none)."""
    layout = dict(enumerate(hosts))
    straggler = None
    if slowest is not None:
        wait = wait_ms / 1e3
        leads = {p: Estimate(wait if p == phase else 0.0, None, None, 8, "rounds") for p in ("forward", "backward")}
        straggler = Straggler(
            Estimate(wait, wait * 0.8, wait * 1.2, 8, "rounds", wait * 0.1), slowest, "ablation", True, phase,
            layout[slowest], leads=leads,
        )  # fmt: skip
    day = f"2026-12-{1 + number // 24:02d}T{number % 24:02d}:00:00"
    return SweepOutcome("cpu-x-2c", "smoke", f"nightly-{number}", day, layout, {}, straggler, "mlp", frozenset(hosts))


def alternating(number: int) -> tuple[str, str]:
    """Which node takes node rank 0 alternates from sweep to sweep."""
    return TWO if number % 2 == 0 else TWO[::-1]


def test_the_exact_tail_is_the_binomial_and_the_poisson_binomial_by_enumeration():
    for n, k, p in [(13, 12, 0.5), (15, 13, 0.5), (30, 9, 0.125), (8, 0, 0.3)]:
        assert at_least([p] * n, k) == pytest.approx(stats.binom.sf(k - 1, n, p), rel=1e-9, abs=1e-15)
    chances = [0.5, 0.25, 0.125, 0.5, 0.75]
    for k in range(len(chances) + 1):
        by_hand = sum(
            math.prod(p if hit else 1 - p for p, hit in zip(chances, hits))
            for hits in itertools.product((0, 1), repeat=len(chances))
            if sum(hits) >= k
        )
        assert at_least(chances, k) == pytest.approx(by_hand, rel=1e-12)


def test_hosts_that_could_not_reach_the_level_are_not_counted():
    # Two hosts of 13 sweeps at 1 in 2 can each reach 1 %: both counted.
    assert units_tested([0.5**13, 0.5**13], 0.01) == 2
    # A third host in 3 sweeps cannot reach 1 % even with every vote (1/8): it is left out.
    assert units_tested([0.5**13, 0.5**13, 0.5**3], 0.01) == 2
    assert units_tested([0.5] * 5, 0.01) == 1  # nobody can: nothing is tested


def test_the_issues_example_reads_as_promised():
    # node-1 slowest in 12 of 13 sweeps, node-0 in 1, layouts alternating: p = 2 x 14/8192.
    outcomes = [
        sweep(i, alternating(i), alternating(i).index("node-1" if i else "node-0"), wait_ms=10.0 + i % 5)
        for i in range(13)
    ]
    verdict = judge(outcomes, Window(last=30))
    (named,) = verdict.named("host")
    assert (named.name, named.votes, named.trials, named.tested) == ("node-1", 12, 13, 2)
    assert named.corrected == pytest.approx(2 * 14 / 8192) and named.beyond_chance
    # Its lead: the mean of its 12 sweeps' waits, with Student's t over them.
    waits = [10.0 + i % 5 for i in range(1, 13)]
    half = stats.t.ppf(0.975, 11) * stats.tstd(waits) / math.sqrt(12)
    line = hosts_lines(verdict, "store")[1]
    assert line == (
        "node-1: slowest in 12 of 13 sweeps since 2026-12-01, where chance gives 1 in 2 (p = 0.0034, corrected "
        f"over 2 hosts); +{sum(waits) / 12:.1f} ± {half:.1f} ms per step, in backward"
    ), line
    assert avoid_hosts(verdict) == ["node-1"]
    # One vote fewer is within chance at 1 %: 11 of 13 is p = 2 x 92/8192 = 0.022.
    outcomes[5] = sweep(5, alternating(5), alternating(5).index("node-0"))
    assert judge(outcomes).named("host") == [] and avoid_hosts(judge(outcomes)) == []


def test_the_level_holds_exactly_for_two_hosts_that_share_every_job():
    # Under chance each host is slowest half the time: the rule names one in at most 1 % of windows.
    for n in (13, 15, 20, 30):
        needed = min(k for k in range(n + 1) if 2 * stats.binom.sf(k - 1, n, 0.5) <= FAMILY_ALPHA)
        rate = 2 * stats.binom.sf(needed - 1, n, 0.5)
        assert rate <= FAMILY_ALPHA
        for hits, named in ((needed, ["node-1"]), (needed - 1, [])):
            outcomes = [
                sweep(i, alternating(i), alternating(i).index("node-1" if i < hits else "node-0")) for i in range(n)
            ]
            assert [u.name for u in judge(outcomes).named("host")] == named


def test_chance_follows_the_layout():
    # node-a holds 4 of 8 ranks in every sweep: slowest half the time by chance; 7 of 8 ranks: more.
    eight = ["node-a"] * 4 + [f"node-{i}" for i in range(4)]
    verdict = judge([sweep(i, eight, 0) for i in range(12)])
    (host,) = [u for u in verdict.families["host"] if u.name == "node-a"]
    assert host.chances == [0.5] * 12 and "chance gives 1 in 2" in hosts_lines(verdict, "s")[1]
    assert host.p_value == pytest.approx(0.5**12)
    # Layouts that differ: Poisson-binomial, and the chance said as votes.
    mixed = [sweep(i, eight if i % 2 else ["node-a"] * 7 + ["node-b"], 0) for i in range(12)]
    host = next(u for u in judge(mixed).families["host"] if u.name == "node-a")
    assert host.expected == pytest.approx(6 * 0.5 + 6 * 7 / 8)
    assert host.p_value == pytest.approx(0.5**6 * (7 / 8) ** 6)


def test_a_slow_rank_on_alternating_hosts_names_no_host_and_says_the_rank_recurs():
    outcomes = [sweep(i, alternating(i), 1, phase="forward") for i in range(15)]
    verdict = judge(outcomes)
    assert verdict.named("host") == [] and avoid_hosts(verdict) == []
    (rank,) = [u for u in verdict.families["rank"] if u.beyond_chance]
    assert rank.name == "1" and rank.votes == 15
    said = "\n".join(hosts_lines(verdict, "s"))
    assert "rank 1: slowest in 15 of 15 sweeps" in said and "on 2 hosts (node-0 7, node-1 8)" in said
    assert "not a host; excluding hosts will not help" in said and "no host to keep out" in said


def test_a_slow_rank_always_on_the_same_host_cannot_be_told_from_it():
    outcomes = [sweep(i, TWO, 1) for i in range(15)]
    verdict = judge(outcomes)
    host = next(u for u in verdict.families["host"] if u.name == "node-1")
    assert host.beyond_chance and host.confounded_with == "rank 1" and not host.named
    assert avoid_hosts(verdict) == [] and verdict.host("node-1") is None
    said = "\n".join(hosts_lines(verdict, "s"))
    assert "node-1 and rank 1 go together" in said and "vary which node takes node rank 0" in said


def test_sweeps_without_a_straggler_give_no_vote_and_unrecorded_hosts_test_nothing():
    outcomes = [sweep(i, alternating(i), alternating(i).index("node-1")) for i in range(13)]
    outcomes += [sweep(13 + i, TWO, None) for i in range(5)]  # named none: no vote, no trial
    outcomes += [sweep(18, (None, None), 1)]  # a record from before hosts were recorded
    verdict = judge(outcomes)
    (named,) = verdict.named("host")
    assert (named.votes, named.trials) == (13, 13) and verdict.not_recorded == 1
    head = hosts_lines(verdict, "s")[0]
    assert "19 sweeps" in head and "14 named their slowest rank beyond noise" in head and "5 named none" in head
    assert "1 vote(s) from ranks whose host was not recorded" in head


def test_the_lead_is_pooled_over_its_votes_since_its_series_changed():
    # Four quiet sweeps (nobody beyond noise, or node-0 a little), then node-1 held back by 40 ms.
    quiet = [sweep(i, alternating(i), None if i % 2 else 0, wait_ms=2.0) for i in range(4)]
    slow = [sweep(4 + i, alternating(4 + i), alternating(4 + i).index("node-1"), 38.0 + i % 3) for i in range(13)]
    verdict = judge(quiet + slow)
    (named,) = verdict.named("host")
    assert named.since == "nightly-4" and named.phase == "backward"
    assert named.lead.value == pytest.approx(sum(38.0 + i % 3 for i in range(13)) / 13e3)
    assert named.lead.samples == 13 and named.lead.over == "runs"
    assert "; since sweep nightly-4" in hosts_lines(verdict, "s")[1]


def test_the_window_is_the_last_sweeps_or_those_since_a_date():
    old = [sweep(i, alternating(i), alternating(i).index("node-1")) for i in range(13)]
    # From 2026-12-02, the hosts take turns: 19 of 26 for node-1 is within chance (p = 0.029).
    new = [sweep(24 + i, alternating(24 + i), alternating(24 + i).index(TWO[i % 2])) for i in range(13)]
    assert [u.name for u in judge(old + new, Window(last=None)).named("host")] == []
    assert [u.name for u in judge(old + new, Window(last=13)).named("host")] == []
    assert [u.name for u in judge(old + new, Window(last=30, since=None)).named("host")] == []
    recent = judge(old + new, Window(since="2026-12-02"))
    assert len(recent.sweeps) == 13 and recent.sweeps[0].sweep == "nightly-24"
    assert [u.name for u in judge(old, Window(last=13)).named("host")] == ["node-1"]


# --- from records, through a real store and the command ------------------------------------------


def copy_of(record: dict, hosts: tuple[str, str], sweep_id: str, hour: int) -> dict:
    copied = json.loads(json.dumps(record))
    copied["ended_at"] = f"2026-12-01T{hour:02d}:00:00+00:00"
    for rank in copied["ranks"]:
        rank["hostname"] = hosts[rank["rank"]]
    return copied


@pytest.fixture(scope="module")
def slow_rank_store(tmp_path_factory):
    """15 sweeps of the committed slow-rank record (rank 1 sleeps 10 ms in its forward), added with
    `history add`: which host holds rank 1 alternates (`alternating.sqlite`), or never does
    (`fixed.sqlite`)."""
    folder = tmp_path_factory.mktemp("slow-rank-history")
    with open(SLOW_RANK, encoding="utf-8") as handle:
        record = json.load(handle)
    stores = {}
    for name, layout in (("alternating", alternating), ("fixed", lambda number: TWO)):
        url = f"sqlite:///{folder}/{name}.sqlite"
        for number in range(15):
            sweep_dir = folder / name / f"nightly-{number}"
            (sweep_dir / "runs").mkdir(parents=True)
            copied = copy_of(record, layout(number), f"nightly-{number}", number)
            (sweep_dir / "runs" / "slow2.json").write_text(json.dumps(copied))
            done = ddpbench("history", "add", str(sweep_dir), "--store", url, env=NO_OTAVA)
            assert done.returncode == 0, done.stderr
        stores[name] = url
    return stores


def test_a_stored_runs_straggler_is_the_records(slow_rank_store):
    record = load_record(SLOW_RANK)
    rows = rank_rows(record)
    found = straggler_of(rows)
    assert found.rank == 1 and found.named and found.phase == "forward"
    with open_store(slow_rank_store["fixed"], create=False) as store:
        stored = store.ranks()
    assert len(stored) == 15 and [row.host for row in stored[0].ranks] == list(TWO)
    again = straggler_of(stored[0].ranks)
    assert (again.wait, again.rank, again.phase, again.halves_agree) == (found.wait, 1, "forward", found.halves_agree)


def test_history_hosts_tells_a_slow_rank_from_a_slow_host(slow_rank_store, tmp_path):
    out = tmp_path / "hosts.json"
    done = ddpbench(
        "history", "hosts", "--store", slow_rank_store["alternating"], "--json-file", str(out), env=NO_OTAVA
    )
    assert done.returncode == 0, done.stderr
    assert "rank 1: slowest in 15 of 15 sweeps" in done.stdout and "not a host" in done.stdout, done.stdout
    found = json.loads(out.read_text())
    assert found["named"]["host"] == [] and found["ranks_beyond_chance"] == ["1"] and found["avoid_hosts"] == []
    assert found["votes"] == 15 and found["by_sweep"][1]["host"] == "node-0" and found["lines"][0] in done.stdout
    fixed = ddpbench("history", "hosts", "--store", slow_rank_store["fixed"], env=NO_OTAVA)
    assert fixed.returncode == 0 and "node-1 and rank 1 go together" in fixed.stdout, fixed.stdout
    # The gate's view leaves a sweep out: 14 of the 15 remain.
    with open_store(slow_rank_store["fixed"], create=False) as store:
        assert len(store_verdict(store, leave_out="nightly-3").sweeps) == 14


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--since", "yesterday"], "--since takes a date such as 2026-12-01"),
        (["--last", "0"], "must be a whole number >= 1"),
        (["--last", "3", "--since", "2026-12-01"], "not allowed with argument"),
        (["--family-alpha", "150"], "--family-alpha must be between 0 and 100 %"),
    ],
)
def test_bad_input_is_one_line_exit_2(tmp_path, arguments, message):
    done = ddpbench("history", "hosts", "--store", str(tmp_path / "none.sqlite"), *arguments)
    assert done.returncode == 2 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_store_without_ranks_says_so(tmp_path):
    url = f"sqlite:///{tmp_path}/old.sqlite"
    shutil.copytree(os.path.join(FIXTURES, "history"), tmp_path / "csv")
    assert ddpbench("history", "import", str(tmp_path / "csv"), "--store", url).returncode == 0
    done = ddpbench("history", "hosts", "--store", url)
    assert done.returncode == 0 and "nothing to test" in done.stdout and "add them again" in done.stdout
    with open_store(url, create=False) as store:
        assert hosts_json(store_verdict(store), store.shown)["sweeps"] == 0


def test_the_history_page_has_a_hosts_section(slow_rank_store, tmp_path):
    url = slow_rank_store["alternating"]
    done = ddpbench("history", "report", "--store", url, "--out", str(tmp_path), env=NO_OTAVA)
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "index.html").read_text()
    hosts = page[page.index('<section id="hosts">') : page.index("<h2>Table</h2>")]
    assert "rank 1: slowest in 15 of 15 sweeps" in hosts and "no host to keep out" in hosts
    rows = hosts[hosts.index("<tbody>") :].split("<tr>")[1:]
    assert sorted(row.split("</td>")[0][4:] for row in rows) == ["node-0", "node-1"]
    assert all("within chance" in row and "1 in 2" in row for row in rows)


def test_the_realistic_null_keeps_the_rank_bias_and_places_the_ranks_again():
    """benchmarks/recurring_null.py on constructed null sweeps that favour rank 0 (12 of 15 votes):
    alternating layouts spread the bias over both hosts and name none; a fixed layout makes node-0
    look slow, and the host is said to go with rank 0 instead of being named. The draws are seeded."""
    sys.path.insert(0, os.path.join(REPO, "benchmarks"))
    import recurring_null

    real = [sweep(i, TWO, 0 if i < 12 else 1) for i in range(15)] + [sweep(15, TWO, None)]
    assert recurring_null.culprit_frequencies(real) == {"sweeps": 16, "no_vote": 1, "by_rank": {"0": 12, "1": 3}}
    moved = recurring_null.placed(real[0], 1, "alternating")
    assert moved.hosts == {0: "node-1", 1: "node-0"} and moved.host == "node-1" and moved.rank == 0
    alternating_rate = recurring_null.synthetic_rate(real, 30, 200, "alternating", seed=1)
    fixed_rate = recurring_null.synthetic_rate(real, 30, 200, "fixed", seed=1)
    assert alternating_rate["named_host"] == 0 and alternating_rate["rank_recurs"] > 100
    assert fixed_rate["named_host"] == 0 and fixed_rate["host_goes_with_rank"] == fixed_rate["rank_recurs"] > 100
    assert recurring_null.upper_bound(0, 200) == pytest.approx(1 - 0.05 ** (1 / 200))


def test_a_gpu_slowest_beyond_chance_is_named_with_its_serial_and_bus_and_its_host_avoided():
    # 2 hosts of 4 GPUs; GPU-a3 on node-a is the slowest in 9 of 12 sweeps, where chance gives 1 in 8.
    # Which local rank drives which GPU turns from sweep to sweep, so no rank goes with the GPU.
    hosts = ["node-a"] * 4 + ["node-b"] * 4
    outcomes = []
    for number in range(12):
        one = sweep(number, hosts, (3 - number) % 4 if number < 9 else 5 + number % 3)
        one.devices = {rank: f"GPU-{'ab'[rank // 4]}{(rank + number) % 4}" for rank in range(8)}
        outcomes.append(one)
    verdict = judge(outcomes)
    verdict.devices = {"GPU-a3": {"host": "node-a", "serial": "1652", "bus": "00000000:41:00.0"}}
    (gpu,) = verdict.named("device")
    assert (gpu.name, gpu.votes, gpu.trials, gpu.tested) == ("GPU-a3", 9, 12, 8)
    assert gpu.p_value == pytest.approx(stats.binom.sf(8, 12, 1 / 8))
    said = hosts_lines(verdict, "s")
    assert any(
        line.startswith("GPU-a3 (serial 1652, bus 00000000:41:00.0) on node-a: slowest in 9 of 12") for line in said
    )
    # node-a held half the ranks and 9 of 12 votes: within chance as a host; its GPU is what to avoid.
    assert verdict.named("host") == [] and avoid_hosts(verdict) == ["node-a"]


def test_a_sweeps_straggler_is_the_rank_every_run_chose_with_its_wait_over_their_rounds():
    from ddpbench.analysis.straggler import pooled
    from ddpbench.history.culprits import sweep_straggler

    def run(rank, wait_ms, se_ms, agree=True):
        wait, se = wait_ms / 1e3, se_ms / 1e3
        half = stats.t.ppf(0.975, 9) * se
        return Straggler(Estimate(wait, wait - half, wait + half, 10, "rounds", se), rank, "ablation", agree, None, "h")

    # Two runs that chose rank 1, each about 3.3 ms: beyond noise over their 20 rounds, while pooled
    # over the two runs (t with 1 degree of freedom) it is not.
    runs = [run(1, 3.71, 0.95), run(1, 2.95, 0.93)]
    found = sweep_straggler(runs)
    se = math.sqrt(0.95**2 + 0.93**2) / 2e3
    assert found.named and found.rank == 1 and found.wait.value == pytest.approx(3.33e-3)
    assert found.wait.half == pytest.approx(stats.t.ppf(0.975, 18) * se, rel=1e-3)
    assert not pooled(runs).named
    # Runs that chose different ranks, or one whose halves disagree, name none; an unmeasured run is
    # left out; one run is its own answer.
    assert not sweep_straggler([run(1, 3.7, 0.9), run(0, 3.0, 0.9)]).named
    assert not sweep_straggler([run(1, 3.7, 0.9), run(1, 3.0, 0.9, agree=False)]).named
    unmeasured = Straggler(None, None, "none")
    assert sweep_straggler([runs[0], unmeasured]).wait == runs[0].wait
    assert sweep_straggler([unmeasured]) is None
