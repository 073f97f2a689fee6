"""Statistics used everywhere a figure is reported.

Confidence intervals are for the mean over windows, from Student's t distribution (windows are few).
A result is unstable, by pyperf's rules, when its standard deviation exceeds UNSTABLE_REL_STDEV of its mean
or it has fewer than MIN_STABLE_WINDOWS windows.

Across launches, a ratio of case means is computed in one place, ratio_of_cases: the page's comparisons and
the regression gate's figures (bench.results.figures) both take their values from it.

A few runs a side of one event each (a fault's recovery, whether it came through) are compared with exact tests, which
hold their error rate at any sample size: exact_ratio (a permutation test of the mean log time, with the interval that
inverts it) and fisher_exact (a 2x2 table of counts).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass
from typing import Any

CONFIDENCE = 0.95
UNSTABLE_REL_STDEV = 0.10
MIN_STABLE_WINDOWS = 3


def t_quantile(confidence: float, dof: float) -> float:
    """Student's t at `dof` degrees of freedom (fractional for Welch's) that holds `confidence` of it within +-t.
    scipy.special's functions are what scipy.stats' t calls, without its second of import and its checks per call
    (a report of a large store makes tens of thousands of these)."""
    from scipy.special import stdtrit

    return float(stdtrit(dof, 0.5 + confidence / 2.0))


def t_two_sided_p(t_value: float, dof: float) -> float:
    """The two-sided p of a t statistic at `dof` degrees of freedom (scipy.stats' 2 t.sf(|t|), as t_quantile)."""
    from scipy.special import stdtr

    return float(2 * stdtr(dof, -abs(t_value)))


def summarize(values: list[float], confidence: float = CONFIDENCE) -> dict[str, Any]:
    """mean, sample standard deviation, and the t confidence interval of the mean."""
    n = len(values)
    if n == 0:
        raise ValueError("no values to summarise")
    mean = sum(values) / n
    try:
        stdev = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else float("nan")
    except OverflowError:  # values apart by more than a float's range (a record's absurd figure): no spread to tell
        stdev = math.inf
    half = t_quantile(confidence, n - 1) * stdev / math.sqrt(n) if n > 1 else float("nan")
    rel = stdev / mean if mean else float("nan")
    return {
        "mean": mean,
        "stdev": stdev,
        "n": n,
        "confidence": confidence,
        "ci_low": mean - half,
        "ci_high": mean + half,
        "ci_half_width": half,
        "rel_stdev": rel,
        "unstable": bool(n < MIN_STABLE_WINDOWS or not rel <= UNSTABLE_REL_STDEV),
    }


# ---------------------------------------------------------------- across launches
# Launches, not windows, are the unit of replication when two cases are compared: windows of one launch
# agree more closely than launches of the same case do, so a test over windows calls launch-to-launch
# drift a difference. A comparison resting on a single launch on either side cannot tell.
MIN_LAUNCHES = 2


@dataclass(frozen=True)
class Estimate:
    """A ratio of case means across launches, exp(sum of sign x mean log launch value) / scale, with its t
    interval (`low`, `high`; NaN when a case has fewer than MIN_LAUNCHES launches), the p-value of
    "ratio = 1", and `resolution`: the relative difference from 1 that this comparison would just have
    called significant (the interval's half-width, as a factor minus 1)."""

    ratio: float
    low: float
    high: float
    p: float
    resolution: float
    launches: tuple[int, ...]  # launches behind each case, in the order given
    confidence: float
    log_ratio: float  # log(ratio) as computed, so that a difference of two ratios loses nothing to exp and log
    se: float = float("nan")  # the standard error of log_ratio
    dof: float = float("nan")  # its degrees of freedom (Welch-Satterthwaite's, or n - 1 for pairs)
    # the share of the error rate (1 - confidence) this estimate's look spends, below 1 only in a sweep that looked
    # more than once (Looks): p is then already divided by it, and the interval and margin are at its level
    share: float = 1.0
    # exact_ratio's: the per-run values of each side, which its interval and margin are computed from (exact tests
    # of a few runs, judged each on its own: Family leaves them out of Holm's correction); () for a t estimate
    samples: tuple[tuple[float, ...], ...] = ()

    @property
    def exact(self) -> bool:
        return bool(self.samples)

    @property
    def replicated(self) -> bool:
        return min(self.launches) >= MIN_LAUNCHES

    @property
    def significant(self) -> bool:
        """The interval excludes 1 (so the direction is resolved); never with a single launch a side."""
        return self.replicated and (self.low > 1 or self.high < 1)

    def interval_text(self, fmt: str = "{:+.1%}") -> str:
        if not self.replicated:
            return "-"
        return f"{fmt.format(self.low - 1)} to {fmt.format(self.high - 1)}"


def exp(x: float) -> float:
    """e**x held in a float's range: infinity above it, the least positive float below it (e**x is a ratio of positive
    values, which a caller may turn over). A comparison of an absurd figure with a sane one says so, instead of failing
    the page that makes it."""
    try:
        return math.exp(x) or math.ulp(0.0)
    except OverflowError:
        return math.inf


def resolution_at(sd: float, launches: int, confidence: float = CONFIDENCE) -> float:
    """What a comparison of two cases of log spread `sd`, `launches` a side, resolves: the half-width of its Welch t
    interval as a factor minus 1 (2n - 2 degrees of freedom), before any correction for many comparisons or looks;
    infinite where it leaves a float's range."""
    return exp(t_quantile(confidence, 2 * launches - 2) * sd * math.sqrt(2 / launches)) - 1


def mean_log(values: list[float]) -> float:
    """The mean of the logs of positive values: the log of their geometric mean."""
    return sum(math.log(v) for v in values) / len(values)


def geometric_mean(values: list[float]) -> float:
    return exp(mean_log(values))


def ratio_of_cases(
    numerators: list[list[float]], denominators: list[list[float]], scale: float = 1.0, confidence: float = CONFIDENCE
) -> Estimate:
    """The ratio of the (geometric) case means prod(numerators) / prod(denominators) / scale, each case a list
    of per-launch values. The interval is Student's t on the log scale: each case contributes its
    launch-to-launch variance over its count, and the degrees of freedom are Welch-Satterthwaite's (no
    case is assumed to vary like another)."""
    cases = [(1, c) for c in numerators] + [(-1, c) for c in denominators]
    launches = tuple(len(c) for _, c in cases)
    if any(v <= 0 or not math.isfinite(v) for _, c in cases for v in c) or min(launches) < 1:
        raise ValueError("a ratio of cases needs positive, finite values in every case")
    log_ratio = sum(sign * mean_log(c) for sign, c in cases) - math.log(scale)
    nan = float("nan")
    if min(launches) < MIN_LAUNCHES:
        return Estimate(exp(log_ratio), nan, nan, nan, nan, launches, confidence, log_ratio)
    terms = []
    for _, c in cases:
        logs = [math.log(v) for v in c]
        mean = mean_log(c)
        var = sum((x - mean) ** 2 for x in logs) / (len(logs) - 1)
        terms.append((var / len(logs), len(logs) - 1))
    var = sum(v for v, _ in terms)
    dof = var**2 / sum(v**2 / d for v, d in terms if v > 0) if var else 1.0
    return _t_estimate(log_ratio, var, dof, launches, confidence)


def _t_estimate(log_ratio: float, var: float, dof: float, launches: tuple[int, ...], confidence: float) -> Estimate:
    """The Estimate of a log ratio whose variance is `var`, with Student's t at `dof` degrees of freedom."""
    if var == 0:
        same = exp(log_ratio)
        return Estimate(same, same, same, 0.0 if log_ratio else 1.0, 0.0, launches, confidence, log_ratio, 0.0, dof)
    se = math.sqrt(var)
    half = t_quantile(confidence, dof) * se
    p = t_two_sided_p(log_ratio / se, dof)
    return Estimate(
        exp(log_ratio),
        exp(log_ratio - half),
        exp(log_ratio + half),
        p,
        exp(half) - 1,
        launches,
        confidence,
        log_ratio,
        se,
        dof,
    )


def ratio_of_pairs(numerators: list[float], denominators: list[float], confidence: float = CONFIDENCE) -> Estimate:
    """The ratio of geometric means of two sides launched in pairs (numerators[i] and denominators[i] ran one
    after the other): Student's t on the per-pair log ratios, with n - 1 degrees of freedom. A slow spell of
    the machine that lasts a pair shifts both of its launches and cancels in their ratio, so this interval
    is narrower than ratio_of_cases' whenever the machine drifts; a launch left without its partner (an
    interrupted pair) is not counted."""
    n = min(len(numerators), len(denominators))
    values = list(numerators[:n]) + list(denominators[:n])
    if n < 1 or any(v <= 0 or not math.isfinite(v) for v in values):
        raise ValueError("a ratio of pairs needs positive, finite values and at least one pair")
    ratios = [a / b for a, b in zip(numerators, denominators)]
    logs = [math.log(r) for r in ratios]
    mean = mean_log(ratios)
    nan = float("nan")
    if n < MIN_LAUNCHES:
        return Estimate(exp(mean), nan, nan, nan, nan, (n, n), confidence, mean)
    var = sum((x - mean) ** 2 for x in logs) / (n - 1)
    return _t_estimate(mean, var / n, n - 1, (n, n), confidence)


# ---------------------------------------------------------------- a comparison looked at after every round
@dataclass(frozen=True)
class Looks:
    """The group-sequential design of a sweep that adds launches until its comparisons are resolved
    (`bench sweep --resolution`): the first look after `first` launches a side (the planned ones), one more after
    every added round (a launch a side), and at most `most` launches a side, so `most - first + 1` looks, fixed
    before the first. Look k spends share(k) = 2^k / (2 + 4 + ... + 2^K) of the error rate: a Bonferroni split over
    the looks, valid whatever the looks' dependence and whenever the sweep stops (the chance of a false call at any
    look is at most the sum of the shares, 1), each look twice the one before, so that the last look, where a
    comparison the time allowed for ends, keeps half of it (docs/method.md, "Sequential sweeps")."""

    first: int
    most: int

    def __post_init__(self) -> None:
        if not MIN_LAUNCHES <= self.first <= self.most:
            raise ValueError(f"looks from {self.first} to {self.most} launches a side")

    @property
    def count(self) -> int:
        return self.most - self.first + 1

    def look(self, launches: int) -> int:
        """The look (1 ... count) at which a comparison with `launches` a side stands."""
        return min(max(launches - self.first + 1, 1), self.count)

    def share(self, launches: int) -> float:
        return 2.0 ** self.look(launches) / (2.0 ** (self.count + 1) - 2)


def sequential(est: Estimate, looks: Looks, launches: int) -> Estimate:
    """`est` as its look of `looks` may state it (`launches`: a side, of the sweep that looked): p divided by the
    look's share (a valid p-value over all looks, so Holm's correction over a family still holds), the interval at
    level 1 - share x (1 - confidence), and the equivalence margin at the same share (equivalence_margin)."""
    if not est.replicated:
        return est
    share = looks.share(launches)
    level = 1 - share * (1 - est.confidence)
    if est.se == 0 or not math.isfinite(est.se):
        return dataclasses.replace(est, share=share)
    half = t_quantile(level, est.dof) * est.se
    return dataclasses.replace(
        est,
        low=exp(est.log_ratio - half),
        high=exp(est.log_ratio + half),
        p=min(1.0, est.p / share),
        resolution=exp(half) - 1,
        share=share,
    )


# ---------------------------------------------------------------- a page's comparisons as one family
def equivalence_margin(est: Estimate, alpha: float) -> float:
    """The smallest margin m for which two one-sided tests at level `alpha` conclude that the ratio lies within
    [1 / (1 + m), 1 + m]: exp(|log ratio| + t(1 - alpha) x se) - 1 (the (1 - 2 alpha) interval's farther end).
    NaN for a comparison with a single launch on a side."""
    if not est.replicated:
        return float("nan")
    if est.exact:  # the farther end of the exact (1 - 2 alpha) interval
        first, second = est.samples
        low, high = exact_interval(first, second, 1 - 2 * alpha)
        return exp(max(abs(low), abs(high))) - 1
    if est.se == 0:
        return exp(abs(est.log_ratio)) - 1
    # t's one-sided (1 - a) quantile is its two-sided (1 - 2a) one
    return exp(abs(est.log_ratio) + t_quantile(1 - 2 * alpha * est.share, est.dof) * est.se) - 1


def holm(pvalues: dict[str, float]) -> dict[str, float]:
    """Holm's step-down adjustment of a family of p-values (NaN ones are not members and stay NaN): the k-th
    smallest of m is multiplied by m - k + 1, and each adjusted value is at least the one before it. A comparison
    whose adjusted p is below 1 - CONFIDENCE is significant with the family-wise error rate held at that level
    however many comparisons the family has, and whatever their dependence."""
    members = sorted((p, key) for key, p in pvalues.items() if math.isfinite(p))
    m, out, running = len(members), {key: float("nan") for key in pvalues}, 0.0
    for k, (p, key) in enumerate(members):
        running = max(running, min(1.0, (m - k) * p))
        out[key] = running
    return out


EQUIVALENCE_USEFUL = 0.25  # beyond this margin, "within ±X%" says too little: the page calls it unresolved


@dataclass(frozen=True)
class Judgement:
    """What a page may say of one comparison of a family (Family.judge)."""

    estimate: Estimate
    p_adjusted: float  # Holm's, over the family
    family_size: int
    margin: float  # the equivalence margin (two one-sided tests at 1 - CONFIDENCE), NaN without replication

    @property
    def replicated(self) -> bool:
        return self.estimate.replicated

    @property
    def significant(self) -> bool:
        return self.replicated and self.p_adjusted < 1 - self.estimate.confidence

    @property
    def equivalent(self) -> bool:
        """Not significant, and shown within a margin small enough to act on."""
        return self.replicated and not self.significant and self.margin <= EQUIVALENCE_USEFUL

    def settled(self, resolution: float) -> bool:
        """A difference, or shown within ±resolution: where a sequential sweep stops adding to this comparison."""
        return self.significant or (self.replicated and self.margin <= resolution)


class Family:
    """The comparisons a page (or a sweep, in `bench agreement`) makes, judged together: a difference is called
    significant when Holm's adjusted p is below 1 - CONFIDENCE, so that the chance of calling any true tie a
    difference is at most 5% for the whole page, however many comparisons it makes. Where a difference is not
    significant, the equivalence margin is that of two one-sided tests at 1 - CONFIDENCE: each "within ±X%" is
    its comparison's own 95% statement, like an interval (docs/method.md, "Many comparisons")."""

    def __init__(self, estimates: dict[str, Estimate]):
        self.estimates = dict(estimates)
        # an exact estimate (a fault scenario's few runs) is judged on its own p: its test can reach 5% with 4 runs a
        # side, never after a correction over a page's comparisons, and the page weighs each scenario by itself
        members = {k: e for k, e in self.estimates.items() if not e.exact}
        self.adjusted = holm({k: e.p if e.replicated else float("nan") for k, e in members.items()})
        self.adjusted.update({k: e.p if e.replicated else float("nan") for k, e in self.estimates.items() if e.exact})
        self.size = sum(1 for e in members.values() if e.replicated and math.isfinite(e.p))

    def judge(self, key: str, est: Estimate | None = None) -> Judgement:
        """The judgement of comparison `key` (a member of the family; `est` only where the caller holds it)."""
        est = est if est is not None else self.estimates[key]
        m = max(self.size, 1)
        p = self.adjusted.get(key, float("nan"))
        if est.exact:
            p = est.p
        elif not math.isfinite(p) and est.replicated and math.isfinite(est.p):  # not in the family: as its last
            p = min(1.0, est.p * m)
        return Judgement(est, p, m, equivalence_margin(est, 1 - est.confidence))


# ---------------------------------------------------------------- exact tests of a few runs a side
ALPHA = 1 - CONFIDENCE
# Up to this many splits of the pooled runs into two sides, a permutation test takes every one (C(16, 8) = 12,870:
# 8 runs a side); beyond it, EXACT_DRAWS splits drawn with a fixed seed, so that a page says the same every time.
EXACT_SPLITS = 200_000
EXACT_DRAWS = 20_000


def fisher_exact(a: int, b: int, c: int, d: int) -> float:
    """The two-sided p of Fisher's exact test of the 2x2 table [[a, b], [c, d]] (rows: the two sides; columns: came
    through, did not): the hypergeometric probability, with the table's margins fixed, of every table no more likely
    than the one observed. In whole numbers, so that a table as likely as the observed one is counted as such."""
    if min(a, b, c, d) < 0:
        raise ValueError("a 2x2 table of counts needs counts of 0 or more")
    row, column, n = a + b, a + c, a + b + c + d

    def weight(x: int) -> int:  # the number of ways to draw the table whose top-left count is x
        return math.comb(column, x) * math.comb(n - column, row - x)

    observed = weight(a)
    tables = range(max(0, row + column - n), min(row, column) + 1)
    return sum(w for w in map(weight, tables) if w <= observed) / math.comb(n, row)


def runs_to_decide(alpha: float = ALPHA) -> int:
    """The fewest runs a side at which an exact test (exact_ratio's, fisher_exact) can call a difference at `alpha`
    two-sided: where one side is ahead in every run, p is 2 / C(2n, n) (1/3 at 2 a side, 1/10 at 3, 2/70 at 4)."""
    n = 1
    while 2 / math.comb(2 * n, n) >= alpha:
        n += 1
    return n


def _splits(n1: int, n2: int) -> Any:
    """Every way to take n1 of n1 + n2 pooled values for the first side (a boolean row per split, the observed one,
    the first n1, among them), or, past EXACT_SPLITS, the observed split and EXACT_DRAWS seeded random ones."""
    import numpy as np

    n = n1 + n2
    if math.comb(n, n1) <= EXACT_SPLITS:
        mask = np.zeros((math.comb(n, n1), n), dtype=bool)
        for i, chosen in enumerate(itertools.combinations(range(n), n1)):
            mask[i, list(chosen)] = True
        return mask
    observed = np.arange(n) < n1
    rng = np.random.default_rng(0)
    return np.vstack([observed, rng.permuted(np.tile(observed, (EXACT_DRAWS, 1)), axis=1)])


def _split_statistics(first: list[float] | tuple[float, ...], second: list[float] | tuple[float, ...]) -> Any:
    """For every split (_splits) of the logs of two sides' values: the difference of its two means, and how that
    difference moves when the first side's logs are shifted down by d (it falls by d times the returned slope; the
    observed split's slope is 1). Returns (differences, slopes, the observed difference)."""
    import numpy as np

    n1, n2 = len(first), len(second)
    logs = np.log(np.array([*first, *second], dtype=float))
    mask = _splits(n1, n2)
    total = logs.sum()
    chosen = mask @ logs
    differences = chosen / n1 - (total - chosen) / n2
    taken = mask[:, :n1].sum(axis=1)  # values of the first side in the split's first group
    slopes = taken / n1 - (n1 - taken) / n2
    return differences, slopes, float(logs[:n1].mean() - logs[n1:].mean())


def permutation_p(first: list[float], second: list[float]) -> float:
    """The two-sided p of a permutation test of the difference of the mean logs of two sides' values: the share of
    the splits of the pooled values into two sides of their sizes whose difference is at least as far from 0 as the
    observed one (exact over every split up to EXACT_SPLITS). Where one side is below the other in every run, that
    is 2 / C(n1 + n2, n1)."""
    differences, _, observed = _split_statistics(first, second)
    tolerance = 1e-9 * max(1.0, abs(observed))  # the same split's difference summed in another order
    return float((abs(differences) >= abs(observed) - tolerance).mean())


def exact_interval(
    first: list[float] | tuple[float, ...], second: list[float] | tuple[float, ...], confidence: float = CONFIDENCE
) -> tuple[float, float]:
    """The interval of log(ratio of geometric means) first / second that inverts the permutation test: the shifts d
    of the first side's logs that a one-sided test at (1 - confidence) / 2 does not reject in either direction. A
    split's difference crosses the observed one at one shift (its slope is below the observed split's 1), so the
    ends are order statistics of those crossings. Infinite where the runs are too few for any shift to be rejected
    (fewer than 2 / (1 - confidence) splits: 2 + 2 and 3 + 3 runs at 95%)."""
    import numpy as np

    differences, slopes, observed = _split_statistics(first, second)
    others = slopes < 1 - 1e-12
    crossings = np.sort((observed - differences[others]) / (1 - slopes[others]))
    splits = len(differences)
    tail = (1 - confidence) / 2
    # the fewest crossings m below a shift for its one-sided p, (1 + m) / splits, to exceed the tail
    m = math.floor(tail * splits - 1 + 1e-12) + 1
    if m < 1 or m > len(crossings):
        return -math.inf, math.inf
    return float(crossings[m - 1]), float(crossings[-m])


def exact_ratio(first: list[float], second: list[float], confidence: float = CONFIDENCE) -> Estimate:
    """The ratio of the geometric means of two sides' per-run values (first / second) with the permutation test's p
    (permutation_p) and its exact interval (exact_interval; 0 to infinity where the runs allow none): for a few runs a
    side of a skewed figure (a recovery time), where Student's t with a degree of freedom or two would state an
    interval the data cannot mean. `resolution`: the interval's farther end from the estimate, as a factor minus 1."""
    values = [*first, *second]
    if min(len(first), len(second)) < 1 or any(v <= 0 or not math.isfinite(v) for v in values):
        raise ValueError("an exact ratio needs positive, finite values on both sides")
    log_ratio = mean_log(first) - mean_log(second)
    launches = (len(first), len(second))
    samples = (tuple(first), tuple(second))
    nan = float("nan")
    if min(launches) < MIN_LAUNCHES:
        return Estimate(exp(log_ratio), nan, nan, nan, nan, launches, confidence, log_ratio, samples=samples)
    low, high = exact_interval(first, second, confidence)
    return Estimate(
        exp(log_ratio),
        exp(low) if math.isfinite(low) else 0.0,
        exp(high) if math.isfinite(high) else math.inf,
        permutation_p(first, second),
        exp(max(high - log_ratio, log_ratio - low)) - 1,
        launches,
        confidence,
        log_ratio,
        samples=samples,
    )
