"""`bench selfcheck`: bad input (one line, exit 2), the pass rule and the adaptive loop on given numbers, the
alternating order, the suite's specs and the bare loops' arguments; one real check of elastic against its bare
loop (slow)."""

import json
import math
import sys

import pytest

import bench.workflows.selfcheck as sc
from bench.core.stats import ratio_of_cases, ratio_of_pairs
from conftest import FAST, assert_one_line_error, bench, bench_in_process


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "args, fragments",
    [
        (["--backend", "ps"], ["backend ps has no bare loop", "elastic, horovod"]),
        (["--backend", "single"], ["backend single has no bare loop", "elastic, horovod"]),
        (["--backend", "elastic,tensorflow"], ["unknown backend 'tensorflow'", "elastic, horovod"]),
        (["--backend", ","], ["names no backend", "elastic, horovod"]),
        (["--pairs", "1"], ["--pairs 1", "at least 2"]),
        (["--pairs", "0"], ["--pairs", "at least 1"]),
        (["--pairs-timeout", "-1"], ["--pairs-timeout", "0 or more"]),
        (["--pairs-timeout", "inf"], ["--pairs-timeout", "finite"]),
        (["--max-minutes", "-1"], ["--max-minutes", "0 or more"]),  # the old spelling refuses what it refused
        (["--max-minutes", "inf"], ["--max-minutes", "finite"]),
        (["--workload", "mnist_mlp,resnet18"], ["checks one workload at a time"]),
        (["--workload", "gpt5"], ["unknown workload 'gpt5'"]),
        (["--nproc", "1"], ["allreduce needs 2 processes", "--no-comm"]),
        (["--nproc", "64"], ["needs 64 cores"]),
        (["--windows", "1"], ["at least 2"]),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, fragments, store):
    proc = bench_in_process("selfcheck", "--backend", "elastic", *args, "--store", store)
    assert_one_line_error(proc, *fragments)
    assert not store.exists(), "bad input must not create a store"


def test_a_backend_that_cannot_run_here_is_one_line(monkeypatch, store):
    from bench.core.registry import get_backend

    monkeypatch.setattr(
        type(get_backend("horovod")),
        "unavailable_reason",
        lambda self, device: "Horovod is not installed; run `python -m bench.tools.horovod_build`",
    )
    proc = bench_in_process("selfcheck", "--backend", "horovod", "--store", store)
    assert_one_line_error(proc, "backend horovod cannot run here", "not installed")
    assert not store.exists()


def test_help_says_which_backends_and_why(capsys):
    from bench.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["selfcheck", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "has a bare loop (elastic, horovod" in text and "ps and single have no external bare loop" in text
    assert f"default {sc.DEFAULT_PAIRS}" in text
    assert f"default {sc.DEFAULT_MAX_MINUTES * 60:g}, {sc.DEFAULT_MAX_MINUTES:g} minutes" in text  # in seconds


# ---------------------------------------------------------------- the rule, on given numbers
def estimate(suite, bare):
    return ratio_of_pairs(suite, bare)


def test_pass_needs_1_inside_the_interval_and_a_high_enough_low_end():
    thr, busbw = sc.GOALS["throughput"], sc.GOALS["busbw"]
    same = estimate([100.0, 101.0, 99.5, 100.4], [100.2, 100.8, 99.7, 100.1])
    assert sc.meets_goal(same, thr) == (True, "")
    assert sc.resolved(same, thr)

    slower = estimate([95.0, 95.5, 94.8, 95.2], [100.0, 100.4, 99.8, 100.1])  # the suite 5% low, tightly
    passed, why = sc.meets_goal(slower, thr)
    assert not passed and "below 1.0" in why
    faster = estimate([105.0, 105.5, 104.8], [100.0, 100.4, 99.8])
    passed, why = sc.meets_goal(faster, thr)
    assert not passed and "above 1.0" in why

    wide = estimate([90.0, 110.0, 96.0], [100.0, 101.0, 99.0])  # includes 1, but reaches far below
    assert wide.low < 1 < wide.high and wide.low < 0.95
    passed, why = sc.meets_goal(wide, thr)
    assert not passed and "low end" in why and "0.98" in why
    assert not sc.resolved(wide, thr)

    # the same numbers against the busbw goal: its floor is lower
    mid = estimate([97.0, 100.0, 102.5, 99.0], [100.0, 99.5, 100.5, 100.0])
    assert 0.95 <= mid.low < 0.98 < 1 < mid.high
    assert not sc.meets_goal(mid, thr)[0] and sc.meets_goal(mid, busbw)[0]

    one_side = estimate([100.0], [100.0, 101.0])
    assert sc.meets_goal(one_side, thr) == (False, "fewer than 2 pairs of launches: no interval")
    assert not sc.resolved(one_side, thr)
    assert sc.meets_goal(None, thr)[0] is False


def test_a_drift_that_spans_a_pair_cancels_in_its_ratio():
    # the machine's speed wanders from pair to pair; within a pair the suite is 1% below its bare loop
    speed = [100.0, 82.0, 118.0, 91.0, 108.0]
    suite, bare = [0.99 * v for v in speed], speed
    paired = estimate(suite, bare)
    assert math.isclose(paired.ratio, 0.99) and paired.resolution < 1e-9
    assert ratio_of_cases([suite], [bare]).resolution > 0.15  # across launches the drift looks like noise
    # an interrupted pair (a suite launch without its bare partner) is not counted
    assert estimate(suite + [50.0], bare).launches == (5, 5)


def ratios_with_spread(m: int, sd: float) -> list[float]:
    """m pair ratios whose logs have mean 0 and sample standard deviation exactly sd."""
    if m % 2 == 0:
        c = sd * math.sqrt((m - 1) / m)
        return [math.exp(c if i % 2 else -c) for i in range(m)]
    return [1.0] + [math.exp(sd if i % 2 else -sd) for i in range(m - 1)]


def test_the_pairs_a_goal_needs_at_the_spread_seen_so_far():
    from bench.core.stats import t_quantile

    thr = sc.GOALS["throughput"]
    est = estimate([100.0, 108.0, 93.0, 104.0, 97.0], [100.0] * 5)
    logs = [math.log(v / 100.0) for v in (100.0, 108.0, 93.0, 104.0, 97.0)]
    mean = sum(logs) / 5
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 4)
    assert math.isclose(math.log1p(est.resolution), t_quantile(0.95, 4) * sd / math.sqrt(5))
    needed = sc.pairs_for_goal(est, thr)
    assert needed > 5
    # the same spread over that many pairs reaches the goal, over one pair fewer it does not
    assert sc.resolved(estimate(ratios_with_spread(needed, sd), [1.0] * needed), thr)
    assert not sc.resolved(estimate(ratios_with_spread(needed - 1, sd), [1.0] * (needed - 1)), thr)
    assert sc.pairs_for_goal(estimate([100.0], [100.0]), thr) is None
    assert sc.pairs_for_goal(estimate([100.0, 110.0], [100.0, 100.0]), thr, limit=10) is None


def test_pairs_alternate_which_side_goes_first():
    assert [sc.pair_order(i) for i in range(4)] == [("suite", "bare"), ("bare", "suite")] * 2


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def fake_check(figure, suite_values, bare_values, clock, seconds_per_launch=10.0, log=None):
    """A check whose launches return the given values in turn, each taking seconds_per_launch on `clock`."""
    values = {"suite": iter(suite_values), "bare": iter(bare_values)}

    def side(name):
        def launch():
            clock.now += seconds_per_launch
            if log is not None:
                log.append((figure, name))
            value = next(values[name])
            if isinstance(value, Exception):
                raise value
            return value

        return launch

    return sc.Check("elastic", sc.GOALS[figure], {"suite": side("suite"), "bare": side("bare")})


def test_minimum_pairs_then_more_until_the_goal_resolution():
    clock, said, order = FakeClock(), [], []
    # throughput: noisy at first, then steady, so the interval narrows below 2% after a few more pairs
    thr = fake_check("throughput", [100, 108, 93] + [100.0] * 40, [100, 92, 106] + [100.0] * 40, clock, log=order)
    busbw = fake_check("busbw", [1.0, 1.005, 0.995], [1.0, 0.995, 1.005], clock, log=order)  # resolved at the minimum
    sc.run_checks([thr, busbw], pairs=3, budget_s=10_000, say=said.append, clock=clock)

    assert busbw.pairs == 3 and busbw.resolved
    assert thr.pairs > 3 and thr.resolved
    assert not sc.resolved(ratio_of_pairs(thr.suite[:-1], thr.bare[:-1]), thr.goal), "stopped late"
    # every pair alternates, starting with the suite
    assert thr.order == [s for i in range(thr.pairs) for s in sc.pair_order(i)]
    assert order[:6] == [("throughput", s) for i in range(3) for s in sc.pair_order(i)]  # minimum first, in turn
    assert said[0].startswith("[elastic throughput 1/3] suite 100.0 samples/s, bare 100.0 samples/s (suite first)")
    assert "left" in said[0] and "elapsed 20s" in said[0]
    assert any(line.startswith("[elastic busbw 3/3]") for line in said)
    assert any("adding pairs until the goal or the time budget" in line for line in said)


def test_the_time_budget_stops_extra_pairs_but_never_the_minimum():
    clock, said = FakeClock(), []
    noisy = fake_check("throughput", [100, 120, 85, 110, 90] * 10, [100, 90, 115, 95, 105] * 10, clock)
    sc.run_checks([noisy], pairs=2, budget_s=0, say=said.append, clock=clock)
    assert noisy.pairs == 2 and not noisy.resolved

    clock.now = 0.0
    noisy2 = fake_check("throughput", [100, 120, 85, 110, 90] * 10, [100, 90, 115, 95, 105] * 10, clock)
    sc.run_checks([noisy2], pairs=2, budget_s=100, say=said.append, clock=clock)  # a pair takes 20 s
    assert 2 < noisy2.pairs <= 2 + 100 // 20 + 1 and not noisy2.resolved


def test_a_failed_launch_fails_its_check_with_its_error_and_the_others_go_on():
    clock, said = FakeClock(), []
    broken = fake_check(
        "throughput", [100.0, 100.0], [100.0, sc.LaunchFailed("bare loop exited 1 (boom); log x")], clock
    )
    fine = fake_check("busbw", [1.0, 1.0], [1.0, 1.0], clock)
    sc.run_checks([broken, fine], pairs=2, budget_s=0, say=said.append, clock=clock)
    assert broken.error == "bare loop exited 1 (boom); log x" and not broken.passed
    assert "[elastic throughput] launch failed: bare loop exited 1 (boom); log x" in said
    assert fine.pairs == 2 and fine.passed
    d = broken.to_dict()
    assert d["passed"] is False and d["why"].startswith("a launch failed: bare loop exited 1")
    assert d["launches"] == [1, 1]  # the second pair starts with the bare loop, which failed


# ---------------------------------------------------------------- what runs
def test_the_suite_specs_and_the_bare_loop_arguments_match():
    from bench.workflows.bare_loops import BARE_LOOPS

    (p,) = sc.plan(
        ["elastic"],
        "resnet18",
        "cpu",
        2,
        allreduce=True,
        comm={"warmup_iters": 3, "iters": 7},
        options={"windows": 3, "steps_per_window": 4, "warmup_steps": 2, "backend_options": {}},
    )
    t, c = p.train, p.comm
    assert (t.task, t.backend, t.workload, t.world_size, t.windows, t.steps_per_window) == (
        "train",
        "elastic",
        "resnet18",
        2,
        3,
        4,
    )
    args = dict(zip(*[iter(map(str, sc.train_args(t)))] * 2))
    assert args == {
        "--workload": "resnet18",
        "--device": "cpu",
        "--batch-size": str(t.batch_size),
        "--image-size": str(t.image_size),
        "--classes": str(t.num_classes),
        "--threads": str(t.threads),
        "--warmup-steps": "2",
        "--steps": "12",
        "--seed": str(t.seed),
        "--lr": str(t.lr),
        "--momentum": str(t.momentum),
        "--cpu-bind": "cores",
    }  # auto: each CPU worker on its own core
    assert c.task == "comm" and c.threads == t.threads and c.cpu_bind == t.cpu_bind == "cores"
    assert c.comm.to_dict() == {
        "ops": ["allreduce"],
        "dtype": "float32",
        "min_bytes": 16 * 2**20,
        "max_bytes": 16 * 2**20,
        "warmup_iters": 3,
        "iters": 7,
    }
    assert sc.allreduce_args(c) == [
        "--device",
        "cpu",
        "--threads",
        t.threads,
        "--allreduce",
        16 * 2**20,
        "--warmup-iters",
        3,
        "--iters",
        7,
        "--cpu-bind",
        "cores",
    ]
    unpinned = sc.plan(
        ["elastic"], "mnist_mlp", "cpu", 2, allreduce=True, comm={}, options={"cpu_bind": "none", "backend_options": {}}
    )[0]
    assert unpinned.train.cpu_bind == unpinned.comm.cpu_bind == "none"
    assert sc.train_args(unpinned.train)[-2:] == ["--cpu-bind", "none"]
    command = BARE_LOOPS["elastic"].command(2, ["--steps", 12])
    assert "torch.distributed.run" in command and command[command.index("--nproc-per-node") + 1] == "2"
    assert command[-3:] == [str(BARE_LOOPS["elastic"].script), "--steps", "12"]
    hvd = BARE_LOOPS["horovod"].command(2, [])
    assert hvd[1:6] == ["--gloo", "-np", "2", "-H", "localhost:2"]
    ray = BARE_LOOPS["ray"].command(2, ["--steps", 12])  # the script is its own driver: python runs it
    assert ray == [sys.executable, str(BARE_LOOPS["ray"].script), "--num-workers", "2", "--steps", "12"]
    assert sc.plan(["elastic"], "mnist_mlp", "cpu", 2, allreduce=False, comm={}, options={})[0].comm is None


def test_the_figure_is_read_from_the_launchers_output():
    from bench.workflows.bare_loops import read_figure

    out = 'W0 some warning {not json}\n[0]<stdout>:{"throughput": 123.5}\n[1]<stderr>: done\n'
    assert read_figure(out, "throughput") == 123.5
    assert read_figure('{"busbw_GBps": 0.5}', "busbw_GBps") == 0.5
    assert read_figure(out, "busbw_GBps") is None and read_figure("", "throughput") is None


def fake_launches(monkeypatch, values: dict):
    """Replace both sides' launches: values[(figure, side)] is the list each launch takes its value from."""

    def suite_launch(spec, store, pick):
        figure = "throughput" if pick is sc.pick_throughput else "busbw"
        it = iter(values[(figure, "suite")])
        return lambda: next(it)

    def bare_launch(loop, spec, args, key, log_dir, name):
        figure = "throughput" if key == "throughput" else "busbw"
        it = iter(values[(figure, "bare")])

        def launch():
            value = next(it)
            if isinstance(value, Exception):
                raise value
            return value

        return launch

    monkeypatch.setattr(sc, "suite_launch", suite_launch)
    monkeypatch.setattr(sc, "bare_launch", bare_launch)


def test_the_verb_prints_a_row_per_figure_and_exits_by_the_verdict(monkeypatch, tmp_path):
    fake_launches(
        monkeypatch,
        {
            ("throughput", "suite"): [100.0, 100.5, 99.8],
            ("throughput", "bare"): [100.2, 100.1, 99.9],
            ("busbw", "suite"): [1.0, 0.8, 1.2],
            ("busbw", "bare"): [1.0, 1.0, 1.0],
        },
    )
    proc = bench_in_process(
        "selfcheck", "--backend", "elastic", "--pairs", "3", "--pairs-timeout", "0", "--store", tmp_path / "s.sqlite"
    )
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1].split() == [
        "backend",
        "figure",
        "launches",
        "suite",
        "mean",
        "bare",
        "mean",
        "ratio",
        "95%",
        "interval",
        "verdict",
    ]
    assert lines[2].startswith("elastic  throughput") and lines[2].endswith("PASS") and "3 + 3" in lines[2]
    assert lines[3].startswith("elastic  allreduce busbw 16 MiB") and lines[3].endswith("FAIL")
    assert any(line.startswith("elastic allreduce busbw 16 MiB: FAIL: the interval's low end") for line in lines)
    assert any(
        "goal resolution not reached" in line
        and "pairs in all would reach it" in line
        and "raise --pairs-timeout" in line
        for line in lines
    )
    assert "[elastic throughput 3/3]" in proc.stderr and "[elastic busbw 1/3]" in proc.stderr

    fake_launches(monkeypatch, {("throughput", "suite"): [100.0, 100.02], ("throughput", "bare"): [100.01, 100.0]})
    proc = bench_in_process(
        "selfcheck",
        "--backend",
        "elastic",
        "--pairs",
        "2",
        "--pairs-timeout",
        "0",
        "--no-comm",
        "--json",
        "--store",
        tmp_path / "s.sqlite",
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["passed"] is True and [c["figure"] for c in out["checks"]] == ["throughput"]
    check = out["checks"][0]
    assert check["launches"] == [2, 2] and check["order"] == ["suite", "bare", "bare", "suite"]
    assert math.isclose(check["ratio"], ratio_of_pairs([100.0, 100.02], [100.01, 100.0]).ratio)

    fake_launches(
        monkeypatch,
        {
            ("throughput", "suite"): [100.0, 100.5],
            ("throughput", "bare"): [sc.LaunchFailed("bare loop exited 1 (boom); log L")],
        },
    )
    proc = bench_in_process(
        "selfcheck", "--backend", "elastic", "--pairs", "2", "--no-comm", "--store", tmp_path / "s.sqlite"
    )
    assert proc.returncode == 1
    assert "FAIL: a launch failed: bare loop exited 1 (boom); log L" in proc.stdout
    assert "launch failed" in proc.stderr and "bare loops' logs in" in proc.stderr


def test_a_bare_launch_past_its_deadline_leaves_no_folder_nor_process(tmp_path):
    """What a bare loop writes to its temporary folder goes with the launch, also when its deadline ends it."""
    import dataclasses
    import os
    import time

    import psutil

    from bench.workflows.bare_loops import BareLoop, _python

    script = tmp_path / "slow_loop.py"
    told = tmp_path / "scratch.txt"
    script.write_text(
        "import pathlib, sys, tempfile, time\n"
        "d = tempfile.mkdtemp(prefix='session-')\n"  # as Ray's driver does under $TMPDIR
        f"pathlib.Path({str(told)!r}).write_text(d)\n"
        "time.sleep(120)\n"
    )
    (p,) = sc.plan(["elastic"], "mnist_mlp", "cpu", 2, allreduce=False, comm={}, options={"backend_options": {}})
    spec = dataclasses.replace(p.train, timeout=3.0)
    launch = sc.bare_launch(BareLoop("elastic", script, _python), spec, [], "throughput", tmp_path, "slow")
    t0 = time.monotonic()
    with pytest.raises(sc.LaunchFailed, match=r"bare loop passed its deadline \(3 s\)"):
        launch()
    assert time.monotonic() - t0 < 60
    scratch = told.read_text()
    assert os.path.basename(os.path.dirname(scratch)).startswith("bare-")  # in the launch's own folder
    assert not os.path.exists(scratch) and not os.path.exists(os.path.dirname(scratch))
    assert not [q for q in psutil.process_iter(["cmdline"]) if str(script) in " ".join(q.info["cmdline"] or [])]


# ---------------------------------------------------------------- for real
@pytest.mark.slow
def test_elastic_against_its_bare_loop(tmp_path):
    """Two pairs of real launches (the suite's run and bare_ddp.py under torchrun), MLP, few steps."""
    store = tmp_path / "bench.sqlite"
    proc = bench(
        "selfcheck",
        "--backend",
        "elastic",
        "--workload",
        "mnist_mlp",
        "--pairs",
        "2",
        "--pairs-timeout",
        "0",
        "--no-comm",
        *FAST,
        "--json",
        "--store",
        store,
        timeout=240,
    )
    assert proc.returncode in (0, 1), proc.stderr  # the verdict depends on the machine; the shape does not
    out = json.loads(proc.stdout)
    (check,) = out["checks"]
    assert check["backend"] == "elastic" and check["figure"] == "throughput" and check["launches"] == [2, 2]
    assert check["order"] == ["suite", "bare", "bare", "suite"]
    assert check["suite"] and check["bare"] and all(v > 0 for v in check["suite"] + check["bare"])
    assert check["low"] < check["ratio"] < check["high"]
    assert out["passed"] == check["passed"] == (proc.returncode == 0)
    assert "[elastic throughput 2/2]" in proc.stderr and "Traceback" not in proc.stderr
    from bench.core.store import Store

    runs = Store(store).records()
    assert [(r.spec.backend, r.status) for r in runs] == [("elastic", "ok")] * 2
    assert sorted(r.metrics.throughput.mean for r in runs) == sorted(check["suite"])
