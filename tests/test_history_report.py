"""`ddpbench history report`: the history page of a store built from the committed CSV series (five
configurations, fourteen nights, every configuration about 22 % slower from night-08 on), its
change points, links and commits, its filter in a real browser, and bad input."""

import csv
import html
import os
import re
import shutil
import statistics

import pytest
from conftest import FIXTURES, ddpbench
from test_gate_history import NO_OTAVA

from ddpbench.history import HistoryRun, open_store

HISTORY = os.path.join(FIXTURES, "history")
PLACE = os.path.join(HISTORY, "cpu-amd-epyc-2c", "custom")
STEP = "night-08"


def fixture_series() -> dict[str, list[dict]]:
    """The committed series by configuration name, their rows as read from the CSV files."""
    found = {}
    for name in sorted(os.listdir(PLACE)):
        with open(os.path.join(PLACE, name), encoding="utf-8") as handle:
            first = handle.readline()
            found[first.split(": ", 1)[1].split(" | ")[0]] = list(csv.DictReader(handle))
    return found


@pytest.fixture
def store_url(tmp_path):
    url = f"sqlite:///{tmp_path}/history.sqlite"
    done = ddpbench("history", "import", HISTORY, "--store", url)
    assert done.returncode == 0, done.stderr
    return url


def write_page(url: str, cwd, *out: str) -> str:
    done = ddpbench("history", "report", "--store", url, *out, cwd=cwd, env=NO_OTAVA)
    assert done.returncode == 0, done.stderr
    path = done.stdout.strip().removeprefix("history page: ")
    assert done.stdout.startswith("history page: ") and os.path.isfile(os.path.join(cwd, path))
    with open(os.path.join(cwd, path), encoding="utf-8") as handle:
        return handle.read()


def sections(page: str) -> dict[str, str]:
    """Each configuration's part of the page, by the configuration's name."""
    found = {}
    for body in re.findall(r'<section class="config".*?</section>', page, flags=re.S):
        name = html.unescape(re.search(r"<h3>(.*?) <span", body).group(1))
        found[name] = body
    return found


def test_every_configuration_has_its_charts_with_the_change_point_at_the_step(store_url, tmp_path):
    page = write_page(store_url, tmp_path)  # default --out: reports/history/index.html
    assert os.path.isfile(tmp_path / "reports" / "history" / "index.html")
    series = fixture_series()
    shown = sections(page)
    assert set(shown) == set(series)
    for name, body in shown.items():
        rows = series[name]
        has_efficiency = any(row["efficiency"] for row in rows)
        changes = re.findall(r'<g class="change"><title>(.*?)</title>', body)
        # The throughput's change point, marked on the efficiency chart too where there is one.
        assert len(changes) == (2 if has_efficiency else 1), name
        assert all(f"sweep {STEP}" in change for change in changes)
        assert body.count("<svg") == (2 if has_efficiency else 1)
        assert has_efficiency or "No scaling efficiency" in body
    table = page[page.index("<table>") :]
    rows = re.findall(r"<tr data-workload.*?<td>(.*?)</td>.*?</tr>", table)
    assert sorted(html.unescape(name) for name in rows) == sorted(series)
    changes = re.findall(rf">{STEP}</a> \(2026-11-09, \u2212(\d+\.\d) %\)", table)
    assert len(changes) == len(rows)
    for name, found in zip(rows, changes):
        speeds = [float(row["throughput"]) for row in series[html.unescape(name)]]
        before, after = statistics.fmean(speeds[:8]), statistics.fmean(speeds[8:])
        assert float(found) == pytest.approx((1 - after / before) * 100, abs=0.06)  # each about 22 % slower
    assert "keeps no gate verdicts" in page


def test_every_point_links_to_its_sweep_and_shows_its_commit(store_url, tmp_path):
    page = write_page(store_url, tmp_path, "--out", "reports/history")
    series = fixture_series()
    for name, body in sections(page).items():
        rows = series[name]
        points = re.findall(r'<a href="([^"]+)"><circle [^>]*><title>(.*?)</title>', body, flags=re.S)
        with_efficiency = [row for row in rows if row["efficiency"]]
        assert len(points) == len(rows) + len(with_efficiency)
        expected = [(row["sweep"], row["git_sha"]) for row in rows + with_efficiency]
        for (link, tooltip), (sweep, sha) in zip(points, expected):
            assert link == f"../../results/{sweep}/"
            assert f"sweep {sweep}" in tooltip and f"commit {sha}" in tooltip
    # Self-contained: every address on the page is a relative link to a sweep folder.
    addresses = re.findall(r'(?:src|href)="([^"]*)"', page)
    assert addresses and all(re.fullmatch(r"\.\./\.\./results/night-\d\d/", a) for a in addresses)
    assert "<link" not in page and "@import" not in page and "url(" not in page


def add_other_runs(url: str) -> None:
    """A second workload on a second machine class, so the filter has something to choose."""
    key = ("gpt2", "small", "ddp", 2, 4, "bf16", "cuda", "{}")
    runs = [
        HistoryRun(
            "2x-nvidia-h100",
            "nightly",
            key,
            "gpt2/small ddp x2 b4 bf16 cuda",
            f"gpu-night-{night}",
            "gpt2-ddp-n2",
            "c0ffee",
            f"2026-11-{night + 1:02d}T03:00:00+00:00",
            {"throughput": 5000.0 + night, "efficiency": 0.9, "exposed_share": 0.1},
        )
        for night in range(7)
    ]
    with open_store(url) as store:
        store.add_sweep(runs)


def chromium_path():
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.launches
@pytest.mark.skipif(chromium_path() is None, reason="needs Debian's chromium (apt-get install chromium)")
def test_the_filter_shows_only_the_chosen_workload_and_machine_class_in_a_browser(store_url, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs the playwright package (test extra)")
    add_other_runs(store_url)
    write_page(store_url, tmp_path)
    problems = []
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium_path(), args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
        )
        view = browser.new_page(viewport={"width": 1366, "height": 800})
        view.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)
        view.on("pageerror", lambda error: problems.append(str(error)))
        address = (tmp_path / "reports" / "history" / "index.html").as_uri()
        # Nothing but the page itself is loaded: no style sheet, script, image or font from anywhere.
        view.on("request", lambda request: problems.append(f"loaded {request.url}") if request.url != address else None)
        view.goto(address)

        def visible(selector: str) -> list[str]:
            return [element.inner_text() for element in view.query_selector_all(selector) if element.is_visible()]

        assert len(visible("section.config")) == 6 and len(visible("tbody tr")) == 6
        view.select_option("#workload", "gpt2")
        assert [text.splitlines()[0] for text in visible("section.config h3")] == [
            "gpt2/small ddp x2 b4 bf16 cuda 2x-nvidia-h100 / nightly \u00b7 7 runs \u00b7 0 change points"
        ]
        assert len(visible("tbody tr")) == 1 and view.inner_text("#shown") == "1 of 6 shown"
        view.select_option("#machine", "cpu-amd-epyc-2c")
        assert visible("section.config") == [] and visible("tbody tr") == []
        assert view.is_visible("#nothing")
        view.select_option("#workload", "")
        assert len(visible("section.config")) == 5 and view.inner_text("#shown") == "5 of 6 shown"
        assert not view.is_visible("#nothing")
        page_width = view.evaluate("document.documentElement.scrollWidth")
        view.screenshot(path=str(tmp_path / "history.png"), full_page=True)
        browser.close()
    assert problems == []
    # not chance: the page's layout in a fixed window, not a timing
    assert page_width <= 1366  # no sideways scrolling on a laptop


def one_line_error(done, *words: str) -> None:
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert all(word in done.stderr for word in words), done.stderr


def test_no_store_or_an_empty_store_is_refused_in_one_line(tmp_path, monkeypatch):
    monkeypatch.delenv("DDPBENCH_HISTORY", raising=False)
    missing = ddpbench("history", "report", "--store", str(tmp_path / "none.sqlite"), cwd=tmp_path)
    one_line_error(missing, "none.sqlite", "no such file")
    default = ddpbench("history", "report", cwd=tmp_path)  # no --store, no results/history.sqlite
    one_line_error(default, "results/history.sqlite", "no such file")
    empty = f"sqlite:///{tmp_path}/empty.sqlite"
    open_store(empty).close()  # the tables, no runs
    one_line_error(ddpbench("history", "report", "--store", empty, cwd=tmp_path), "holds no runs")
    assert not os.path.exists(tmp_path / "reports")


def test_a_year_is_marked_by_months_and_two_weeks_by_days():
    from ddpbench.history.chart import calendar_ticks, parse_time

    year = calendar_ticks(parse_time("2026-01-01T02:00:00+00:00"), parse_time("2026-12-31T02:00:00+00:00"))
    assert [label for _, label in year] == ["2026-03", "2026-05", "2026-07", "2026-09", "2026-11"]
    fortnight = calendar_ticks(parse_time("2026-11-01T02:00:00"), parse_time("2026-11-14T02:00:00"))
    assert [label for _, label in fortnight] == ["2026-11-02", "2026-11-05", "2026-11-08", "2026-11-11", "2026-11-14"]
