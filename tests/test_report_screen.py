"""The report as a reader sees it, in Chromium at 1,400 x 900, built from the saved records of a
default CPU suite sweep (tests/fixtures/sweeps/cpu-default-suite: 3 workloads, local and ddp x2, 3
rounds; traces and logs left out): the verdict's items for every workload on the first screen, the
body above the appendix within 5 screens, the appendix closed until it is opened, nothing about
communication at one rank, and DataParallel on CPU never drawn as a rival."""

import html
import os
import re
import shutil

import pytest
from conftest import FIXTURES

from ddpbench.report.html import build_report

pytestmark = pytest.mark.launches

SWEEP = os.path.join(FIXTURES, "sweeps", "cpu-default-suite")
WIDTH, HEIGHT = 1400, 900
WORKLOADS = ("gpt2", "mlp", "resnet50")


def chromium_path():
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    path = build_report(SWEEP, str(tmp_path_factory.mktemp("report") / "index.html"))
    return path, open(path, encoding="utf-8").read()


@pytest.fixture(scope="module")
def seen(page):
    if chromium_path() is None:
        pytest.skip("needs Debian's chromium (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs the playwright package (test extra)")
    path, _ = page
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox", "--disable-gpu"])
        view = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
        view.goto("file://" + os.path.abspath(path))
        found = {
            "verdict_bottom": view.evaluate("document.getElementById('verdict').getBoundingClientRect().bottom"),
            "rows": view.evaluate(
                "Array.from(document.querySelectorAll('#verdict tr')).slice(1).map(r => "
                "[Array.from(r.cells).map(c => c.innerText), r.getBoundingClientRect().bottom])"
            ),
            "heads": view.evaluate("Array.from(document.querySelectorAll('#verdict th')).map(h => h.innerText)"),
            "body_px": view.evaluate("document.getElementById('appendix').getBoundingClientRect().top + scrollY"),
            "appendix_open": view.evaluate("document.getElementById('appendix').open"),
            "appendix_shown": view.evaluate("document.querySelector('#appendix h2').checkVisibility()"),
        }
        view.click("#appendix > summary")
        found["opened"] = view.evaluate("document.getElementById('appendix').open")
        found["appendix_opened"] = view.evaluate("document.querySelector('#appendix h2').checkVisibility()")
        browser.close()
    return found


def test_the_first_screen_holds_every_workloads_verdict(seen):
    heads = [head.lower() for head in seen["heads"]]
    for item in (
        "scaling efficiency",
        "largest cause",
        "held the others back",
        "waiting for a core",
        "correctness checks",
        "try",
    ):
        assert any(item in head for head in heads), (item, heads)
    rows = {cells[0].split()[0]: (cells, bottom) for cells, bottom in seen["rows"]}
    assert set(rows) == set(WORKLOADS), rows
    for workload, (cells, bottom) in rows.items():
        assert bottom <= HEIGHT, (workload, bottom)
        efficiency, _, cause, held, waiting, checks, advice = cells[1:]
        assert re.match(r"\d+\.\d % ± \d+\.\d \(3 runs\)", efficiency), efficiency
        # not chance: the report of saved records fills each cell from them
        assert cause and held and waiting and advice and checks.startswith("passed"), cells
    assert seen["verdict_bottom"] <= HEIGHT


def test_the_body_fits_five_screens_and_the_appendix_opens_on_a_click(seen):
    assert seen["body_px"] <= 5 * HEIGHT, seen["body_px"] / HEIGHT
    assert not seen["appendix_open"] and not seen["appendix_shown"]
    assert seen["opened"] and seen["appendix_opened"]


def test_nothing_about_communication_at_one_rank_and_dataparallel_is_no_rival(page):
    _, text = page
    body = html.unescape(text[: text.index('<details class="appendix"')])
    assert "overlap" not in body.lower() and " x1:" not in body
    verdict = body[body.index('<section class="verdict"') : body.index("</section>")]
    # not chance: the saved CPU suite has no DataParallel run, and the report says so
    assert "not run (on CPU: not comparable)" in verdict  # the CPU suite has no DataParallel
    # not chance: the saved records are of 2 gloo processes on CPU, and the report says so
    assert "On CPU: 2 gloo processes share this machine's cores" in verdict
