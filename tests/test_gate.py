"""The regression gate's rules, on figures whose truth is known, and its handling of bad files."""

import json
import math

import numpy as np
import pytest

from bench.core.errors import UsageError
from bench.rank.inject import parse_step_delay
from bench.results.baselines import read_runs_file, write_baseline
from bench.results.figures import CaseValues, Figure, figures
from bench.results.gate import RULES, aa_rates, change_interval, change_verdict, compare_figures
from conftest import bench
from factories import comm_record, comm_row, train_record


def values(mean, rel_sd, n=5, seed=0):
    rng = np.random.default_rng(seed)
    return list(mean * (1 + rel_sd * rng.standard_normal(n)))


def fig(kind, cases, scale=1.0, key=None):
    """A figure from per-run values of one case (throughput, busbw) or of a ratio of two cases."""
    signs = [1, -1][: len(cases)]
    return Figure(key or f"{kind} elastic mnist_mlp n=2", kind, [CaseValues(v, "run", []) for v in cases], signs, scale)


def test_a_change_verdict_needs_both_size_and_significance():
    assert change_verdict(-0.20, -0.25, -0.15, 0.10) == "regressed"
    assert change_verdict(-0.20, -0.24, +0.02, 0.10) == "ok"  # big but not significant
    assert change_verdict(-0.05, -0.07, -0.03, 0.10) == "ok"  # significant but small: run-to-run drift
    assert change_verdict(+0.30, +0.20, +0.40, 0.10) == "improved"
    assert change_verdict(0.0, -0.3, +0.3, 0.10, noisy=True) == "unstable"
    assert change_verdict(-0.05, -0.5, +0.9, 0.10) == "unstable"  # an interval that rules nothing out
    assert change_verdict(-0.30, -0.4, -0.2, 0.10, noisy=True) == "regressed"  # noise does not hide a clear loss


@pytest.mark.parametrize("seed", range(5))
def test_interval_is_the_pooled_t_test_on_the_log_scale(seed):
    from scipy.stats import ttest_ind

    base = fig("throughput", [values(100, 0.05, n=5, seed=seed)])
    cur = fig("throughput", [values(94, 0.05, n=3, seed=seed + 10)])
    change, low, high = change_interval(base, cur, confidence=0.95)
    assert change == pytest.approx(cur.value() / base.value() - 1)
    # for one case, the interval excludes 0 exactly when Student's two-sample t-test on the logs rejects
    p = ttest_ind(np.log(cur.cases[0].values), np.log(base.cases[0].values), equal_var=True).pvalue
    assert (high < 0 or low > 0) == (p < 0.05)


@pytest.mark.parametrize("kind", list(RULES))
def test_a_known_slowdown_is_caught_and_no_change_passes(kind):
    rule = RULES[kind]
    slow = 1 / (1 + 3 * rule.min_effect)  # a slowdown three times the gate's minimum effect
    base = fig(kind, [values(100, 0.03, seed=1), values(50, 0.03, seed=2)], scale=2)
    same = fig(kind, [values(100, 0.03, seed=3), values(50, 0.03, seed=4)], scale=2)
    slower = fig(kind, [values(100 * slow, 0.03, seed=5), values(50, 0.03, seed=6)], scale=2)
    rows = compare_figures({base.key: base}, {same.key: same}, {}, same_machine=True)
    assert rows[0]["verdict"] == "ok", rows
    rows = compare_figures({base.key: base}, {slower.key: slower}, {}, same_machine=True)
    assert rows[0]["verdict"] == "regressed", rows
    assert rows[0]["change"] == pytest.approx(slow - 1, abs=0.04)
    assert rows[0]["ci_low"] < rows[0]["change"] < rows[0]["ci_high"] < 0


def test_noisy_runs_are_unstable_not_regressed():
    base = fig("vs_plain", [values(100, 0.02, seed=1), values(100, 0.02, seed=2)])
    noisy = fig("vs_plain", [values(85, 0.40, n=3, seed=3), values(100, 0.40, n=3, seed=4)])
    rows = compare_figures({base.key: base}, {noisy.key: noisy}, {}, same_machine=True)
    assert rows[0]["verdict"] == "unstable" and "spread" in rows[0]["why"]


def test_failed_missing_new_and_other_machine():
    key = "throughput elastic mnist_mlp n=2"
    base = {key: fig("throughput", [values(100, 0.01)], key=key)}
    rows = compare_figures(base, {}, {key: {"status": "crashed", "run_id": "r1"}}, same_machine=True)
    assert rows[0]["verdict"] == "failed" and "crashed" in rows[0]["why"] and rows[0]["run_ids"] == ["r1"]
    rows = compare_figures(base, {}, {}, same_machine=True)
    assert rows[0]["verdict"] == "failed" and "missing" in rows[0]["why"]
    rows = compare_figures({}, base, {}, same_machine=True)
    assert rows[0]["verdict"] == "new"
    slower = {key: fig("throughput", [values(50, 0.01)], key=key)}
    rows = compare_figures(base, slower, {}, same_machine=False)
    assert rows[0]["verdict"] == "skipped"  # absolute figures do not travel between machines
    # a backend that cannot run here (Ray not installed): its baseline figures are skipped, saying why; another
    # backend's missing figures still fail
    ray = "vs_plain ray mnist_mlp n=2"
    base[ray] = fig("vs_plain", [values(0.9, 0.01), values(1.0, 0.01)], key=ray)
    rows = {
        r["metric"]: r
        for r in compare_figures(base, {}, {}, same_machine=True, cannot_run={"ray": "Ray is not installed"})
    }
    assert rows[ray]["verdict"] == "skipped" and rows[ray]["why"] == "ray cannot run here: Ray is not installed"
    assert rows[key]["verdict"] == "failed"


def test_a_ratio_is_judged_only_beyond_what_the_speed_of_what_it_divides_by_explains():
    key = "efficiency elastic resnet18 n=2"
    base = {key: fig("efficiency", [values(240, 0.02, seed=1), values(180, 0.02, seed=2)], scale=2, key=key)}
    # runs 30% faster on one worker and the same at two: the efficiency falls by a fifth though no code changed, less
    # than the 31% the faster divisor explains
    faster = {key: fig("efficiency", [values(240, 0.02, seed=3), values(234, 0.02, seed=4)], scale=2, key=key)}
    row = compare_figures(base, faster, {}, same_machine=False, host_differs="cpu_flags differ")[0]
    assert row["verdict"] == "ok" and row["change"] < -0.15, row
    assert row["explained"] == pytest.approx(1.31, abs=0.02)
    assert "cpu_flags differ" in row["why"] and "131% of the baseline's speed" in row["why"], row
    assert "up to a factor 1.31 either way" in row["why"], row
    row = compare_figures(base, faster, {}, same_machine=True)[0]  # the same host, busier or quieter than then
    assert row["verdict"] == "ok" and "131% of the baseline's speed" in row["why"], row
    assert "host" not in row["why"]
    # at that speed, a loss past the band is still a loss: the two-worker runs fell to 150 (-52%, -37% beyond it)
    lost = {key: fig("efficiency", [values(150, 0.02, seed=9), values(234, 0.02, seed=4)], scale=2, key=key)}
    row = compare_figures(base, lost, {}, same_machine=False)[0]
    assert row["verdict"] == "regressed" and row["change"] == pytest.approx(-0.52, abs=0.02), row
    # where what it divides by runs near the baseline's speed, a loss is a loss, on any host
    slower = {key: fig("efficiency", [values(170, 0.02, seed=5), values(190, 0.02, seed=6)], scale=2, key=key)}
    for same in (True, False):
        row = compare_figures(base, slower, {}, same_machine=same)[0]
        assert row["verdict"] == "regressed", row
    # a figure with no case it divides by (busbw over a limit measured in the same run) is gated on any host
    bw = "busbw_fraction elastic n=2"
    rows = compare_figures(
        {bw: fig("busbw_fraction", [values(0.5, 0.02, seed=7)], key=bw)},
        {bw: fig("busbw_fraction", [values(0.3, 0.02, seed=8)], key=bw)},
        {},
        same_machine=False,
    )
    assert rows[0]["verdict"] == "regressed"


def test_absolute_throughput_is_judged_beyond_what_the_hosts_calibration_speed_explains():
    """A host that matches (its calibration within CALIBRATION_TOLERANCE) may still run at 87% of the baseline host's
    speed: every absolute figure moves with it. A case 26% slower there is judged beyond that band (about -15%):
    no regression at the 25% the gate asks; on a host that ran the calibration at the baseline's speed it is one."""
    from bench.results.baselines import host_speed

    key = "throughput elastic resnet18 n=1"
    base = {key: fig("throughput", [values(179, 0.02, seed=1)], key=key)}
    slower = {key: fig("throughput", [values(132, 0.02, seed=2)], key=key)}
    calibration = {"gemm_gflops": 100.0, "conv_step_ms": 13.4}
    here = {"gemm_gflops": 97.0, "conv_step_ms": 15.4}  # the convolution step at 87%, the figure furthest off
    speed = host_speed({"calibration": calibration}, {"calibration": here})
    assert speed == pytest.approx(13.4 / 15.4) and host_speed({}, {"calibration": here}) is None
    row = compare_figures(base, slower, {}, same_machine=True, host_speed=speed)[0]
    assert row["verdict"] != "regressed" and row["change"] == pytest.approx(-0.26, abs=0.02), row
    assert row["explained"] == pytest.approx(1 / speed)
    assert "this host ran the calibration work at 87% of the baseline's speed" in row["why"], row
    assert "move the figure up to a factor 1.15 either way" in row["why"], row
    for at_its_speed in (1.0, None):
        row = compare_figures(base, slower, {}, same_machine=True, host_speed=at_its_speed)[0]
        assert row["verdict"] == "regressed", row
    # a loss past the band is still a loss: 40% slower is -31% beyond it
    lost = {key: fig("throughput", [values(107, 0.02, seed=3)], key=key)}
    assert compare_figures(base, lost, {}, same_machine=True, host_speed=speed)[0]["verdict"] == "regressed"


def record(run_id, backend, world, per_window, created, status="ok", sweep="s1"):
    """A training run of mnist_mlp whose windows had these throughputs."""
    return train_record(run_id, backend, world, per_window, created, status, sweep)


def test_figures_are_ratios_of_case_means_within_one_sweep():
    recs = [
        record("p", "single", 1, [100.0, 100.0], 1),
        record("e1", "elastic", 1, [90.0, 90.0], 2),
        record("e2", "elastic", 2, [150.0, 150.0], 3),
    ]
    figs, not_ok = figures(recs)
    assert not_ok == {}
    assert figs["vs_plain elastic mnist_mlp n=2"].value() == pytest.approx(150 / (2 * 100))
    assert figs["vs_plain elastic mnist_mlp n=1"].value() == pytest.approx(0.9)
    assert figs["efficiency elastic mnist_mlp n=2"].value() == pytest.approx(150 / (2 * 90))
    assert figs["throughput single mnist_mlp n=1"].value() == pytest.approx(100)
    assert "vs_plain single mnist_mlp n=1" not in figs
    # a lone run stands in with its windows; repeats give one value per run (the mean of its windows)
    assert figs["throughput single mnist_mlp n=1"].cases[0].per == "window"
    recs.append(record("e2b", "elastic", 2, [120.0, 180.0], 4))
    figs, _ = figures(recs)
    case = figs["throughput elastic mnist_mlp n=2"].cases[0]
    assert case.per == "run" and case.values == [150.0, 150.0] and case.run_ids == ["e2", "e2b"]
    # a failed repeat is left out; a case with no ok run at all is reported as such
    recs.append(record("e2c", "elastic", 2, None, 5, status="crashed"))
    assert figures(recs)[0]["throughput elastic mnist_mlp n=2"].cases[0].run_ids == ["e2", "e2b"]
    recs = [r for r in recs if r.run_id not in ("e2", "e2b")]
    figs, not_ok = figures(recs)
    assert not_ok["vs_plain elastic mnist_mlp n=2"] == {"status": "crashed", "run_id": "e2c"}
    assert "efficiency elastic mnist_mlp n=2" not in figs


def test_busbw_figure_uses_the_largest_allreduce_and_the_runs_own_limit():
    rows = [comm_row("allreduce", s, 100.0, window_time_us=[100.0, 200.0]) for s in (1024, 2**20)]
    comm = comm_record("c", "elastic", 2, rows=rows, limit_gbps=4.0)
    largest = rows[1].busbw_gbps
    figs, not_ok = figures([comm])
    f = figs["busbw_fraction elastic n=2"]
    assert f.cases[0].values == pytest.approx([largest / 4.0, largest / 8.0])  # per chunk, over the run's own limit
    assert f.value() == pytest.approx(math.sqrt(largest / 4.0 * largest / 8.0))  # a geometric mean
    assert not_ok == {}
    # a sweep that timed no chunks, or measured no limit, cannot be gated
    unmeasured = comm_record("u", "horovod", 2, rows=[comm_row(size=2**20)], limit_gbps=None)
    figs, not_ok = figures([unmeasured])
    assert figs == {} and not_ok["busbw_fraction horovod n=2"]["run_id"] == "u"


def test_aa_rates_count_every_ordered_pair():
    sweeps = {
        f"s{i}": [
            record(f"p{i}{k}", "single", 1, values(100, 0.02, n=4, seed=10 * i + k), i, sweep=f"s{i}") for k in range(3)
        ]
        + [
            record(f"e{i}{k}", "elastic", 2, values(150, 0.02, n=4, seed=100 + 10 * i + k), i, sweep=f"s{i}")
            for k in range(3)
        ]
        for i in range(3)
    }
    rows, pairs = aa_rates(sweeps)
    assert pairs == 6
    by_kind = {r["kind"]: r for r in rows}
    assert by_kind["vs_plain"]["compared"] == 6 and by_kind["throughput"]["compared"] == 12
    assert all(r["false_alarm_rate"] == 0 for r in rows)


def test_parse_step_delay():
    assert parse_step_delay("20%") == {"fraction": pytest.approx(0.2)}
    assert parse_step_delay("5ms") == {"seconds": pytest.approx(0.005)}
    assert parse_step_delay("0.5s") == {"seconds": pytest.approx(0.5)}
    assert parse_step_delay(None) is None
    for bad in ("20", "x%", "-5ms", "fast", "100s"):
        with pytest.raises(UsageError, match="--inject-delay"):
            parse_step_delay(bad)


def test_baseline_file_round_trip_and_bad_files(tmp_path):
    recs = [record("p", "single", 1, [100.0, 100.0], 1)]
    path = write_baseline(tmp_path / "b.json", recs, "s1", ["bench", "sweep"])
    data = read_runs_file(path, "baseline")
    assert data["records"] == recs and data["machine"]["cpu_count"] == 2 and data["matrix"] == ["bench", "sweep"]
    raw = json.loads(path.read_text())
    assert raw["records"] == [r.to_dict() for r in recs]  # plain JSON records, as the store keeps them
    bad = {
        "missing.json": (None, "does not exist"),
        "corrupt.json": ("{not json", "not readable JSON"),
        "other.json": (json.dumps({"runs": []}), "not a bench baseline file"),
        "empty.json": (json.dumps({**raw, "records": []}), "holds no runs"),
        "old.json": (json.dumps({**raw, "version": 0}), "has version 0"),
        "malformed.json": (json.dumps({**raw, "records": [{"run_id": "x"}]}), "run record 0 is malformed"),
        "not-a-dict.json": (json.dumps({**raw, "records": [raw["records"][0], 7]}), "run record 1 is malformed"),
        "bad-type.json": (
            json.dumps({**raw, "records": [{**raw["records"][0], "created_at": "today"}]}),
            "created_at: expected float, found str",
        ),
        "bad-spec.json": (
            json.dumps({**raw, "records": [{**raw["records"][0], "spec": []}]}),
            "spec: expected an object, found list",
        ),
        "no-machine.json": (
            json.dumps({k: v for k, v in raw.items() if k != "machine"}),
            "'machine' must be an object",
        ),
        "machine-text.json": (json.dumps({**raw, "machine": "vm"}), "'machine' must be an object"),
        "bad-calibration.json": (
            json.dumps({**raw, "machine": {**raw["machine"], "calibration": {"gemm_gflops": -1}}}),
            "'machine.calibration' must be null or hold positive numbers",
        ),
    }
    (tmp_path / "folder.json").mkdir()  # a directory, named like a file
    for name, (text, says) in bad.items():
        if text is not None:
            (tmp_path / name).write_text(text)
        with pytest.raises(UsageError) as err:
            read_runs_file(tmp_path / name, "baseline")
        assert says in str(err.value) and "bench baseline" in str(err.value)
    with pytest.raises(UsageError, match="folder.json is a directory; give a file, such as .*cpu-gloo.json"):
        read_runs_file(tmp_path / "folder.json", "baseline")


@pytest.mark.slow  # a process per case; read_runs_file and parse_step_delay are checked in-process above
@pytest.mark.parametrize(
    "argv, says",
    [
        (["compare", "--baseline", "{tmp}/nope.json"], "does not exist"),
        (["compare", "--baseline", "{tmp}/corrupt.json"], "not readable JSON"),
        (["compare"], "give --baseline"),
        (["compare", "--aa", "--store", "{tmp}/empty.sqlite"], "no results store"),
        (["regress", "--dir", "{tmp}"], "does not exist"),
        (["run", "--inject-delay", "fast"], "--inject-delay"),
    ],
)
def test_gate_cli_errors_are_one_line(tmp_path, argv, says):
    (tmp_path / "corrupt.json").write_text("\x00\x01 not json")
    proc = bench(*[a.format(tmp=tmp_path) for a in argv])
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], proc.stderr


MACHINE = {
    "cpu_model": "AMD EPYC",
    "cpu_count": 2,
    "cuda_devices": [],
    "cpu_flags": ["avx", "avx2", "fma"],
    "cpu_capability": "AVX2",
    "calibration": {"gemm_gflops": 80.0, "conv_step_ms": 20.0},
}


@pytest.mark.parametrize(
    "change, same, says",
    [
        ({}, True, ""),
        ({"calibration": {"gemm_gflops": 84.0, "conv_step_ms": 21.0}}, True, ""),  # within the tolerance
        ({"calibration": {"gemm_gflops": 40.0, "conv_step_ms": 21.0}}, False, "50% (gemm_gflops)"),
        ({"calibration": {"gemm_gflops": 80.0, "conv_step_ms": 40.0}}, False, "50% (conv_step_ms)"),
        ({"calibration": None}, False, "no calibration recorded with the current runs"),
        ({"cpu_flags": ["avx", "avx2", "fma", "avx512f"]}, False, "cpu_flags"),
        ({"cpu_capability": "AVX512"}, False, "cpu_capability"),
        ({"cpu_count": 4}, False, "cpu_count"),
        # a CPU quota where the baseline's host had none (recorded: None), or another one
        ({"cpu_quota": 1.0}, False, "CPU quota no limit on the baseline's host, 1 CPU's time here"),
        ({"cpu_quota": None}, True, ""),
    ],
)
def test_hosts_are_matched_by_what_decides_speed_not_by_label(change, same, says):
    from bench.results.baselines import host_match

    ok, why = host_match({**MACHINE, "cpu_quota": None}, {**MACHINE, **change})
    assert ok == same and says in why, why
    if "cpu_quota" in change:  # a baseline written before quotas were recorded: not compared on them
        assert host_match(MACHINE, {**MACHINE, **change}) == (True, "")
    # a baseline written before calibrations were recorded cannot vouch for its host
    ok, why = host_match({k: v for k, v in MACHINE.items() if k != "calibration"}, MACHINE)
    assert not ok and "no calibration recorded with the baseline" in why


def test_another_host_gates_no_absolute_figure_and_a_ratio_only_where_what_it_divides_by_keeps_its_speed(capsys):
    """The same code on another kind of host: absolute throughput is skipped, naming the host difference; a ratio
    whose divisor (the plain loop) runs at the baseline's speed still gates, and a real slowdown of it fails;
    on a host half as fast, a ratio is judged beyond the factor 2 that speed explains, saying at what speed the
    divisor ran."""
    from bench.workflows.regress import compare_and_print

    def sweep(scale, elastic_scale=1.0):
        recs = []
        for i in range(3):
            recs += [
                record(f"p{scale}{i}", "single", 1, [100.0 * scale * (1 + 0.01 * i)] * 3, 10 * i + 1),
                record(f"e{scale}{i}", "elastic", 1, [90.0 * scale * elastic_scale * (1 + 0.01 * i)] * 3, 10 * i + 2),
            ]
        return recs

    baseline = {"machine": MACHINE, "records": sweep(1.0)}
    other_host = {**MACHINE, "cpu_flags": [*MACHINE["cpu_flags"], "avx_vnni"]}
    code, rows = compare_and_print(baseline, sweep(1.0), as_json=False, machine=other_host)
    verdicts = {r["metric"]: r["verdict"] for r in rows}
    assert code == 0, verdicts
    assert verdicts["throughput elastic mnist_mlp n=1"] == "skipped"
    assert verdicts["vs_plain elastic mnist_mlp n=1"] == "ok"
    assert "host differs" in capsys.readouterr().err
    code, rows = compare_and_print(baseline, sweep(1.0, elastic_scale=0.7), as_json=False, machine=other_host)
    assert code == 1 and {r["metric"]: r["verdict"] for r in rows}["vs_plain elastic mnist_mlp n=1"] == "regressed"
    slow_host = {**MACHINE, "calibration": {"gemm_gflops": 40.0, "conv_step_ms": 40.0}}
    code, rows = compare_and_print(baseline, sweep(0.5, elastic_scale=0.7), as_json=False, machine=slow_host)
    row = {r["metric"]: r for r in rows}["vs_plain elastic mnist_mlp n=1"]
    assert code == 0 and row["verdict"] == "ok" and "at 50% of the baseline's speed" in row["why"], row
    code, rows = compare_and_print(baseline, sweep(0.5, elastic_scale=0.3), as_json=False, machine=slow_host)
    row = {r["metric"]: r for r in rows}["vs_plain elastic mnist_mlp n=1"]
    assert code == 1 and row["verdict"] == "regressed" and "up to a factor 2.00 either way" in row["why"], row


def test_hot_paths_are_compared_only_on_a_host_that_runs_the_yardstick_at_its_saved_speed():
    from bench.results.hot_paths import HOT_PATH_LIMIT, YARDSTICK_BENCHMARK, compare_hot_paths

    def bench_file(**mins):
        return {"benchmarks": [{"name": name, "stats": {"min": value}} for name, value in mins.items()]}

    saved = bench_file(**{YARDSTICK_BENCHMARK: 1.0, "test_record_write": 2.0, "test_step": 3.0})
    code, lines = compare_hot_paths(
        saved, bench_file(**{YARDSTICK_BENCHMARK: 1.1, "test_record_write": 2.2, "test_step": 3.0})
    )
    assert code == 0 and lines[-1].startswith("hot paths: 0 over")
    slower = 2.0 * HOT_PATH_LIMIT * 1.2
    code, lines = compare_hot_paths(
        saved, bench_file(**{YARDSTICK_BENCHMARK: 1.0, "test_record_write": slower, "test_step": 3.0})
    )
    assert code == 1 and "test_record_write" in lines[-1] and "SLOWER" in "\n".join(lines)
    # everything twice as slow, the yardstick too: another host, nothing compared, and it says so
    code, lines = compare_hot_paths(
        saved, bench_file(**{YARDSTICK_BENCHMARK: 2.0, "test_record_write": 9.0, "test_step": 6.0})
    )
    assert code == 0 and "host differs" in lines[0]
    code, lines = compare_hot_paths(bench_file(test_step=3.0), bench_file(test_step=30.0))
    assert code == 0 and "no test_yardstick_work timing" in lines[0]
    # figures saved while the yardstick was test_reference_work still match the host and are compared
    former = bench_file(**{"test_reference_work": 1.0, "test_record_write": 2.0, "test_step": 3.0})
    code, lines = compare_hot_paths(
        former, bench_file(**{YARDSTICK_BENCHMARK: 1.0, "test_record_write": slower, "test_step": 3.0})
    )
    assert code == 1 and "test_record_write" in lines[-1]


def test_the_hot_path_benchmarks_are_where_the_gate_runs_them():
    from bench.results.hot_paths import HOT_PATH_TESTS

    assert HOT_PATH_TESTS.is_dir() and (HOT_PATH_TESTS / "test_hot_paths.py").is_file(), HOT_PATH_TESTS


def test_the_band_a_divisors_speed_explains_is_its_factor_either_way():
    from bench.results.gate import beyond_band, explained_band

    assert explained_band(None) == 1.0
    assert explained_band(1.25) == pytest.approx(1.25) and explained_band(0.8) == pytest.approx(1.25)
    assert beyond_band(0.1, 1.25) == 0.0 and beyond_band(-0.19, 1.25) == 0.0
    assert beyond_band(-0.5, 1.25) == pytest.approx(-0.375)  # 0.5 x 1.25 - 1
    assert beyond_band(0.5, 1.25) == pytest.approx(0.2)  # 1.5 / 1.25 - 1
    assert beyond_band(-1.0, 2.0) == -1.0 and beyond_band(math.inf, 2.0) == math.inf  # an interval's open ends


def test_a_host_vouches_for_its_absolute_figures_only_at_its_slower_calibration():
    """bench regress times the calibration before its runs and after them and hands the gate the slower of each
    figure: a shared host at its baseline's speed at one moment but not at the other cannot vouch for its absolute
    throughput (the figures are from one such host: its convolution step at 68% to 88% of the baseline's)."""
    from bench.results.baselines import host_match, slower_calibration

    base = {"calibration": {"gemm_gflops": 100.0, "conv_step_ms": 13.4}}
    quick = {"gemm_gflops": 95.0, "conv_step_ms": 15.2}
    slow = {"gemm_gflops": 92.0, "conv_step_ms": 19.7}
    both = slower_calibration(quick, slow)
    assert both == {"gemm_gflops": 92.0, "conv_step_ms": 19.7} == slower_calibration(slow, quick)
    assert host_match(base, {"calibration": quick}) == (True, "")
    same, why = host_match(base, {"calibration": both})
    assert not same and why == "this host runs the calibration work at 68% (conv_step_ms) of the baseline host's speed"


def test_a_fresh_baseline_records_its_hosts_slower_calibration_as_the_gate_reads_its_own(tmp_path, monkeypatch):
    """bench baseline times the calibration once the matrix is checked, before its first launch, and again after its
    last, and records the slower of each figure: the two sides of the gate's host check are timed alike."""
    import bench.workflows.regress as workflow

    timings = iter([{"gemm_gflops": 95.0, "conv_step_ms": 15.2}, {"gemm_gflops": 97.0, "conv_step_ms": 19.7}])
    order = []

    def timed():
        order.append("calibration")
        return next(timings)

    def run_matrix(store, verb, repeats, *, timeout=None, before_launches=None, **_):
        assert verb == "bench baseline" and before_launches is not None
        before_launches()
        order.append("launches")
        return "s1", [record(f"r{i}", "single", 1, [100.0, 100.0], 1) for i in range(2)]

    monkeypatch.setattr(workflow, "timed_calibration", timed)
    monkeypatch.setattr(workflow, "run_matrix", run_matrix)
    assert workflow.baseline(None, str(tmp_path), hot_paths=False) == 0
    assert order == ["calibration", "launches", "calibration"]
    machine = read_runs_file(tmp_path / "cpu-gloo.json", "baseline")["machine"]
    assert machine["calibration"] == {"gemm_gflops": 95.0, "conv_step_ms": 19.7}
