"""What every backend keeps, one test per behaviour, each parametrized over the backends that take it (read from
bench.core.registry: a backend's tasks, its elastic mode's scenarios, whether its updates are synchronous): a hung
process ended at the deadline with nothing left running; a crashed process, by an exception and by SIGKILL, named
with its exit; a rank killed under `bench fault` and recovered, the parameters each process resumed from checked
against 2-worker SGD computed here; and, after K synchronous steps from the same seed and batches, the same
parameters as the companion backend of its framework. Real runs through the CLI, 2 gloo workers each (1 for a
backend that takes no more); the process that hangs or crashes is the run's last (a worker, or the parameter
server's server, which follows the workers).

A backend that cannot run here (Ray or TensorFlow not installed) is skipped, saying why; under CI (CI=true) it runs
and fails instead, so CI never passes by skipping one. What only one backend has (Horovod's MPI controllers, the
parameter server's sharding, Ray's start-up phases, torchrun's restarts exhausted) is tested in its own module."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from bench.core.registry import COMPARED, PRIMARY, get_backend
from bench.tasks.fault.scenarios import SCENARIOS
from conftest import (
    FAST,
    SHORT,
    TrainedRun,
    assert_nothing_left,
    assert_resumed_params_are_two_worker_sgd,
    bench_json,
    claims_apart,
    fault,
    keras_model,
    torch_compiler_before_tensorflow,
)
from needs import needs

torch_compiler_before_tensorflow()  # the parameter checks of the TensorFlow backends load TensorFlow in this process

pytestmark = pytest.mark.slow

BACKENDS = list(COMPARED) + [name for name in ("single",) if name not in COMPARED]  # with the plain loop


def takes(name: str, task: str) -> bool:
    return task in get_backend(name).tasks


def world_of(name: str) -> int:
    """The workers of its contract runs: 2, or fewer where the backend takes no more (the plain loop)."""
    most = get_backend(name).max_world_size
    return min(2, most) if most else 2


def last_process(name: str) -> int:
    """The rank of the last process of its contract runs: the last worker, or the last of the processes of other
    roles, which follow the workers (a parameter server's server)."""
    backend = get_backend(name)
    world = world_of(name)
    return sum(backend.roles(backend.resolve_options({}, world), world).values()) - 1


# backends whose runs hold their cores mostly idle, waiting for their runtime (conftest.claims_apart)
MOSTLY_WAITING = {"ray"}


def on(*backends: str, values: tuple = ()) -> object:
    """A case of a test run under `backends` (the first one's name, then `values`), which needs each of them here."""
    marks = [needs(*(f"backend:{name}" for name in backends))]
    if MOSTLY_WAITING & set(backends):
        marks.append(pytest.mark.claims_apart)
    return pytest.param(backends[0], *values, marks=marks)


def name_in_messages(record: dict, rank: int) -> str:
    """How a run's messages name a process: 'rank R', with its role where the run has processes of several roles."""
    if len(record["spec"]["roles"]) < 2:
        return f"rank {rank}"
    row = next(r for r in record["rank_map"] if r["rank"] == rank)
    return f"rank {rank} ({row['role']} {row['role_rank']})"


# ---------------------------------------------------------------- a hung process
# each backend's deadline: its start-up and two steps, with room. The start-up differs by machine, and on one machine
# by how busy it is (Horovod's workers started 8 s after the launch on a 2-core Intel Xeon, 12.9 s on a 2-core AMD
# EPYC), so the deadline is read off this session's own 2-worker run of the backend on the MLP (two_worker_run, made
# anyway for the parameters' equivalence): its launch to first step, times HANG_STARTUP_ROOM, plus HANG_STEPS_ROOM_S.
# The last process reaches its hang by then: a worker two MLP steps (milliseconds) after its first, the parameter
# server's server before the workers' first step. Where no such run can be read (the plain loop has none; a failed
# run records no start-up) the deadline is HANG_DEADLINE_S's. Where a process is still starting at the deadline all
# the same (the machine busier than during the 2-worker run), the run is made again with twice the time
# (HANG_RETRY_FACTOR), once, so that a slower moment costs a second run and a faster one nothing. The hang holds the
# run, its cores claimed, until the deadline ends it: a deadline fitted to the machine holds them no longer than
# it needs.
HANG_STARTUP_ROOM = 1.5
HANG_STEPS_ROOM_S = 5
HANG_DEADLINE_S = {"ray": 60, "horovod-tf": 30, "ps": 25, "horovod": 20, "single": 10}
DEFAULT_HANG_DEADLINE_S = 15
HANG_RETRY_FACTOR = 2
# where each process of a hung run stands at the deadline, by its role: a worker past its warm-up (the hang is at step
# 3, after FAST's 2 warm-up steps), a parameter server joined. A run ended before that was still starting, and would
# test the deadline, not the hang.
HUNG_STATE = {"worker": "warm-up done", "server": "joined the group, in warm-up"}
# the states a process passes through before its hang, in order (bench.harness.outcome)
STARTING_STATES = ("not started", "started, not yet joined the group", "joined the group, in warm-up")
TEARDOWN_S = 45  # from the deadline to the bench process's exit, every process of the run ended


def injected_run(backend: str, injection: str, deadline: int, store) -> tuple:
    """A contract run (FAST) of the backend with `--inject INJECTION`, ended at `deadline` at the latest."""
    return bench_json(
        "run",
        "--backend",
        backend,
        "--nproc",
        world_of(backend),
        "--inject",
        injection,
        "--timeout",
        deadline,
        "--store",
        store,
        *FAST,
        timeout=deadline + 300,
    )


def hung_run(backend: str, deadline: int, hung: int, store) -> tuple[dict, list[tuple[str, str]]]:
    """A run whose last process hangs at step 3, ended at `deadline`: its record, checked for what holds whether or not
    every process had reached the hang, and for each process by rank, where it stood and where its hang leaves it."""
    # the hang holds its cores until the deadline, mostly idle: a hung Horovod run's survivors keep one core busy (its
    # background loop polls), which leaves the other worker's runs the other core rather than none
    with claims_apart():
        proc, record = injected_run(backend, f"hang:{hung}:3", deadline, store)
    # from its launch (a run may first wait for cores another run holds) to the bench process's exit
    assert time.time() - record["created_at"] < deadline + TEARDOWN_S
    assert proc.returncode == 1 and record["status"] == "timeout", record["error"]
    error = record["error"]
    assert error["message"] == f"deadline of {deadline} s passed"
    # where every process was when the deadline came, from the files it wrote
    assert [row["rank"] for row in error["ranks"]] == list(range(hung + 1))
    roles = {row["rank"]: row["role"] for row in record["rank_map"]}
    assert_nothing_left(record)
    return record, [(row["state"], HUNG_STATE[roles.get(row["rank"], "worker")]) for row in error["ranks"]]


def still_starting(state: str, hung_state: str) -> bool:
    """Whether a process that stood at `state` at the deadline had not yet reached the state of its hang."""
    return state in STARTING_STATES and (
        hung_state not in STARTING_STATES or STARTING_STATES.index(state) < STARTING_STATES.index(hung_state)
    )


def hang_deadline(backend: str, two_worker_run) -> int:
    """The deadline of the backend's hung run: from this session's 2-worker run of it, or its fixed one."""
    fixed = HANG_DEADLINE_S.get(backend, DEFAULT_HANG_DEADLINE_S)
    if world_of(backend) < 2:
        return fixed
    run = two_worker_run(backend, "mnist_mlp", *OPTIONS.get(backend, ()))
    startup = (run.record.get("metrics") or {}).get("startup") or {}
    first_step = startup.get("launch_to_first_step_s")
    if run.record.get("status") != "ok" or not first_step:
        return fixed
    return math.ceil(first_step * HANG_STARTUP_ROOM + HANG_STEPS_ROOM_S)


@pytest.mark.parametrize("backend", [on(name) for name in BACKENDS if takes(name, "train")])
def test_a_hung_process_is_ended_at_the_deadline_with_nothing_left(backend, store, two_worker_run):
    deadline, hung = hang_deadline(backend, two_worker_run), last_process(backend)
    record, states = hung_run(backend, deadline, hung, store)
    if any(still_starting(state, hung_state) for state, hung_state in states):
        # a slower machine: the deadline came before the hang; once more, with time for the start-up seen here
        record, states = hung_run(backend, deadline * HANG_RETRY_FACTOR, hung, store)
    assert all(state == hung_state for state, hung_state in states), (record["error"]["ranks"], record["rank_map"])


def test_the_hang_deadline_is_fitted_to_the_sessions_two_worker_run():
    """1.5 x its launch to first step + 5 s, rounded up; the fixed one where that run failed or cannot be made."""
    asked = []

    def made(status: str, first_step: float | None):
        def two_worker_run(backend, workload, *options):
            asked.append((backend, workload, *options))
            startup = {"launch_to_first_step_s": first_step} if first_step is not None else {}
            return TrainedRun(None, {"status": status, "metrics": {"startup": startup}}, Path("."), Path("."))

        return two_worker_run

    assert hang_deadline("horovod", made("ok", 10.0)) == 20
    assert hang_deadline("ray", made("ok", 21.7)) == 38
    assert hang_deadline("ps", made("ok", 11.0)) == 22  # the run the equivalence makes, with its options
    assert asked == [("horovod", "mnist_mlp"), ("ray", "mnist_mlp"), ("ps", "mnist_mlp", *OPTIONS["ps"])]
    assert hang_deadline("horovod", made("failed", None)) == HANG_DEADLINE_S["horovod"]
    assert hang_deadline("elastic", made("ok", None)) == DEFAULT_HANG_DEADLINE_S
    assert hang_deadline("single", made("ok", 3.0)) == HANG_DEADLINE_S["single"]  # no 2-worker run of it


def test_a_process_still_starting_at_the_deadline_is_told_from_one_past_its_hang():
    """The retry's rule: a process before its hung state is still starting; one at or past it is not."""
    assert still_starting("started, not yet joined the group", "warm-up done")
    assert still_starting("joined the group, in warm-up", "warm-up done")
    assert still_starting("not started", "joined the group, in warm-up")
    assert not still_starting("joined the group, in warm-up", "joined the group, in warm-up")
    assert not still_starting("warm-up done", "warm-up done")
    assert not still_starting("finished window 1", "warm-up done")


# ---------------------------------------------------------------- a crashed process
# launchers that reap their workers themselves: a worker's exit status never reaches bench (Ray's actors)
NO_EXIT_STATUS = {"ray"}
# launchers that end every other process as soon as one exits: the one that raised may be ended by their SIGTERM
# while it shuts down (horovodrun, whose first exit is often the victim's own)
ENDS_THE_OTHERS_AT_ONCE = {"horovod", "horovod-tf"}


@pytest.mark.parametrize(
    "backend, kind",
    [on(name, values=(kind,)) for name in BACKENDS if takes(name, "train") for kind in ("crash", "kill")],
)
def test_a_crashed_process_is_named_with_its_exit(backend, kind, store):
    """An exception at step 4 (the rank, the exception and its message, its exit) or a SIGKILL (the rank and the
    signal): that process is blamed, not the others whose failures follow from it."""
    victim = last_process(backend)
    proc, record = injected_run(backend, f"{kind}:{victim}:4", 120, store)
    assert proc.returncode == 1 and record["status"] == "crashed", record["error"]
    error = record["error"]
    assert error["rank"] == victim
    name = name_in_messages(record, victim)
    if kind == "crash":
        assert error["exception"] == "RuntimeError" and "injected crash at step 4" in error["tail"]
        ways = {(1, None): "exit code 1"}  # (exit code, signal): how the message says it
        if backend in ENDS_THE_OTHERS_AT_ONCE:
            ways[None, "SIGTERM"] = "signal SIGTERM"
        how = ways.get((error["exit_code"], error["signal"]))
        assert how is not None, error
        assert error["message"] == f"{name} raised RuntimeError: injected crash at step 4 (exited with {how})"
    elif backend in NO_EXIT_STATUS:
        assert (error["exception"], error["exit_code"], error["signal"]) == (None, None, None), error
        assert error["message"].startswith(f"{name} ended with no exit status")
        assert "the Ray worker process died" in error["tail"]
    else:
        assert (error["exception"], error["exit_code"], error["signal"]) == (None, None, "SIGKILL"), error
        assert error["message"] == f"{name} ended with signal SIGKILL"
        # its guard ends by the same signal (SIGKILL can be neither caught nor reset), with no error of its own
        assert "bench/harness/guard.py" not in (Path(record["run_dir"]) / "launcher.log").read_text()
    assert_nothing_left(record)


# ---------------------------------------------------------------- a killed rank under `bench fault`
@dataclass(frozen=True)
class Recovery:
    """How a backend's elastic mode comes through a killed worker of two."""

    world_after: int  # 2: the group is restarted at its size, in new processes; 1: the survivor goes on alone
    detected_by: tuple[str, ...] = ()  # what the detection it records names
    agent_reports: bool = False  # torchrun's agent: a rendezvous per attempt, each new worker's restart count


RECOVERY = {
    "elastic": Recovery(world_after=2, agent_reports=True),
    "ray": Recovery(world_after=2),
    "horovod": Recovery(world_after=1, detected_by=("HorovodInternalError",)),
    # the survivor's step fails in Horovod's allreduce (TensorFlow's error, which hvd.elastic.run takes for a lost peer)
    "horovod-tf": Recovery(world_after=1, detected_by=("UnknownError", "Allreduce")),
}


def kills_under_fault(name: str) -> bool:
    elastic = get_backend(name).elastic
    return takes(name, "fault") and elastic is not None and elastic.supports(SCENARIOS["kill"])


@pytest.mark.parametrize("backend", [on(name) for name in BACKENDS if kills_under_fault(name)])
def test_a_killed_rank_is_recovered_from_the_last_checkpoint(backend, store):
    """Rank 1 of 2 SIGKILLed at step 25, a commit every 10 steps: the run comes through, resumes from step 20 and
    redoes 5 steps; the parameters each process resumed from are 20 steps of 2-worker SGD. A backend RECOVERY does
    not name may come through either way, each checked as RECOVERY's are."""
    proc, record = fault(store, "--backend", backend, "--nproc", 2, "--kill-rank", 1, *SHORT, "--save-params")
    assert proc.returncode == 0 and record["status"] == "ok", record["error"]
    f = record["metrics"]
    expected = RECOVERY.get(backend) or Recovery(world_after=f["world_after"])
    assert f["fault"]["signal"] == "KILL" and f["fault"]["step"] == 25 and f["fault"]["delivered"]
    assert (f["world_before"], f["world_after"]) == (2, expected.world_after) and expected.world_after in (1, 2)
    assert f["resumed_from_step"] == 20 and f["steps_redone"] == 5 and f["steps_completed"] == 60
    assert 0 < f["detection_s"] <= f["recovery_s"]
    for fragment in expected.detected_by:
        assert fragment in f["detected_by"], f["detected_by"]
    before = [r for r in record["rank_map"] if r["phase"] == "before"]
    after = [r for r in record["rank_map"] if r["phase"] == "after"]
    assert [r["rank"] for r in before] == [0, 1]
    if expected.world_after == 2:  # a new group: new processes, ranks 0 and 1 again, after one restart
        assert f["restarts"] == 1
        assert [r["rank"] for r in after] == [0, 1]
        assert not {r["pid"] for r in before} & {r["pid"] for r in after}
    else:  # the survivor (rank 0 here) is the same process, now alone, after one reset
        assert f["resets"] == 1
        assert len(after) == 1 and after[0]["pid"] == before[0]["pid"] and after[0]["world_size"] == 1
    if expected.agent_reports:
        assert all(r["restart_count"] == 1 for r in after)
        rendezvous = [r for r in f["rendezvous"] if r["state"] == "RENDEZVOUS"]
        assert sorted(r["attempt"] for r in rendezvous) == [0, 1] and all(r["duration_ms"] >= 0 for r in rendezvous)
    # each process resumed with the checksum committed at step 20
    assert len(f["resume_checks"]) == expected.world_after and all(c["equal"] for c in f["resume_checks"])
    assert_resumed_params_are_two_worker_sgd(record, steps=20, processes=expected.world_after)
    assert_nothing_left(record)


# ---------------------------------------------------------------- the same parameters after K synchronous steps
def anchor_of(framework: str) -> str:
    """The backend the others of a framework are held against: the first compared one of that framework (elastic
    for PyTorch, TensorFlow's own strategy for TensorFlow)."""
    return next(name for name in COMPARED if get_backend(name).framework == framework)


# the parameter server's update split over two servers (synchronous, as by default): the comparison its sharding
# must pass
OPTIONS = {"ps": ("--ps-servers", 2, "--ps-mode", "sync")}


def synchronous_by_default(name: str) -> bool:
    backend = get_backend(name)
    return backend.synchronous(backend.resolve_options({}, 2))


# every synchronous backend of 2 or more workers on the MLP, besides its framework's anchor; the primary pair,
# whose comparison is the report's verdict, on ResNet18 too
EQUIVALENT = [
    (name, workload)
    for name in COMPARED
    if takes(name, "train")
    and world_of(name) == 2
    and synchronous_by_default(name)
    and name != anchor_of(get_backend(name).framework)
    for workload in (("mnist_mlp", "resnet18") if name in PRIMARY else ("mnist_mlp",))
]


def initial_params(record: dict, framework: str) -> list:
    """The parameters the run started from (the seeded model), as numpy arrays in the model's order."""
    spec = record["spec"]
    if framework == "tensorflow":
        model, _ = keras_model(spec)
        return [w.numpy() for w in model.weights]
    import torch

    from workloads import WORKLOADS

    torch.manual_seed(spec["seed"])
    model = WORKLOADS[spec["workload"]].build(spec["num_classes"], spec["image_size"])
    return [value.numpy() for value in model.state_dict().values()]


@pytest.mark.parametrize(
    "backend, workload",
    [
        pytest.param(name, workload, marks=on(name, anchor_of(get_backend(name).framework)).marks)
        for name, workload in EQUIVALENT
    ],
)
def test_the_same_parameters_as_the_anchor_after_k_synchronous_steps(backend, workload, two_worker_run):
    """The same seed, data and per-worker batch, and each step the mean of the same gradients: the parameters after
    K steps are the anchor's within float tolerance (any difference is a bug of one of them), and both workers of
    each run hold the same ones. (The runs are shared with each backend's own run test: conftest.two_worker_run.)"""
    framework = get_backend(backend).framework
    anchor = anchor_of(framework)
    ours, theirs = (two_worker_run(name, workload, *OPTIONS.get(name, ())) for name in (backend, anchor))
    for run in (ours, theirs):
        assert run.proc.returncode == 0 and run.record["status"] == "ok", run.proc.stderr
        assert_nothing_left(run.record)
        assert run.left_in_tmpdir() == [], f"{run.record['spec']['backend']} left files in its TMPDIR"
    params, anchor_params = ours.params(framework), theirs.params(framework)
    assert [name for name, _ in params] == [name for name, _ in anchor_params]
    initial = initial_params(ours.record, framework)
    assert len(initial) == len(params)
    moved = 0
    for (name, value), (_, expected), start in zip(params, anchor_params, initial, strict=True):
        if np.issubdtype(value.dtype, np.floating):
            np.testing.assert_allclose(value, expected, rtol=1e-4, atol=1e-5, err_msg=name)
            moved += not np.allclose(value, start)
    assert moved > 0, "training changed no parameter: the comparison would prove nothing"
    for run in (ours, theirs):
        ranks = run.record["metrics"]["per_rank"]
        assert [r["rank"] for r in ranks] == [0, 1]
        assert ranks[0]["param_checksum"] == pytest.approx(ranks[1]["param_checksum"], rel=1e-6)
        # one compute thread of its framework in each worker, as --threads 1 (the default on CPU) says
        assert run.record["spec"]["threads"] == 1 and all(r["threads"][framework] == 1 for r in ranks), ranks
    for mine, its in zip(ours.record["metrics"]["per_rank"], theirs.record["metrics"]["per_rank"], strict=True):
        assert mine["param_checksum"] == pytest.approx(its["param_checksum"], rel=1e-5)
        assert mine["loss_last"] == pytest.approx(its["loss_last"], rel=1e-4)
