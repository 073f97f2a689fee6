"""Fault cases decided by exact tests, one rule for the page and the sweep: whether each backend came through by
Fisher's exact test, how soon by a permutation test of the mean log recovery time, each at 5% on its own; the sweep
adding a run a side to each case not yet decided until it is or has 4 a side; and the committed main-job study's
sweeps, each alone and pooled, saying the same where each decides."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from bench.core import stats
from bench.core.stats import Family
from bench.report.answer import NEITHER, TIE, UNDECIDED, WON, overall
from bench.report.page import page_scenarios, task_parts
from bench.report.sections import ReportContext
from bench.results.agreement import frame_comparisons
from bench.results.frame import records_to_frame
from bench.tasks.fault.results import RUNS_TO_DECIDE, comparisons, decide, follow_ups
from factories import HUNG_METRICS, fault_record

ROOT = Path(__file__).resolve().parent.parent
SLOW, FAST = [4.65, 5.23, 3.6, 5.8, 4.9, 5.1], [0.14, 0.42, 0.3, 0.5, 0.2, 0.35]


def runs(times: dict[str, list[float | None]], signal: str = "KILL", sweep_id: str = "s1") -> list:
    """Fault runs of one case, a run per value, a side's runs in order: a time it recovered in, or None where it timed
    out."""
    out = []
    for backend, values in times.items():
        for i, seconds in enumerate(values):
            rec = fault_record(
                f"{signal}-{backend}-{i}",
                backend,
                sweep_id=sweep_id,
                created_at=100.0 + i + (50 if backend == "horovod" else 0),
                status="ok" if seconds is not None else "timeout",
                fault={"signal": signal},
                metrics={"recovery_s": seconds} if seconds is not None else HUNG_METRICS,
            )
            out.append(dataclasses.replace(rec, spec=dataclasses.replace(rec.spec, repeat=i)))
    return out


def hung(elastic: int, horovod: int, n: int) -> list:
    """n hang runs a side, the first `elastic` (`horovod`) of each side came through in 9 s."""
    return runs(
        {"elastic": [9.0] * elastic + [None] * (n - elastic), "horovod": [9.0] * horovod + [None] * (n - horovod)},
        "STOP",
    )


# ---------------------------------------------------------------- the rule
def test_came_through_is_decided_by_fishers_exact_test_at_four_runs_a_side():
    for n, standing in ((2, "unresolved"), (3, "unresolved"), (4, "ahead")):
        found = decide(([9.0] * n, n), ([], n))
        assert found.standing == standing and found.basis == "came through" and found.leader == "elastic"
        assert found.p == pytest.approx(2 / stats.math.comb(2 * n, n))
        assert found.winner == ("elastic" if n == 4 else None) and found.settled == (n == 4)
    # one failure in 4 is no difference at 5% (p 1): not yet decided, and no one ahead in every run
    one = decide(([9.0] * 4, 4), ([9.0] * 3, 4))
    assert one.standing == "unresolved" and one.leader is None and one.p == 1.0
    assert decide(([], 2), ([], 2)).standing == "neither" and decide(([], 2), ([], 2)).settled
    assert decide(([9.0], 1), ([9.0], 1)).standing == "one launch"


def test_recovery_times_are_decided_by_the_permutation_test_on_the_log_scale():
    two = decide((SLOW[:2], 2), (FAST[:2], 2))
    assert (two.standing, two.leader, two.winner) == ("unresolved", "horovod", None) and two.p == pytest.approx(1 / 3)
    assert two.estimate.exact and two.estimate.high == float("inf")  # no interval the runs cannot mean
    four = decide((SLOW[:4], 4), (FAST[:4], 4))
    assert (four.standing, four.winner, four.leader) == ("ahead", "horovod", "horovod")
    assert four.p == pytest.approx(2 / 70)
    # one run that breaks the order: horovod still ahead on the whole, not in every run
    mixed = decide((SLOW[:3] + [0.25], 4), (FAST[:4], 4))
    assert mixed.leader is None and mixed.standing == "unresolved" and not mixed.settled
    # the same times a side: shown within a margin, a tie
    same = decide(([1.0, 1.05, 0.95, 1.02], 4), ([1.01, 1.03, 0.97, 0.99], 4))
    assert same.standing == "within" and same.margin < stats.EQUIVALENCE_USEFUL and same.settled


def test_the_pages_comparison_of_recovery_times_is_the_exact_one():
    """What the page and `bench agreement` compare: the exact ratio (p 1/3 at 2 + 2), never Student's t with one
    degree of freedom (which called the same runs' gap at 95% in one sweep and allowed ±68420% in another)."""
    frame = records_to_frame(runs({"elastic": SLOW[:2], "horovod": FAST[:2]}))
    (est,) = comparisons(frame).values()
    assert est.exact and est.p == pytest.approx(1 / 3) and not Family({"k": est}).judge("k").significant
    # `bench agreement` states the interval as the page does: none, not "±inf times"
    from bench.report.agreement_table import resolution_words

    assert resolution_words(est.resolution) == "no interval"
    (four,) = comparisons(records_to_frame(runs({"elastic": SLOW[:4], "horovod": FAST[:4]}))).values()
    assert resolution_words(four.resolution).startswith("±")
    # a case whose sides came through in different shares is decided on the counts: no ratio of times
    assert comparisons(records_to_frame(hung(2, 1, 2))) == {}


# ---------------------------------------------------------------- the sweep's added runs
def planned(n: int = 2) -> list:
    return [r.spec for r in hung(n, n, n)]


def test_follow_ups_add_a_run_a_side_to_each_undecided_case_up_to_four_a_side():
    more = follow_ups(hung(2, 0, 2), planned())  # ahead in every run, p 1/3: not yet decided
    assert sorted(s.backend for s in more) == ["elastic", "horovod"]
    assert all(s.fault.signal == "STOP" and s.repeat == 2 and s.sweep_id == "s1" for s in more)
    assert len(follow_ups(hung(3, 0, 3), planned())) == 2  # p 1/10: one more a side
    assert follow_ups(hung(4, 0, 4), planned()) == []  # decided: p 2/70
    assert follow_ups(hung(4, 3, 4), planned()) == []  # not decided, but at the cap
    assert len(follow_ups(hung(2, 1, 2), planned())) == 2  # one failure: more runs can tell
    assert follow_ups(hung(0, 0, 2), planned()) == []  # neither came through
    assert follow_ups(hung(1, 1, 1), planned(1)) == []  # one run a side was asked for
    assert follow_ups(hung(6, 0, 6), planned(6)) == [] and len(follow_ups(hung(4, 3, 4), planned(6))) == 2
    # times seen apart in every run of 2 + 2 and 3 + 3 are not yet decided; 4 + 4 are
    killed = runs({"elastic": SLOW[:3], "horovod": FAST[:3]})
    assert len(follow_ups(killed, [r.spec for r in runs({"elastic": SLOW[:2], "horovod": FAST[:2]})])) == 2
    assert follow_ups(runs({"elastic": SLOW[:4], "horovod": FAST[:4]}), planned()) == []
    # a side short of the cap gets its run, the other none
    uneven = [r for r in hung(3, 0, 4) if not (r.spec.backend == "horovod" and r.spec.repeat == 3)]
    assert [s.backend for s in follow_ups(uneven, planned())] == ["horovod"]
    # a run that shared its cores with another bench run is not counted, as on the page
    shared = [r if r.spec.backend == "elastic" else dataclasses.replace(r, shared_with=["x"]) for r in hung(2, 0, 2)]
    assert follow_ups(shared, planned()) == []
    assert RUNS_TO_DECIDE == 4


def begin(store, plan: list) -> None:
    store.begin_sweep(
        {
            "sweep_id": "s1",
            "created_at": 1.0,
            "updated_at": 1.0,
            "state": "complete",
            "title": "bench sweep",
            "description": "a test",
            "planned": len(plan),
            "owner": json.dumps({"host": "elsewhere", "pid": 1, "started": 0.0}),
            "why": None,
            "plan": "{}",
        }
    )


@pytest.mark.parametrize(
    "elastic, horovod, rounds",
    [
        (lambda i: 9.0, lambda i: None, 2),  # horovod never came through: decided at 4 + 4
        (lambda i: 4.0 + i % 2, lambda i: 4.5 - i % 2, 2),  # the runs overlap: stops at the cap, 4 a side
    ],
)
def test_the_sweep_adds_rounds_to_its_plan_until_each_fault_case_is_decided_or_at_four_a_side(
    tmp_path, monkeypatch, elastic, horovod, rounds
):
    """settle_faults: each round goes into the stored plan before it runs (so that --resume knows it), then runs as the
    sweep's; the rounds stop once the case is decided or has 4 runs a side. The launches are made by a stand-in that
    stores what each spec's run would have measured (no process runs)."""
    from bench.core.store import Store
    from bench.results.sweeps import plan_of
    from bench.workflows import sweep

    made = runs({"elastic": [elastic(i) for i in range(2)], "horovod": [horovod(i) for i in range(2)]}, "STOP")
    plan = [r.spec for r in made]
    store = Store(tmp_path / "s.sqlite")
    begin(store, plan)
    called = []

    def stand_in(store, sweep_id, specs, title, planned_now, ran_before, on_look=None):
        assert len(plan_of(store.sweeps(sweep_id)[0])[0]) == planned_now  # stored before it runs
        called.append(specs)
        out = []
        for spec in specs:
            seconds = (elastic if spec.backend == "elastic" else horovod)(spec.repeat)
            (one,) = runs({spec.backend: [seconds]}, "STOP")
            out.append(dataclasses.replace(one, run_id=f"{spec.backend}-{spec.repeat}", spec=spec))
        return out

    monkeypatch.setattr(sweep, "run_marked", stand_in)
    assert sweep.settle_faults(store, "s1", plan, made[:-1], "t") == [] and called == []  # a planned launch missing
    added = sweep.settle_faults(store, "s1", plan, made, "t")
    assert len(called) == rounds and all(sorted(s.backend for s in specs) == ["elastic", "horovod"] for specs in called)
    assert [s.repeat for specs in called for s in specs] == [2, 2, 3, 3] and len(added) == 4
    specs, _ = plan_of(store.sweeps("s1")[0])
    assert len(specs) == len(plan) + 4 and store.sweeps("s1")[0]["planned"] == len(plan) + 4


# ---------------------------------------------------------------- the same machine, the same sentence
MAIN_JOB = ROOT / "docs" / "studies" / "main-job"
# the main job as it is (its fault cases run until decided), and as it was: every row, and the planned launches only
STUDIES = [
    MAIN_JOB / "bench.sqlite",
    MAIN_JOB / "all-rows" / "bench.sqlite",
    MAIN_JOB / "fixed-design" / "bench.sqlite",
]


def answer_of_store(path: Path, sweep_id: str | None = None):
    """The scenarios and overall sentence of a store's page, of one sweep's runs alone where `sweep_id` is given."""
    from bench.core.store import Store
    from bench.results.frame import load_frame

    if sweep_id is not None:
        with sqlite3.connect(path) as db:
            db.execute("DELETE FROM runs WHERE sweep_id IS NULL OR sweep_id != ?", (sweep_id,))
            db.execute("DELETE FROM sweeps WHERE sweep_id != ?", (sweep_id,))
    frame = load_frame(Store(path))
    parts = task_parts(frame, ReportContext("", [], frame, Family(frame_comparisons(frame))))
    found = page_scenarios([r for p in parts for r in p.scorecard])
    return {s.name: s for s in found}, overall(found)


@pytest.mark.slow  # four pages' scorecards of a study's store (seconds)
@pytest.mark.parametrize("study", STUDIES, ids=["main-job", "all-rows", "fixed-design"])
def test_the_main_job_studys_sweeps_alone_and_pooled_give_one_answer(tmp_path, study):
    """Three default sweeps of one machine: each alone and all pooled. Where a sweep alone decides a scenario, the
    pooled page decides it the same way, but for a tie that more launches resolve into a difference smaller than the
    tie's margin (compatible with it: the pooled interval reaches into that margin); where it does not decide, its
    sentence names it as not yet decided, with the side ahead in every run being the one the pooled page finds ahead.
    Every sweep alone says the same first sentence, the choice. So a fresh default run never chooses a backend that
    more runs of the same machine would not. The main job as it is adds fault runs until decided (up to 4 a side):
    each of its sweeps alone decides both faults as the three pooled do."""
    pooled_copy = tmp_path / "pooled.sqlite"
    shutil.copy(study, pooled_copy)
    pooled, said = answer_of_store(pooled_copy)
    assert pooled["a killed worker"].state == WON and pooled["a killed worker"].favours == "horovod"
    assert pooled["a hung worker"].state == WON and pooled["a hung worker"].favours == "elastic"
    # (pooled, the main job's 22 + 22 launches also find elastic faster on the MLP, named beside the hung worker)
    assert said.startswith("Neither is ahead everywhere: elastic wins ") and (
        "a hung worker; horovod wins a killed worker;" in said
    )
    with sqlite3.connect(study) as db:
        sweep_ids = [row[0] for row in db.execute("SELECT sweep_id FROM sweeps ORDER BY created_at")]
    assert len(sweep_ids) == 3
    choices = set()
    for sweep_id in sweep_ids:
        copy = tmp_path / f"{sweep_id}.sqlite"
        shutil.copy(study, copy)
        alone, sentence = answer_of_store(copy, sweep_id)
        assert set(alone) == set(pooled), sweep_id
        for name, one in alone.items():
            whole = pooled[name]
            if one.state == UNDECIDED:
                assert f"{name} (" in sentence.split("Not yet decided: ")[1], (sweep_id, sentence)
                assert one.leader in (None, whole.favours), (sweep_id, name, one.leader, whole.favours)
            elif one.state == TIE and whole.state == WON and not one.failure:
                margin = float(re.search(r"within ±(\d+)%", one.why).group(1)) / 100
                low, high = map(float, re.search(r"\[([\d.]+), ([\d.]+)\]", whole.said).groups())
                assert min(low, 1 / high) <= 1 + margin, (
                    sweep_id,
                    name,
                    one,
                    whole,
                )  # the pooled gap can be that small
            else:
                assert (one.state, one.favours) == (whole.state, whole.favours), (sweep_id, name, one, whole)
                assert one.state in (WON, TIE, NEITHER)
        choices.add(sentence.split(". ")[0])
        assert "Choose" not in sentence and "in none." not in sentence, sentence
        assert alone["a killed worker"].leader == "horovod" and alone["a hung worker"].leader == "elastic"
        from bench.core.store import Store

        faults = [r for r in Store(copy).records() if r.spec.task == "fault"]
        if max(Counter((r.task.case(r.spec), r.spec.backend) for r in faults).values()) <= 2:
            # a sweep of 2 + 2 fault runs decides neither scenario: said so, with the side ahead in every run
            assert alone["a killed worker"].state == UNDECIDED and "4 a side can decide it" in sentence
        else:  # the fault runs added until decided: each sweep alone decides both, as all three pooled do
            assert alone["a killed worker"].state == alone["a hung worker"].state == WON, sentence
    assert TIE in {s.state for s in pooled.values()}
    assert len(choices) == 1, choices  # the same choice from every fresh run
