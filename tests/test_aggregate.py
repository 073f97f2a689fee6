"""Status rules on hand-made rank files: which rank is blamed when several fail."""

from bench.aggregate import _root_cause


def exit_row(rank, t, returncode=1, terminated_by=None):
    return {"rank": rank, "attempt": 0, "time": t, "returncode": returncode,
            "exit_code": returncode if returncode >= 0 else None,
            "signal": "SIGKILL" if returncode == -9 else None, "terminated_by": terminated_by, "tail": ""}


def test_victim_that_exits_first_is_not_blamed():
    # rank 1 raised first; rank 0 failed 10 ms later because of it, but exited sooner
    exits = {0: exit_row(0, 5.0), 1: exit_row(1, 5.2, terminated_by="SIGTERM")}
    errors = {0: {"time": 4.01, "type": "HorovodInternalError", "message": "shut down"},
              1: {"time": 4.00, "type": "RuntimeError", "message": "boom"}}
    cause = _root_cause(exits, errors)
    assert cause["rank"] == 1 and cause["exception"] == "RuntimeError"


def test_signal_death_is_ordered_by_exit_time():
    exits = {0: exit_row(0, 3.0, returncode=-9), 1: exit_row(1, 3.5)}
    errors = {1: {"time": 3.2, "type": "RuntimeError", "message": "peer closed"}}
    cause = _root_cause(exits, errors)
    assert cause["rank"] == 0 and cause["signal"] == "SIGKILL"


def test_ranks_terminated_by_the_launcher_alone_are_not_causes():
    exits = {0: exit_row(0, 3.0, returncode=-15, terminated_by="SIGTERM"),
             1: exit_row(1, 3.0, returncode=-15, terminated_by="SIGTERM")}
    assert _root_cause(exits, {}) is None


def test_killed_rank_is_blamed_though_a_peer_raised_a_moment_before_its_exit_was_seen():
    # a server SIGKILLed: its peers raise "connection closed" 0.1 ms before its guard records the death
    exits = {0: exit_row(0, 5.2, returncode=-15, terminated_by="SIGTERM"),
             1: exit_row(1, 5.2, returncode=-15, terminated_by="SIGTERM"),
             2: exit_row(2, 5.0001, returncode=-9)}
    errors = {0: {"time": 5.0000, "type": "RuntimeError", "message": "Connection closed by peer"},
              1: {"time": 5.0002, "type": "RuntimeError", "message": "Connection closed by peer"}}
    cause = _root_cause(exits, errors)
    assert cause["rank"] == 2 and cause["signal"] == "SIGKILL" and cause["exception"] is None
