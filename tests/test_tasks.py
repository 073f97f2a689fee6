"""What each kind of run makes of a finished run, on hand-made run directories, results and journals: the
status rules, the training, communication and fault figures, efficiency, labels, the parameter server's
share of a sweep, and spec checks. Nothing here launches a process."""

import pytest

from bench.core.codec import decode
from bench.core.errors import UsageError
from bench.core.records import RunError
from bench.core.registry import get_task
from bench.core.spec import check_timeout
from bench.harness.outcome import process_status
from bench.rank.collectives import GB, OPS, TorchBuffers, ops_per_size, sweep_plan, time_messages
from bench.results.frame import records_to_frame
from bench.tasks.comm import build_spec as build_comm_spec
from bench.tasks.comm import comm_metrics
from bench.tasks.fault import FaultMetrics
from bench.tasks.fault.analysis import (
    MIN_BIN_S,
    _detection,
    _processes,
    _rank_map,
    fault_metrics,
    fault_status,
    recovered,
    timeline,
)
from bench.tasks.train import TrainMetrics, train_metrics
from bench.tasks.train import build_spec as build_train_spec
from factories import (
    HUNG_METRICS,
    LAUNCHED_AT,
    OBSERVED,
    RunDirBuilder,
    comm_output,
    comm_record,
    comm_spec,
    fault_journals,
    fault_record,
    fault_spec,
    finished_run,
    outcome,
    rank_result,
    rank_row,
    resumed,
    steps,
    train_record,
    train_results,
    train_spec,
)

TRAIN, COMM, FAULT = get_task("train"), get_task("comm"), get_task("fault")


# ---------------------------------------------------------------- statuses of a run
@pytest.fixture
def spec():
    return train_spec(world_size=2)


def ok_run(tmp_path, spec):
    return finished_run(tmp_path / "run", spec, train_results(spec, [[0.1, 0.1], [0.1, 0.1]]))


def test_every_rank_finished_is_ok(tmp_path, spec):
    assert process_status(spec, ok_run(tmp_path, spec), outcome()) == ("ok", None)


def test_a_rank_killed_by_a_signal_is_the_crash(tmp_path, spec):
    builder = RunDirBuilder(tmp_path / "run", spec).joined(0).joined(1)
    builder.exited(1, -9, t=LAUNCHED_AT + 5.0, tail="step 3")
    builder.raised(0, "RuntimeError", "Connection closed by peer", t=LAUNCHED_AT + 5.01)
    builder.exited(0, 1, t=LAUNCHED_AT + 5.1)
    status, error = process_status(spec, builder.run_dir, outcome(returncode=1))
    assert status == "crashed"
    assert error.message == "rank 1 ended with signal SIGKILL"
    assert (error.rank, error.signal, error.exit_code, error.exception, error.tail) == (
        1,
        "SIGKILL",
        None,
        None,
        "step 3",
    )


def test_a_rank_that_raised_is_the_crash_with_its_exception(tmp_path, spec):
    builder = RunDirBuilder(tmp_path / "run", spec).joined(0).joined(1)
    builder.raised(1, "RuntimeError", "injected crash at step 3", t=LAUNCHED_AT + 4.0).exited(1, 1, t=LAUNCHED_AT + 4.2)
    builder.exited(0, -15, t=LAUNCHED_AT + 4.1, terminated_by="SIGTERM")
    status, error = process_status(spec, builder.run_dir, outcome(returncode=1))
    assert status == "crashed"
    assert error.message == "rank 1 raised RuntimeError: injected crash at step 3 (exited with exit code 1)"
    assert (error.rank, error.exit_code, error.exception) == (1, 1, "RuntimeError")


def test_a_crash_in_a_run_of_several_roles_names_the_role(tmp_path):
    spec = train_spec("ps", world_size=2, servers=1)
    builder = RunDirBuilder(tmp_path / "run", spec).joined(0).joined(1).joined(2)
    builder.raised(2, "RuntimeError", "injected crash at step 3", t=LAUNCHED_AT + 4.0).exited(2, 1, t=LAUNCHED_AT + 4.2)
    _, error = process_status(spec, builder.run_dir, outcome(returncode=1))
    assert error.message == "rank 2 (server 0) raised RuntimeError: injected crash at step 3 (exited with exit code 1)"
    builder = RunDirBuilder(tmp_path / "run2", spec).joined(0).joined(1).joined(2).exited(1, -9, t=LAUNCHED_AT + 5.0)
    _, error = process_status(spec, builder.run_dir, outcome(returncode=1))
    assert error.message == "rank 1 (worker 1) ended with signal SIGKILL"


def test_a_failed_launcher_with_no_rank_to_blame_is_failed(tmp_path, spec):
    run_dir = ok_run(tmp_path, spec)
    run_dir.launcher_log.write_text("rendezvous closed\nagent gave up\n")
    status, error = process_status(spec, run_dir, outcome(returncode=1))
    # the launcher's last line in the message: what a user sees first (here, the driver's exception)
    assert (
        status == "failed"
        and error.message == "launcher exited with 1 and no rank failed; its last line: agent gave up"
    )
    assert error.tail == "rendezvous closed\nagent gave up" and error.rank is None


def test_a_missing_result_is_failed(tmp_path, spec):
    results = train_results(spec, [[0.1, 0.1], [0.1, 0.1]])
    builder = RunDirBuilder(tmp_path / "run", spec).finished(results[0]).joined(1).exited(1, 0, t=LAUNCHED_AT + 9)
    status, error = process_status(spec, builder.run_dir, outcome())
    assert status == "failed" and error.message == "rank(s) [1] produced no result"


@pytest.mark.parametrize(
    "ending, message", [("timeout", "deadline of 900 s passed"), ("interrupted", "interrupted by the user")]
)
def test_an_ended_run_says_where_each_rank_was(tmp_path, ending, message):
    spec = train_spec(world_size=6)
    builder = RunDirBuilder(tmp_path / "run", spec).finished(rank_result(0, 6, {})).progress(1, 2).progress(2, 0)
    builder.joined(3).started(4)
    builder.exited(1, 1, t=LAUNCHED_AT + 5, terminated_by="SIGTERM")  # a consequence: not blamed
    builder.launcher_log("before the end\nduring teardown\n")
    status, error = process_status(
        spec, builder.run_dir, outcome(ending, returncode=None, log_bytes=len("before the end\n"))
    )
    assert (status, error.message) == (ending, message)
    assert [(r["rank"], r["state"]) for r in error.ranks] == [
        (0, "finished"),
        (1, "finished window 2"),
        (2, "warm-up done"),
        (3, "joined the group, in warm-up"),
        (4, "started, not yet joined the group"),
        (5, "not started"),
    ]
    assert error.ranks[1]["steps_reported"] == 25
    assert error.tail == "before the end"  # the log as it was before teardown


# ---------------------------------------------------------------- training figures
def test_window_time_is_the_slowest_rank_and_throughput_the_global_batch_over_it():
    spec = train_spec(world_size=2, batch_size=32, steps_per_window=10)
    results = train_results(spec, [[0.10, 0.20, 0.10], [0.15, 0.10, 0.10]])
    m = train_metrics(spec, results, LAUNCHED_AT)
    assert m.window_times_s == [0.15, 0.20, 0.10]
    assert m.throughput.per_window == pytest.approx([640 / 0.15, 640 / 0.20, 640 / 0.10])  # 2 x 32 x 10 samples
    assert m.throughput.mean == pytest.approx(sum(m.throughput.per_window) / 3) and m.throughput.n == 3
    assert m.step_time_s.mean == pytest.approx((0.15 + 0.20 + 0.10) / 3 / 10)
    assert [r.rank for r in m.per_rank] == [0, 1]
    assert m.per_rank[0].step_time_mean_s == pytest.approx(0.04 / 3)
    assert m.per_rank[1].throughput.per_window is None
    assert m.per_rank[1].throughput.mean == pytest.approx((320 / 0.15 + 320 / 0.10 + 320 / 0.10) / 3)
    assert m.straggler_ratio == pytest.approx(0.04 / 0.035)
    assert m.peak_rss_bytes_max == 101 * 2**20 and m.param_count == 1000 and m.loss_last == 0.5
    assert m.other_roles == []


def test_startup_is_the_slowest_rank_from_the_launch():
    spec = train_spec(world_size=3)
    m = train_metrics(spec, train_results(spec, [[0.1, 0.1]] * 3), LAUNCHED_AT)
    assert m.startup.launch_to_process_s == pytest.approx(0.7)  # rank 2 started last
    assert m.startup.rendezvous_s == pytest.approx(0.7)
    assert m.startup.launch_to_first_step_s == pytest.approx(2.2)


def test_gradient_accumulation_counts_every_micro_batch():
    spec = train_spec(world_size=2, batch_size=16, steps_per_window=5, backward_passes=4)
    m = train_metrics(spec, train_results(spec, [[1.0, 1.0], [1.0, 1.0]]), LAUNCHED_AT)
    assert m.throughput.mean == pytest.approx(2 * 16 * 4 * 5)


def test_servers_are_reported_beside_the_workers_not_among_them():
    spec = train_spec("ps", world_size=2, servers=1)
    served = {"server": 0, "workers": 2, "pushes": 40}
    m = train_metrics(spec, train_results(spec, [[0.1, 0.1], [0.1, 0.1]], served=served), LAUNCHED_AT)
    assert [r.rank for r in m.per_rank] == [0, 1]
    assert m.other_roles == [{"rank": 2, "role": "server", "served": served, "peak_rss_bytes": 900 * 2**20}]
    assert m.peak_rss_bytes_max == 101 * 2**20
    assert m.throughput.mean == pytest.approx(2 * 64 * 10 / 0.1)


def test_the_train_task_concludes_from_its_run_directory(tmp_path, spec):
    run_dir = ok_run(tmp_path, spec)
    conclusion = TRAIN.conclude(spec, run_dir, outcome(), None)
    assert conclusion.status == "ok" and conclusion.error is None
    assert isinstance(conclusion.metrics, TrainMetrics) and conclusion.metrics.throughput.mean == pytest.approx(12800)
    assert conclusion.rank_map == [rank_row(0, 2), rank_row(1, 2)]
    failed = TRAIN.conclude(spec, run_dir, outcome(returncode=3), None)
    assert failed.status == "failed" and failed.metrics is None and len(failed.rank_map) == 2


def test_a_training_spec_from_its_defaults():
    spec = build_train_spec(backend="single", workload="mnist_mlp", world_size=1, device="cpu")
    assert (spec.task, spec.batch_size, spec.image_size, spec.roles) == ("train", 64, 28, {"worker": 1})
    assert spec.global_batch == 64 and spec.processes == 1 and spec.windows >= 2


# ---------------------------------------------------------------- communication figures
def comm_results(spec, per_rank_rows):
    return {r: rank_result(r, spec.world_size, comm_output(rows)) for r, rows in enumerate(per_rank_rows)}


def test_comm_rows_take_the_slowest_rank_and_sum_the_wrong_elements():
    spec = comm_spec(world_size=4, ops=["allreduce", "allgather"])
    per_rank = [
        [
            ("allreduce", 1024, 10e-6 * (1 + r), r % 2),
            ("allreduce", 4096, 20e-6, 0),
            ("allgather", 4096, 40e-6 if r == 3 else 30e-6, 0),
        ]
        for r in range(4)
    ]
    m = comm_metrics(spec, comm_results(spec, per_rank), LAUNCHED_AT, {"limit_gbps": 2.0})
    small, large, gather = m.rows
    assert small.time_us == pytest.approx(40.0) and small.per_rank_time_us == pytest.approx([10.0, 20.0, 30.0, 40.0])
    assert small.window_time_us == pytest.approx([40.0, 40.0])
    assert (small.wrong, large.wrong, m.wrong) == (2, 0, 2)
    assert small.algbw_gbps == pytest.approx(1024 / 40e-6 / GB)
    assert small.busbw_gbps == pytest.approx(small.algbw_gbps * 1.5)  # 2(n-1)/n at n = 4
    assert gather.busbw_gbps == pytest.approx(4096 / 40e-6 / GB * 0.75)  # (n-1)/n
    assert (gather.type, gather.redop, small.redop, gather.count) == ("float32", "none", "sum", 1024)
    assert large.busbw_fraction_of_limit == pytest.approx(large.busbw_gbps / 2.0)
    assert m.avg_busbw_gbps["allreduce"] == pytest.approx((small.busbw_gbps + large.busbw_gbps) / 2)
    assert m.avg_busbw_gbps["allgather"] == pytest.approx(gather.busbw_gbps)
    assert m.model == "ring" and m.fit["alpha_coef"] == 6.0 and m.fit["beta_coef"] == pytest.approx(1.5)
    assert m.ceiling == {"limit_gbps": 2.0} and m.startup.rendezvous_s == pytest.approx(0.8)


def test_comm_rows_without_a_ceiling_have_no_fraction():
    spec = comm_spec(world_size=2)
    m = comm_metrics(spec, comm_results(spec, [[("allreduce", 64, 1e-5, 0)]] * 2), LAUNCHED_AT, None)
    assert m.rows[0].busbw_fraction_of_limit is None and m.ceiling is None
    assert m.fit is None  # one size: nothing to fit


def test_a_parameter_server_sweep_fits_its_own_cost_model():
    spec = comm_spec("ps", world_size=2, roles={"worker": 2, "server": 2}, backend_options={"ps_servers": 2})
    rows = [("allreduce", 1024, 1e-5, 0), ("allreduce", 4096, 2e-5, 0)]
    results = comm_results(spec, [rows, rows]) | {
        r: rank_result(r, 4, {"served": {"pushes": 2}}, role="server", role_rank=r - 2) for r in (2, 3)
    }
    m = comm_metrics(spec, results, LAUNCHED_AT, None)
    assert len(m.rows) == 2 and m.model == "parameter server" and m.fit["beta_coef"] == 1.0


@pytest.mark.parametrize("wrong, status", [(0, "ok"), (3, "failed")])
def test_a_sweep_with_wrong_elements_is_failed(tmp_path, wrong, status):
    spec = comm_spec(world_size=2)
    results = comm_results(spec, [[("allreduce", 64, 1e-5, 0)], [("allreduce", 64, 1e-5, wrong)]])
    conclusion = COMM.conclude(spec, finished_run(tmp_path / "run", spec, results), outcome(), {"ceiling": None})
    assert conclusion.status == status and conclusion.metrics.wrong == wrong
    if wrong:
        assert conclusion.error.message == "3 wrong elements: a collective returned wrong results"


# ---------------------------------------------------------------- fault figures
@pytest.fixture
def kill_spec():
    return fault_spec(world_size=2)


def fault_run(tmp_path, spec, **journals):
    return fault_journals(RunDirBuilder(tmp_path / "run", spec), **journals).run_dir


def measured(spec, run_dir, ending="exited", returncode=0, observed=OBSERVED):
    """The fault figures and status of a run whose journals count seconds from 0 and that ended at 8 s."""
    done = outcome(ending, returncode, ended_after=8.0, launched_at=0.0)
    metrics = decode(FaultMetrics, fault_metrics(spec, run_dir, done, observed), "fault metrics")
    return metrics, fault_status(spec, metrics, done)


def test_a_recovered_kill_run(tmp_path, kill_spec):
    m, status = measured(kill_spec, fault_run(tmp_path, kill_spec))
    assert status == ("ok", None)
    assert (m.step_at_fault, m.steps_completed, m.world_before, m.world_after) == (6, 12, 2, 2)
    assert m.detection_s == pytest.approx(0.3) and m.detected_by == "rank 0: allreduce failed"
    assert m.recovery_s == pytest.approx(1.5)  # signal at 2.0; resumed at 3.0; first step after it at 3.5
    assert (m.resumed_from_step, m.steps_redone, m.restarts, m.resets, m.commits) == (4, 2, 1, 0, 1)
    assert m.ended_after_fault_s == pytest.approx(6.0)
    assert [(r.rank, r.world_size, r.pid, r.attempt) for r in m.rank_map_before] == [(0, 2, 100, 0), (1, 2, 101, 0)]
    assert [(r.rank, r.pid, r.restart_count) for r in m.rank_map_after] == [(0, 200, 1), (1, 201, 1)]
    assert [(c["step"], c["pid"], c["equal"]) for c in m.resume_checks] == [(4, 200, True), (4, 201, True)]
    assert m.fault["pid"] == 101 and m.hang_observed_s is None and m.join_contributes_s is None


def test_detection_is_the_earliest_of_the_launcher_and_the_workers(tmp_path, kill_spec):
    run_dir = fault_run(tmp_path, kill_spec)
    launcher = {**OBSERVED, "detections": [(1.5, "too early: before the fault"), (2.1, "agent saw it")]}
    m, _ = measured(kill_spec, run_dir, observed=launcher)
    assert m.detection_s == pytest.approx(0.1) and m.detected_by == "agent saw it"
    later = {**OBSERVED, "detections": [(2.5, "agent saw it")]}
    m, _ = measured(kill_spec, run_dir, observed=later)
    assert m.detection_s == pytest.approx(0.3) and m.detected_by == "rank 0: allreduce failed"


def test_detection_counts_resets_and_ignores_what_came_before_the_fault():
    lines = [
        {"kind": "detected", "t": 1.0, "rank": 0},
        {"kind": "reset", "t": 2.4, "rank": 1, "size": 1},
        {"kind": "detected", "t": 2.6, "rank": 0},
    ]
    assert _detection(lines, [], 2.0) == (2.4, "rank 1: reset")
    assert _detection(lines[2:], [], 2.0) == (2.6, "rank 0: collective failed")
    assert _detection(lines[:1], [(1.9, "before")], 2.0) is None


def test_recovery_is_the_first_step_after_the_first_resume_after_the_fault():
    lines = [
        resumed(0.5, 0, 0, 2, 100, 0.0),
        *steps(1, 3, 1.0, 0, 2),
        resumed(3.0, 2, 0, 2, 200, 2.0),
        resumed(3.2, 2, 1, 2, 201, 2.0),
        *steps(3, 4, 3.4, 0, 2),
    ]
    lines.sort(key=lambda e: e["t"])
    assert recovered(lines, 2.0) == {"kind": "step", "t": 3.4, "step": 3, "rank": 0, "size": 2}
    assert recovered(lines, 3.5) is None  # nothing resumed after it
    assert recovered(lines[:-2], 2.0) is None  # resumed, no step yet


def test_the_rank_map_at_a_moment():
    def line(file_rank, attempt, *args, **kwargs):
        return {**resumed(*args, **kwargs), "file_rank": file_rank, "attempt": attempt}

    lines = [
        line(0, 0, 0.5, 0, 0, 2, 100, 0.0),
        line(1, 0, 0.6, 0, 1, 2, 101, 0.0),
        line(1, 0, 3.0, 4, 0, 1, 101, 4.0),  # rank 0 died: the survivor is renumbered in place
        line(0, 1, 3.1, 4, 1, 2, 300, 4.0, restart_count=1),
    ]  # and a replacement joins it
    procs = _processes(lines)
    assert set(procs) == {(0, 0), (1, 0), (0, 1)} and len(procs[(1, 0)]["ranks"]) == 2
    before = _rank_map(procs, before=2.0, after=None)
    assert [(r["rank"], r["world_size"], r["pid"], r["attempt"]) for r in before] == [(0, 2, 100, 0), (1, 2, 101, 0)]
    after = _rank_map(procs, before=None, after=2.9)
    assert [(r["rank"], r["world_size"], r["pid"], r["attempt"], r["restart_count"]) for r in after] == [
        (0, 1, 101, 0, 0),
        (1, 2, 300, 1, 1),
    ]


def test_the_timeline_bins_rank_0s_samples():
    # 81 steps a second apart: 80 s in 80 bins of 1 s, each with one step of 8 samples x 2 workers
    lines = sorted(steps(1, 81, 0.0, 0, 2, every=1.0) + steps(1, 81, 0.5, 1, 2, every=1.0), key=lambda e: e["t"])
    tl = timeline(lines, batch=8)
    assert (tl["t0"], tl["bin_s"]) == (0.0, 1.0) and tl["t"] == [float(i) for i in range(81)]
    assert tl["samples_per_s"] == [16.0] * 81  # rank 0's steps only, each counting the whole world's batch
    # a short run: bins no narrower than MIN_BIN_S
    tl = timeline(steps(1, 10, 0.0, 0, 2, every=0.125), batch=8)
    assert tl["bin_s"] == MIN_BIN_S and len(tl["t"]) == int(1.125 / MIN_BIN_S) + 1
    assert sum(v * tl["bin_s"] for v in tl["samples_per_s"]) == pytest.approx(10 * 16)
    assert timeline([], batch=8) == {"t": [], "samples_per_s": [], "bin_s": None}


@pytest.mark.parametrize(
    "journals, ending, status, says",
    [
        (
            {},
            dict(returncode=1),
            "failed",
            "the launcher exited 1 after the fault: it gave up (restarts or resets allowed: 3, used 1)",
        ),
        (dict(last_step=9), {}, "failed", "training stopped at step 9 of 12"),
        (dict(restored=4.5), {}, "failed", "resumed from parameters that differ from the committed ones"),
        ({}, dict(ending="timeout", returncode=None), "timeout", "deadline of 900 s passed"),
        ({}, dict(ending="interrupted", returncode=None), "interrupted", "interrupted by the user"),
        (
            dict(fired=False),
            dict(returncode=1),
            "failed",
            "exited 1 before the fault was injected (no rank reached step 6)",
        ),
        (dict(recovered=False), {}, "failed", "no training step completed after the fault, yet the launcher exited 0"),
    ],
)
def test_fault_statuses(tmp_path, kill_spec, journals, ending, status, says):
    _, (got, message) = measured(kill_spec, fault_run(tmp_path, kill_spec, **journals), **ending)
    assert got == status and says in message


def test_a_hang_is_a_timeout_that_says_what_noticed_it(tmp_path, kill_spec):
    m, (status, message) = measured(
        kill_spec, fault_run(tmp_path, kill_spec, recovered=False), ending="hung", returncode=None
    )
    assert status == "timeout"
    assert message == (
        "hung: no training step within 90 s of the fault; the fault was noticed after 0.30 s (rank 0: allreduce failed)"
    )
    assert m.recovery_s is None and m.world_after is None and m.hang_observed_s == pytest.approx(0.3)
    m, (status, message) = measured(
        kill_spec,
        fault_run(tmp_path / "quiet", kill_spec, recovered=False, detected_at=None),
        ending="hung",
        returncode=None,
    )
    assert message.endswith("; nothing noticed it") and m.hang_observed_s == pytest.approx(6.0)


def join_run(tmp_path, spec, grows: bool):
    """One worker trains; a second agent joins at t = 2.0; the run resumes at 3.0 with 1 or 2 workers."""
    builder = RunDirBuilder(tmp_path / "run", spec)
    world = 2 if grows else 1
    builder.journal(
        0,
        0,
        resumed(0.5, 0, 0, 1, 100, 0.0),
        *steps(1, 6, 1.0, 0, 1),
        resumed(3.0, 6, 0, world, 100, 6.0),
        *steps(7, 14, 3.5, 0, world),
    )
    builder.journal(0, 0, {"kind": "commit", "t": 1.55, "step": 6, "rank": 0, "checksum": 6.0})
    if grows:
        builder.journal(1, 0, resumed(3.02, 6, 1, 2, 300, 6.0), *steps(7, 14, 3.6, 1, 2))
    builder.fault_fired(scenario="join", time=2.0, step=6, joiner_pid=55)
    return builder.run_dir


@pytest.mark.parametrize("grows", [True, False])
def test_a_join_must_grow_the_world(tmp_path, grows):
    spec = fault_spec(world_size=1, scenario="join", at_step=6, total_steps=12)
    m, (status, message) = measured(spec, join_run(tmp_path, spec, grows))
    assert (m.world_before, m.world_after) == (1, 2 if grows else 1)
    if grows:
        assert status == "ok" and m.join_contributes_s == pytest.approx(1.6) and m.steps_redone == 0
    else:
        assert status == "failed" and "never trained with the others (world size stayed 1" in message


def test_the_fault_task_concludes_with_the_launchers_own_report(tmp_path, kill_spec):
    builder = fault_journals(RunDirBuilder(tmp_path / "run", kill_spec))
    builder.agent_events({"kind": "metric", "name": "workers.default.failed", "t": 2.05})
    conclusion = FAULT.conclude(kill_spec, builder.run_dir, outcome(launched_at=0.0), None)
    assert conclusion.status == "ok" and conclusion.error is None
    assert conclusion.metrics.detected_by == "elastic agent saw the worker group fail"
    assert conclusion.metrics.detection_s == pytest.approx(0.05)
    assert [(r.phase, r.pid) for r in conclusion.rank_map] == [
        ("before", 100),
        ("before", 101),
        ("after", 200),
        ("after", 201),
    ]
    assert conclusion.events == [
        {
            "time": 2.0,
            "kind": "fault_kill",
            "scenario": "kill",
            "signal": "KILL",
            "pid": 101,
            "rank": 1,
            "step": 6,
            "delivered": True,
        }
    ]


# ---------------------------------------------------------------- efficiency across runs
def test_efficiency_is_over_n_times_the_same_backends_one_worker_throughput():
    import dataclasses

    from bench.tasks.train.results import replicated_cases

    old = train_record("e1-old", "elastic", 1, [50.0, 50.0], 2, sweep_id="s0")
    old = dataclasses.replace(old, environment={**old.environment, "git": {"commit": "older", "dirty": False}})
    recs = [
        train_record("p", "single", 1, [100.0, 100.0], 1),
        old,
        train_record("e1", "elastic", 1, [90.0, 90.0], 3),
        train_record("e2", "elastic", 2, [150.0, 150.0], 4),
        train_record("e4", "elastic", 4, [240.0, 240.0], 5),
        train_record("h2", "horovod", 2, [160.0, 160.0], 6),
        train_record("x", "elastic", 2, None, 7, status="crashed"),
        train_record("b32", "elastic", 2, [80.0, 80.0], 8, spec_fields={"batch_size": 32}),
    ]
    frame = records_to_frame(recs)
    cases = {
        (c.backend, c.world_size, c.cond["batch_size"]): c for c in replicated_cases(frame[frame["status"] == "ok"])
    }
    assert [r.run_id for r in cases[("elastic", 2, 64)].records] == ["e2"]  # only ok runs
    assert [r.run_id for r in cases[("elastic", 1, 64)].records] == ["e1"]  # the latest code's launches of the case
    assert cases[("elastic", 2, 64)].efficiency.ratio == pytest.approx(150 / (2 * 90))
    assert cases[("elastic", 4, 64)].efficiency.ratio == pytest.approx(240 / (4 * 90))
    assert cases[("elastic", 1, 64)].efficiency is None  # defined above one worker
    assert cases[("elastic", 2, 64)].vs_plain.ratio == pytest.approx(150 / (2 * 100))
    assert cases[("single", 1, 64)].vs_plain is None
    assert cases[("horovod", 2, 64)].efficiency is None and cases[("horovod", 2, 64)].vs_plain.ratio == pytest.approx(
        0.8
    )
    # other conditions (a smaller batch) have no one-worker run to compare with
    assert cases[("elastic", 2, 32)].efficiency is None and cases[("elastic", 2, 32)].vs_plain is None
    # one launch a side: a ratio, no interval
    assert not cases[("elastic", 2, 64)].efficiency.replicated


# ---------------------------------------------------------------- recovery across launches
def test_recovery_per_case_and_backend_and_its_scorecard_rows():
    from bench.tasks.fault.report import scorecard_rows
    from bench.tasks.fault.results import comparisons, recovery_cases

    stop = {"signal": "STOP"}
    hung = HUNG_METRICS
    recs = [
        fault_record("ek1", "elastic", sweep_id="s1", created_at=2.0, metrics={"recovery_s": 12.0}),
        fault_record("ek2", "elastic", sweep_id="s1", created_at=3.0, metrics={"recovery_s": 18.0}),
        fault_record("hk1", "horovod", sweep_id="s1", created_at=4.0, metrics={"recovery_s": 0.2, "world_after": 1}),
        fault_record("hk2", "horovod", sweep_id="s1", created_at=5.0, metrics={"recovery_s": 0.3, "world_after": 1}),
        fault_record("eh1", "elastic", sweep_id="s1", created_at=6.0, fault=stop, metrics={"recovery_s": 16.0}),
        fault_record("hh1", "horovod", sweep_id="s1", created_at=7.0, status="timeout", fault=stop, metrics=hung),
    ]
    frame = records_to_frame(recs)
    cases = recovery_cases(frame)
    killed = next(by for case, by in cases.items() if "SIGKILL" in case)
    assert killed["elastic"].times == [12.0, 18.0] and killed["elastic"].median_s == 15.0
    hang = next(by for case, by in cases.items() if "SIGSTOP" in case)
    assert hang["horovod"].times == [] and hang["horovod"].failures() == "timeout in 1 run"
    compared = comparisons(frame)
    assert len(compared) == 1 and next(iter(compared)).startswith("recovery elastic / horovod, ")
    assert next(iter(compared.values())).ratio == pytest.approx((12.0 * 18.0) ** 0.5 / (0.2 * 0.3) ** 0.5)
    # 2 + 2 runs, horovod sooner in every one: led, not decided (an exact test's smallest p there is 1/3)
    rows = {r.measure: r for r in scorecard_rows(frame)}
    killed = rows["recovery from a killed worker"]
    assert (killed.standing, killed.winner, killed.leader) == ("unresolved", None, "horovod")
    assert killed.to_decide == "4 a side can decide it"
    stuck = rows["recovery from a hung worker"]
    assert stuck.standing == "one launch" and stuck.winner is None  # one run a side: no winner
    assert stuck.outcome == "one run a side; 4 a side can decide it"
    # 4 + 4: horovod sooner in every run (p 2/70) and elastic through every hang where horovod never was (Fisher's)
    four = recs + [
        *(fault_record(f"ek{i}", "elastic", sweep_id="s1", created_at=10.0 + i, metrics={"recovery_s": 15.0})
          for i in (3, 4)),
        *(fault_record(f"hk{i}", "horovod", sweep_id="s1", created_at=20.0 + i,
                       metrics={"recovery_s": 0.25, "world_after": 1}) for i in (3, 4)),
        *(fault_record(f"eh{i}", "elastic", sweep_id="s1", created_at=30.0 + i, fault=stop,
                       metrics={"recovery_s": 15.0}) for i in (2, 3, 4)),
        *(fault_record(f"hh{i}", "horovod", sweep_id="s1", created_at=40.0 + i, status="timeout", fault=stop,
                       metrics=hung) for i in (2, 3, 4)),
    ]  # fmt: skip
    rows = {r.measure: r for r in scorecard_rows(records_to_frame(four))}
    assert (rows["recovery from a killed worker"].standing, rows["recovery from a killed worker"].winner) == (
        "ahead",
        "horovod",
    )
    stuck = rows["recovery from a hung worker"]
    assert stuck.winner == "elastic" and stuck.outcome == "elastic came through in every run and horovod in none"
    assert comparisons(frame.iloc[0:0]) == {}


# ---------------------------------------------------------------- labels
def test_each_task_names_its_case(kill_spec):
    assert TRAIN.case(train_spec(workload="resnet18")) == "resnet18"
    assert COMM.case(comm_spec()) == "communication sweep"
    assert FAULT.case(kill_spec) == "mnist_mlp: SIGKILL to 1 of 2 workers, checkpoint/commit every 4 steps"
    joined = fault_spec(world_size=1, scenario="join")
    assert FAULT.case(joined) == "mnist_mlp: a worker joins 1 running, checkpoint/commit every 4 steps"
    assert [FAULT.kind(s) for s in (kill_spec, fault_spec(signal="STOP"), joined)] == ["kill", "hang", "join"]
    assert FAULT.describe(kill_spec) == (
        "elastic mnist_mlp, 2 workers, SIGKILL to rank 1 at step 6 of 12, checkpoint/commit every 4, up to 3 restarts"
    )


def test_training_lines():
    rec = train_record(per_window=[1000.0, 1100.0, 900.0])
    assert TRAIN.one_line(rec) == "ok 1,000 samples/s ± 24.8%"
    assert TRAIN.list_figure(rec) == "1,000 samples/s ± 24.8%"
    lines = TRAIN.summary_lines(rec)
    assert lines[0] == "status: ok"
    assert lines[1] == "throughput: 1,000 samples/s ± 24.8% (95% CI 752 to 1,248, 3 windows)"
    assert "startup: 2.00 s to first step, rendezvous 0.25 s" in lines
    assert lines[-1].startswith("  rank 0: 1,000 samples/s")
    crashed = train_record(
        status="crashed",
        error=RunError(
            message="deadline of 900 s passed",
            tail="last words",
            ranks=[{"rank": 0, "state": "finished"}, {"rank": 1, "state": "finished window 2"}],
        ),
    )
    assert TRAIN.one_line(crashed) == "crashed: deadline of 900 s passed" and TRAIN.list_figure(crashed) == "-"
    assert TRAIN.summary_lines(crashed) == [
        "status: crashed",
        "error: deadline of 900 s passed",
        "  rank 0: finished",
        "  rank 1: finished window 2",
        "error output (tail):",
        "  last words",
    ]


def test_communication_lines():
    rec = comm_record()
    busbw = rec.metrics.avg_busbw_gbps["allreduce"]
    assert COMM.one_line(rec) == f"ok avg busbw allreduce {busbw:.3f} GB/s"
    lines = COMM.summary_lines(rec)
    assert lines[0] == "# allreduce" and f"# Avg bus bandwidth    : {busbw:.4f}" in lines
    assert "# machine ceiling: loopback TCP 4.00 GB/s (memory_copy 10.00 GB/s, loopback_tcp 4.00 GB/s)" in lines
    assert lines[-1] == "# alpha-beta fit (ring): a = 50.0 us, 1/b = 1.50 GB/s, weighted R^2 = 0.990"
    failed = comm_record(status="failed", error=RunError(message="3 wrong elements"))
    assert COMM.one_line(failed) == "failed: 3 wrong elements" and COMM.list_figure(failed) == "-"
    assert COMM.summary_lines(failed) == ["status: failed", "error: 3 wrong elements"]


def test_fault_lines():
    rec = fault_record()
    assert FAULT.one_line(rec) == "ok recovered in 1.50 s, world 2 -> 2"
    assert FAULT.list_figure(rec) == "recovered in 1.50 s"
    lines = FAULT.summary_lines(rec)
    assert lines[:4] == [
        "status: ok",
        "fault: SIGKILL to rank 1 (pid 4001) at step 6",
        "detection: 0.10 s (elastic agent saw the worker group fail)",
        "recovery (signal to first step after it): 1.50 s",
    ]
    assert "resumed from step 4; steps redone 2; trained 12 of 12" in lines
    assert "world size 2 -> 2; restarts 1, resets 0; the run ended 5.00 s after the fault" in lines
    assert "ranks after: 0=pid 4000@node, 1=pid 4001@node" in lines
    assert lines[-1] == "resumed state equals the committed one (1 process(es) checked)"
    hung = fault_record(status="timeout", metrics={"recovery_s": None, "world_after": None, "hang_observed_s": 4.0})
    assert FAULT.one_line(hung) == "timeout: hung: no training step within 90 s of the fault"
    assert FAULT.list_figure(hung) == "-"
    assert "hang observed 4.00 s after the fault; no step since" in FAULT.summary_lines(hung)


# ---------------------------------------------------------------- the parameter server's share of a sweep
class CountingGroup:
    """A process group that only counts the collective calls a sweep makes, and returns its output buffer."""

    def __init__(self):
        self.calls = []

    def run_op(self, op, inp, out):
        self.calls.append((op, inp.numel()))
        return out

    def barrier(self):
        pass


@pytest.mark.parametrize("ops, n", [(["allreduce"], 2), (["allreduce", "allgather", "broadcast"], 3)])
def test_a_server_is_told_exactly_the_calls_each_worker_makes(ops, n):
    spec = comm_spec(world_size=n, ops=ops, dtype="float32", min_bytes=4, max_bytes=4096, warmup_iters=3, iters=7)
    comm = spec.comm
    group = CountingGroup()
    rows = time_messages(spec, group, rank_row(0, n), TorchBuffers("float32", "cpu", lambda: None))
    assert ops_per_size(comm) == 3 + 7 + 1
    plan = sweep_plan(comm, n)
    assert [(r["op"], r["count"]) for r in rows] == [(op, count) for op, _, count in plan]
    made = []  # (op, input elements, calls) per step of the sweep, in order
    for call in group.calls:
        if made and tuple(made[-1][:2]) == call:
            made[-1][2] += 1
        else:
            made.append([*call, 1])
    told = [(op, OPS[op].in_count(count, n), ops_per_size(comm)) for op, _, count in plan]
    assert [tuple(m) for m in made] == told
    server_plan = [(count, ops_per_size(comm)) for op, _, count in plan if op == "allreduce"]
    assert server_plan == [(count, calls) for op, count, calls in made if op == "allreduce"]


# ---------------------------------------------------------------- spec checks
def test_a_sweep_of_no_collective_is_refused():
    with pytest.raises(UsageError, match="--ops names no collective"):
        build_comm_spec(backend="elastic", world_size=1, device="cpu", ops=[])


@pytest.mark.parametrize(
    "backend, options, says",
    [
        ("ps", dict(ops=["allgather"]), "has no allgather"),
        ("horovod", dict(ops=["allreduce"], dtype="bfloat16"), "float32"),
        ("elastic", dict(ops=["allreduce"], min_bytes=64, max_bytes=4), "need 1 <= min <= max"),
        ("elastic", dict(ops=["alltoall"]), "unknown op 'alltoall'"),
        ("single", dict(ops=["allreduce"]), "no collectives to time"),
    ],
)
def test_sweeps_a_backend_cannot_run_are_refused(backend, options, says):
    with pytest.raises(UsageError, match=says):
        build_comm_spec(backend=backend, world_size=1, device="cpu", **options)


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), 0, -1, "10", 1e10, 7 * 24 * 3600 + 1])
def test_a_timeout_must_be_a_positive_finite_number(timeout):
    with pytest.raises(UsageError, match="positive, finite number of seconds"):
        check_timeout(timeout)


def test_a_usable_timeout_passes():
    check_timeout(0.5)
    check_timeout(7 * 24 * 3600)
    check_timeout(900)


def test_a_fault_runs_group_waits_for_its_processes_until_the_recovery_timeout():
    """The short collective timeout (how soon a stopped peer is noticed) does not bound a group's forming; a training
    run's group waits as long as its collectives."""
    from factories import fault_spec, train_spec

    spec = fault_spec(comm_timeout=3.0, recovery_timeout=90.0)
    assert (spec.collective_timeout, spec.join_timeout) == (3.0, 90.0)
    assert fault_spec(comm_timeout=30.0, recovery_timeout=20.0).join_timeout == 30.0
    train = train_spec("elastic", "mnist_mlp", 2)
    assert train.join_timeout == train.collective_timeout


def test_horovods_gloo_timeout_is_the_join_timeout_only_where_a_worker_joins():
    """One Gloo timeout bounds Horovod's rendezvous and its collectives: the join timeout under --fault join, where the
    workers wait for the new process to start, the short collective timeout under every other fault."""
    from bench.backends.horovod.launcher import HorovodElastic
    from factories import fault_spec

    join = fault_spec("horovod", scenario="join", comm_timeout=3.0, recovery_timeout=90.0)
    kill = fault_spec("horovod", comm_timeout=3.0, recovery_timeout=90.0)
    assert HorovodElastic.gloo_timeout_s(join, join.fault) == 90
    assert HorovodElastic.gloo_timeout_s(kill, kill.fault) == 3
