"""The noise study (docs/studies/noise.md): its figures recomputed from its committed data, the page's words from them,
and the adjustment's A/A check able to fail."""

import json
import math
import random
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDER = ROOT / "docs" / "studies" / "noise"
sys.path.insert(0, str(ROOT / "scripts"))

import noise_study  # noqa: E402


@pytest.fixture(scope="module")
def figures():
    return noise_study.analyse(FOLDER)


def test_the_committed_figures_are_what_the_data_give(figures):
    committed = json.loads((FOLDER / "figures.json").read_text())
    assert json.loads(json.dumps(figures, sort_keys=True)) == committed


def test_the_study_page_holds_the_tables_and_figures_the_data_give(figures):
    page = (ROOT / "docs" / "studies" / "noise.md").read_text()
    for table in noise_study.tables(figures).split("\n\n"):
        assert table.strip() in page, table
    a = figures["adjustment"]
    worded = [
        f"One launch spread {figures['sd_launch']:.1%}",
        f"the machine's speed {figures['yardstick_sd']:.1%}",
        f"({a['aa_adjusted']['coverage']:.1%} hold 1)",
        f"theta {a['theta']:.2f}",
        f"±8% takes {figures['launches_for_8pct']} a side",
        f"{figures['explained']['helpers_share']['r2']:.0%}; {figures['explained_together']:.0%} with the other shares",
        f"The other {1 - figures['explained_together']:.0%} is set",
        f"{figures['launches']} launches",
        f"({figures['main_job']['most']} launches a side at most)",
        f"in {figures['main_job']['both_settled']:.0%} of 4,000 simulated",
        "(median ±{:.0%}, ±{:.0%})".format(*figures["main_job"]["median_margin"].values()),
    ]
    for words in worded:
        assert words in page, words


def simulated(explained: float, n: int = 16) -> list[dict]:
    """Launches of two cases of one backend's speed, each log figure `explained` parts a covariate measured beside it
    (its log) and the rest its own noise."""
    rng = random.Random(7)
    rows = []
    for case in (("a", "w"), ("b", "w")):
        for _ in range(n):
            x = rng.gauss(0, 0.1)
            y = math.sqrt(explained) * x + math.sqrt(1 - explained) * rng.gauss(0, 0.1)
            rows.append({"case": case, "y": 5.0 + y, "yardstick": math.exp(x)})
    return rows


def test_an_adjustment_narrows_the_aa_intervals_only_by_what_its_covariate_explains():
    """On launches where a covariate explains half the variance, the adjustment narrows the A/A intervals by about
    1 - sqrt(1/2) and still hold 1 about 95% of the time; by a covariate that explains nothing they stay as wide."""
    for explained, narrower in ((0.5, (0.15, 0.45)), (0.0, (-0.1, 0.1))):
        rows = simulated(explained)
        raw = noise_study.aa_coverage(rows, [r["y"] for r in rows], splits=2000)
        logs, theta = noise_study.adjusted(rows, "yardstick")
        adjusted = noise_study.aa_coverage(rows, logs, splits=2000)
        assert 0.9 <= raw["coverage"] <= 0.99 and 0.9 <= adjusted["coverage"] <= 0.99, (raw, adjusted)
        assert narrower[0] < 1 - adjusted["resolution"] / raw["resolution"] < narrower[1], (explained, raw, adjusted)
        assert (theta > 0.4) == (explained > 0)
