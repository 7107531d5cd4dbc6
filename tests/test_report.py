"""The HTML report, built from a committed sweep made by a real CPU run."""

import json
import os
import re
import shutil

import pytest
from conftest import FIXTURES, ddpbench

from ddpbench.report.html import build_report

SWEEP = os.path.join(FIXTURES, "sweeps", "cpu-mlp-with-failure")


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    path = tmp_path_factory.mktemp("report") / "index.html"
    build_report(SWEEP, str(path))
    return path, path.read_text()


def records():
    folder = os.path.join(SWEEP, "runs")
    return [json.load(open(os.path.join(folder, name))) for name in sorted(os.listdir(folder))]


def table_cells(html_text):
    return re.findall(r"<td[^>]*>(.*?)</td>", html_text)


def test_table_numbers_are_those_recomputed_from_the_records(page):
    _, html_text = page
    cells = table_cells(html_text)
    ok = {r["run_id"]: r for r in records() if r["status"] == "ok"}
    x1 = ok["mlp-local-n1"]["metrics"]["global_samples"] / ok["mlp-local-n1"]["metrics"]["window_s"]
    for run_id, record in ok.items():
        metrics = record["metrics"]
        throughput = metrics["global_samples"] / metrics["window_s"]
        world_size = record["spec"]["world_size"]
        assert f"{throughput:,.1f}" in cells, run_id
        # One run per configuration: E(N) with the interval of that run's steps.
        assert any(cell.startswith(f"{throughput / (world_size * x1):.1%}") for cell in cells), run_id


def test_the_page_is_self_contained(page):
    _, html_text = page
    sources = re.findall(r'<img [^>]*src="([^"]*)"', html_text)
    assert len(sources) == 5 and all(src.startswith("data:image/png;base64,") for src in sources)
    assert "<script" not in html_text and "http://" not in html_text
    assert re.findall(r"<link ", html_text) == []
    assert all('alt="' in tag for tag in re.findall(r"<img [^>]*>", html_text))


def test_headline_failures_traces_and_glossary_are_there(page):
    path, html_text = page
    verdict = html_text[html_text.index('<section class="verdict"') : html_text.index("</section>")]
    assert "mlp x2" in verdict and "30.3 %" in verdict and "not comparable on CPU" in verdict
    assert "On CPU: 2 gloo processes" in verdict
    errors = re.findall(
        r'<li><code>(broken-[a-z0-9-]+)</code> <span class="status-failed">failed</span>: ([^<]*)<details>', html_text
    )
    assert len(errors) == 5 and all("RuntimeError: this workload is broken on purpose" in m for _, m in errors)
    for link in re.findall(r'<a href="([^"]+)"', html_text):
        assert os.path.exists(os.path.join(path.parent, link)), link
    for term in ("step time", "iteration time", "scaling efficiency", "overlap", "exposed communication"):
        assert f"<dt>{term}" in html_text


def test_strings_from_records_are_escaped(tmp_path):
    copy = tmp_path / "sweep"
    shutil.copytree(SWEEP, copy)
    record_path = copy / "runs" / "broken-local-n1.json"
    record = json.loads(record_path.read_text())
    record["spec"]["workload"] = "<script>alert('workload')</script>"
    record["error"]["message"] = "<script>alert('error')</script><img src=x onerror=alert(1)>"
    record_path.write_text(json.dumps(record))
    html_text = open(build_report(str(copy), str(tmp_path / "r.html"))).read()
    assert "<script>" not in html_text and "<img src=x" not in html_text
    # Jinja2 writes a quote as &#39;, Python's html.escape as &#x27;: both are escaped.
    assert re.search(r"&lt;script&gt;alert\((&#39;|&#x27;)workload(&#39;|&#x27;)\)&lt;/script&gt;", html_text)
    assert "&lt;img src=x onerror=alert(1)&gt;" in html_text


def test_unreadable_records_are_listed_and_the_rest_reported(tmp_path):
    copy = tmp_path / "sweep"
    shutil.copytree(SWEEP, copy)
    (copy / "runs" / "mlp-dp-n2.json").write_text('{"truncated": ')
    newer = json.loads((copy / "runs" / "mlp-dp-n1.json").read_text())
    newer["schema_version"] = 99
    (copy / "runs" / "mlp-dp-n1.json").write_text(json.dumps(newer))
    html_text = open(build_report(str(copy), str(tmp_path / "r.html"))).read()
    assert "mlp-dp-n2.json" in html_text and "unreadable" in html_text
    assert "schema_version 99, this ddpbench reads 1 to 6" in html_text
    assert "mlp x2" in html_text[: html_text.index("</section>")]  # the readable records are still reported


def test_report_command_default_path_and_errors(tmp_path):
    copy = tmp_path / "sweep"
    shutil.copytree(SWEEP, copy)
    done = ddpbench("report", str(copy), "-o", str(tmp_path / "out" / "index.html"))
    assert done.returncode == 0 and f"report: {tmp_path / 'out' / 'index.html'}" in done.stdout
    empty = tmp_path / "empty"
    empty.mkdir()
    done = ddpbench("report", str(empty))
    assert done.returncode == 2 and "holds no run records" in done.stderr
    done = ddpbench("report", str(tmp_path / "missing"))
    assert done.returncode == 2 and "is not a sweep folder" in done.stderr


def chromium_path():
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.launches
@pytest.mark.skipif(chromium_path() is None, reason="needs Debian's chromium (apt-get install chromium)")
def test_a_browser_shows_the_report_without_errors(page, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs the playwright package (test extra)")
    path, _ = page
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
        view = browser.new_page(viewport={"width": 1366, "height": 800})  # a laptop screen
        view.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)
        view.on("pageerror", lambda error: problems.append(str(error)))
        view.on("requestfailed", lambda request: problems.append(f"failed to load {request.url}"))
        view.goto(path.as_uri())
        view.click("#appendix > summary")  # the appendix opens on a click; its tables are measured open
        images = view.evaluate("Array.from(document.images).map(i => [i.complete, i.naturalWidth])")
        page_width = view.evaluate("document.documentElement.scrollWidth")
        # Each table against its column: [heading of its section, scrolls sideways].
        tables = view.evaluate(
            """Array.from(document.querySelectorAll('.table-wrap')).map(w => {
                let h = w.previousElementSibling; while (h && h.tagName !== 'H2') h = h.previousElementSibling;
                return [h ? h.textContent : '', w.scrollWidth > w.clientWidth + 1];
            })"""
        )
        view.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        browser.close()
    assert problems == []
    # not chance: the page's layout, not a timing
    assert len(images) == 5 and all(complete and width > 0 for complete, width in images)
    # not chance: the page's layout in a fixed window, not a timing
    assert page_width <= 1366  # no sideways scrolling of the page itself on a laptop
    runs = [scrolls for heading, scrolls in tables if heading == "Runs"]
    assert runs and not any(runs)  # the run table fits its column: no column is hidden


def test_a_run_on_two_hosts_has_its_ranks_grouped_by_host(tmp_path, page):
    # The committed sweep's 2-rank run, as if its rank 1 had run on another node.
    sweep = tmp_path / "sweep"
    shutil.copytree(SWEEP, sweep)
    path = sweep / "runs" / "mlp-ddp-n2.json"
    record = json.loads(path.read_text())
    for rank in record["ranks"]:
        rank["hostname"] = f"node-{rank['rank']}"
    path.write_text(json.dumps(record))
    build_report(str(sweep), str(tmp_path / "index.html"))
    html_text = (tmp_path / "index.html").read_text()
    table = html_text[html_text.index("mlp-ddp-n2: ranks by host") :]
    table = table[: table.index("</table>")]
    cells = table_cells(table)
    assert cells[0] in ("node-0", "node-1") and table.count("<tr") == 3
    assert {cells[0], cells[5]} == {"node-0", "node-1"} and {cells[1], cells[6]} == {"0", "1"}
    # On one host there is nothing to group.
    assert "ranks by host" not in page[1]
