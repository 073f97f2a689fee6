import math

import numpy as np
import pytest

from bench.core import stats
from bench.core.stats import summarize, t_quantile, t_two_sided_p


def test_confidence_interval_uses_student_t():
    s = summarize([10.0, 12.0, 11.0, 13.0, 9.0])
    assert s["mean"] == 11.0
    assert s["stdev"] == pytest.approx(math.sqrt(2.5))
    # t(0.975, 4) = 2.7764
    assert s["ci_half_width"] == pytest.approx(2.7764 * math.sqrt(2.5) / math.sqrt(5), rel=1e-4)
    assert s["ci_low"] < 11.0 < s["ci_high"]


def test_student_t_is_scipy_stats_t_to_the_last_bit():
    """t_quantile and t_two_sided_p compute what scipy.stats' t does (its ppf and sf call the same functions), at
    whole and fractional (Welch) degrees of freedom, small and huge, so that no figure moves."""
    from scipy.stats import t

    for dof in (1, 2, 3, 4, 7, 29, 1.0001, 1.73, 2.5, 11.2, 58.9, 1e3, 1e6, 1e30, math.inf):
        for confidence in (0.5, 0.9, 0.95, 0.99):
            assert t_quantile(confidence, dof) == float(t.ppf(0.5 + confidence / 2, dof))
        for value in (0.0, 0.3, -1.96, 2.5, -40.0):
            assert t_two_sided_p(value, dof) == float(2 * t.sf(abs(value), dof))


def test_unstable_by_pyperf_rules():
    assert not summarize([100.0, 101.0, 99.0, 100.5])["unstable"]
    assert summarize([100.0, 130.0, 80.0, 100.0])["unstable"]  # sd above 10% of the mean
    assert summarize([100.0, 100.1])["unstable"]  # too few windows


def test_single_value_has_no_interval():
    s = summarize([5.0])
    assert math.isnan(s["ci_half_width"]) and s["unstable"]


def test_a_summary_is_the_records_summary():
    from bench.core.records import Summary

    s = Summary(**summarize([10.0, 12.0, 11.0]), unit="samples/s")
    assert (s.mean, s.n, s.unit, s.per_window) == (11.0, 3, "samples/s", None)
    assert Summary.from_dict(s.to_dict()) == s


# ---------------------------------------------------------------- across launches
def test_ratio_of_cases_is_welch_on_the_log_scale():
    from scipy.stats import ttest_ind

    from bench.core.stats import ratio_of_cases

    a, b = [110.0, 112.0, 108.0], [100.0, 103.0, 98.0]
    est = ratio_of_cases([a], [b])
    logs_a, logs_b = [math.log(v) for v in a], [math.log(v) for v in b]
    assert est.ratio == pytest.approx(math.exp(sum(logs_a) / 3 - sum(logs_b) / 3))
    assert est.p == pytest.approx(ttest_ind(logs_a, logs_b, equal_var=False).pvalue)
    assert est.low < est.ratio < est.high and est.significant and est.launches == (3, 3)
    # the resolution is the interval's half-width as a factor: ratio x (1 + resolution) is its upper end
    assert est.high == pytest.approx(est.ratio * (1 + est.resolution))


def test_ratio_of_pairs_is_the_paired_t_test_on_the_log_scale():
    from scipy.stats import ttest_rel

    from bench.core.stats import ratio_of_pairs

    a, b = [110.0, 91.0, 120.0, 104.0], [100.0, 85.0, 108.0, 97.0]
    est = ratio_of_pairs(a, b)
    logs = [math.log(x / y) for x, y in zip(a, b)]
    assert est.ratio == pytest.approx(math.exp(sum(logs) / 4))
    assert est.p == pytest.approx(ttest_rel([math.log(v) for v in a], [math.log(v) for v in b]).pvalue)
    assert est.significant and est.launches == (4, 4)
    assert est.high == pytest.approx(est.ratio * (1 + est.resolution))
    assert not ratio_of_pairs([110.0], [100.0]).replicated
    for bad in ([0.0, 1.0], [float("nan"), 1.0]):
        with pytest.raises(ValueError):
            ratio_of_pairs(bad, [1.0, 1.0])


def test_a_single_launch_on_a_side_cannot_tell():
    from bench.core.stats import ratio_of_cases

    est = ratio_of_cases([[150.0]], [[100.0, 101.0, 99.0]])
    assert est.ratio == pytest.approx(1.5, rel=1e-3)
    assert not est.replicated and not est.significant and math.isnan(est.low) and est.interval_text() == "-"


def test_scaled_ratios_of_several_cases():
    from bench.core.stats import ratio_of_cases

    # efficiency-like: thr(2) / (2 x thr(1)), the same spread on both sides
    est = ratio_of_cases([[190.0, 200.0, 210.0]], [[95.0, 100.0, 105.0]], scale=2)
    assert est.ratio == pytest.approx(1.0, abs=0.01) and not est.significant
    with pytest.raises(ValueError):
        ratio_of_cases([[0.0, 1.0]], [[1.0, 1.0]])


# ---------------------------------------------------------------- many comparisons: Holm, and equivalence
def test_holm_adjusts_step_down_and_keeps_the_order():
    adjusted = stats.holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": float("nan")})
    # sorted 0.01, 0.03, 0.04 of m = 3: x3, x2, x1, each at least the one before
    assert adjusted["a"] == pytest.approx(0.03) and adjusted["c"] == pytest.approx(0.06)
    assert adjusted["b"] == pytest.approx(0.06) and math.isnan(adjusted["d"])
    assert stats.holm({"x": 0.9, "y": 0.8}) == {"x": 1.0, "y": 1.0}


def test_a_page_of_ties_calls_a_difference_at_most_five_percent_of_the_time():
    """40 comparisons of 3 + 3 launches whose true ratio is 1, on 300 pages: judged one by one, most pages call
    something significant; judged as a family (Holm), at most about 5% do."""
    import random

    rng = random.Random(7)
    raw_pages = family_pages = 0
    for _ in range(300):
        estimates = {
            f"c{i}": stats.ratio_of_cases(
                [[rng.lognormvariate(0, 0.05) for _ in range(3)]], [[rng.lognormvariate(0, 0.05) for _ in range(3)]]
            )
            for i in range(40)
        }
        family = stats.Family(estimates)
        raw_pages += any(e.significant for e in estimates.values())
        family_pages += any(family.judge(k).significant for k in estimates)
    assert raw_pages / 300 > 0.6
    assert family_pages / 300 <= 0.09  # 5% in expectation; the bound leaves room for 300 pages' sampling


def test_the_equivalence_margin_is_where_two_one_sided_tests_just_pass():
    from scipy.stats import t as student

    est = stats.ratio_of_cases([[100, 103, 98, 101]], [[99, 102, 100, 97]])
    margin = stats.equivalence_margin(est, 0.05)
    bound = math.log(1 + margin)
    # at the margin, the one-sided test against the nearer bound has p = 0.05 exactly
    upper_p = student.cdf((est.log_ratio - bound) / est.se, est.dof)
    lower_p = student.sf((est.log_ratio + bound) / est.se, est.dof)
    assert max(upper_p, lower_p) == pytest.approx(0.05)
    assert margin > abs(est.ratio - 1)  # never narrower than the point estimate
    assert math.isnan(stats.equivalence_margin(stats.ratio_of_cases([[100]], [[99]]), 0.05))


def test_a_judgement_says_within_only_when_not_significant_and_narrow():
    tie = stats.ratio_of_cases([[100, 101, 99, 100]], [[100, 99, 101, 100]])
    j = stats.Family({"tie": tie}).judge("tie")
    assert not j.significant and j.equivalent and j.margin < 0.03
    wide = stats.ratio_of_cases([[60, 140, 100]], [[140, 60, 100]])
    j = stats.Family({"wide": wide}).judge("wide")
    assert not j.significant and not j.equivalent and j.margin > stats.EQUIVALENCE_USEFUL
    clear = stats.ratio_of_cases([[150, 151, 149]], [[100, 101, 99]])
    nulls = {f"n{i}": stats.ratio_of_cases([[100, 110, 90]], [[105, 95, 100]]) for i in range(30)}
    assert stats.Family({"clear": clear, **nulls}).judge("clear").significant  # a real difference survives
    borderline = stats.ratio_of_cases([[104, 106, 105]], [[100, 102, 99]])
    assert borderline.significant and not stats.Family({"b": borderline, **nulls}).judge("b").significant


# ---------------------------------------------------------------- exact tests of a few runs a side
def test_fishers_exact_test_is_the_hypergeometric_sum_worked_by_hand():
    """Each table's weight is the ways to draw it with its margins fixed, C(column 1, a) C(column 2, b), of
    C(n, row 1); p sums the weights of the tables no more likely than the one observed."""
    # 2 + 2 runs, one side through in both, the other in neither: weights 1, 4, 1 of 6 -> 2/6
    assert stats.fisher_exact(2, 0, 0, 2) == pytest.approx(1 / 3)
    # 4 + 4: weights 1, 16, 36, 16, 1 of 70 -> the two extreme tables, 2/70
    assert stats.fisher_exact(4, 0, 0, 4) == pytest.approx(2 / 70)
    assert stats.fisher_exact(0, 4, 4, 0) == pytest.approx(2 / 70)
    # 3 of 4 against 1 of 4: the tables of weight 16 or less, 1 + 16 + 16 + 1 = 34 of 70
    assert stats.fisher_exact(3, 1, 1, 3) == pytest.approx(34 / 70)
    # margins unequal, [[3, 0], [1, 2]]: tables x = 1, 2, 3 weigh 4, 12, 4 of C(6, 3) = 20 -> 8/20
    assert stats.fisher_exact(3, 0, 1, 2) == pytest.approx(0.4)
    assert stats.fisher_exact(2, 2, 2, 2) == 1.0
    from scipy.stats import fisher_exact

    for table in ((1, 9, 11, 3), (6, 0, 0, 6), (5, 1, 2, 4), (0, 3, 0, 3), (7, 2, 3, 9)):
        a, b, c, d = table
        assert stats.fisher_exact(*table) == pytest.approx(fisher_exact([[a, b], [c, d]]).pvalue, rel=1e-12)
    with pytest.raises(ValueError):
        stats.fisher_exact(-1, 2, 3, 4)


def test_the_permutation_test_takes_every_split():
    """One side below the other in every run: p = 2 / C(n1 + n2, n1), 1/3 at 2 + 2, 1/10 at 3 + 3, 2/70 at 4 + 4, so
    4 runs a side are the fewest that can call it at 5%; runs that overlap against scipy's exact test."""
    slow, fast = [4.65, 5.23, 3.6, 5.8], [0.14, 0.42, 0.3, 0.5]
    assert stats.permutation_p(slow[:2], fast[:2]) == pytest.approx(1 / 3)
    assert stats.permutation_p(slow[:3], fast[:3]) == pytest.approx(1 / 10)
    assert stats.permutation_p(slow, fast) == pytest.approx(2 / 70)
    assert stats.permutation_p(fast, slow) == pytest.approx(2 / 70)
    assert stats.runs_to_decide() == 4 and stats.runs_to_decide(0.01) == 5
    from scipy.stats import permutation_test

    a, b = [1.0, 1.3, 0.8, 1.6, 1.1], [1.2, 1.9, 1.4, 2.2]
    exact = permutation_test(
        (np.log(a), np.log(b)), lambda x, y: np.mean(x) - np.mean(y), permutation_type="independent", n_resamples=10**6
    )
    assert stats.permutation_p(a, b) == pytest.approx(exact.pvalue, rel=1e-9)


def test_the_exact_interval_is_the_shifts_the_test_does_not_reject():
    """Inside the interval, neither one-sided test at 2.5% rejects the first side's logs shifted down by d; just
    outside an end, one does. 2 + 2 and 3 + 3 runs reject no shift at all: no interval, not a wide one."""
    a, b = [1.0, 1.3, 0.8, 1.6, 1.1], [1.2, 1.9, 1.4, 2.2]
    low, high = stats.exact_interval(a, b)

    def tails(d):
        x = [v / math.exp(d) for v in a]
        differences, _, observed = stats._split_statistics(x, b)
        return (differences >= observed - 1e-9).mean(), (differences <= observed + 1e-9).mean()

    for d in (low + 1e-6, (low + high) / 2, high - 1e-6):
        assert min(tails(d)) > 0.025
    assert min(tails(low - 1e-6)) <= 0.025 and min(tails(high + 1e-6)) <= 0.025
    assert stats.exact_interval([4.65, 5.23], [0.14, 0.42]) == (-math.inf, math.inf)
    assert stats.exact_interval([4.65, 5.23, 3.6], [0.14, 0.42, 0.3]) == (-math.inf, math.inf)


def test_an_exact_ratio_of_two_runs_a_side_states_no_interval_where_students_t_states_a_meaningless_one():
    """The defect of a fresh default sweep's page: 4.65 and 5.23 s against 0.14 and 0.42 s, a t interval on about one
    degree of freedom that allowed ±68420%. The exact ratio says p 1/3 and no interval; at 4 + 4 it calls the gap, its
    interval the spread of the runs' ratios."""
    t = stats.ratio_of_cases([[4.65, 5.23]], [[0.14, 0.42]])
    assert t.dof < 1.5 and t.high / t.low > 1000  # what the page printed as "±68420%"
    est = stats.exact_ratio([4.65, 5.23], [0.14, 0.42])
    assert est.p == pytest.approx(1 / 3) and (est.low, est.high, est.resolution) == (0.0, math.inf, math.inf)
    assert est.exact and est.ratio == pytest.approx(math.sqrt(4.65 * 5.23 / (0.14 * 0.42)))
    four = stats.exact_ratio([4.65, 5.23, 3.6, 5.8], [0.14, 0.42, 0.3, 0.5])
    assert (
        four.p == pytest.approx(2 / 70)
        and four.low == pytest.approx(3.6 / 0.5)
        and four.high == pytest.approx(5.8 / 0.14)
    )
    with pytest.raises(ValueError):
        stats.exact_ratio([1.0, 0.0], [1.0, 2.0])


def test_a_family_judges_an_exact_comparison_on_its_own_p():
    """A fault scenario's exact test is decided at 5% on its own: Holm's correction over the page's t comparisons
    neither adjusts it nor counts it."""
    four = stats.exact_ratio([4.65, 5.23, 3.6, 5.8], [0.14, 0.42, 0.3, 0.5])
    ties = {f"t{i}": stats.ratio_of_cases([[100.0, 101.0, 99.0 + i]], [[100.5, 99.5, 100.0]]) for i in range(5)}
    family = stats.Family({"fault": four, **ties})
    assert family.size == 5 and family.judge("fault").p_adjusted == four.p and family.judge("fault").significant
    assert family.judge("t0").p_adjusted == stats.Family(ties).judge("t0").p_adjusted


def test_resolution_at_is_the_welch_half_width_of_two_cases_alike():
    """Two cases of log spread sd, n launches a side: t(2n - 2) x sd x sqrt(2/n), as a factor minus 1; infinite, not
    raised, past a float's range."""
    from bench.core import stats

    assert stats.resolution_at(0.065, 7) == pytest.approx(
        math.exp(stats.t_quantile(0.95, 12) * 0.065 * math.sqrt(2 / 7)) - 1
    )
    assert stats.resolution_at(0.065, 28) < stats.resolution_at(0.065, 7) / 1.9  # four times the launches: half
    assert stats.resolution_at(1000.0, 2) == math.inf
