"""The parameter-server backend: sync and async, sharding, equivalence with elastic, failures."""

from pathlib import Path

import pytest
import torch

from bench.backends.ps import balance_by_bytes
from conftest import FAST, assert_nothing_left, bench, bench_json


def test_shards_are_balanced_by_bytes():
    assert balance_by_bytes([100, 10, 60, 50], 2) == [[0, 1], [2, 3]]  # 110 bytes each
    sizes = [5, 5, 5, 5, 4, 4]
    shards = balance_by_bytes(sizes, 3)
    assert sorted(sum(sizes[i] for i in s) for s in shards) == [9, 9, 10]
    assert sorted(i for s in shards for i in s) == list(range(6))  # each parameter exactly once


@pytest.mark.slow
@pytest.mark.parametrize("servers, mode", [(1, "sync"), (2, "sync"), (1, "async")])
def test_ps_run(servers, mode, store):
    proc, record = bench_json("run", "--backend", "ps", "--nproc", 2, "--ps-servers", servers,
                              "--ps-mode", mode, "--store", store, *FAST)
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
    proc, record = bench_json("run", "--backend", "ps", "--nproc", 2, "--ps-mode", "async",
                              "--ps-staleness", 0, "--store", store, *FAST)
    assert proc.returncode == 0, proc.stderr
    assert record["spec"]["backend_options"]["ps_staleness"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("workload, servers", [("mnist_mlp", 2)])  # ResNet18 under ps: test_across_hosts, the sweeps
def test_sync_ps_equals_elastic(workload, servers, store):
    common = ["--workload", workload, "--nproc", 2, "--save-params", "--seed", 3, "--store", store, *FAST]
    params = {}
    for backend, extra in (("elastic", []), ("ps", ["--ps-servers", servers])):
        proc, record = bench_json("run", "--backend", backend, *extra, *common)
        assert proc.returncode == 0, proc.stderr
        params[backend] = torch.load(Path(record["run_dir"]) / "ranks" / "rank0.a0.params.pt")
    for name, value in params["elastic"].items():
        if value.is_floating_point():
            torch.testing.assert_close(params["ps"][name], value, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.slow
def test_killed_server_ends_the_run(store):
    proc, record = bench_json("run", "--backend", "ps", "--nproc", 2, "--inject", "kill:2:4",
                              "--timeout", 120, "--store", store, *FAST)
    assert proc.returncode == 1 and record["status"] == "crashed", record["error"]
    assert record["error"]["rank"] == 2 and record["error"]["signal"] == "SIGKILL"
    assert {r["rank"]: r["role"] for r in record["rank_map"]}[2] == "server"
    # the killed rank's guard ends by the same signal (SIGKILL can be neither caught nor reset), with no error of its own
    assert "bench/harness/guard.py" not in (Path(record["run_dir"]) / "launcher.log").read_text()
    assert_nothing_left(record)


@pytest.mark.slow
def test_hung_server_times_out(store):
    proc, record = bench_json("run", "--backend", "ps", "--nproc", 2, "--inject", "hang:2:4",
                              "--timeout", 15, "--store", store, *FAST)
    assert proc.returncode == 1 and record["status"] == "timeout"
    assert len(record["error"]["ranks"]) == 3
    assert_nothing_left(record)
