"""CPU affinity: what --cpu-bind auto resolves to, that every kind of run's spec holds the resolved value, that
pinned and unpinned runs are never one case, and that pinning reaches every thread of a process.
(The real runs of the backends check the pinning of Horovod's own threads: tests/test_horovod.py.)"""

import os
import subprocess
import sys

import pytest

from bench.core.errors import UsageError
from bench.core.spec import resolve_cpu_bind
from bench.results.frame import CONDITIONS, records_to_frame
from factories import train_record

CLUSTER = {"hosts": [{"name": "h1", "slots": 1}, {"name": "h2", "slots": 1}], "iface": "eth0"}


@pytest.mark.parametrize(
    "requested, device, oversubscribe, cluster, chosen",
    [
        ("auto", "cpu", False, None, "cores"),  # CPU workers on one host that fit its cores: each on its own
        (None, "cpu", False, None, "cores"),  # not given: the default, auto
        ("auto", "cuda", False, None, "numa"),  # GPU workers on their GPU's NUMA node's cores
        ("auto", "cuda", False, CLUSTER, "numa"),  # each host reads its own GPUs' nodes
        ("numa", "cuda", False, None, "numa"),
        ("auto", "cpu", True, None, "none"),  # contention measured on purpose
        ("auto", "cpu", False, CLUSTER, "none"),  # test hosts share one machine: local ranks would collide
        ("none", "cpu", False, None, "none"),
        ("cores", "cpu", False, CLUSTER, "cores"),  # asked for: kept
        ("cores", "cuda", True, None, "cores"),
    ],
)
def test_auto_resolves_to_a_placement_and_given_values_are_kept(requested, device, oversubscribe, cluster, chosen):
    assert resolve_cpu_bind(requested, device, oversubscribe, cluster) == chosen


def test_an_unknown_binding_is_one_line_naming_the_choices():
    with pytest.raises(UsageError, match="--cpu-bind 'sockets': choose one of auto, none, cores"):
        resolve_cpu_bind("sockets", "cpu", False, None)


def test_every_kind_of_run_holds_the_resolved_binding():
    from bench.tasks.fault.spec import build_spec as fault_spec
    from bench.tasks.train import build_spec as train_spec
    from bench.workflows.plan import comm_specs

    assert train_spec(backend="elastic", workload="mnist_mlp", world_size=2, device="cpu").cpu_bind == "cores"
    assert (
        train_spec(backend="elastic", workload="mnist_mlp", world_size=2, device="cpu", cpu_bind="none").cpu_bind
        == "none"
    )
    (comm,) = comm_specs(["elastic"], "cpu", [2], comm={"ops": ["allreduce"]}, options={})
    assert comm.cpu_bind == "cores"
    fault = dict(
        backend="elastic",
        workload="mnist_mlp",
        world_size=2,
        fault="kill",
        rank=1,
        at_step=4,
        max_restarts=1,
        checkpoint_every=2,
        total_steps=8,
        comm_timeout=10.0,
        recovery_timeout=60.0,
    )
    assert fault_spec(**fault).cpu_bind == "none"  # restarted and joining agents' local ranks overlap
    assert fault_spec(**fault, cpu_bind="cores").cpu_bind == "cores"  # asked for: kept


def test_a_record_made_before_auto_reads_as_unpinned():
    from bench.core.spec import RunSpec

    old = train_record("old", "elastic", 2, per_window=[100, 101, 99]).spec.to_dict()
    old.pop("cpu_bind")
    assert RunSpec.from_dict(old).cpu_bind == "none"


def test_pinned_and_unpinned_runs_are_never_one_case():
    from bench.report.sections import ReportContext
    from bench.tasks.train import report as train_report
    from bench.tasks.train import results as train_results

    assert "cpu_bind" in CONDITIONS
    recs = []
    for i, (bind, value) in enumerate([("none", 175), ("cores", 230), ("none", 172), ("cores", 228)]):
        recs.append(
            train_record(
                f"hvd-{i}",
                "horovod",
                2,
                per_window=[value * 0.99, value, value * 1.01],
                created_at=1000 + i,
                sweep_id="s1",
                spec_fields={"cpu_bind": bind, "repeat": i // 2},
            )
        )
    frame = records_to_frame(recs)
    assert list(frame["cpu_bind"]) == ["none", "cores", "none", "cores"]
    cases = train_results.replicated_cases(frame[frame["status"] == "ok"])
    by_bind = {c.cond["cpu_bind"]: c for c in cases}
    assert set(by_bind) == {"none", "cores"} and all(c.launches == 2 for c in cases)
    assert [round(v) for v in by_bind["cores"].values] == [230, 228]
    page = train_report.report_part(frame, ReportContext("test", [], frame))
    titles = " ".join(s.title for s in page.sections) + " ".join(str(b) for s in page.sections for b in s.blocks)
    assert "pinned to its cores" in titles


def test_pinning_reaches_threads_started_before_it():
    """A helper thread started before the pin (as Horovod's and gloo's are, at the group's set-up) is pinned too."""
    assert len(os.sched_getaffinity(0)) >= 2, "needs 2 cores, as every 2-process test of the suite does"
    code = """
import json, os, threading
from types import SimpleNamespace
from bench.rank.kit import bind_cpus, thread_affinities
go = threading.Event()
helper = threading.Thread(target=go.wait, daemon=True)
helper.start()
chosen = bind_cpus(SimpleNamespace(cpu_bind="cores", threads=1), local_rank=1)
print(json.dumps({"chosen": chosen, "threads": list(thread_affinities().values())}))
go.set()
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    import json

    seen = json.loads(out.stdout)
    cores = sorted(os.sched_getaffinity(0))
    assert seen["chosen"] == [cores[1]]
    assert len(seen["threads"]) == 2 and all(t == [cores[1]] for t in seen["threads"])


def test_a_process_that_does_not_train_is_left_to_the_scheduler():
    from types import SimpleNamespace

    from bench.rank.kit import bind_cpus

    before = sorted(os.sched_getaffinity(0))
    assert bind_cpus(SimpleNamespace(cpu_bind="cores", threads=1), 0, role="server") == before
    assert sorted(os.sched_getaffinity(0)) == before


def test_the_communication_view_keeps_machines_and_pinnings_apart():
    """Allreduce launches of two machines, or pinned and unpinned, are separate rows and never one claim."""
    import dataclasses

    from bench.tasks.comm import report as comm_report
    from bench.tasks.comm import results as comm_results
    from factories import comm_record, comm_row

    def launch(run_id, backend, time_us, t, cpu_model="cpu", bind="none"):
        rec = comm_record(run_id, backend, rows=[comm_row(size=2**24, time_us=time_us)], created_at=t)
        return dataclasses.replace(
            rec, spec=dataclasses.replace(rec.spec, cpu_bind=bind), environment={"cpu_model": cpu_model, "cpu_count": 2}
        )

    here = [
        launch(f"{b}-{i}", b, us, 1000 + 2 * i + j)
        for i in range(3)
        for j, (b, us) in enumerate([("elastic", 20_000 + 100 * i), ("horovod", 40_000 + 100 * i)])
    ]
    frame = records_to_frame(here)
    (row, *_), _ = comm_report.matched_size_rows(frame)
    assert row.outcome.startswith("elastic faster by") and ", on " not in row.condition

    # a faster machine's horovod, later: not compared with this machine's elastic
    there = [launch(f"other-{i}", "horovod", 10_000, 2000 + i, cpu_model="Other CPU") for i in range(3)]
    pinned = [launch(f"pinned-{i}", "elastic", 15_000, 3000 + i, bind="cores") for i in range(3)]
    frame = records_to_frame(here + there + pinned)
    rows, _ = comm_report.matched_size_rows(frame)
    assert len(rows) == 1 and rows[0].outcome.startswith("elastic faster by") and "on cpu (2 CPUs)" in rows[0].condition
    rows = comm_report.sweep_rows(comm_report.case_launches(frame[frame["status"] == "ok"]))
    assert sorted(r[0] for r in rows) == [
        "elastic, on cpu (2 CPUs)",
        "elastic, pinned, on cpu (2 CPUs)",
        "horovod, on Other CPU (2 CPUs)",
        "horovod, on cpu (2 CPUs)",
    ]
    assert list(comm_results.comparisons(frame)) == [
        "allreduce busbw elastic / horovod at 16MB, 2 ranks float32, on cpu (2 CPUs)"
    ]


def test_workers_an_existing_ray_cluster_places_are_left_to_it():
    from bench.core.registry import get_backend

    ray = get_backend("ray")
    assert ray.places_on_this_host(ray.resolve_options({}, 2))
    assert not ray.places_on_this_host(ray.resolve_options({"ray_address": "10.213.7.1:6379"}, 2))
    assert resolve_cpu_bind("auto", "cpu", False, None, on_this_host=False) == "none"
    assert resolve_cpu_bind("cores", "cpu", False, None, on_this_host=False) == "cores"  # asked for: kept


def test_unpinned_wins_never_decide_the_recommendation():
    """Unpinned on one host distorts the comparison: its rows are shown, marked, and not weighed, so an unpinned
    win does not decide the pinned default's choice."""
    from bench.core.stats import Family
    from bench.report.page import scorecard_recommendation
    from bench.report.sections import ReportContext
    from bench.results.agreement import frame_comparisons
    from bench.tasks.train import report as train_report

    def launches(prefix, bind, values, t0):
        out = []
        for i, (backend, v) in enumerate(values):
            out.append(
                train_record(
                    f"{prefix}-{i}",
                    backend,
                    2,
                    per_window=[v * 0.99, v, v * 1.01],
                    created_at=t0 + i,
                    sweep_id=prefix,
                    spec_fields={"cpu_bind": bind, "repeat": i // 2},
                )
            )
        return out

    close = [("elastic", 230), ("horovod", 228), ("elastic", 226), ("horovod", 231), ("elastic", 229), ("horovod", 225)]
    apart = [("elastic", 230), ("horovod", 170), ("elastic", 226), ("horovod", 175), ("elastic", 229), ("horovod", 172)]
    frame = records_to_frame(launches("pinned", "cores", close, 1000) + launches("unpinned", "none", apart, 2000))
    part = train_report.report_part(frame, ReportContext("test", [], frame, Family(frame_comparisons(frame))))
    rows = {r.artefact: r for r in part.scorecard if r.measure == "training throughput"}
    assert rows["unpinned on one host"].winner == "elastic" and "unpinned" in rows["unpinned on one host"].condition
    assert rows[""].standing == "within" and rows[""].default
    said = " ".join(scorecard_recommendation(part.scorecard))
    assert said.startswith("Neither is ahead on what this page measured") and "Choose elastic" not in said
    assert "2 row(s) under conditions that distort the comparison" in said  # its throughput and startup
