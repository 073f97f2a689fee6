import math

import pytest

from bench.stats import summarize


def test_confidence_interval_uses_student_t():
    s = summarize([10.0, 12.0, 11.0, 13.0, 9.0])
    assert s["mean"] == 11.0
    assert s["stdev"] == pytest.approx(math.sqrt(2.5))
    # t(0.975, 4) = 2.7764
    assert s["ci_half_width"] == pytest.approx(2.7764 * math.sqrt(2.5) / math.sqrt(5), rel=1e-4)
    assert s["ci_low"] < 11.0 < s["ci_high"]


def test_unstable_by_pyperf_rules():
    assert not summarize([100.0, 101.0, 99.0, 100.5])["unstable"]
    assert summarize([100.0, 130.0, 80.0, 100.0])["unstable"]  # sd above 10% of the mean
    assert summarize([100.0, 100.1])["unstable"]  # too few windows


def test_single_value_has_no_interval():
    s = summarize([5.0])
    assert math.isnan(s["ci_half_width"]) and s["unstable"]


def test_a_summary_is_the_records_summary():
    from bench.records import Summary

    s = Summary(**summarize([10.0, 12.0, 11.0]), unit="samples/s")
    assert (s.mean, s.n, s.unit, s.per_window) == (11.0, 3, "samples/s", None)
    assert Summary.from_dict(s.to_dict()) == s
