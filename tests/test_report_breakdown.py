"""The report's "Where the efficiency went", built from committed records: one chart for every
configuration (the in-process efficiency, then each cause up to 100 %, E(N) beside it), a table of
the same figures, what to try, and the glossary's causes."""

import html
import os
import re
import shutil

import pytest
from conftest import FIXTURES
from matplotlib.colors import to_rgba

from ddpbench.analysis.answers import answer_sweep
from ddpbench.analysis.causes import CAUSES, CHECKS
from ddpbench.records.store import read_records
from ddpbench.report.breakdown_section import HEADINGS, KEPT_COLOUR, chart
from ddpbench.report.html import build_report

SLOW_RANK = os.path.join(FIXTURES, "sweeps", "slow-rank")
OLD = os.path.join(FIXTURES, "sweeps", "cpu-mlp-with-failure")
TITLE = "<h2>Where the efficiency went</h2>"


def section_of(page: str, title: str = TITLE) -> str:
    start = page.index(title)
    end = page.find("<h2>", start + len(title))
    return page[start:end]


def table_rows(section: str) -> list[list[str]]:
    rows = []
    for row in re.findall(r"<tr>(.*?)</tr>", section, flags=re.S):
        cells = [html.unescape(cell.strip()) for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, flags=re.S)]
        if cells:
            rows.append(cells)
    return rows


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    path = build_report(SLOW_RANK, str(tmp_path_factory.mktemp("report") / "index.html"))
    return open(path, encoding="utf-8").read()


def test_one_chart_and_a_table_for_the_configurations_of_two_ranks_or_more(page):
    section = section_of(page)
    images = re.findall(r"<img [^>]*>", section)
    assert len(images) == 1
    alt = html.unescape(re.search(r'alt="([^"]*)"', images[0]).group(1))
    assert "planted_causes.slow_rank_one x2: in-process 9.7 % ± 5.2, largest cause waiting for the slowest rank" in alt
    assert "x1" not in alt  # one rank shows where there is nothing of two
    [row] = table_rows(section)[:1]
    assert row[:4] == ["planted_causes.slow_rank_one x2", "1", "7.1±0.3", "9.7±5.2"]
    heads = [html.unescape(h) for h in re.findall(r"<th[^>]*>(.*?)</th>", section)]
    assert heads[4:-1] == [HEADINGS[d.name] for d in CAUSES] and heads[-1] == "check"
    assert "76.1±3.8" in row and "(2.9±4.3)" in row  # a finding; within noise in parentheses


def test_the_bar_starts_with_what_was_kept_and_its_causes_reach_100(page):
    records, _ = read_records(SLOW_RANK)
    answers, _ = answer_sweep(records)
    two = [answer for answer in answers if answer.world_size == 2]
    figure = chart(two)
    bars = [patch for patch in figure.axes[0].patches if patch.get_width() > 0]
    kept = [bar for bar in bars if bar.get_facecolor() == to_rgba(KEPT_COLOUR)]
    faster = [bar for bar in bars if bar.get_facecolor()[:3] == (1.0, 1.0, 1.0)]
    assert len(kept) == 1 and kept[0].get_x() == 0
    assert kept[0].get_width() == pytest.approx(100 * two[0].in_process.value)
    positive = sum(c.points.value for c in two[0].causes.values() if c.points.value > 0)
    assert max(bar.get_x() + bar.get_width() for bar in bars) == pytest.approx(kept[0].get_width() + positive)
    # What made the step faster is one segment drawn back from there: the causes add up to 100 %.
    negative = -sum(c.points.value for c in two[0].causes.values() if c.points.value < 0)
    assert len(faster) == 1 and faster[0].get_width() == pytest.approx(negative)
    assert kept[0].get_width() + positive - negative == pytest.approx(100)
    # A cause within noise is pale; one beyond it solid.
    alphas = {bar.get_facecolor()[3] for bar in bars if bar not in kept and bar not in faster}
    assert alphas == {1.0, 0.35}


def test_what_to_try_names_the_rank_and_the_glossary_every_cause(page):
    section = html.unescape(section_of(page))
    assert "What to try:" in section and "rank 1 on vm is the slowest (in its forward)" in section
    glossary = html.unescape(page[page.index("<h2>Glossary</h2>") :])
    for definition in (*CAUSES, *CHECKS):
        assert f"<dt>{definition.label}</dt><dd>{definition.method[0].upper()}{definition.method[1:]}.</dd>" in glossary


def test_a_run_without_the_ablation_draws_no_chart(tmp_path):
    page = open(build_report(OLD, str(tmp_path / "r.html"))).read()
    assert TITLE not in page  # nothing measured in place: the verdict says so instead
    verdict = html.unescape(page[page.index('<section class="verdict"') : page.index("</section>")])
    assert "not measured in place" in verdict


def test_without_a_local_run_the_causes_stand_without_e_n(tmp_path):
    copy = tmp_path / "sweep"
    shutil.copytree(SLOW_RANK, copy)
    os.remove(copy / "runs" / "loc.json")
    section = html.unescape(section_of(open(build_report(str(copy), str(tmp_path / "r.html"))).read()))
    [row] = table_rows(section)[:1]
    assert row[:4] == ["planted_causes.slow_rank_one x2", "1", "n/a", "9.7±5.2"]


def test_the_communication_appendix_has_one_exposed_figure_and_nothing_at_one_rank(page):
    appendix = html.unescape(page[page.index('<details class="appendix"') :])
    section = section_of(appendix, "<h2>Exposed communication and its cross-checks</h2>")
    rows = table_rows(section[: section.index("</table>")])
    assert [row[0] for row in rows] == ["slow2"]  # the one-rank run sends nothing: no row
    assert rows[0][4] == "0.69 ± 0.13"
    body = html.unescape(page[: page.index('<details class="appendix"')])
    assert "overlap" not in body.lower()
