"""The committed sample page is what the code makes of the committed sample store: rendered afresh, its text (every
figure, table and sentence; plots compared by presence only) equals the committed page's but for the time it
was written. A change to the code that moves a figure on the page shows here, and then the sample is rendered
again (`bench report --store reports/sample/bench.sqlite --out reports/sample/report.html`) and its difference
read before it is committed."""

from __future__ import annotations

import html
import re
import shutil
from pathlib import Path

import pytest

from bench.core.store import Store
from bench.report.page import render_report
from bench.results.frame import load_frame

SAMPLE = Path(__file__).resolve().parent.parent / "reports" / "sample"


def page_text(path: Path) -> list[str]:
    """The page's visible text, a line per element, with inline images as a marker and the time it was written
    left out."""
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "PNG", text)
    text = re.sub(r"<(script|style)\b.*?</\1>", "", text, flags=re.S)
    lines = (html.unescape(line).strip() for line in re.sub(r"<[^>]+>", "\n", text).split("\n"))
    return [re.sub(r"Written \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", "Written (time)", line) for line in lines if line]


@pytest.mark.slow  # the whole page of the sample store, rendered (seconds)
def test_the_sample_page_is_what_the_code_makes_of_the_sample_store(tmp_path):
    store = tmp_path / "bench.sqlite"
    shutil.copyfile(SAMPLE / "bench.sqlite", store)  # the read must not depend on (or touch) the committed file
    page = tmp_path / "page.html"
    page.write_text(render_report(load_frame(Store(store)), "reports/sample/bench.sqlite"), encoding="utf-8")
    fresh, committed = page_text(page), page_text(SAMPLE / "report.html")
    assert len(fresh) > 1000, "the sample page lost its content"
    differing = [(i, a, b) for i, (a, b) in enumerate(zip(committed, fresh)) if a != b]
    assert not differing and len(fresh) == len(committed), (
        f"{len(differing)} line(s) differ, {len(committed)} committed vs {len(fresh)} fresh; first: {differing[:3]}"
    )


def visible_words(page: str) -> int:
    """The words a reader sees without opening anything: the page's text outside <details> (a folded block's
    summary line counts)."""
    page = re.sub(r"<(script|style)\b.*?</\1>", "", page, flags=re.S)
    while "<details>" in page:  # the innermost first, so that a folded block inside another goes with it
        page = re.sub(r"<details>((?:(?!<details>).)*?)</details>", lambda m: summary_of(m.group(1)), page, flags=re.S)
    return len(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def summary_of(folded: str) -> str:
    found = re.search(r"<summary>(.*?)</summary>", folded, flags=re.S)
    return found.group(1) if found else ""


DEFAULT_PAGE_WORDS = 6000  # the answer must not be buried: detail is folded


def test_the_sample_page_shows_at_most_6000_words_with_its_detail_folded():
    page = (SAMPLE / "report.html").read_text(encoding="utf-8")
    shown = visible_words(page)
    assert 1000 < shown <= DEFAULT_PAGE_WORDS, shown
    nested = "<p>a b <details><summary>c d</summary><p>e <details><summary>f</summary>g</details></p></details></p>"
    assert visible_words(nested) == 4
