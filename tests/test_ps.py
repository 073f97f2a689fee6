"""The parameter-server backend: sync and async, sharding, the staleness bound (its server killed, crashed and hung,
and its equivalence with elastic: tests/test_backend_contract.py, whose failing process is a run's last: its
server)."""

import pytest

from bench.backends.ps.group import balance_by_bytes
from conftest import FAST, assert_nothing_left, bench, bench_json


def test_shards_are_balanced_by_bytes():
    assert balance_by_bytes([100, 10, 60, 50], 2) == [[0, 1], [2, 3]]  # 110 bytes each
    sizes = [5, 5, 5, 5, 4, 4]
    shards = balance_by_bytes(sizes, 3)
    assert sorted(sum(sizes[i] for i in s) for s in shards) == [9, 9, 10]
    assert sorted(i for s in shards for i in s) == list(range(6))  # each parameter exactly once


@pytest.mark.slow
@pytest.mark.parametrize("servers, mode", [(1, "sync"), (2, "sync"), (1, "async")])
def test_ps_run(servers, mode, two_worker_run):
    # the synchronous run with 2 servers is shared with the contract's equivalence test
    run = two_worker_run("ps", "mnist_mlp", "--ps-servers", servers, "--ps-mode", mode)
    proc, record = run.proc, run.record
    assert proc.returncode == 0, proc.stderr
    assert record["status"] == "ok"
    spec = record["spec"]
    assert spec["world_size"] == 2 and spec["roles"] == {"worker": 2, "server": servers}
    assert spec["backend_options"]["ps_mode"] == mode
    roles = sorted((r["role"], r["role_rank"]) for r in record["rank_map"])
    assert roles == [("server", s) for s in range(servers)] + [("worker", 0), ("worker", 1)]
    m = record["metrics"]
    assert [r["rank"] for r in m["per_rank"]] == [0, 1]  # servers are not workers
    served = [o["served"] for o in m["other_roles"]]
    assert len(served) == servers and sum(s["parameters"] for s in served) == m["param_count"]
    steps = spec["warmup_steps"] + spec["windows"] * spec["steps_per_window"]
    for s in served:
        assert s["workers"] == 2 and s["pushes"] == 2 * steps and s["mode"] == mode
        assert s["bytes_in"] == 2 * steps * s["shard_bytes"]  # each server link carries N x its shard
    if mode == "sync":
        assert m["per_rank"][0]["param_checksum"] == m["per_rank"][1]["param_checksum"]
    assert_nothing_left(record)


def test_staleness_needs_async(store):
    proc = bench("run", "--backend", "ps", "--ps-staleness", 2, "--store", store)
    assert proc.returncode == 2 and "--ps-mode async" in proc.stderr


@pytest.mark.slow
def test_async_with_staleness_bound(store):
    proc, record = bench_json(
        "run", "--backend", "ps", "--nproc", 2, "--ps-mode", "async", "--ps-staleness", 0, "--store", store, *FAST
    )
    assert proc.returncode == 0, proc.stderr
    assert record["spec"]["backend_options"]["ps_staleness"] == 0
