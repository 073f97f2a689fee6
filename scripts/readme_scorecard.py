"""Write the README's "answer so far" from the committed sample store: the scorecard as Markdown between the
README's scorecard markers, and its screenshot (docs/img/scorecard.png, Chromium at 1280x800, as a reader first
sees the page). tests/test_docs.py fails when the README's block differs from what this writes.

    python scripts/readme_scorecard.py            # rewrite the block and the screenshot
    python scripts/readme_scorecard.py --check    # exit 1 if the README's block is stale
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.core.store import Store  # noqa: E402 (the checkout's bench, wherever this runs from)
from bench.report.page import answer_markdown, write_report  # noqa: E402
from bench.results.frame import load_frame  # noqa: E402

SAMPLE = ROOT / "reports" / "sample" / "bench.sqlite"
README = ROOT / "README.md"
SHOT = ROOT / "docs" / "img" / "scorecard.png"
BEGIN, END = "<!-- scorecard:begin -->", "<!-- scorecard:end -->"


def block() -> str:
    """What belongs between the markers."""
    answer = answer_markdown(load_frame(Store(SAMPLE)), "[reports/sample/report.html](reports/sample/report.html)")
    return f"{BEGIN}\n![The first screen of the sample page: the answer](docs/img/scorecard.png)\n\n{answer}\n{END}"


def current(text: str) -> str:
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{README} has no {BEGIN} ... {END} block")
    return text[text.index(BEGIN) : text.index(END) + len(END)]


def screenshot() -> None:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "bench.sqlite"
        shutil.copy(SAMPLE, store)
        page_path = write_report(Store(store), Path(tmp) / "report.html")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(page_path.as_uri())
            SHOT.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SHOT))  # the first screen, as a reader opens the page
            browser.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the README's block is stale")
    args = parser.parse_args()
    text = README.read_text(encoding="utf-8")
    fresh = block()
    if args.check:
        if current(text) != fresh:
            print(f"{README}: the scorecard block is stale; run python scripts/readme_scorecard.py", file=sys.stderr)
            return 1
        return 0
    README.write_text(text.replace(current(text), fresh), encoding="utf-8")
    screenshot()
    print(f"wrote the scorecard into {README} and {SHOT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
