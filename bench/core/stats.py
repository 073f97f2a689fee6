"""Statistics used everywhere a figure is reported.

Confidence intervals are for the mean over windows, from Student's t distribution (windows are few).
A result is unstable, by pyperf's rules, when its standard deviation exceeds UNSTABLE_REL_STDEV of its mean
or it has fewer than MIN_STABLE_WINDOWS windows.

Across launches, a ratio of case means is computed in one place, ratio_of_cases: the page's comparisons and
the regression gate's figures (bench.results.figures) both take their values from it.
"""

from __future__ import annotations

import dataclasses
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
        self.adjusted = holm({k: e.p if e.replicated else float("nan") for k, e in self.estimates.items()})
        self.size = sum(1 for e in self.estimates.values() if e.replicated and math.isfinite(e.p))

    def judge(self, key: str, est: Estimate | None = None) -> Judgement:
        """The judgement of comparison `key` (a member of the family; `est` only where the caller holds it)."""
        est = est if est is not None else self.estimates[key]
        m = max(self.size, 1)
        p = self.adjusted.get(key, float("nan"))
        if not math.isfinite(p) and est.replicated and math.isfinite(est.p):  # not in the family: as its last
            p = min(1.0, est.p * m)
        return Judgement(est, p, m, equivalence_margin(est, 1 - est.confidence))
