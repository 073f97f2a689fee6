"""The page's answer on stores built in memory: per scenario, drawn only from what bears on it (never a collective
microbenchmark), failures counted with their runs, one run a side deciding nothing, and one overall sentence that
follows from the scenarios; first on the page."""

import dataclasses
import re

from bench.core.stats import Family
from bench.report.answer import overall, scenarios
from bench.report.page import answer_markdown, render_report, scorecard_recommendation, task_parts
from bench.report.sections import ReportContext
from bench.results.agreement import frame_comparisons
from bench.results.frame import records_to_frame
from factories import HUNG_METRICS, comm_record, comm_row, fault_record, sweep_records

TIED = {("elastic", 2): [150, 152, 149], ("horovod", 2): [151, 149, 150]}
FASTER = {("elastic", 2): [150, 155, 148], ("horovod", 2): [120, 118, 123]}
STOP = {"signal": "STOP"}


def rows_of(records):
    frame = records_to_frame(records)
    parts = task_parts(frame, ReportContext("test", [], frame, Family(frame_comparisons(frame))))
    return [r for p in parts for r in p.scorecard]


def comm_launches(times_us: dict[str, list[float]]):
    """Allreduce sweeps at 16 MiB, one launch per value: a bus bandwidth each backend reaches."""
    out = []
    for backend, values in times_us.items():
        for i, t in enumerate(values):
            rec = comm_record(
                f"c-{backend}-{i}", backend, rows=[comm_row(size=16 * 2**20, time_us=t)], created_at=100.0 + i
            )
            rec.metrics.fit["predicted_time_us"] = [t]  # the alpha-beta model's line on the page's plot
            out.append(rec)
    return out


def hang_runs(elastic_through: int, horovod_through: int, runs: int = 3, **fault):
    """`runs` hang runs a side; the first `*_through` of each came through, the others timed out."""
    out = []
    for backend, through in (("elastic", elastic_through), ("horovod", horovod_through)):
        for i in range(runs):
            ok = i < through
            out.append(
                fault_record(
                    f"h-{backend}-{i}",
                    backend,
                    sweep_id="s1",
                    created_at=200.0 + i + (10 if backend == "horovod" else 0),
                    status="ok" if ok else "timeout",
                    fault={**STOP, **fault},
                    metrics={"recovery_s": 15.0 + i} if ok else HUNG_METRICS,
                )
            )
    return out


def answer_of(records) -> tuple[str, dict[str, str]]:
    rows = rows_of(records)
    return " ".join(scorecard_recommendation(rows)), {s.name: s.said for s in scenarios(rows)}


def test_a_collective_faster_on_one_side_is_no_reason_to_choose():
    """The fresh-sweep case: training speed ties and the one difference called is the 16 MiB allreduce's bus
    bandwidth: the answer chooses nothing, and says the microbenchmark is shown beside, not weighed."""
    records = sweep_records("s1", TIED) + comm_launches({"elastic": [1000, 1010, 995], "horovod": [1500, 1490, 1510]})
    rows = rows_of(records)
    busbw = next(r for r in rows if r.measure == "allreduce bus bandwidth")
    assert busbw.standing == "ahead" and busbw.winner == "elastic"  # called: the difference is real here
    said, found = answer_of(records)
    assert "Choose" not in said and said.startswith("Neither is ahead on what this page measured")
    (speed,) = found.values()
    assert speed.startswith("a tie within ±")
    page = render_report(records_to_frame(records), "test")
    assert "not weighed" in page and "Choose" not in page


def test_a_backend_that_never_came_through_where_the_other_always_did_loses_that_scenario():
    """4 runs a side, elastic through in each and horovod in none: Fisher's exact p 2/70, a win."""
    said, found = answer_of(sweep_records("s1", TIED) + hang_runs(4, 0, runs=4))
    hung = found["a hung worker"]
    assert hung == (
        "elastic came through in every run, horovod in none (elastic median 16.50 s; horovod timeout in 4 runs; "
        "4 + 4 runs)"
    )
    assert said.startswith("Choose elastic on this hardware: it wins a hung worker; horovod wins none.")
    assert "Tied: training speed in 1 of 1 scenario(s) (within ±" in said


def test_one_run_a_side_or_a_split_too_close_to_call_decides_nothing():
    said, found = answer_of(sweep_records("s1", TIED) + hang_runs(1, 0, runs=1))
    assert (
        found["a hung worker"]
        == "one run a side: cannot tell (elastic 15.00 s; horovod timeout in 1 run; 1 + 1 runs); 4 a side can decide it"
    )
    assert "Choose" not in said and "Not yet decided: 1 scenario(s) run once a side." in said
    said, found = answer_of(sweep_records("s1", TIED) + hang_runs(3, 2))
    assert found["a hung worker"] == (
        "not significant (elastic median 16.00 s; horovod median 15.50 s, timeout in 1 run; 3 + 3 runs); "
        "the runs overlap; 4 a side can decide it"
    )
    assert "Choose" not in said and "wins none" not in said


def test_ahead_in_every_run_but_too_few_runs_is_not_yet_decided_and_never_ahead_in_none():
    """The fresh default sweep's case: 2 + 2 runs, horovod recovering sooner from a killed worker in every run and
    elastic coming through a hung worker where horovod never did. Neither can be called at 5% with 2 runs a side
    (the exact tests' p is at least 1/3), so the sentence chooses nothing, names both as not yet decided with the side
    ahead in every run and what decides it, and prints no interval the runs cannot support."""
    killed = [
        fault_record(f"k-{backend}-{i}", backend, sweep_id="s1", created_at=300.0 + i, metrics={"recovery_s": seconds})
        for backend, times in (("elastic", [4.65, 5.23]), ("horovod", [0.14, 0.42]))
        for i, seconds in enumerate(times)
    ]
    records = sweep_records("s1", TIED) + killed + hang_runs(2, 0, runs=2)
    said, found = answer_of(records)
    assert said.startswith("No choice yet: no scenario is decided for either.")
    assert "a killed worker (horovod recovered sooner in every one of 2 + 2 runs; 4 a side can decide it)" in said
    assert "a hung worker (elastic came through in every run and horovod in none, 2 + 2 runs; 4 a side can" in said
    assert "in none." not in said and "wins none" not in said and "Choose" not in said
    assert found["a killed worker"] == (
        "not significant (elastic median 4.94, horovod median 0.28 s; 2 + 2 runs); horovod recovered sooner in every "
        "one of 2 + 2 runs; 4 a side can decide it"
    )
    row = next(r for r in rows_of(records) if r.measure == "recovery from a killed worker")
    assert row.figures == {"elastic": "median 4.94 s; runs 4.65, 5.23 s", "horovod": "median 0.28 s; runs 0.14, 0.42 s"}
    assert "2 + 2 runs allow no 95% interval" in row.difference and "p 0.33 (permutation test)" in row.difference
    assert "±" not in row.difference + row.outcome  # no interval the data cannot mean


def test_faster_on_one_side_and_more_robust_on_the_other_is_said_as_such():
    said, found = answer_of(sweep_records("s1", FASTER) + hang_runs(0, 4, runs=4))
    assert re.fullmatch(
        r"elastic 1\.\d\dx faster \[1\.\d\d, 1\.\d\d\] \(elastic 151, horovod 120 samples/s; 3 \+ 3 launches\)",
        found["training, mnist_mlp, 2 workers, cpu, pinned, one host"],
    ), found
    assert said.startswith(
        "Neither is ahead everywhere: elastic wins training, mnist_mlp, 2 workers, cpu, pinned, one host; "
        "horovod wins a hung worker; choose by which"
    )
    assert "Choose" not in said


def test_faster_and_behind_nowhere_is_a_choice():
    said, _ = answer_of(sweep_records("s1", FASTER) + hang_runs(3, 3))
    assert said.startswith("Choose elastic on this hardware: it trains faster in 1 of 1 training scenario(s)")
    assert "horovod wins none. Tied: a hung worker (within ±" in said  # the same times: shown within a margin


def test_nothing_comparable_says_so():
    assert overall([]).startswith("No answer yet")


def test_the_answer_comes_before_the_scorecard_on_the_page_and_in_the_readme():
    records = sweep_records("s1", FASTER) + hang_runs(4, 0, runs=4)
    page = render_report(records_to_frame(records), "test")
    answer, table = page.index("The answer"), page.index('id="scorecard"')
    assert answer < table
    between = re.sub(r"<[^>]+>", " ", page[answer:table])
    assert "a hung worker:" in between and "training, mnist_mlp, 2 workers" in between
    # the page's one machine is named, though its conditions do not name it (there is no other to tell it from)
    assert between.split(":")[0].split() == ["The", "answer", "for", "cpu", "(2", "CPUs)"], between[:80]
    markdown = answer_markdown(records_to_frame(records))
    assert (
        markdown.startswith("**The answer for cpu (2 CPUs).** Choose elastic")
        and "- **a hung worker**: elastic came through" in markdown
    )
    assert "The scorecard behind it" in markdown.splitlines()[-1]


def test_many_conditions_keep_the_first_scenarios_in_view_and_fold_the_rest():
    """A store of many conditions (here 12 links' worth of training rows) lists the first SCENARIOS_SHOWN scenarios,
    the default condition's first, under the overall sentence and folds the others, so the answer stays in the first
    screen."""
    from bench.report.page import SCENARIOS_SHOWN, answer_blocks
    from bench.report.sections import SPEED, ScoreRow

    def row(condition: str, default: bool = False) -> ScoreRow:
        return ScoreRow(
            "training throughput",
            condition,
            {"elastic": "1 samples/s", "horovod": "1 samples/s"},
            "-",
            "3 + 3",
            "within ±5% of each other",
            standing="within",
            default=default,
            weighs=SPEED,
        )

    rows = [row(f"mnist_mlp, 2 workers, across 2 hosts, link {n}gbit") for n in range(1, 12)]
    rows.append(row("mnist_mlp, 2 workers, one host", default=True))
    blocks = answer_blocks(rows)
    shown, folded = blocks[1], blocks[2]
    assert len(shown.items) == SCENARIOS_SHOWN and shown.items[0][0].text.startswith(
        "training, mnist_mlp, 2 workers, one"
    )
    assert folded.summary == f"{12 - SCENARIOS_SHOWN} more scenario(s)" and len(folded.blocks[0].items) == 4


def test_a_fault_made_under_two_sets_of_conditions_is_two_scenarios_each_named_with_them():
    runs = hang_runs(3, 0) + [
        dataclasses.replace(r, run_id=r.run_id + "-b") for r in hang_runs(3, 3, checkpoint_every=5, total_steps=15)
    ]
    names = [s.name for s in scenarios(rows_of(runs))]
    assert len(names) == 2 and all(n.startswith("a hung worker (mnist_mlp: SIGSTOP") for n in names), names
    assert len(set(names)) == 2 and any("every 5 steps" in n for n in names), names
    assert [s.name for s in scenarios(rows_of(hang_runs(3, 0)))] == ["a hung worker"]  # one: its name alone
