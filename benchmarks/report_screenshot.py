"""The report's screenshots for docs/report.md, taken from a real sweep: its first screen as a reader
sees it (Chromium at 1,400 x 900) and the whole body above the appendix. Also prints how tall the body
is, in screens of 900 px, and the commit, so the page can say where its pictures come from.

    python benchmarks/report_screenshot.py results/<sweep-id>
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

from ddpbench.host.facts import project_git  # noqa: E402
from ddpbench.report.html import build_report  # noqa: E402

IMAGES = os.path.join(REPO, "docs", "images")
WIDTH, HEIGHT = 1400, 900


def screenshots(page: str, out_dir: str) -> dict:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        view = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
        view.goto("file://" + os.path.abspath(page))
        body_px = view.evaluate("document.getElementById('appendix').getBoundingClientRect().top + window.scrollY")
        view.screenshot(path=os.path.join(out_dir, "report-first-screen.png"))
        view.screenshot(
            path=os.path.join(out_dir, "report-body.png"),
            full_page=True,
            clip={"x": 0, "y": 0, "width": WIDTH, "height": body_px},
        )
        browser.close()
    return {"body_px": body_px, "screens": body_px / HEIGHT}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep_dir")
    parser.add_argument("--images", default=IMAGES, help="where the PNGs go (default docs/images)")
    args = parser.parse_args(argv)
    os.makedirs(args.images, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        page = build_report(args.sweep_dir, os.path.join(folder, "index.html"))
        found = screenshots(page, args.images)
    git = project_git()
    print(
        f"sweep {args.sweep_dir}; commit {(git.get('git_sha') or '?')[:7]}; body {found['body_px']:.0f} px = "
        f"{found['screens']:.1f} screens of {HEIGHT} px at {WIDTH} px wide; images in {args.images}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
