"""The page says a difference one way everywhere: the side ahead named, by a positive percentage below twice and as a
factor from twice on; a cost is never shown below zero; one colour per backend on every plot; no internal names."""

import html
import math
import re
from types import SimpleNamespace

import pytest

from bench.core.stats import Family
from bench.report import sections
from bench.report.page import render_report
from bench.report.sections import (
    FASTER,
    RECOVERS_SOONER,
    STARTS_SOONER,
    ReportContext,
    colour_of,
    difference_words,
    judged_outcome,
)
from bench.results.agreement import frame_comparisons
from bench.results.frame import records_to_frame
from bench.tasks.train import report as train_report
from factories import CLEAR, comm_record, sweep_records


def estimate(ratio, low=math.nan, high=math.nan):
    return SimpleNamespace(ratio=ratio, low=low, high=high, replicated=not math.isnan(low))


def judgement(est, p=0.5, margin=0.1, significant=False, equivalent=False):
    return SimpleNamespace(
        estimate=est, p_adjusted=p, margin=margin, significant=significant, equivalent=equivalent, replicated=True
    )


def test_the_difference_names_the_side_ahead_as_the_outcome_does():
    # elastic's start takes 0.8 of horovod's: elastic starts sooner, by 1 / 0.8 - 1 = 25%, interval said the same way
    said = judged_outcome(judgement(estimate(0.8, 0.75, 0.85), p=0.003, significant=True), "elastic", "horovod",
                          higher_is_better=False, words=STARTS_SOONER)  # fmt: skip
    assert said["outcome"] == "elastic starts sooner by 25%" and said["winner"] == "elastic"
    assert said["difference"] == "elastic starts sooner by 25.0% (17.6% to 33.3%), p 0.003 (Holm)"
    assert not re.search(r"[-+]\d", said["difference"])  # never a signed figure: the side says the direction


def test_an_interval_across_no_difference_names_the_side_each_end_favours():
    words = difference_words(estimate(1.03, 1 / 1.02, 1.08), "elastic", "horovod")
    assert words == "elastic faster by 3.0% (horovod faster by 2.0% to elastic faster by 8.0%)"
    # horovod ahead: the ends run from the one least in its favour to the one most in its favour
    words = difference_words(estimate(1 / 1.1, 1 / 1.3, 1.05), "elastic", "horovod")
    assert words == "horovod faster by 10.0% (elastic faster by 5.0% to horovod faster by 30.0%)"


def test_a_ratio_of_two_or_more_is_said_as_a_factor():
    # 4.8 s against 0.18 s: 26.7 times, never "+2539.5%"
    est = estimate(4.8 / 0.18, 4.8 / 0.18 / 1.5, 4.8 / 0.18 * 1.2)
    said = judged_outcome(judgement(est, p=0.01, significant=True), "elastic", "horovod", False, RECOVERS_SOONER)
    assert said["outcome"] == "horovod recovers 26.7 times as fast"
    assert said["difference"] == "horovod recovers 26.7 times as fast (17.8 times to 32.0 times), p 0.01 (Holm)"
    # on one run a side, the same factor in words that claim nothing
    said = judged_outcome(judgement(estimate(4.8 / 0.18)), "elastic", "horovod", False, RECOVERS_SOONER)
    assert said["difference"] == "horovod ahead by a factor of 26.7 (one launch a side: no interval)"
    assert said["outcome"] == "cannot tell: one launch on a side (horovod ahead by a factor of 26.7)"
    assert "%" not in said["difference"] + said["outcome"]
    # an end of an interval at twice or more is a factor too, the other end a percentage
    assert difference_words(estimate(1.72, 1.19, 2.49), "elastic", "horovod", words=FASTER) == (
        "elastic faster by 72.0% (19.0% to 2.5 times)"
    )


def test_a_cost_is_never_shown_below_zero():
    assert sections.at_least_zero(-0.31, ".2f", " ms") == "0 (within noise: -0.31 ms measured)"
    assert sections.at_least_zero(1.5, ".2f", " ms") == "1.50"
    # a backend at one worker faster than the plain loop: its exposed communication is noise around zero
    launches = {("single", 1): [100, 101, 99], ("elastic", 1): [110, 111, 109], ("horovod", 1): [99, 100, 98]}
    frame = records_to_frame(sweep_records("s1", launches))
    part = train_report.report_part(frame, ReportContext("test", [], frame, Family(frame_comparisons(frame))))
    table = next(b for s in part.sections if s.id == "time" for b in s.blocks if b.kind == "table")
    elastic = next(r for r in table.rows if r.cells[2].text == "elastic")
    exposed, share, interval = (c.text for c in elastic.cells[7:])
    assert exposed.startswith("0 (within noise: -") and exposed.endswith(" ms measured)")
    assert share.startswith("0 (within noise: -") and not interval.startswith("-")
    for r in table.rows:
        assert not any(c.text.startswith("-") and c.text != "- (1 launch)" for c in r.cells[7:])


@pytest.fixture(scope="module")
def page_and_plots():
    """A page of training and communication runs, with every figure its plots drew."""
    figures = []
    keep = sections.figure_png

    def capture(fig):
        figures.append(fig)
        return keep(fig)

    comm = [comm_record(f"c{i}-{b}", b, created_at=2000 + i) for i, b in enumerate(["elastic", "horovod"] * 3)]
    for rec in comm:
        rec.metrics.fit["predicted_time_us"] = [50.0, 60.0]  # the model's time at each size measured
    records = sweep_records("s1", CLEAR) + comm
    frame = records_to_frame(records)
    with pytest.MonkeyPatch.context() as mp:
        for module in ("bench.tasks.train.report", "bench.tasks.comm.report", "bench.report.page"):
            mp.setattr(f"{module}.figure_png", capture)
        page = render_report(frame, "test")
    return page, figures


def test_one_colour_per_backend_on_every_plot(page_and_plots):
    from matplotlib.colors import to_hex

    _, figures = page_and_plots
    seen: dict[str, set] = {}
    for fig in figures:
        for ax in fig.axes:
            for line in ax.get_lines():
                backend = str(line.get_label()).split(" ")[0]
                if backend in ("elastic", "horovod", "single"):
                    seen.setdefault(backend, set()).add(to_hex(line.get_color()))
            at = {round(y): t.get_text() for y, t in zip(ax.get_yticks(), ax.get_yticklabels())}
            if at and all(": " in label for label in at.values()):  # the exposed communication bars, one per case
                for bar in ax.patches:
                    backend = at[round(bar.get_y() + bar.get_height() / 2)].rsplit(": ", 1)[1].split(" x")[0]
                    seen.setdefault(backend, set()).add(to_hex(bar.get_facecolor()))
    assert {"elastic", "horovod"} <= set(seen)
    for backend, colours in seen.items():
        assert colours == {colour_of(backend)}, backend
    assert len({colour_of(b) for b in ("elastic", "horovod", "single", "ps", "ray")}) == 5


def test_throughput_axes_start_at_zero_and_efficiency_is_in_percent(page_and_plots):
    _, figures = page_and_plots
    titled = {ax.get_title(): ax for fig in figures for ax in fig.axes}
    throughput = [ax for title, ax in titled.items() if title.startswith("throughput")]
    efficiency = [ax for title, ax in titled.items() if title.startswith("scaling efficiency")]
    assert throughput and efficiency
    assert all(ax.get_ylim()[0] == 0 for ax in throughput)
    assert all("%" in ax.get_title() and ax.get_ylim()[1] > 20 for ax in efficiency)


def test_no_internal_names_in_the_page_text(page_and_plots):
    page, _ = page_and_plots
    text = html.unescape(re.sub(r"<[^>]+>", " ", page.split("</style>")[1]))
    text = re.sub(r"data:image/png;base64,\S+", "", text)
    for internal in ("schema", "sd/mean", "1/b", "role rank", "a (us)", " / horovod - 1", "+2539"):
        assert internal not in text, internal
    assert "spread (sd / mean)" in text and "latency (us)" in text and "bandwidth (GB/s)" in text
    assert "comparison (95% interval)" in text


def test_the_method_says_what_resolution_the_runs_reach_and_why():
    """The Resolution note: the spread between launches pooled over the compared cases of 2 workers or more (never the
    one-worker or plain-loop cases), what n launches a side resolve, and 4n; none where no such case has 2 launches."""
    from bench.core import stats
    from bench.tasks.train.results import replicated_cases

    launches = {
        ("single", 1): [100.0, 150.0, 60.0, 120.0],  # wild, but not compared at 2 workers: left out
        ("elastic", 2): [190.0, 210.0, 200.0, 195.0],
        ("horovod", 2): [180.0, 220.0, 185.0, 215.0],
    }
    frame = records_to_frame(sweep_records("s1", launches))
    cases = replicated_cases(frame[frame["status"] == "ok"])
    (note,) = train_report.resolution_note(cases)
    text = "".join(str(part) for part in note)
    # each launch's figure is the mean of its windows (v x 0.99, v, v x 1.01): v itself
    logs = [[math.log(v) for v in launches[key]] for key in (("elastic", 2), ("horovod", 2))]
    squares = sum(sum((x - sum(side) / 4) ** 2 for x in side) for side in logs)
    sd = math.sqrt(squares / 6)
    assert f"varies by {sd:.1%} between launches" in text and "over the 2 compared case(s)" in text, text
    at_4 = math.exp(stats.t_quantile(stats.CONFIDENCE, 6) * sd * math.sqrt(2 / 4)) - 1
    at_16 = math.exp(stats.t_quantile(stats.CONFIDENCE, 30) * sd * math.sqrt(2 / 16)) - 1
    assert f"±{at_4:.0%} at the 4 launches a side here, ±{at_16:.0%} at 16" in text, text
    one_launch = {key: values[:1] for key, values in launches.items()}
    frame = records_to_frame(sweep_records("s2", one_launch))
    assert train_report.resolution_note(replicated_cases(frame)) == []
    # launches hundreds of orders of magnitude apart (a corrupt or absurd store) resolve nothing, said so, never raised
    absurd = {("elastic", 2): [1e-300, 1e300, 1.0], ("horovod", 2): [1e300, 1e-300, 1.0]}
    frame = records_to_frame(sweep_records("s3", absurd))
    (note,) = train_report.resolution_note(replicated_cases(frame))
    assert "no bound at the 3 launches a side here" in "".join(str(part) for part in note)
