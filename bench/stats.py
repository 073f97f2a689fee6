"""Statistics used everywhere a figure is reported.

Confidence intervals are for the mean over windows, from Student's t distribution (windows are few).
A result is unstable, by pyperf's rules, when its standard deviation exceeds 10% of its mean or it
has fewer than MIN_STABLE_WINDOWS windows.
"""

from __future__ import annotations

import math

CONFIDENCE = 0.95
UNSTABLE_REL_STDEV = 0.10
MIN_STABLE_WINDOWS = 3


def t_quantile(confidence: float, dof: int) -> float:
    from scipy.stats import t

    return float(t.ppf(0.5 + confidence / 2.0, dof))


def summarize(values: list[float], confidence: float = CONFIDENCE) -> dict:
    """mean, sample standard deviation, and the t confidence interval of the mean."""
    n = len(values)
    if n == 0:
        raise ValueError("no values to summarise")
    mean = sum(values) / n
    stdev = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else float("nan")
    half = t_quantile(confidence, n - 1) * stdev / math.sqrt(n) if n > 1 else float("nan")
    rel = stdev / mean if mean else float("nan")
    return {
        "mean": mean, "stdev": stdev, "n": n, "confidence": confidence,
        "ci_low": mean - half, "ci_high": mean + half, "ci_half_width": half,
        "rel_stdev": rel,
        "unstable": bool(n < MIN_STABLE_WINDOWS or not rel <= UNSTABLE_REL_STDEV),
    }
