"""`bench testray`: a real Ray cluster on the test hosts, and the ray backend on it with --ray-address. The fast tests
check the refusals anywhere; the other starts the cluster on two test hosts (root, network namespaces, sshd and
Ray; CI has them), taking down any test hosts already on the machine, one module using the test hosts at a time
(the lock tests/test_testhosts.py takes too). One module-wide cluster: a Ray run across two hosts is the costly
part (about a minute on 2 cores)."""

import os

import psutil
import pytest

from bench.testbed import hosts as testhosts
from bench.testbed import ray as testray
from bench.testbed.protocol import StateFile
from conftest import (
    FAST,
    assert_fails_in_one_line,
    assert_nothing_left,
    bench,
    bench_in_process,
    bench_json,
    held_test_hosts,
    run_tag_of,
)
from needs import needs

pytestmark = pytest.mark.claims_apart  # Ray's runs wait for its runtime most of their time (conftest.py)


# ---------------------------------------------------------------- refusals (no root needed)
@pytest.mark.parametrize(
    "args, fragments",
    [
        ([], ["required: ACTION"]),
        (["sideways"], ["invalid choice: 'sideways'"]),
        (["up", "2"], ["unrecognized arguments: 2"]),
        (["up", "--cpus", "many"], ["--cpus"]),
        (["up", "--cpus", "0"], ["--cpus"]),
    ],
)
def test_bad_input_is_refused(args, fragments):
    assert_fails_in_one_line(bench_in_process("testray", *args), 2, *fragments)


@pytest.mark.parametrize("action", ["up", "down", "status"])
def test_refused_when_not_root(monkeypatch, action):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert_fails_in_one_line(bench_in_process("testray", action), 2, "root", "sudo")


def test_refused_without_test_hosts(monkeypatch, tmp_path):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(testray, "unavailable_reason", lambda: None)
    monkeypatch.setattr(testhosts, "STATE", StateFile(tmp_path))  # no state file: no hosts were built
    monkeypatch.setattr(testray, "build", lambda *a: pytest.fail("built without test hosts"))
    assert_fails_in_one_line(bench_in_process("testray", "up"), 2, "no test hosts are up", "bench testhosts up 2")


def test_refused_without_ray(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(testhosts, "unavailable_reason", lambda: None)
    monkeypatch.setattr("bench.backends.ray.ray_problem", lambda: "Ray is not installed; pip install -e '.[ray]'")
    assert_fails_in_one_line(bench_in_process("testray", "up"), 2, "Ray is not installed", "pip install")


def test_a_client_joins_with_the_clusters_own_token():
    env = testray.environment()
    assert env == {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(testray.STATE_DIR / "auth_token")}
    assert testray.export_line() == f"export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH={testray.STATE_DIR}/auth_token"


# ---------------------------------------------------------------- a cluster on two test hosts (root)
def tagged(proc) -> bool:
    return run_tag_of(proc.pid) is not None


@pytest.fixture(scope="module")
def cluster():
    """Two test hosts and the Ray cluster on them, taken down afterwards, also when a test fails."""
    with held_test_hosts(2) as hosts:
        try:
            _, address = testray.up(cpus=1)
            yield {"hosts": hosts, "address": address}
        finally:
            testray.down()


@pytest.mark.slow
@needs("ray-cluster")
def test_ray_trains_across_the_test_hosts_and_leaves_the_cluster_as_it_was(cluster, store, monkeypatch):
    hosts, address = cluster["hosts"], cluster["address"]
    proc = bench("testray", "status")
    assert proc.returncode == 0, proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines()]
    assert [(r[0], r[1], r[2], r[-1]) for r in rows] == [("head", address.split(":")[0], "0", "alive")] + [
        (h.name, h.address, "1", "alive") for h in hosts
    ]
    before = {p.pid for p in testray.processes()}

    for key, value in testray.environment().items():  # as `bench testray up` says to
        monkeypatch.setenv(key, value)
    proc, record = bench_json(
        "run",
        "--backend",
        "ray",
        "--nproc",
        2,
        "--threads",
        1,
        "--ray-address",
        address,
        "--store",
        store,
        *FAST,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stderr
    assert record["status"] == "ok", record["error"]
    assert record["spec"]["backend_options"]["ray_address"] == address
    # one worker on each host (each offers 1 CPU, the head none): what Ray Train gave them, by the host they ran on
    rows = sorted(record["rank_map"], key=lambda r: r["rank"])
    assert {r["host"] for r in rows} == {h.name for h in hosts}, rows
    assert sorted(r["group_rank"] for r in rows) == [0, 1] and all(r["local_rank"] == 0 for r in rows)
    m = record["metrics"]
    assert m["per_rank"][0]["param_checksum"] == pytest.approx(m["per_rank"][1]["param_checksum"])
    assert "ray runtime start" in m["startup"]["launcher_phases"]  # here: joining the cluster
    # nothing of the run left, and the cluster as it was: none of its processes ended by the run's teardown (a
    # cluster-wide actor the run made, Ray Train's AutoscalingCoordinator, stays the cluster's, untagged)
    assert_nothing_left(record)
    assert not [p for p in testray.processes() if p.pid not in before and tagged(p)]
    assert before and all(psutil.pid_exists(pid) for pid in before)
    assert bench("testray", "status").returncode == 0

    proc = bench("testray", "down")
    assert proc.returncode == 0 and "Ray test cluster removed" in proc.stderr, proc.stderr
    assert testray.leftovers() == []
    proc = bench("testray", "status")
    assert proc.returncode == 1 and "no Ray test cluster is up" in proc.stderr
