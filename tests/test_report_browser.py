"""The report in a real browser: headless Chromium (Debian's package; CI installs it, and elsewhere these tests skip
without it, naming it) through Playwright. No console errors, every figure decoded and drawn, and readable with
JavaScript off. The page is the one of the committed store written before typed records (training, communication and
fault runs, read through the upgrade), so no run is launched here; test_report.py covers pages of fresh runs."""

import shutil
from pathlib import Path

import pytest

from bench.core.store import Store
from bench.report.page import write_report
from conftest import assert_the_answer_is_in_the_first_screen, launch_chromium
from needs import needs

V1_STORE = Path(__file__).resolve().parent / "data" / "store-v1.sqlite"

# slow: a browser started for each test (seconds)
pytestmark = [needs("chromium"), pytest.mark.slow]


@pytest.fixture(scope="module")
def report_path(tmp_path_factory):
    folder = tmp_path_factory.mktemp("browser")
    store = folder / "bench.sqlite"
    shutil.copy(V1_STORE, store)  # a copy: reading must never touch the committed store
    return write_report(Store(store), folder / "report.html")


def test_report_renders_without_errors_and_every_figure_draws(report_path, tmp_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = launch_chromium(p)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors = []
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(report_path.as_uri())
        sizes = page.eval_on_selector_all("img", "imgs => imgs.map(i => [i.complete, i.naturalWidth, i.naturalHeight])")
        assert len(sizes) >= 3
        assert all(done and w > 100 and h > 100 for done, w, h in sizes), sizes
        for i, img in enumerate(page.query_selector_all("img")):
            shot = tmp_path / f"figure{i}.png"
            img.screenshot(path=str(shot))
            assert not _blank(shot), f"figure {i} rendered blank"
        page.screenshot(path=str(tmp_path / "page.png"), full_page=True)
        assert not _blank(tmp_path / "page.png")
        browser.close()
    assert errors == []


def test_report_reads_with_javascript_disabled(report_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = launch_chromium(p)
        context = browser.new_context(java_script_enabled=False)
        page = context.new_page()
        page.goto(report_path.as_uri())
        text = page.inner_text("body")
        for heading in (
            "Verdict",
            "Throughput and scaling",
            "Communication",
            "Where the time goes",
            "Startup and rendezvous",
            "Elasticity",
            "Rank map",
            "Environment",
            "Failed and unstable runs",
            "Methodology",
        ):
            assert heading in text
        assert page.eval_on_selector_all("img", "imgs => imgs.length") >= 3
        browser.close()


def _blank(path) -> bool:
    """A screenshot is blank when (nearly) every pixel has the same colour."""
    from matplotlib.image import imread

    pixels = imread(str(path))[..., :3].reshape(-1, 3)
    spread = pixels.max(axis=0) - pixels.min(axis=0)
    return bool(spread.max() < 0.05)


SAMPLE_STORE = Path(__file__).resolve().parent.parent / "reports" / "sample" / "bench.sqlite"


@pytest.mark.parametrize("source", [SAMPLE_STORE, V1_STORE], ids=["sample", "v1"])
def test_the_answer_is_in_the_first_screen_then_the_scorecard(source, tmp_path):
    """On the page of the committed sample store and of the oldest committed store (test_report.py: of a fresh
    sweep)."""
    store = tmp_path / "bench.sqlite"
    shutil.copy(source, store)
    assert_the_answer_is_in_the_first_screen(write_report(Store(store), tmp_path / "report.html"))
