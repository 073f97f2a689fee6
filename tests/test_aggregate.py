"""Status rules on hand-made rank files: which rank is blamed when several fail; startup; the record built
from a run directory."""

import dataclasses

import pytest

from bench.core.records import SCHEMA_VERSION, RunRecord
from bench.core.registry import get_task
from bench.harness.outcome import _root_cause, build_record, startup
from factories import (
    LAUNCHED_AT,
    exit_row,
    finished_run,
    outcome,
    rank_result,
    times,
    train_output,
    train_results,
    train_spec,
)


def test_victim_that_exits_first_is_not_blamed():
    # rank 1 raised first; rank 0 failed 10 ms later because of it, but exited sooner
    exits = {0: exit_row(0, 5.0), 1: exit_row(1, 5.2, terminated_by="SIGTERM")}
    errors = {
        0: {"time": 4.01, "type": "HorovodInternalError", "message": "shut down"},
        1: {"time": 4.00, "type": "RuntimeError", "message": "boom"},
    }
    cause = _root_cause(exits, errors, {})
    assert cause["rank"] == 1 and cause["exception"] == "RuntimeError"


def test_signal_death_is_ordered_by_exit_time():
    exits = {0: exit_row(0, 3.0, returncode=-9), 1: exit_row(1, 3.5)}
    errors = {1: {"time": 3.2, "type": "RuntimeError", "message": "peer closed"}}
    cause = _root_cause(exits, errors, {})
    assert cause["rank"] == 0 and cause["signal"] == "SIGKILL"


def test_ranks_terminated_by_the_launcher_alone_are_not_causes():
    exits = {
        0: exit_row(0, 3.0, returncode=-15, terminated_by="SIGTERM"),
        1: exit_row(1, 3.0, returncode=-15, terminated_by="SIGTERM"),
    }
    assert _root_cause(exits, {}, {}) is None


def test_killed_rank_is_blamed_though_a_peer_raised_a_moment_before_its_exit_was_seen():
    # a server SIGKILLed: its peers raise "connection closed" 0.1 ms before its guard records the death
    exits = {
        0: exit_row(0, 5.2, returncode=-15, terminated_by="SIGTERM"),
        1: exit_row(1, 5.2, returncode=-15, terminated_by="SIGTERM"),
        2: exit_row(2, 5.0001, returncode=-9),
    }
    errors = {
        0: {"time": 5.0000, "type": "RuntimeError", "message": "Connection closed by peer"},
        1: {"time": 5.0002, "type": "RuntimeError", "message": "Connection closed by peer"},
    }
    cause = _root_cause(exits, errors, {})
    assert cause["rank"] == 2 and cause["signal"] == "SIGKILL" and cause["exception"] is None


def test_a_vanished_rank_is_blamed_like_a_killed_one():
    # a Ray worker SIGKILLed: no exit status reaches the driver; its peer raised "connection reset" first
    exits = {
        0: exit_row(0, 5.2),
        1: {**exit_row(1, 5.3, returncode=-1), "signal": None, "exit_code": None, "vanished": True},
    }
    errors = {0: {"time": 5.0, "type": "RuntimeError", "message": "Connection reset by peer"}}
    cause = _root_cause(exits, errors, {})
    assert (cause["rank"], cause["signal"], cause["vanished"], cause["exception"]) == (1, None, True, None)


def test_without_a_signal_or_an_exception_the_first_to_exit_is_blamed():
    # rank 0 finished (its result is there); ranks 1 and 2 exited non-zero without a word, rank 2 first
    exits = {
        0: exit_row(0, 3.0, returncode=0),
        1: exit_row(1, 4.0, returncode=2, tail="oops"),
        2: exit_row(2, 3.5, returncode=1),
    }
    cause = _root_cause(exits, {}, {0: {}})
    assert (cause["rank"], cause["exit_code"], cause["signal"], cause["exception"]) == (2, 1, None, None)


def test_a_rank_that_exits_zero_before_the_end_is_blamed_not_its_peers_errors():
    # rank 1 left with code 0 at 3.0, without a word or its result; rank 0's "connection reset" (raised first, as
    # a peer's error can be before the leaver's guard sees it go) and the server's are consequences
    exits = {0: exit_row(0, 3.4), 1: exit_row(1, 3.0, returncode=0), 2: exit_row(2, 3.5)}
    errors = {
        0: {"time": 2.9999, "type": "RuntimeError", "message": "Connection reset by peer"},
        2: {"time": 3.1, "type": "RuntimeError", "message": "server: peer gone"},
    }
    cause = _root_cause(exits, errors, {})
    assert (cause["rank"], cause["exit_code"], cause["signal"], cause["exception"]) == (1, 0, None, None)
    # a rank that exits 0 after writing its result ended the run normally: the raiser is blamed
    cause = _root_cause(exits, errors, {1: {}})
    assert cause["rank"] == 0 and cause["exception"] == "RuntimeError"


def test_startup_is_the_slowest_process_and_needs_every_first_step():
    results = [rank_result(r, 2, train_output([0.1, 0.1])) for r in range(2)]
    s = startup(results, LAUNCHED_AT)
    assert (s.launch_to_process_s, s.rendezvous_s, s.launch_to_first_step_s) == pytest.approx((0.6, 0.6, 2.1))
    results[1] = dataclasses.replace(results[1], times=times(1, first_step=False))  # a process with no steps
    assert startup(results, LAUNCHED_AT).launch_to_first_step_s is None


def test_the_record_of_a_run_holds_its_facts_and_what_its_task_concluded(tmp_path):
    spec = train_spec(world_size=2)
    run_dir = finished_run(tmp_path / "run", spec, train_results(spec, [[0.1, 0.1], [0.2, 0.1]]))
    done = outcome(ended_after=12.0)
    done.reaped = [{"pid": 99, "name": "python"}]
    conclusion = get_task("train").conclude(spec, run_dir, done, None)
    conclusion.events.append({"time": LAUNCHED_AT + 5.0, "kind": "note"})
    rec = build_record("r-1", spec, run_dir, done, {"cpu_count": 2}, ["torchrun", "x"], conclusion, {"port": 1})
    assert (rec.schema_version, rec.run_id, rec.status, rec.created_at, rec.duration_s) == (
        SCHEMA_VERSION,
        "r-1",
        "ok",
        LAUNCHED_AT,
        12.0,
    )
    assert rec.metrics.window_times_s == [0.2, 0.1] and rec.launch == {"port": 1}
    assert rec.run_dir == str(run_dir.path) and rec.command == ["torchrun", "x"]
    kinds = [(e["kind"], e.get("rank")) for e in rec.events]
    assert kinds == [
        ("launch", None),
        ("note", None),
        ("rank_exit", 0),
        ("rank_exit", 1),
        ("launcher_exited", None),
        ("reaped", None),
    ]
    assert [e["time"] for e in rec.events] == sorted(e["time"] for e in rec.events)
    assert RunRecord.from_dict(rec.to_dict()) == rec
