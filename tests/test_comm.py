"""Communication sweeps: nccl-tests' definitions, the alpha-beta fit, and real 2-rank sweeps."""

import pytest

from bench.core.codec import float_of
from bench.rank.collectives import (
    OPS,
    element_count,
    fit_alpha_beta,
    format_table,
    parse_bytes,
    sweep_plan,
    sweep_sizes,
)
from bench.tasks.comm.settings import CommSettings
from conftest import bench, bench_json
from factories import ceiling, comm_row
from needs import needs


@pytest.mark.parametrize(
    "op, n, factor",
    [
        ("allreduce", 2, 1.0),
        ("allreduce", 8, 1.75),
        ("allgather", 4, 0.75),
        ("reduce_scatter", 8, 0.875),
        ("broadcast", 8, 1.0),
    ],
)
def test_bus_bandwidth_factors(op, n, factor):
    assert OPS[op].factor(n) == pytest.approx(factor)


def test_sizes_and_counts():
    assert [parse_bytes(t) for t in ("4", "8K", "64M", "1G", "2kb")] == [4, 8192, 64 * 2**20, 2**30, 2048]
    with pytest.raises(ValueError, match="not a size"):
        parse_bytes("12 parsecs")
    assert sweep_sizes(4, 64) == [4, 8, 16, 32, 64]
    assert element_count(OPS["allreduce"], 4, "float32", 2) == 1
    assert element_count(OPS["allgather"], 12, "float32", 2) == 2  # rounded to a multiple of n
    assert element_count(OPS["allreduce"], 4, "float16", 2) == 2


def test_fit_recovers_known_alpha_and_beta():
    a, b, n = 25e-6, 1 / 5e9, 4  # 25 us per step, 5 GB/s
    alpha_coef, beta_coef = 2 * (n - 1), 2 * (n - 1) / n
    rows = [{"size": s, "time_us": (alpha_coef * a + beta_coef * s * b) * 1e6} for s in sweep_sizes(4, 2**26)]
    fit = fit_alpha_beta(rows, alpha_coef, beta_coef)
    assert fit["alpha_s"] == pytest.approx(a, rel=1e-6)
    assert fit["bandwidth_gbps"] == pytest.approx(5.0, rel=1e-6)
    assert fit["r2_weighted"] == pytest.approx(1.0)
    # noise of +-10% still lands near the truth
    noisy = [dict(r, time_us=r["time_us"] * (1.1 if i % 2 else 0.9)) for i, r in enumerate(rows)]
    fit = fit_alpha_beta(noisy, alpha_coef, beta_coef)
    assert fit["alpha_s"] == pytest.approx(a, rel=0.15) and fit["bandwidth_gbps"] == pytest.approx(5.0, rel=0.15)


def test_no_fit_for_one_rank():
    assert fit_alpha_beta([{"size": 4, "time_us": 1.0}, {"size": 8, "time_us": 1.0}], 0.0, 0.0) is None


def test_table_has_nccl_tests_columns():
    rows = [comm_row("allreduce", 1024, 10.0)]  # 1024 B in 10 us: algbw 0.1024 GB/s, busbw x 1 at n = 2
    text = format_table(rows)
    assert "size         count      type   redop     time   algbw   busbw  #wrong" in text
    assert "1024           256     float     sum     10.0    0.10    0.10       0" in text
    assert "# Avg bus bandwidth    : 0.1024" in text
    assert "machine ceiling" not in text
    text = format_table(rows + [comm_row("allgather", 2048, 10.0, world_size=4, wrong=3)], ceiling(4.0))
    assert text.count("# Avg bus bandwidth") == 2 and "# allgather" in text
    assert "2048           512     float    none     10.0    0.20    0.15       3" in text
    assert text.endswith("# machine ceiling: loopback TCP 4.00 GB/s (memory_copy 10.00 GB/s, loopback_tcp 4.00 GB/s)")


@pytest.mark.slow
@pytest.mark.parametrize(
    "backend, ops, dtype",
    [
        ("elastic", "allreduce,allgather,reduce_scatter,broadcast", "float32"),
        ("elastic", "allreduce", "bfloat16"),
        # Not reduce_scatter: Horovod 0.28.1's Gloo reduce-scatter was seen to return a few wrong elements,
        # intermittently (25 of 16,384 at 128 KiB, once in four sweeps); the sweep reports that as `failed`.
        ("horovod", "allreduce,allgather,broadcast", "float32"),
        ("horovod", "allreduce", "float16"),
        ("ps", "allreduce", "float32"),
        # TensorFlow's collectives, on TensorFlow tensors (TFBuffers): the strategy's two, Horovod's in float16
        pytest.param("tf-mwms", "allreduce,allgather", "float32", marks=needs("tf")),
        pytest.param("horovod-tf", "allreduce,allgather,broadcast", "float16", marks=needs("tf")),
    ],
)
def test_real_two_rank_sweep_has_no_wrong_elements(backend, ops, dtype, store):
    proc, record = bench_json(
        "allreduce",
        "--backend",
        backend,
        "--nproc",
        2,
        "--ops",
        ops,
        "--dtype",
        dtype,
        "--min-bytes",
        4,
        "--max-bytes",
        "256K",
        "--warmup-iters",
        1,
        "--iters",
        3,
        "--store",
        store,
    )
    assert proc.returncode == 0, proc.stderr
    assert record["status"] == "ok" and record["spec"]["task"] == "comm"
    rows = record["metrics"]["rows"]
    assert [(r["op"], r["size"]) for r in rows] == [
        (op, size) for op, size, _ in sweep_plan(CommSettings.from_dict(record["spec"]["comm"]), 2)
    ]
    assert rows and all(r["wrong"] == 0 for r in rows)
    for r in rows:
        assert r["time_us"] == pytest.approx(max(r["per_rank_time_us"]))  # max over ranks
        assert r["algbw_gbps"] == pytest.approx(r["size"] / (r["time_us"] * 1e-6) / 1e9)
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * OPS[r["op"]].factor(2))
        assert 0 < r["busbw_fraction_of_limit"]
    metrics = record["metrics"]
    # a fit whose time per byte is not positive (timings at small sizes on a busy CPU) gives an infinite bandwidth,
    # which strict JSON writes as "Infinity" (docs/method.md, "Records")
    assert metrics["ceiling"]["limit_gbps"] > 0 and float_of(metrics["fit"]["bandwidth_gbps"]) > 0
    assert metrics["model"] == ("parameter server" if backend == "ps" else "ring")


@pytest.mark.slow  # a process per case; bench.tasks.comm.build_spec's refusals are checked in-process in test_tasks
def test_ops_a_backend_lacks_are_refused(store):
    proc = bench("allreduce", "--backend", "ps", "--ops", "allgather", "--store", store)
    assert proc.returncode == 2 and "has no allgather" in proc.stderr
    proc = bench("allreduce", "--backend", "horovod", "--dtype", "bfloat16", "--store", store)
    assert proc.returncode == 2 and "float32" in proc.stderr
    proc = bench("allreduce", "--backend", "elastic", "--max-bytes", "lots", "--store", store)
    assert proc.returncode == 2 and "not a size" in proc.stderr
    assert not store.exists()
