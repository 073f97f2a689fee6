"""A sweep that adds launches until it is sure (bench.workflows.sequential, bench.core.stats.Looks): the design's
shares, the stopping rule fed with made-up per-launch figures, a simulation of thousands of sweeps that shows the
error rates hold when the sweep looks after every round, and the page judging a stored sequential sweep's comparison
at the share of its last look, as the sweep's own look did."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import sqlite3
import time

import numpy as np
import pytest

from bench.core import stats
from bench.core.stats import Family, Looks, ratio_of_cases, sequential
from bench.workflows.sequential import (
    Standing,
    fix_looks,
    look_line,
    next_comparison,
    round_specs,
    simulated_launches,
    simulated_sweeps,
    stop_reason,
)

ALPHA = 1 - stats.CONFIDENCE


def test_the_looks_shares_add_up_to_the_error_rate_and_favour_the_later_looks():
    looks = Looks(3, 8)
    shares = [looks.share(n) for n in range(3, 9)]
    assert looks.count == 6 and math.isclose(sum(shares), 1.0)
    assert all(math.isclose(later, 2 * earlier) for earlier, later in zip(shares, shares[1:]))
    assert shares[-1] > 0.5  # the last look, where a comparison the time allowed for ends, keeps half
    assert looks.look(2) == 1 and looks.look(30) == 6  # an interrupted case or a pooled one: within the design
    with pytest.raises(ValueError):
        Looks(1, 4)  # one launch a side decides nothing


def test_a_look_states_a_wider_interval_and_a_larger_p_and_margin():
    est = ratio_of_cases([[100, 104, 97, 101]], [[96, 99, 94, 98]])
    looked = sequential(est, Looks(3, 8), 4)  # look 2 of 6: 4 / (2 + 4 + ... + 64) of the error rate
    share = 4 / 126
    assert math.isclose(looked.share, share) and math.isclose(looked.p, min(1.0, est.p / share))
    assert looked.low < est.low < est.ratio < est.high < looked.high and looked.ratio == est.ratio
    assert stats.equivalence_margin(looked, ALPHA) > stats.equivalence_margin(est, ALPHA)
    # a design of one look is the fixed design
    once = sequential(est, Looks(4, 4), 4)
    assert (once.low, once.high, once.p) == pytest.approx((est.low, est.high, est.p))


def test_the_design_is_fixed_from_the_time_a_round_of_every_comparison_takes():
    assert fix_looks(3, [14.0, 18.0], 180.0) == Looks(3, 8)  # 5 rounds of both in 180 s
    assert fix_looks(3, [14.0, 18.0], 20.0) == Looks(3, 4)  # a round of one of them fits
    assert fix_looks(3, [14.0, 18.0], 10.0) == Looks(3, 3)  # none fits: the fixed design, at its full 5%
    assert fix_looks(2, [0.0], 60.0) == Looks(2, 3)


def standing(label, margin, launches=3, round_s=15.0, significant=False):
    est = ratio_of_cases([[100, 101, 99]], [[100, 100, 100.5]])
    judgement = stats.Judgement(est, 0.001 if significant else 0.9, 2, margin)
    return Standing(label, label, judgement, launches, round_s)


def test_the_next_round_goes_to_the_widest_unsettled_comparison_that_fits():
    looks = Looks(3, 8)
    wide, narrow, done = (
        standing("resnet18 2 workers", 0.20),
        standing("mnist_mlp 2 workers", 0.12),
        standing("x 2 workers", 0.05),
    )
    assert next_comparison([narrow, wide, done], 0.08, looks, 100.0) is wide
    assert next_comparison([narrow, standing("y", 0.30, round_s=120.0), done], 0.08, looks, 100.0) is narrow
    assert next_comparison([standing("z", 0.2, launches=8), done], 0.08, looks, 100.0) is None  # its last look
    assert next_comparison([wide], 0.08, looks, 10.0) is None  # no time for its round
    assert next_comparison([standing("d", 0.30, significant=True), done], 0.08, looks, 100.0) is None
    assert "every comparison is a difference or within ±8%" in stop_reason([done], 0.08, looks, 50.0)
    why = stop_reason([wide, standing("z", 0.2, launches=8)], 0.08, looks, 10.0)
    assert "z at the design's last look (8 launches a side)" in why and "resnet18 2 workers (about 15 s)" in why


def test_a_look_in_one_line():
    looks = Looks(3, 8)
    line = look_line(standing("resnet18 2 workers", 0.11, launches=6), 0.12, looks, 120.0)
    assert line == "resnet18 2 workers: within ±11%, 6 + 6, 2m00s left (look 4 of 6)"
    assert "not yet within ±8%" in look_line(standing("mlp", 0.11), 0.08, looks, 30.0)
    assert look_line(standing("mlp", 0.30, significant=True), 0.08, looks, 30.0).startswith("mlp: horovod faster by")


def sweep_by_the_code(logs, looks: Looks, resolution):
    """One simulated sweep (logs[comparison, side, launch]) run by the product's rule: every comparison judged as one
    family at its look (stats.sequential, Family), rounds added by next_comparison until it stops (no time limit:
    the design's last look bounds it). Returns each comparison's (significant, margin) where it stopped."""
    n = [looks.first] * logs.shape[0]
    while True:
        ests = {
            str(c): sequential(ratio_of_cases([list(np.exp(logs[c, 0, :k]))], [list(np.exp(logs[c, 1, :k]))]), looks, k)
            for c, k in enumerate(n)
        }
        family = Family(ests)
        now = [Standing(key, key, family.judge(key), n[int(key)], 1.0) for key in ests]
        pick = next_comparison(now, resolution, looks, math.inf)
        if pick is None:
            return [(s.judgement.significant, s.judgement.margin) for s in now]
        n[int(pick.key)] += 1


def test_the_numpy_simulation_is_the_products_rule():
    """On the same draws, the vectorized simulation the error-rate tests use stops where the product's code stops
    and says what it says."""
    looks = Looks(3, 8)
    logs = simulated_launches([0.0, math.log(1.05)], 0.07, 40, looks, seed=3)
    significant, margin = simulated_sweeps(logs, looks, 0.08)
    for s in range(len(logs)):
        by_code = sweep_by_the_code(logs[s], looks, 0.08)
        assert [c[0] for c in by_code] == list(significant[s])
        assert [c[1] for c in by_code] == pytest.approx(list(margin[s]), rel=1e-6)


def test_looking_after_every_round_calls_no_more_ties_differences_than_the_error_rate():
    """Two true ties judged as one family (the main job's two-worker rows), at the spread the study measured (7% a
    launch), looked at after every round up to 10 launches a side: in 4000 sweeps the family's false difference rate
    stays under 5%, its binomial 95% interval's upper end too. Looking as often at the fixed design's level (no
    shares) calls far more: the simulation can tell."""
    looks = Looks(3, 10)
    logs = simulated_launches([0.0, 0.0], 0.07, 4000, looks, seed=7)
    significant, _ = simulated_sweeps(logs, looks, 0.08)
    rate = significant.any(axis=1).mean()
    assert rate + 1.96 * math.sqrt(rate * (1 - rate) / len(logs)) <= 0.05, rate
    naive, _ = simulated_sweeps(logs, looks, 0.08, shares=False)
    assert naive.any(axis=1).mean() > 0.08


def test_a_within_statement_is_wrong_in_at_most_5_percent_of_sweeps():
    """Where the truth lies outside the resolution (a 10% or a 12% difference, sought to ±10%), a sweep that says
    "within ±X%" with the truth beyond X is wrong; that happens in at most 5% of 4000 simulated sweeps (the
    binomial interval's upper end too), and within ±X% holds the truth wherever a 6% difference is said to be
    within. Looking as often at the fixed design's level says a false "within" far more often."""
    looks = Looks(3, 10)
    for truth in (1.06, 1.10, 1.12):
        logs = simulated_launches([math.log(truth), 0.0], 0.07, 4000, looks, seed=11)
        significant, margin = simulated_sweeps(logs, looks, 0.10)
        wrong = (~significant[:, 0] & (margin[:, 0] <= 0.10) & (math.log(truth) > np.log1p(margin[:, 0]))).mean()
        assert wrong + 1.96 * math.sqrt(max(wrong, 0.01) * (1 - wrong) / len(logs)) <= 0.05, (truth, wrong)
    logs = simulated_launches([math.log(1.10), 0.0], 0.07, 4000, looks, seed=11)
    significant, margin = simulated_sweeps(logs, looks, 0.10, shares=False)
    assert (~significant[:, 0] & (margin[:, 0] <= 0.10)).mean() > 0.08


def test_a_round_is_one_more_launch_of_each_side():
    from bench.core.spec import RunSpec

    with sqlite3.connect("docs/studies/main-job/fixed-design/bench.sqlite") as db:
        rows = db.execute(
            "SELECT record FROM runs WHERE world_size = 2 AND backend IN ('elastic', 'horovod')"
        ).fetchall()
    found = {}
    for (text,) in rows:
        spec = json.loads(text)["spec"]
        if spec["task"] == "train":
            found[spec["backend"]] = RunSpec.from_dict(spec)
    specs = (dataclasses.replace(found["elastic"], repeat=4), dataclasses.replace(found["horovod"], repeat=3))
    s = Standing("k", "mnist_mlp 2 workers", None, 4, 10.0, specs)
    made = round_specs(s, "sweep-1")
    assert sorted(x.backend for x in made) == ["elastic", "horovod"] and {x.repeat for x in made} == {5}
    assert made == round_specs(s, "sweep-1")  # seeded
    by_backend = {x.backend: x for x in made}
    assert all(by_backend[x.backend] == dataclasses.replace(x, repeat=5) for x in specs)


def test_the_page_judges_a_sequential_sweeps_comparison_at_its_last_look(tmp_path):
    """A stored sweep marked sequential (its plan's design) is judged by the page's frame at the share of its look,
    and the sweep's own look (bench.workflows.sequential.standings) says the same; the same store without the mark
    is judged at the fixed design."""
    from bench.core.store import Store
    from bench.results.agreement import claims_by_sweep, frame_comparisons
    from bench.results.frame import load_frame
    from bench.results.sweeps import looks_of, plan_text
    from bench.tasks.train.results import looked_comparisons
    from bench.workflows.sequential import standings

    path = tmp_path / "bench.sqlite"
    shutil.copy("docs/studies/main-job/fixed-design/bench.sqlite", path)
    with sqlite3.connect(path) as db:
        sweep_id = db.execute("SELECT sweep_id FROM sweeps ORDER BY created_at LIMIT 1").fetchone()[0]
        db.execute("DELETE FROM runs WHERE sweep_id != ?", (sweep_id,))  # one sweep: its launches alone
    store = Store(path)
    plain = load_frame(store)
    key = next(iter(looked_comparisons(plain)))
    before = frame_comparisons(plain)[key]
    assert before.share == 1.0 and before.launches == (3, 3)
    store.update_sweep(sweep_id, plan=plan_text([], None, {"resolution": 0.08, "timeout_s": 60, "first": 3, "most": 6}))
    frame = load_frame(store)
    after = frame_comparisons(frame)[key]
    assert after.share == pytest.approx(2 / 30) and after.high > before.high and after.p >= before.p
    family = Family(frame_comparisons(frame))
    looked = {s.key: s for s in standings(store, sweep_id)}
    assert looked[key].judgement == family.judge(key) and looked[key].launches == 3
    # `bench agreement` takes the sweep's claims at the same look
    records = store.sweep_records(sweep_id)
    assert claims_by_sweep({sweep_id: records})[sweep_id][key].estimate.share == 1.0
    assert claims_by_sweep({sweep_id: records}, looks_of(store.sweeps()))[sweep_id][key].estimate == after


def test_the_loop_adds_rounds_stores_them_and_says_each_look(tmp_path, capsys):
    """resolve() on a stored sweep of 3 + 3 launches a side, its launches made by a stand-in runner that stores a
    copy of an earlier launch of the same case under the new spec (no process runs): rounds go to the unsettled
    comparisons until the design's last look, each round is in the stored plan before it runs, the time spent is
    kept for --resume, every look is a line, and the page's frame then states the comparisons at their last look."""
    from bench.core.store import Store
    from bench.harness.runner import new_run_id
    from bench.results.agreement import frame_comparisons
    from bench.results.frame import load_frame
    from bench.results.sweeps import plan_of, sequential_of
    from bench.workflows.sequential import resolve, standings

    path = tmp_path / "bench.sqlite"
    shutil.copy("docs/studies/main-job/fixed-design/bench.sqlite", path)
    with sqlite3.connect(path) as db:
        sweep_id = db.execute("SELECT sweep_id FROM sweeps ORDER BY created_at LIMIT 1").fetchone()[0]
        db.execute("DELETE FROM runs WHERE sweep_id != ?", (sweep_id,))
        db.execute("DELETE FROM sweeps WHERE sweep_id != ?", (sweep_id,))
    store = Store(path)
    records = store.sweep_records(sweep_id)
    plan = [r.spec for r in records]
    ran_specs = []

    def stand_in(store, sweep_id, specs, title, planned, ran_before):
        assert len(plan_of(store.sweeps(sweep_id)[0])[0]) == planned  # stored before it runs
        made = []
        for spec in specs:
            ran_specs.append(spec)
            same = [
                r
                for r in records
                if (r.spec.backend, r.spec.workload, r.spec.world_size, r.spec.task)
                == (spec.backend, spec.workload, spec.world_size, spec.task)
            ]
            copy = dataclasses.replace(
                same[spec.repeat % len(same)], spec=spec, run_id=new_run_id(), created_at=time.time()
            )
            store.save(copy)
            made.append(copy)
        return made

    settings = {"resolution": 0.02, "timeout_s": 70.0}
    made = resolve(store, sweep_id, plan, records, "bench sweep", settings, stand_in)
    said = capsys.readouterr().err
    stored = sequential_of(store.sweeps(sweep_id)[0])
    looks = Looks(stored["first"], stored["most"])
    assert looks == Looks(3, 5)  # 70 s hold two rounds of both comparisons (about 15 + 17 s each)
    assert len(made) == len(ran_specs) == 8 and {s.repeat for s in ran_specs} == {3, 4}
    assert len(plan_of(store.sweeps(sweep_id)[0])[0]) == len(plan) + 8 and stored["spent_s"] > 0
    assert "mnist_mlp 2 workers:" in said and "resnet18 2 workers:" in said and ", 5 + 5, " in said
    assert "(look 3 of 3)" in said and "at the design's last look (5 launches a side)" in said
    frame = load_frame(store)
    now = {s.key: s for s in standings(store, sweep_id)}
    for key, est in frame_comparisons(frame).items():
        if key in now:
            assert est.launches == (5, 5) and est.share == pytest.approx(looks.share(5))
            assert now[key].judgement.margin == pytest.approx(stats.equivalence_margin(est, ALPHA))


def test_the_regression_gate_adds_no_rounds(monkeypatch):
    """The gate's sweep is its fixed matrix only: its run budget does not grow with sequential sweeps."""
    from bench.workflows import regress

    seen: dict = {}
    monkeypatch.setattr(regress, "run_benchmark_sweep", lambda store, title, **kw: seen.update(kw) or ("", []))
    regress.run_matrix(None, "bench regress", regress.REGRESS_REPEATS)
    assert seen["repeats"] == regress.REGRESS_REPEATS and seen.get("sequential") is None
    assert "--resolution" not in regress.regress_command(regress.REGRESS_REPEATS)


def test_sequential_sweeps_of_one_code_pooled_call_no_more_ties_differences():
    """The page pools the sweeps of one code: three sequential sweeps in a row, each deciding on the launches pooled so
    far and stated at its own look (the product's code), on two true ties at 7% a launch. In 400 simulated triples
    the pooled family calls a difference at most 5% of the time (about 2% in 3000)."""
    looks, rng, calls = Looks(3, 7), np.random.default_rng(1), 0
    for _ in range(400):
        pooled: list = [[[], []] for _ in range(2)]
        for _sweep in range(3):
            mine = [[list(rng.normal(0, 0.07, 3)), list(rng.normal(0, 0.07, 3))] for _ in range(2)]
            while True:
                ests = {
                    str(c): sequential(
                        ratio_of_cases(
                            [list(np.exp(pooled[c][0] + mine[c][0]))], [list(np.exp(pooled[c][1] + mine[c][1]))]
                        ),
                        looks,
                        len(mine[c][0]),
                    )
                    for c in range(2)
                }
                family = Family(ests)
                now = [Standing(k, k, family.judge(k), len(mine[int(k)][0]), 1.0) for k in ests]
                pick = next_comparison(now, 0.08, looks, math.inf)
                if pick is None:
                    break
                for side in mine[int(pick.key)]:
                    side.append(rng.normal(0, 0.07))
            for c in range(2):
                pooled[c][0] += mine[c][0]
                pooled[c][1] += mine[c][1]
        calls += any(s.judgement.significant for s in now)
    assert calls / 400 <= 0.05
