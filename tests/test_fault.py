"""Fault runs for real: torchrun and horovodrun elastic modes on 2 gloo processes, restarts exhausted, a stopped
worker (torchrun's; Horovod's, which it does not come through, in tests/test_runs.py's sweep), a worker joining, and
bad input (a worker killed from outside, with the resumed parameters checked against
training computed independently: tests/test_backend_contract.py)."""

import pytest

from conftest import SHORT, bench, fault

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("backend", ["elastic", "horovod"])
def test_restarts_exhausted_fail_quickly(store, backend):
    proc, record = fault(store, "--backend", backend, "--nproc", 2, "--max-restarts", 0, *SHORT)
    assert proc.returncode == 1
    assert record["status"] == "failed" and "gave up" in record["error"]["message"]
    assert record["metrics"]["ended_after_fault_s"] < 30


def test_a_stopped_elastic_worker_is_detected_and_replaced(store):
    proc, record = fault(store, "--backend", "elastic", "--nproc", 2, "--signal", "STOP", "--comm-timeout", 3, *SHORT)
    assert record["status"] == "ok", record["error"]
    f = record["metrics"]
    assert f["detection_s"] >= 2.5 and f["recovery_s"] > f["detection_s"] and f["restarts"] == 1


@pytest.mark.parametrize("backend", ["elastic", "horovod"])
def test_a_joining_worker_is_taken_in(store, backend):
    proc, record = fault(store, "--backend", backend, "--nproc", 1, "--fault", "join", *SHORT)
    assert proc.returncode == 0, record["error"]
    assert record["status"] == "ok", record["error"]
    f = record["metrics"]
    assert (f["world_before"], f["world_after"]) == (1, 2)
    if backend == "horovod":  # Gloo's timeout covers the joiner's start (docs/method.md, "horovod")
        assert record["launch"]["collective_timeout_s"] == record["spec"]["fault"]["recovery_timeout"]
    assert f["join_contributes_s"] is not None and f["join_contributes_s"] >= f["recovery_s"] - 0.5
    assert f["resume_checks"] and all(c["equal"] for c in f["resume_checks"])
    assert len([r for r in record["rank_map"] if r["phase"] == "after"]) == 2


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--backend", "ps"], "no elastic mode"),
        (["--backend", "horovod", "--nproc", "1"], "--nproc 2 or more"),
        (["--kill-rank", "5"], "--kill-rank 5"),
        (["--at-step", "0"], "--at-step"),
        (["--at-step", "30", "--steps", "20"], "must exceed"),
        (["--gpus", "1"], "no CUDA device"),
        (["--signal", "HUP"], "invalid choice"),
        (["--workload", "nope"], "unknown workload"),
    ],
)
def test_fault_bad_input_is_one_line(store, argv, says):
    proc = bench("fault", "--store", store, *argv)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], proc.stderr


def test_every_elastic_mode_that_makes_drop_host_has_the_work_that_delivers_it():
    """drop-host is delivered by work of the elastic mode's own (its entry's hook, DropsHosts: drop_host and
    discovered): a mode makes it only with that work, and one without it is refused when asked for it."""
    from bench.core.errors import UsageError
    from bench.core.registry import elastic_backends, get_backend
    from bench.tasks.fault.scenarios import DROP_HOST, DropsHosts
    from bench.tasks.fault.spec import check_scenario_of

    making = []
    for name in elastic_backends():
        mode = get_backend(name).elastic
        if mode.supports(DROP_HOST):
            making.append(name)
            assert isinstance(mode, DropsHosts), name
        else:
            with pytest.raises(UsageError, match="not drop-host"):
                check_scenario_of(name, DROP_HOST)
    assert set(making) == {"horovod", "horovod-tf"}


def _late_member(rank: int, late_s: float, port: int, out) -> None:
    """A process of a 2-process gloo group joined through join_torchrun_group (join timeout 60 s, collective timeout
    2 s), `late_s` after its peer; rank 0 then waits in an allreduce that rank 1 never joins."""
    import os
    import time
    from types import SimpleNamespace

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2")
    time.sleep(late_s)
    import torch
    import torch.distributed as dist

    from bench.backends.shared.torchrun import join_torchrun_group

    join_torchrun_group("gloo", SimpleNamespace(join_timeout=60.0, collective_timeout=2.0))
    out.put((rank, "joined"))
    if rank == 0:
        started = time.monotonic()
        try:
            dist.all_reduce(torch.ones(1))
            out.put((rank, "no timeout"))
        except RuntimeError:
            out.put((rank, time.monotonic() - started))
    else:
        time.sleep(15)  # alive, never in the collective: rank 0's allreduce must end by its timeout, not by a peer gone


def test_a_process_started_late_still_joins_and_collectives_keep_the_short_timeout():
    """Real processes on gloo: rank 1 starts 6 s after rank 0, past the 2 s collective timeout, and the group still
    forms (a fault run's restarted process on a busy machine); an allreduce its peer never joins then fails after
    about the 2 s collective timeout, not the 60 s the group waited to form."""
    import multiprocessing
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_late_member, args=(rank, late, port, out)) for rank, late in ((0, 0.0), (1, 6.0))]
    for p in procs:
        p.start()
    try:
        seen = [out.get(timeout=90) for _ in range(3)]
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    assert sorted(r for r, what in seen if what == "joined") == [0, 1], seen
    (waited,) = [what for r, what in seen if what != "joined"]
    assert isinstance(waited, float) and waited < 30, seen
