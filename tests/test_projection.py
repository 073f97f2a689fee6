"""The scaling model (bench.projection): its replay of each backend's schedule, the bytes each exchange puts on the
links, the clusters, the projection's intervals, and the profile it starts from (a real warm-up, timed in parts)."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from bench.backends.base import CommSchedule
from bench.core.errors import UsageError
from bench.core.registry import get_backend
from bench.projection.clusters import PROFILES, TCP_GOODPUT, Cluster, Link, parse_cluster, profile, shaped_test_hosts
from bench.projection.model import Inputs, Parts, Point, Shape, Value, crossover, project, replay, step_parts

S = 1e6  # bytes


def fixed(seconds):
    return lambda nbytes: (seconds, seconds)


# ---------------------------------------------------------------- each backend's schedule, replayed
def test_ddp_buckets_start_when_their_last_gradient_is_ready_one_at_a_time():
    schedule = CommSchedule("buckets", cap_bytes=2 * S, first_cap_bytes=1 * S)
    grads = [(0.1, 1 * S), (0.2, 1 * S), (0.3, 1 * S), (0.4, 1 * S)]
    # buckets: [g0] (first cap 1 MB), [g1, g2], [g3]; each collective takes 0.15 s
    end, busy, working, count = replay(schedule, grads, 0.4, fixed(0.15))
    assert count == 3
    # g0 at 0.1 -> 0.25; [g1, g2] ready at 0.3 -> 0.45; [g3] ready 0.4, waits for 0.45 -> 0.6
    assert end == pytest.approx(0.6)
    assert busy == pytest.approx(0.15 + 0.1)  # inside the backward pass (0 to 0.4)
    assert working == pytest.approx(busy)  # all of it the backend's own processing here


def test_horovod_cycles_fuse_what_is_ready_and_what_piles_up_behind_a_long_collective():
    schedule = CommSchedule("cycles", cap_bytes=100 * S, cycle_s=0.01)
    grads = [(0.001, S), (0.002, S), (0.05, S), (0.06, S), (0.07, S)]
    end, _, _, count = replay(schedule, grads, 0.07, fixed(0.1))
    # first wake at 0.005 fuses the first two; the next wake is when that collective ends (0.105): the other three
    # are ready by then and go as one
    assert count == 2
    assert end == pytest.approx(0.205)


def test_a_fusion_threshold_splits_one_cycles_gradients():
    schedule = CommSchedule("cycles", cap_bytes=1.5 * S, cycle_s=0.01)
    _, _, _, count = replay(schedule, [(0.0, S), (0.0, S), (0.0, S)], 0.01, fixed(0.001))
    assert count == 3


def test_the_parameter_server_exchanges_everything_after_the_backward_pass():
    schedule = get_backend("ps").comm_schedule({})
    end, busy, _, count = replay(schedule, [(0.1, S), (0.5, S)], 0.5, fixed(0.2))
    assert (count, busy) == (1, 0.0)
    assert end == pytest.approx(0.7)


def test_every_backend_says_its_schedule():
    assert get_backend("elastic").comm_schedule({"ddp_bucket_mb": 25.0}) == CommSchedule(
        "buckets", cap_bytes=25 * 2**20, first_cap_bytes=2**20
    )
    assert get_backend("ray").comm_schedule({"ddp_bucket_mb": 4.0}).kind == "buckets"
    hvd = get_backend("horovod").comm_schedule({"hvd_fusion_mb": None, "hvd_cycle_ms": None, "hvd_compression": "fp16"})
    assert (hvd.kind, hvd.cap_bytes, hvd.cycle_s, hvd.wire_scale) == ("cycles", 128 * 2**20, 0.001, 0.5)
    assert get_backend("single").comm_schedule({}).kind == "none"


# ---------------------------------------------------------------- what an exchange puts on the links
def test_a_ring_carries_two_n_minus_one_over_n_of_the_bytes_per_host():
    ring = get_backend("elastic").exchanges(S, 4, 4, "cpu", {})
    assert [(e.name, e.steps, e.link_bytes) for e in ring] == [("ring", 6.0, pytest.approx(1.5 * S))]
    assert get_backend("elastic").exchanges(S, 2, 1, "cpu", {})[0].link_bytes == 0


def test_on_gpus_a_tree_is_offered_and_wins_on_latency_at_scale():
    options = {}
    found = {e.name: e for e in get_backend("elastic").exchanges(S, 1024, 128, "cuda", options)}
    assert set(found) == {"ring", "tree"}
    assert found["tree"].steps < found["ring"].steps / 50


def test_parameter_server_pushes_in_sequence_then_answers():
    """4 hosts, one worker and one server each: every worker pushes 3/4 of S, one after another (4 x 3/4 S), then a
    host's server answers the 3 other workers with its quarter (3/4 S): 3.75 S on the busiest link."""
    (ps,) = get_backend("ps").exchanges(S, 4, 4, "cpu", {"ps_servers": 4})
    assert ps.link_bytes == pytest.approx(3.75 * S)
    assert ps.steps == 5
    (two,) = get_backend("ps").exchanges(S, 2, 2, "cpu", {})
    assert two.link_bytes == pytest.approx(1.5 * S)  # 2 x S/2 pushed, S/2 answered


# ---------------------------------------------------------------- clusters
def test_cluster_descriptions_and_profiles():
    c = parse_cluster("64x8:100gbit:5us")
    assert (c.max_nodes, c.workers_per_node, c.network.latency_s) == (64, 8, pytest.approx(5e-6))
    assert c.network.bandwidth == pytest.approx(100e9 / 8 * TCP_GOODPUT)
    assert c.worker_counts() == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    assert parse_cluster("3x1:10mbit").worker_counts() == [1, 2, 3]
    assert profile("cpu-10g", 2).workers_per_node == 2
    for name, cluster in PROFILES.items():
        assert cluster.source, name
    assert profile("ib-100g").max_workers == 1024


@pytest.mark.parametrize("text", ["8x", "0x8:1gbit", "4x8:fast", "4x8:1gbit:soon", "nowhere"])
def test_a_bad_cluster_is_one_line(text):
    with pytest.raises(UsageError) as err:
        profile(text) if "x" not in text else parse_cluster(text)
    assert "\n" not in str(err.value)


def test_test_hosts_are_a_shaped_link_and_shared_cores():
    c = shaped_test_hosts({"rate": "100mbit", "rate_bytes_per_s": 12.5e6, "delay": "2ms"}, 3, 2)
    assert (c.workers_per_node, c.max_nodes, c.shared_cores) == (1, 3, 2)
    assert c.network.latency_s == pytest.approx(2.05e-3)


# ---------------------------------------------------------------- the projection
def inputs(backend="elastic", se=0.0, **changes) -> Inputs:
    shape = Shape(0.3, 0.6, 0.1, tuple((k / 4, 0.25 * 4e6) for k in range(1, 5)))
    values = dict(
        compute=Value(0.1, 0.1 * se, 2),
        overhead_one=Value(0.002),
        overhead=Value(0.001, 0.0005 * se, 2),
        slowdown=Value(0.5, 0.05 * se, 2),
        alpha=Value(50e-6, 5e-6 * se, 2),
        beta=Value(1e-9, 1e-10 * se, 2),
    )
    values.update(changes)
    options = {
        "elastic": {"ddp_bucket_mb": 1.0},
        "horovod": {"hvd_fusion_mb": None, "hvd_cycle_ms": None, "hvd_compression": "none"},
        "ps": {"ps_servers": 1, "ps_mode": "sync", "ps_staleness": None},
    }[backend]
    return Inputs("w", backend, options, 32, 1, "cpu", shape=shape, fit_world=2, **values)


NET = Cluster("net", "nodes of 1 over 1 Gbit/s", "cpu", 1, 1024, Link(125e6, 50e-6))


def test_one_worker_is_compute_and_the_backends_own_overhead():
    parts, _ = step_parts(inputs(), NET, 1)
    assert parts.step == pytest.approx(0.1 + 0.002)
    (point,) = project(inputs(), NET, [1])
    assert point.efficiency == 1.0


def test_parts_add_up_and_a_slower_link_exposes_more():
    fast = Cluster("fast", "", "cpu", 1, 64, Link(10e9, 5e-6))
    slow = Cluster("slow", "", "cpu", 1, 64, Link(1.25e6, 5e-6))  # 10 Mbit/s
    a, _ = step_parts(inputs(), fast, 8)
    b, _ = step_parts(inputs(), slow, 8)
    for parts in (a, b):
        assert parts.step == pytest.approx(parts.compute + parts.slowdown + parts.exposed + parts.overhead)
    assert b.exposed > a.exposed > 0
    # at 10 Mbit/s the link dominates: 2 x 7/8 x 4 MB / 1.25 MB/s
    assert b.step == pytest.approx(2 * 7 / 8 * 4e6 / 1.25e6, rel=0.1)


def test_communication_inside_the_backward_pass_slows_it_by_the_measured_rate():
    without = step_parts(inputs(slowdown=Value(0.0)), NET, 4)[0]
    with_it = step_parts(inputs(slowdown=Value(1.0)), NET, 4)[0]
    assert without.slowdown == 0 and with_it.slowdown > 0
    assert with_it.step > without.step


def test_shared_cores_slow_the_compute_past_their_count():
    shared = Cluster("th", "", "cpu", 1, 4, Link(1e12, 1e-9), shared_cores=2)
    assert step_parts(inputs(), shared, 2)[0].compute == pytest.approx(0.1)
    assert step_parts(inputs(), shared, 4)[0].compute == pytest.approx(0.2)


def test_intervals_hold_the_point_and_grow_with_the_inputs_spread():
    a = project(inputs(se=1.0), NET, [1, 8, 64])
    for p in a[1:]:
        assert p.step_low < p.step < p.step_high
        assert p.efficiency_low < p.efficiency < p.efficiency_high
    wider = project(inputs(se=2.0), NET, [8])[0]
    assert wider.step_high - wider.step > 1.5 * (a[1].step_high - a[1].step)
    exact = project(inputs(), NET, [8])[0]
    assert exact.step_low == pytest.approx(exact.step) == pytest.approx(exact.step_high)


def test_one_uncertain_input_gives_t_times_its_move():
    """Compute alone uncertain (3 launches: 2 degrees of freedom): the half-width is t(0.975, 2) = 4.303 times the
    step's move when compute moves by its standard error."""
    only = inputs(compute=Value(0.1, 0.01, 2))
    (p,) = project(only, NET, [1])
    assert p.step_high - p.step == pytest.approx(4.303 * 0.01, rel=1e-3)


def test_the_fastest_backend_changes_where_the_replays_cross():
    points = {b: project(inputs(b), NET, [2, 16, 256]) for b in ("elastic", "ps")}
    changes = crossover(points)
    steps = {b: [p.step for p in pts] for b, pts in points.items()}
    leaders = [min(steps, key=lambda b: steps[b][k]) for k in range(3)]
    assert [(n, a, b) for n, a, b in changes] == [
        (n, leaders[k - 1], leaders[k]) for k, n in enumerate([2, 16, 256]) if k and leaders[k] != leaders[k - 1]
    ]


def test_the_summary_says_it_ranks_speed_not_the_efficiency_its_table_shows():
    """A backend can scale better than the other (efficiency against its own one worker) and still train slower:
    the sentence above the table names what it ranks, so it does not read as contradicting the table."""
    from bench.report.scale import projection_blocks

    points = {b: project(inputs(b), NET, [1, 2, 16]) for b in ("elastic", "ps")}
    case = type("Case", (), {"workload": "mnist_mlp", "batch": 64})()
    said = "".join(s.text for s in projection_blocks(case, NET, points)[0].text)
    assert "(a shorter step)" in said or "(the shortest step)" in said
    assert "the efficiencies below are each backend's against its own one worker" in said


def test_value_of_launches():
    v = Value.of([1.0, 2.0, 3.0], ("a", "b", "c"))
    assert (v.mean, v.dof, v.runs) == (2.0, 2, ("a", "b", "c"))
    assert v.se == pytest.approx(1 / math.sqrt(3))
    d = v.minus(Value(0.5, 0.0, 0))
    assert (d.mean, d.se) == (1.5, v.se)


# ---------------------------------------------------------------- the profile, on a real warm-up
def test_a_warm_up_profiled_in_parts():
    import torch

    from bench.rank.profile import StepProfiler
    from bench.rank.training import optimizer_step

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    profiler = StepProfiler(model, lambda: None)
    for _ in range(3):
        optimizer_step(model, optimizer, torch.nn.CrossEntropyLoss(), lambda: (x, y), 1, profiler.mark)
    profile = profiler.close()
    assert profile["steps"] == 3
    # ready in reverse layer order: the last layer's bias and weight first
    assert [g[0] for g in profile["grads"]][:2] in ([3, 2], [2, 3])
    assert sorted(g[0] for g in profile["grads"]) == [0, 1, 2, 3]
    assert sum(g[1] for g in profile["grads"]) == sum(p.numel() for p in model.parameters())
    assert 0 < profile["gradients_s"] <= profile["backward_s"]
    shape = Shape.of_profile(profile)
    assert shape.forward + shape.backward + shape.optimizer == pytest.approx(1.0)
    assert shape.grads[-1][0] == pytest.approx(1.0)
    # the hooks are gone: a step after close() records nothing
    optimizer_step(model, optimizer, torch.nn.CrossEntropyLoss(), lambda: (x, y))
    assert len(profiler.steps) == 3


# ---------------------------------------------------------------- which checked points are judged
def test_a_point_is_judged_only_where_the_link_dominates_and_the_launches_agree():
    from bench.projection.validate import Row, Validation

    (point,) = project(inputs(), NET, [4])

    def row(share, low, high, error=0.05):
        measured = Value(point.step / (1 + error), 0.01, 2, ("a", "b", "c"))
        return Row(
            "w",
            "elastic",
            4,
            "1gbit",
            measured,
            measured.mean * low,
            measured.mean * high,
            point,
            share,
            measured.runs,
            point,
            False,
        )

    judged, cores, scattered = row(0.2, 0.9, 1.1), row(0.8, 0.9, 1.1), row(0.2, 0.5, 1.5, error=-0.6)
    assert judged.left_out == ""
    assert "shared cores decide it" in cores.left_out
    assert "scatter by ±50%" in scattered.left_out
    v = Validation([judged, cores, scattered], [], [])
    assert v.judged == [judged]
    assert v.median_error == pytest.approx(0.05) and v.meets_goal()
    assert "1 of 3 points judged" in v.summary()


def test_the_tasks_say_what_their_runs_give_the_model():
    from bench.core.registry import all_tasks, get_task

    assert get_task("train").model_input == "step" and get_task("comm").model_input == "collective"
    assert {t.name for t in all_tasks() if not t.model_input} == {"fault", "converge"}


# ---------------------------------------------------------------- bench predict on the study's committed store
STUDY = __import__("pathlib").Path(__file__).resolve().parent.parent / "docs/studies/projection/bench.sqlite"


def test_the_studys_table_is_what_bench_predict_validate_says():
    """docs/studies/projection/validate.txt is the output of `bench predict --validate` on the committed store: the
    model, its fit and its check have not drifted from the study; it misses a goal there, so it exits 1."""
    from conftest import bench

    proc = bench("predict", "--validate", "--store", str(STUDY))
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == (STUDY.parent / "validate.txt").read_text()


def test_the_projection_studys_figures_are_what_the_model_computes_from_its_store():
    """docs/studies/projection.md's tables (the check's summary, every point, the CPU and GPU projections) and the
    figures its prose gives are what bench.projection.study makes from the committed store: none is typed by hand."""
    from bench.cli.common import open_store
    from bench.projection import study
    from bench.projection.model import SHARED_CORES_NEGOTIATION_S
    from bench.projection.validate import validate

    page = (STUDY.parent.parent / "projection.md").read_text()
    records = open_store(str(STUDY)).records()
    checked = validate(records)
    for table in study.tables(records, checked):
        assert "\n".join(table) in page, f"the study lacks (or has another version of) this table:\n{table[0]}"
    assert f"**{checked.summary()}**" in page
    over = [r for r in checked.judged if abs(r.error) > 0.20]
    flat = " ".join(page.split())
    assert f"missed at {len(over)} of {len(checked.judged)} points" in flat
    assert f"{SHARED_CORES_NEGOTIATION_S * 1e3:g} ms a rank beyond the fit's 2" in flat


def test_compute_from_another_workloads_run_is_refused_in_one_line():
    from bench.cli.common import open_store
    from conftest import assert_one_line_error, bench

    other = next(
        r.run_id
        for r in open_store(str(STUDY)).records()
        if r.spec.backend == "single" and r.spec.workload == "resnet18"
    )
    proc = bench(
        "predict", "--store", str(STUDY), "--workload", "mnist_mlp", "--backend", "elastic", "--compute-from", other
    )
    assert_one_line_error(proc, f"--compute-from {other}: it trained resnet18, not mnist_mlp")


# ---------------------------------------------------------------- a cluster smaller than asked
def test_a_cluster_smaller_than_the_workers_asked_says_so_in_one_line(tmp_path):
    """--cluster eth-25g --max-workers 512 stops at its 128 GPUs (32 nodes of 4): one line on stderr and the same
    in the JSON, not a table that silently ends short; without --max-workers, the cluster's size is the end."""
    from conftest import bench_in_process

    argv = ["predict", "--model", "params:25M,4M", "--compute-ms", "100", "--compute-batch", "32", "--backend"]
    argv += ["horovod", "--cluster", "eth-25g", "--store", tmp_path / "none.sqlite", "--json"]
    proc = bench_in_process(*argv, "--max-workers", "512")
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "eth-25g has 32 node(s) of 4" in line and "up to 128 workers, not the 512 asked" in line
    (result,) = json.loads(proc.stdout)["results"]
    assert result["cluster"]["short"] == line.removeprefix("bench predict: ")
    assert result["cluster"]["asked_workers"] == 512
    assert result["backends"]["horovod"]["points"][-1]["workers"] == 128
    within = bench_in_process(*argv, "--max-workers", "64")
    assert within.returncode == 0 and within.stderr == ""
    assert json.loads(within.stdout)["results"][0]["cluster"]["short"] is None
    plain = bench_in_process(*argv)
    assert plain.returncode == 0 and plain.stderr == ""


# ---------------------------------------------------------------- what grows with N
def test_horovods_negotiation_grows_with_the_ranks_and_is_its_own_part():
    """Every cycle Horovod's coordinator gathers the ranks' ready tensors and answers before the cycle's collectives
    start: a tree of 2 ceil(log2 N) messages at the links' latency. With a 1 ms message it is the step's growth
    with N (the part `coordination`); DDP's buckets negotiate nothing."""
    from bench.projection.model import NEGOTIATION_LEGS, negotiation_s

    slow = Cluster("slow", "", "cpu", 1, 1024, Link(125e9, 1e-3))
    one_tensor = Shape(0.3, 0.6, 0.1, ((1.0, 4e6),))  # one collective after the backward pass: no fusion to move
    hvd = replace(inputs("horovod", overhead=Value(0.0)), shape=one_tensor)
    hvd = replace(hvd, options={**hvd.options, "hvd_cycle_ms": 50.0})  # a cycle longer than any negotiation here
    assert negotiation_s(hvd, slow, 64) == pytest.approx(NEGOTIATION_LEGS * 6 * 1e-3)
    assert negotiation_s(inputs("elastic"), slow, 64) == 0.0
    counts = [1, 4, 16, 64, 256]
    points = project(hvd, slow, counts)
    coordination = [p.parts.coordination for p in points]
    assert coordination == pytest.approx([negotiation_s(hvd, slow, n) if n > 1 else 0.0 for n in counts])
    assert all(b > a for a, b in zip(coordination, coordination[1:]))
    efficiencies = [p.efficiency for p in points]
    assert all(b < a for a, b in zip(efficiencies, efficiencies[1:]))
    for p in points:
        parts = p.parts
        total = parts.compute + parts.slowdown + parts.exposed + parts.overhead + parts.coordination + parts.stragglers
        assert parts.step == pytest.approx(total)
    assert all(p.parts.coordination == 0 for p in project(inputs("elastic"), slow, [4, 64, 256]))


def test_the_slowest_of_n_workers_grows_as_sigma_sqrt_2_ln_n():
    """A synchronous step waits for the slowest worker: E[max of N] of lognormal steps of spread sigma. Two normal
    draws' larger is sigma/sqrt(pi) above the mean; it grows without end, about as sigma sqrt(2 ln N); on links that
    cost nothing, a compute-bound step loses efficiency with N only through it."""
    from bench.projection.model import slowest_of

    assert slowest_of(2, 0.01) == pytest.approx(1 + 0.01 / math.sqrt(math.pi), rel=1e-4)
    assert slowest_of(1, 0.05) == slowest_of(64, 0.0) == 1.0
    grows = [slowest_of(n, 0.02) for n in (2, 8, 64, 512, 4096)]
    assert all(b > a for a, b in zip(grows, grows[1:]))
    assert slowest_of(4096, 0.02) - 1 == pytest.approx(0.02 * math.sqrt(2 * math.log(4096)), rel=0.25)
    free = Cluster("free", "", "cpu", 1, 1024, Link(1e15, 0.0))
    jittery = project(inputs(jitter=Value(0.05), alpha=Value(0.0), beta=Value(0.0)), free, [1, 8, 512])
    steady = project(inputs(jitter=Value(0.0), alpha=Value(0.0), beta=Value(0.0)), free, [1, 8, 512])
    assert jittery[1].efficiency > jittery[2].efficiency and jittery[2].efficiency < 0.9 * steady[2].efficiency
    assert steady[1].parts.stragglers == 0
    parts = jittery[2].parts
    assert parts.stragglers == pytest.approx((parts.compute + parts.slowdown) * (slowest_of(512, 0.05) - 1))


def test_the_step_spread_is_measured_from_the_plain_loops_windows():
    """The spread of a worker's step on CPU: each plain-loop launch's sd of ln(window time), over launches."""
    from bench.projection.fit import step_spread
    from factories import train_record

    runs = [train_record(f"p{i}", "single", 1, [100.0, 110.0, 90.0 + i]) for i in range(3)]
    spread = step_spread(runs)
    each = [float(np.std(np.log(r.metrics.window_times_s), ddof=1)) for r in runs]
    assert spread.mean == pytest.approx(np.mean(each)) and spread.dof == 2 and spread.mean > 0


def stage_cost(text: str, nbytes: float = 400e6, workers: int = 32):
    """One collective of `nbytes` on a described cluster: (seconds, stages)."""
    from bench.projection.model import collective_cost

    cluster = parse_cluster(text, "cuda" if "=" in text.split(":oversub")[0] else "cpu")
    device = cluster.device
    base = inputs("elastic")
    shaped = Inputs(**{**base.__dict__, "device": "other" if device == "cuda" else device})
    cost, _ = collective_cost(shaped, cluster, workers, 0.0, 0.0)
    took, _, stages = cost(nbytes)
    return took, dict(zip(("in_node", "network", "nic_pcie", "oversubscription"), stages))


def test_a_2_to_1_oversubscribed_fabric_halves_a_nodes_share_across_it():
    """oversub=2 (2:1): the bytes between nodes go at half the NIC's rate, said as its own stage; 1:1 by default."""
    plain_took, plain = stage_cost("8x4:10gbit:0us")
    took, over = stage_cost("8x4:10gbit:0us:oversub=2")
    assert plain["oversubscription"] == 0 and parse_cluster("8x4:10gbit").oversubscription == 1.0
    assert took == pytest.approx(2 * plain_took) and over["oversubscription"] == pytest.approx(over["network"])
    gpu = parse_cluster("4x8:nvlink=1200gbit,ib=100g,oversub=2")
    assert gpu.oversubscription == 2.0 and "oversubscribed 2:1" in gpu.summary
    _, gpu_stages = stage_cost("4x8:nvlink=1200gbit,ib=100g@0us,oversub=2")
    assert gpu_stages["oversubscription"] == pytest.approx(gpu_stages["network"], rel=1e-6)
    assert gpu_stages["in_node"] >= 0


def test_the_nics_share_of_its_pcie_link_caps_the_network_stage():
    """Over TCP NCCL stages the bytes in host memory, so the NIC gets half of the PCIe link it shares with the GPUs
    (nicshare= says otherwise); over RDMA all of it. Where half the PCIe link is slower than the NIC, the network
    stage is that slower rate, and what it adds is its own stage; beside NVLink the PCIe link is given as pcie=."""
    _, tcp = stage_cost("4x4:pcie=32gbit,eth=100g@0us", workers=16)
    _, rdma = stage_cost("4x4:pcie=32gbit,roce=100g@0us", workers=16)
    _, given = stage_cost("4x4:pcie=32gbit,eth=100g@0us,nicshare=1", workers=16)
    nic = 100e9 / 8 * TCP_GOODPUT
    pcie = 32e9 / 8 * 0.8
    wire = 2 * 15 / 16 * 400e6
    assert tcp["network"] == pytest.approx(wire / nic)
    assert tcp["nic_pcie"] == pytest.approx(wire / (0.5 * pcie) - wire / nic)
    assert given["nic_pcie"] == 0  # all of the GPUs' own link, which the ring's bytes cross anyway: in the node's stage
    assert given["in_node"] == pytest.approx(wire / pcie - wire / nic, rel=1e-3)
    assert rdma["nic_pcie"] < tcp["nic_pcie"]
    beside = parse_cluster("4x8:nvlink=1200gbit,pcie=128gbit,ib=100g")
    assert beside.node_link.bandwidth == pytest.approx(120e9) and beside.pcie_link.bandwidth == pytest.approx(12.8e9)


def test_on_gpu_nodes_a_collective_is_its_stages_in_the_node_and_on_the_network():
    """Within a node a collective is all in-node (NVLink); across nodes the network's stage comes in, and a node's
    link slower than the NIC is the in-node stage's extra."""
    one_took, one = stage_cost("1x8:nvlink=1200gbit", workers=8)
    assert one["network"] == 0 and one["in_node"] == pytest.approx(one_took)
    took, both = stage_cost("4x8:pcie=8gbit,ib=100g", workers=32)
    assert both["network"] > 0 and both["in_node"] > both["network"]
    assert sum(both.values()) == pytest.approx(took)


@pytest.mark.parametrize(
    "text, says",
    [
        ("8x4:10gbit:oversub=0.5", "oversub= takes the fabric's oversubscription"),
        ("4x8:nvlink=100g,ib=10g,oversub=x", "oversub= takes the fabric's oversubscription"),
        ("4x8:pcie=100g,ib=10g,nicshare=2", "nicshare= takes the share"),
        ("4x8:nvlink=100g,ib=10g,nicshare=0.5", "nicshare= is a share of the PCIe link: give pcie= too"),
    ],
)
def test_a_bad_fabric_or_nic_share_is_one_line(text, says):
    with pytest.raises(UsageError) as err:
        parse_cluster(text)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_the_steps_breakdown_has_each_effect_as_its_own_part(tmp_path):
    """`bench predict --json`: the step's parts (coordination, stragglers beside compute, exposed, overhead) add up to
    the step; the collectives' stages (in_node, network, nic_pcie, oversubscription) are given beside; the text
    table has a column for each."""
    from conftest import bench_in_process

    argv = ["predict", "--model", "params:25M,4M", "--compute-ms", "100", "--compute-batch", "32", "--backend"]
    argv += ["horovod", "--cluster", "8x4:pcie=32gbit,eth=25g,oversub=2", "--store", tmp_path / "none.sqlite"]
    proc = bench_in_process(*argv, "--json")
    assert proc.returncode == 0, proc.stderr
    (result,) = json.loads(proc.stdout)["results"]
    points = {p["workers"]: p for p in result["backends"]["horovod"]["points"]}
    for p in points.values():
        parts = p["parts_s"]
        assert set(parts) >= {"coordination", "stragglers"}
        summed = sum(parts[k] for k in ("compute", "slowdown", "exposed", "overhead", "coordination", "stragglers"))
        assert p["step_s"] == pytest.approx(summed)
        assert set(p["stages_s"]) == {"in_node", "network", "nic_pcie", "oversubscription"}
    assert points[4]["stages_s"]["in_node"] > 0 and points[4]["stages_s"]["network"] == 0
    assert points[32]["stages_s"]["oversubscription"] > 0 and points[32]["stages_s"]["nic_pcie"] > 0
    assert points[32]["parts_s"]["stragglers"] > points[4]["parts_s"]["stragglers"] > 0
    assert result["cluster"]["oversubscription"] == 2.0 and result["cluster"]["nic_share"] == 0.5
    text = bench_in_process(*argv)
    assert text.returncode == 0, text.stderr
    header = next(line for line in text.stdout.splitlines() if "workers nodes" in line)
    assert all(word in header for word in ("coord", "straggle", "in-node", "network", "pcie", "oversub"))


# ---------------------------------------------------------------- which backend is faster
def point_at(workers: int, step: float, low: float, high: float) -> Point:
    parts = Parts(step, 0.0, 0.0, 0.0, 0.0, 0)
    return Point(workers, 1, parts, low, high, 1.0, 1.0, 1.0, 32, "ring")


def test_a_backend_is_named_faster_only_where_the_intervals_do_not_overlap():
    """At 2 workers elastic's interval lies below horovod's: elastic; at 4 they overlap, though elastic's point is
    shorter: none; at 8 horovod's lies below: horovod. The changes say so, None where none is named."""
    from bench.projection.model import fastest, fastest_words

    points = {
        "elastic": [point_at(2, 1.0, 0.9, 1.1), point_at(4, 1.0, 0.9, 1.1), point_at(8, 2.0, 1.9, 2.1)],
        "horovod": [point_at(2, 1.5, 1.4, 1.6), point_at(4, 1.05, 0.95, 1.15), point_at(8, 1.0, 0.9, 1.1)],
    }
    assert fastest(points) == [(2, "elastic"), (4, None), (8, "horovod")]
    assert crossover(points) == [(4, "elastic", None), (8, None, "horovod")]
    words = fastest_words(points)
    assert "elastic at 2 workers" in words and "none at 4 workers" in words and "horovod at 8 workers" in words
