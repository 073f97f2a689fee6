"""Write the README's "answer so far" from the committed sample store: the scorecard as Markdown between the
README's scorecard markers, and its screenshot (docs/img/scorecard.png, Chromium at 1280x800, as a reader first
sees the page); and the sample page itself (reports/sample/report.html) with the screenshots the docs show of it
(report.png, its first 2,200 pixels; elasticity.png, its Elasticity section). tests/test_docs.py fails when the
README's block differs from what this writes, tests/test_sample_page.py when the page does.

    python scripts/readme_scorecard.py            # rewrite the block, the page and the screenshots
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
from bench.report.page import answer_markdown, render_report  # noqa: E402
from bench.results.frame import load_frame  # noqa: E402

SAMPLE = ROOT / "reports" / "sample" / "bench.sqlite"
README = ROOT / "README.md"
SHOT = ROOT / "docs" / "img" / "scorecard.png"
PAGE = ROOT / "reports" / "sample" / "report.html"
# the docs' pictures of the sample page (docs/usage.md, docs/studies/faults.md): a clip of its top, and a section
PAGE_SHOT, PAGE_SHOT_HEIGHT = ROOT / "reports" / "sample" / "report.png", 2200
SECTION_SHOT, SECTION = ROOT / "reports" / "sample" / "elasticity.png", "elasticity"
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
    """The pictures, taken of the page write_page wrote: it names the committed store, as a reader sees it."""
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto(PAGE.as_uri())
        SHOT.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOT))  # the first screen, as a reader opens the page
        top_of_page = {"x": 0, "y": 0, "width": 1280, "height": PAGE_SHOT_HEIGHT}
        page.screenshot(path=str(PAGE_SHOT), full_page=True, clip=top_of_page)
        # the section from its heading to the next one
        top = page.eval_on_selector(f"#{SECTION}", "e => e.getBoundingClientRect().top + window.scrollY")
        end = page.evaluate(
            f"""() => {{ const h = document.querySelector('#{SECTION}'); let n = h.nextElementSibling;
            while (n && n.tagName !== 'H2') n = n.nextElementSibling;
            return n ? n.getBoundingClientRect().top + window.scrollY : document.body.scrollHeight; }}"""
        )
        section = {"x": 0, "y": top, "width": 1280, "height": end - top}
        page.screenshot(path=str(SECTION_SHOT), full_page=True, clip=section)
        browser.close()


def write_page() -> None:
    """The sample page as tests/test_sample_page.py renders it: from a copy of the store, so reading it never
    touches the committed file, labelled with the committed store's path."""
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "bench.sqlite"
        shutil.copy(SAMPLE, store)
        PAGE.write_text(render_report(load_frame(Store(store)), "reports/sample/bench.sqlite"), encoding="utf-8")


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
    write_page()
    screenshot()
    print(f"wrote the scorecard into {README} and {SHOT}; the sample page {PAGE} and {PAGE_SHOT}, {SECTION_SHOT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
