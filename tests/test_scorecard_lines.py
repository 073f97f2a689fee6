"""Each compared measure of the scorecard in one line, as pyperf's compare says it: one direction (the side ahead),
the ratio of the two figures with its interval only where the difference is called ("1.47x faster [1.36, 1.59]"),
else a tie within its margin or "not significant", and the raw figures and launches beside it; on the committed
sample store (its decisions unchanged) and on a store made here with a clear win, a clear loss and a row too close to
call."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from bench.core.stats import Family
from bench.core.store import Store
from bench.report.page import answer_markdown, render_report, task_parts
from bench.report.sections import ReportContext
from bench.results.agreement import frame_comparisons
from bench.results.frame import load_frame
from factories import fault_record, sweep_records

SAMPLE = Path(__file__).resolve().parent.parent / "reports" / "sample" / "bench.sqlite"
BACKEND = r"(elastic|horovod)"
RATIO = re.compile(rf"{BACKEND} (\d+\.\d\d)x (faster|sooner|better) \[(\d+\.\d\d), (\d+\.\d\d|inf)\]")
CAME = re.compile(rf"{BACKEND} came through (in every run, {BACKEND} in none|more often)")
OTHERS = re.compile(
    r"a tie within ±\d+%|not significant(, the data allow up to ±\d+%|: one time a side)?"
    r"|one (launch|run) a side: cannot tell|neither came through|no ratio: a recovery time is not above 0 s"
)
# the figures beside: each side named with its figure, then the launches (or runs) behind them
BESIDE = re.compile(rf" \({BACKEND} [^;]+[;,] {BACKEND} [^;]+; \d+( \+ \d+)+ (launches|runs)(, [^)]+)?\)$")


def rows_of(frame):
    parts = task_parts(frame, ReportContext("test", [], frame, Family(frame_comparisons(frame))))
    return [r for p in parts for r in p.scorecard]


def check_line(row) -> str:
    """The row's line holds the format, and says what the row decided: a ratio (with an interval in the same
    direction, at or above 1, that holds the ratio) only for the side the row's test calls ahead."""
    line = row.line
    beside = BESIDE.search(line)
    assert beside, line
    compared = line[: beside.start()]
    ratio = RATIO.fullmatch(compared)
    if ratio:
        side, factor, low, high = ratio.group(1), *(float(ratio.group(i)) for i in (2, 4, 5))
        assert row.winner == side and row.standing == "ahead", (line, row.standing)
        assert 1.0 <= low <= factor <= high, line
        assert float(re.search(r"p ([\d.e-]+)", row.test).group(1)) < 0.05, (line, row.test)
    elif CAME.fullmatch(compared):
        assert row.winner == compared.split()[0] and "Fisher's exact" in row.test, line
    else:
        assert OTHERS.fullmatch(compared), line
        assert row.winner is None, line
        assert (row.standing == "within") == compared.startswith("a tie"), (line, row.standing)
    return compared


@pytest.mark.slow  # the sample store's scorecard, computed (seconds)
def test_every_comparison_of_the_sample_store_is_one_line_and_decides_as_before(tmp_path):
    store = tmp_path / "bench.sqlite"
    shutil.copyfile(SAMPLE, store)
    frame = load_frame(Store(store))
    rows = rows_of(frame)
    assert len(rows) == 32
    said = {(r.measure, r.condition): check_line(r) for r in rows}
    # the decisions the sample page made before its rows read this way: the same wins, ties and open cases
    wins = sorted((r.measure, r.winner) for r in rows if r.winner)
    assert wins == [
        ("recovery from a hung worker", "elastic"),
        ("recovery from a killed worker", "horovod"),
        ("scaling efficiency", "elastic"),
        ("scaling efficiency", "elastic"),
        ("startup to the first step", "elastic"),
        ("training throughput", "elastic"),
        ("training throughput", "elastic"),
        ("training throughput", "elastic"),
        ("training throughput", "elastic"),
    ]
    assert sum(1 for r in rows if r.standing == "within") == 10
    killed = said[("recovery from a killed worker", next(c for m, c in said if "every 30 steps" in c and "KILL" in c))]
    assert killed == "horovod 18.45x sooner [11.75, 30.08]"  # the exact test's interval, as a ratio
    markdown = answer_markdown(frame)
    assert "- **training, mnist_mlp, 2 workers, cpu, pinned, one host**: a tie within ±8% (elastic 12,129, " in markdown
    assert "times as fast" not in markdown and "a tie within ±8% (9 + 9" not in markdown


def test_a_win_a_loss_and_a_row_too_close_to_call_each_read_as_one_line(tmp_path):
    """elastic clearly faster at 2 workers, horovod clearly faster at 1 and recovering sooner from a killed worker in
    every one of 4 runs a side, and 4 workers too close to call: each row's line names the side ahead with its ratio
    and interval, or says it is not significant, with both figures beside."""
    launches = {
        ("elastic", 1): [95, 96, 94],
        ("horovod", 1): [120, 121, 119],
        ("elastic", 2): [150, 155, 148],
        ("horovod", 2): [120, 118, 123],
        ("elastic", 4): [100, 160, 80],
        ("horovod", 4): [120, 90, 150],
    }
    killed = [
        fault_record(f"k-{backend}-{i}", backend, sweep_id="s1", created_at=300.0 + i, metrics={"recovery_s": t})
        for backend, times in (("elastic", [4.6, 5.2, 4.9, 5.0]), ("horovod", [0.2, 0.3, 0.25, 0.22]))
        for i, t in enumerate(times)
    ]
    path = tmp_path / "bench.sqlite"
    store = Store(path)
    for rec in sweep_records("s1", launches) + killed:
        store.save(rec)
    frame = load_frame(Store(path))
    rows = rows_of(frame)
    said = {(r.measure, r.condition.split(",")[1].strip()): check_line(r) for r in rows}
    win = said[("training throughput", "2 workers")]
    loss = said[("training throughput", "1 worker")]
    assert RATIO.fullmatch(win).group(1, 3) == ("elastic", "faster"), win
    assert RATIO.fullmatch(loss).group(1, 3) == ("horovod", "faster"), loss
    assert said[("training throughput", "4 workers")].startswith("not significant"), said
    sooner = next(v for (m, _), v in said.items() if m == "recovery from a killed worker")
    assert RATIO.fullmatch(sooner).group(1, 3) == ("horovod", "sooner"), sooner
    two = next(r for r in rows if r.measure == "training throughput" and ", 2 workers," in r.condition)
    assert two.line.endswith("(elastic 151, horovod 120 samples/s; 3 + 3 launches)"), two.line
    page = render_report(frame, "test")
    assert win in page and loss in page and "comparison (95% interval)" in page
