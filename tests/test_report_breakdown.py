"""The report's "Where the scaling went" section, built from committed records: a two-rank DDP
run (the projection fixture) with its sweep's local run as the reference."""

import html
import os
import re
import shutil

import pytest
from conftest import FIXTURES

from ddpbench.analysis.breakdown import explain_sweep
from ddpbench.analysis.breakdown_terms import TERMS, Breakdown, Term
from ddpbench.records.store import read_records
from ddpbench.report.html import build_report

SWEEP = os.path.join(FIXTURES, "sweeps", "cpu-mlp-with-failure")
DDP_RUN = os.path.join(FIXTURES, "projection", "mlp2.json")
LOCAL_RUN = os.path.join(SWEEP, "runs", "mlp-local-n1.json")
TITLE = "<h2>Where the scaling went</h2>"


def make_sweep(folder, *records):
    (folder / "runs").mkdir(parents=True)
    for record in records:
        shutil.copy(record, folder / "runs")
    return folder


def section_of(page: str) -> str:
    start = page.index(TITLE)
    end = page.find("<h2>", start + len(TITLE))
    return page[start:end]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    folder = make_sweep(tmp_path_factory.mktemp("breakdown") / "sweep", DDP_RUN, LOCAL_RUN)
    path = build_report(str(folder), str(folder.parent / "index.html"))
    records, _ = read_records(str(folder))
    breakdowns, problems = explain_sweep(records)
    assert problems == [] and [b.run_id for b in breakdowns] == ["mlp2"]
    return path, open(path).read(), breakdowns[0]


def table_rows(section: str) -> dict[str, list[str]]:
    rows = {}
    for row in re.findall(r"<tr>(.*?)</tr>", section, flags=re.S):
        cells = [html.unescape(cell.strip()) for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, flags=re.S)]
        if cells:
            rows[cells[0]] = cells[1:]
    return rows


def test_one_waterfall_per_workload_with_the_terms_in_the_users_words(report):
    _, page, breakdown = report
    section = section_of(page)
    images = re.findall(r"<img [^>]*>", section)
    assert len(images) == 1 and 'src="data:image/png;base64,' in images[0]
    alt = html.unescape(re.search(r'alt="([^"]*)"', images[0]).group(1))
    assert alt.startswith("Stacked bar chart for mlp") and "not explained hatched grey" in alt
    # data loading is not measured in these records: the figure says so, with the reason.
    assert f"not measured: data loading ({breakdown.terms['data'].basis})" in alt
    assert "made the step faster" in alt and "compute slowed by overlap -1.4 points" in alt
    assert "<h3>mlp</h3>" in section and "<figcaption>" in section


def test_the_table_shows_each_term_in_ms_and_points_and_they_add_up(report):
    _, page, breakdown = report
    rows = table_rows(section_of(page))
    for term in TERMS:
        found = breakdown.terms[term.name]
        if found.s_per_step is None:
            assert rows[term.label] == ["not measured", ""], term.name
        else:
            assert rows[term.label] == [f"{found.s_per_step * 1e3:.2f}", f"{found.points:.1f}"], term.name
    assert "not explained" in rows and float(rows["compute slowed by overlap"][1]) < 0
    points = sum(float(rows[term.label][1]) for term in TERMS if rows[term.label][1])
    lost = float(rows["lost in all: t(N) - t(1)"][1])
    assert lost == pytest.approx(100 - 100 * breakdown.efficiency, abs=0.05)
    # The sum stands beside the loss; nothing makes them equal (no term is a left-over).
    assert float(rows["sum of the measured terms"][1]) == pytest.approx(points, abs=0.3)  # terms rounded to 0.1
    assert float(rows["sum of the measured terms"][1]) < lost - 5  # this record's terms miss 8 of 29 ms
    assert rows["in-run efficiency (same processes)"] == ["", "n/a"]  # no ladder in this record


def test_the_advice_and_the_headline_of_each_run_are_there(report):
    _, page, breakdown = report
    section = html.unescape(section_of(page))
    # No ladder in this record: no advice, and the terms' shortfall against the loss as a note.
    assert not breakdown.advice and "nothing to act on" in section
    assert breakdown.notes and all(f"mlp2: {sentence}" in section for sentence in breakdown.notes)
    assert f"E(N) {breakdown.efficiency:.1%}" in section and "mlp2" in section


def test_the_glossary_has_every_term_from_the_analysis(report):
    _, page, _ = report
    glossary = html.unescape(page[page.index("<h2>Glossary</h2>") :])
    for term in TERMS:
        assert f"<dt>{term.label} (scaling loss)</dt><dd>{term.method[0].upper()}{term.method[1:]}.</dd>" in glossary


def test_without_a_local_run_the_section_says_how_to_get_one(tmp_path):
    copy = tmp_path / "sweep"
    shutil.copytree(SWEEP, copy)
    os.remove(copy / "runs" / "mlp-local-n1.json")
    section = html.unescape(section_of(open(build_report(str(copy), str(tmp_path / "r.html"))).read()))
    notes = re.findall(r'<p class="note">(.*?)</p>', section)
    assert len(notes) == 1 and "<img" not in section
    assert notes[0].startswith("Not broken down: mlp-ddp-n1, mlp-ddp-n2: no local run with batch 8")
    assert "add `local` to --strategies (ddpbench sweep)" in notes[0]


def test_without_ddp_runs_the_section_says_so(tmp_path):
    folder = make_sweep(tmp_path / "sweep", LOCAL_RUN)
    section = html.unescape(section_of(open(build_report(str(folder), str(tmp_path / "r.html"))).read()))
    assert "no ok DDP runs in the sweep: add `ddp` to --strategies" in section and "<img" not in section


def test_with_ddp_at_one_rank_only_the_section_says_what_is_missing(tmp_path):
    folder = make_sweep(tmp_path / "sweep", LOCAL_RUN, os.path.join(SWEEP, "runs", "mlp-ddp-n1.json"))
    section = section_of(open(build_report(str(folder), str(tmp_path / "r.html"))).read())
    assert "No DDP run of 2 or more ranks" in section and "--nproc 2 or more" in section
    assert len(re.findall(r"<img ", section)) == 1


def made_up(run_id: str, efficiency: float, points: dict) -> Breakdown:
    step_s = 0.04
    terms = {
        term.name: Term(
            None if points.get(term.name) is None else points[term.name] / 100 * step_s,
            points.get(term.name),
            "made up",
        )
        for term in TERMS
    }
    return Breakdown(run_id, "mlp", 2, efficiency, step_s, step_s * efficiency, "made up", terms)


@pytest.mark.parametrize(
    "efficiency, points",
    [
        (0.35, {"exposed_comm": 70.0, "ddp_work": 10.0, "unexplained": -15.0}),  # terms exceed the lost time
        (1.10, {"exposed_comm": 2.0, "overlap_slowdown": -5.0, "unexplained": -7.0}),  # faster than one device
    ],
    ids=["negative-unexplained", "superlinear"],
)
def test_a_negative_term_still_reads_from_100_down_to_the_efficiency(efficiency, points):
    from matplotlib.colors import to_rgba

    from ddpbench.report.breakdown_section import KEPT_COLOUR, waterfall

    figure = waterfall("mlp", [made_up("run", efficiency, points)])
    bars = [patch for patch in figure.axes[0].patches if patch.get_height() > 0]
    kept = [bar for bar in bars if bar.get_facecolor() == to_rgba(KEPT_COLOUR)]
    faster = [bar for bar in bars if bar.get_facecolor()[:3] == (1.0, 1.0, 1.0)]
    lost = [bar for bar in bars if bar not in kept and bar not in faster]
    assert len(kept) == 1 and kept[0].get_y() == 0 and kept[0].get_height() == pytest.approx(100 * efficiency)
    assert max(bar.get_y() + bar.get_height() for bar in lost) == pytest.approx(100)
    # The terms that lost time end where the ones that gave it back start; those end at E(N).
    assert min(bar.get_y() for bar in lost) == pytest.approx(min(bar.get_y() for bar in faster))
    assert max(bar.get_y() + bar.get_height() for bar in faster) == pytest.approx(100 * efficiency)
    assert sum(bar.get_height() for bar in faster) == pytest.approx(-sum(p for p in points.values() if p < 0))


def chromium_path():
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.launches
@pytest.mark.skipif(chromium_path() is None, reason="needs Debian's chromium (apt-get install chromium)")
def test_a_browser_loads_the_waterfall(report, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs the playwright package (test extra)")
    path, _, _ = report
    problems = []
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium_path(),
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        view = browser.new_page(viewport={"width": 1366, "height": 800})
        view.on("pageerror", lambda error: problems.append(str(error)))
        view.on("requestfailed", lambda request: problems.append(f"failed to load {request.url}"))
        view.goto("file://" + os.path.abspath(path))
        waterfalls = view.evaluate(
            "Array.from(document.images).filter(i => i.alt.startsWith('Stacked bar chart for'))"
            ".map(i => [i.complete, i.naturalWidth, i.getBoundingClientRect().width])"
        )
        browser.close()
    assert problems == []
    assert len(waterfalls) == 1 and all(
        complete and natural > 0 and shown > 0 for complete, natural, shown in waterfalls
    )


LADDER_SWEEP = os.path.join(FIXTURES, "sweeps", "ladder-slow-rank")


def test_the_waterfall_draws_each_sizable_terms_interval_as_a_whisker():
    from ddpbench.report.breakdown_section import WHISKER_MIN_POINTS, waterfall

    records, _ = read_records(LADDER_SWEEP)
    breakdowns, _ = explain_sweep(records)
    figure = waterfall("slow_rank_one", breakdowns)
    whiskers = [c for c in figure.axes[0].containers if type(c).__name__ == "ErrorbarContainer"]
    sizable = [
        term
        for run in breakdowns
        for term in run.terms.values()
        if term.ci_high_s != term.ci_low_s and abs(term.points) >= WHISKER_MIN_POINTS
    ]
    assert len(whiskers) == len(sizable) > 0


def test_the_communication_section_draws_the_ladders_rungs(tmp_path):
    from ddpbench.analysis.ladder import RUNG_LABELS, ladder_frame

    records, _ = read_records(LADDER_SWEEP)
    rungs = ladder_frame(records)
    # Two ranks: all four rungs; one rank: rungs 1 and 3 (0 and 2 are the same steps there).
    assert sorted(rungs[rungs["world_size"] == 2]["rung"]) == sorted(RUNG_LABELS.values())
    assert sorted(rungs[rungs["world_size"] == 1]["rung"]) == [RUNG_LABELS["unwrapped"], RUNG_LABELS["with_ddp"]]
    page = open(build_report(LADDER_SWEEP, str(tmp_path / "index.html")), encoding="utf-8").read()
    assert "the ladder&#39;s rungs" in page or "the ladder's rungs" in page
    assert "in milliseconds from three estimates" not in page  # the old chart of the three estimates
