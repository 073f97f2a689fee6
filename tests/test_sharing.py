"""One benchmark at a time per set of cores (bench.harness.cores): a run waits for another bench run on its cores,
or is refused after its wait, or runs alongside marked (--allow-shared); the claim dies with its process."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from bench.core.errors import CoresInUse
from bench.harness.cores import CoreClaim, Sharing
from conftest import FAST, ROOT, bench_in_process, claims_apart

HOLDER = """
import sys, time
from bench.harness.cores import CoreClaim
with CoreClaim(sys.argv[1], "a test holder", None, ["cpu0", "cpu1"]):
    print("holding", flush=True)
    time.sleep(600)
"""


CLAIM_AT_ONCE = """
from bench.core.errors import CoresInUse
from bench.harness.cores import CoreClaim, Sharing
try:
    with CoreClaim("another-apart-run", "a test", None, ["cpu1"], Sharing(wait_s=0)):
        print("claimed")
except CoresInUse:
    print("CoresInUse")
"""


def start_holder(run_id: str, env: dict) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, run_id], env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "holding"
    return proc


def test_a_claim_is_waited_for_refused_after_the_wait_and_dies_with_its_process(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("BENCH_LOCK_DIR", str(tmp_path))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    holder = start_holder("holder-run", env)
    try:
        started = time.monotonic()
        with pytest.raises(CoresInUse) as refused:
            with CoreClaim("second-run", "a test", None, ["cpu1", "cpu2"], Sharing(wait_s=0.6)):
                pass
        assert 0.6 <= time.monotonic() - started < 5
        said = str(refused.value)
        assert said.startswith("CPU 1 still in use by run holder-run (a test holder; pid ") and "--allow-shared" in said
        assert f"pid {holder.pid}," in said
        assert "CPU 1 in use by run holder-run" in capfd.readouterr().err  # said while it waited
        # other cores are free
        with CoreClaim("third-run", "a test", None, ["cpu2", "cpu3"], Sharing(wait_s=0)) as claim:
            assert claim.finish() == []
    finally:
        holder.send_signal(signal.SIGKILL)  # no cleanup runs: the kernel drops its lock
        holder.wait()
    assert (tmp_path / "holder-run.claim").exists()
    with CoreClaim("fourth-run", "a test", None, ["cpu1"], Sharing(wait_s=0)):
        assert not (tmp_path / "holder-run.claim").exists()  # a dead process's claim, removed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["registry.lock"]


def test_a_run_claimed_apart_does_not_wait_for_the_other_workers_run(tmp_path, monkeypatch):
    """tests/conftest.py's claims_apart, under pytest-xdist: a run that holds its cores mostly idle claims them in the
    session's second folder, so a claim the other worker holds in its first does not hold it up (nor is either
    marked), while another such run does; outside it, the first folder is back, and the same claim is refused."""
    session = tmp_path / "bench-locks"
    session.mkdir()
    monkeypatch.setenv("BENCH_LOCK_DIR", str(session))
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    holder = start_holder("other-workers-run", dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        with claims_apart():
            with CoreClaim("apart-run", "a test", None, ["cpu0", "cpu1"], Sharing(wait_s=0)) as claim:
                other_worker = subprocess.run(
                    [sys.executable, "-c", CLAIM_AT_ONCE],
                    env=dict(os.environ, PYTHONPATH=str(ROOT)),
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
                assert "CoresInUse" in other_worker.stdout, other_worker.stderr  # the second folder holds it
                assert claim.finish() == []
        assert os.environ["BENCH_LOCK_DIR"] == str(session)
        with pytest.raises(CoresInUse):
            with CoreClaim("waiting-run", "a test", None, ["cpu0"], Sharing(wait_s=0)):
                pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert (tmp_path / "bench-locks-apart" / "registry.lock").exists()


def test_sharing_marks_both_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCH_LOCK_DIR", str(tmp_path))
    with CoreClaim("first", "one", "/a.sqlite", ["cpu0", "cpu1"], Sharing(wait_s=0)) as first:
        with CoreClaim("second", "two", "/b.sqlite", ["cpu1"], Sharing(allow=True, wait_s=0)) as second:
            assert second.finish() == [{"run_id": "first", "label": "one", "store": "/a.sqlite"}]
        # a run that starts once the sharer's processes have ended overlaps nothing of it
        with CoreClaim("third", "three", None, ["cpu1"], Sharing(allow=True, wait_s=0)) as third:
            assert third.finish() == [{"run_id": "first", "label": "one", "store": "/a.sqlite"}]
        assert [r["run_id"] for r in first.finish()] == ["second", "third"]


def bench_process(store, lock_dir, *args):
    env = dict(os.environ, PYTHONPATH=str(ROOT), BENCH_LOCK_DIR=str(lock_dir))
    env.pop("BENCH_STORE", None)
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench",
            "run",
            "--backend",
            "single",
            "--nproc",
            "1",
            "--workload",
            "mnist_mlp",
            "--store",
            str(store),
            "--json",
            *FAST,
            *map(str, args),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def running_claims(lock_dir) -> list[dict]:
    out = []
    for path in lock_dir.glob("*.claim"):
        try:
            claim = json.loads(path.read_text() or "{}")
        except (OSError, ValueError):
            continue
        if claim.get("state") == "running":
            out.append(claim)
    return out


def wait_for_a_running_claim(lock_dir, proc) -> dict:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        claims = running_claims(lock_dir)
        if claims:
            return claims[0]
        time.sleep(0.1)
    pytest.fail(f"no run claimed the cores ({proc.poll()}): {proc.stderr.read() if proc.poll() is not None else ''}")


def finished(proc) -> dict:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return json.loads(out), err


@pytest.mark.slow
def test_a_second_run_into_one_store_waits_or_is_refused(tmp_path):
    store, locks = tmp_path / "bench.sqlite", tmp_path / "locks"
    first = bench_process(store, locks, "--inject-delay", "0.5s")  # 6 timed steps: 3 s more than it needs
    holder = wait_for_a_running_claim(locks, first)
    refused = bench_process(store, locks, "--wait-for-cores", "0.5")
    out, err = refused.communicate(timeout=120)
    assert refused.returncode == 2 and out == ""
    lines = err.strip().splitlines()
    assert lines[-1].startswith("bench run: error: CPU")
    assert f"still in use by run {holder['run_id']} (single" in lines[-1]
    assert "--allow-shared" in lines[-1]
    assert first.poll() is None, "the first run ended before the refusal: nothing was shown"
    waiting = bench_process(store, locks)  # the default wait
    one, _ = finished(first)
    two, said = finished(waiting)
    assert f"in use by run {one['run_id']}" in said and "waits for them" in said
    assert one["status"] == two["status"] == "ok" and one["shared_with"] == two["shared_with"] == []
    assert two["created_at"] >= one["created_at"] + one["duration_s"]  # launched once the first had ended
    runs = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert runs == sorted([one["run_id"], two["run_id"]])  # the refused run made nothing


@pytest.mark.slow
def test_allow_shared_runs_alongside_and_both_records_say_so(tmp_path):
    store, locks = tmp_path / "bench.sqlite", tmp_path / "locks"
    first = bench_process(store, locks, "--inject-delay", "0.5s")
    holder = wait_for_a_running_claim(locks, first)
    sharer = bench_process(store, locks, "--allow-shared", "--wait-for-cores", "0")
    two, said = finished(sharer)
    one, _ = finished(first)
    assert "shares CPU" in said and holder["run_id"] in said
    assert [r["run_id"] for r in two["shared_with"]] == [one["run_id"]]
    assert [r["run_id"] for r in one["shared_with"]] == [two["run_id"]]
    assert one["shared_with"][0] == {"run_id": two["run_id"], "label": "single mnist_mlp, world 1", "store": str(store)}
    from bench.core.store import Store
    from bench.results.frame import comparable_runs, load_frame

    frame = load_frame(Store(store))
    assert frame["shared"].all() and comparable_runs(frame).empty
    listing = bench_in_process("list", "--store", store)
    assert listing.returncode == 0 and listing.stdout.count("ok, shared") == 2
