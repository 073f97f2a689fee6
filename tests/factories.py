"""Hand-made records, rank results, run directories and input files (MNIST's IDX files, a user's workload), for
testing the parent-side logic without launching a process.

Specs are built as RunSpec values directly (no placement check against this machine's cores), records
with the same dataclasses the harness writes, and run directories with bench.core.rundir.RunDir.write, the
way each rank's worker and guard write them.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import struct
import textwrap
from pathlib import Path

import numpy as np

from bench.core.records import SCHEMA_VERSION, RankResult, RankRow, RunError, RunRecord, Startup, Summary, Times
from bench.core.rundir import RunDir, write_json_atomic
from bench.core.spec import RunSpec
from bench.core.stats import summarize
from bench.harness.supervisor import Outcome
from bench.rank.collectives import GB, OPS
from bench.tasks.comm import CommMetrics, CommRow
from bench.tasks.fault import FaultMetrics
from bench.tasks.train import RankFigures, TrainMetrics

LAUNCHED_AT = 1_000.0  # the launch time of every hand-made run: rank times are offsets from it
ENVIRONMENT = {"cpu_model": "cpu", "cpu_count": 2}
COMM_DEFAULTS = {
    "ops": ["allreduce"],
    "dtype": "float32",
    "min_bytes": 4,
    "max_bytes": 1024,
    "warmup_iters": 2,
    "iters": 5,
}
FAULT_DEFAULTS = {
    "scenario": "kill",
    "rank": 1,
    "at_step": 6,
    "signal": "KILL",
    "max_restarts": 3,
    "checkpoint_every": 4,
    "total_steps": 12,
    "comm_timeout": 10.0,
    "recovery_timeout": 90.0,
}


# ---------------------------------------------------------------- specs
def train_spec(
    backend: str = "elastic", workload: str = "mnist_mlp", world_size: int = 2, *, servers: int = 0, **fields
) -> RunSpec:
    roles = {"worker": world_size, **({"server": servers} if servers else {})}
    values = dict(
        backend=backend,
        workload=workload,
        world_size=world_size,
        device="cpu",
        batch_size=64,
        image_size=28,
        num_classes=10,
        threads=1,
        steps_per_window=10,
        roles=roles,
    )
    return RunSpec(**{**values, **fields})


def comm_spec(backend: str = "elastic", world_size: int = 2, **given) -> RunSpec:
    """A sweep's spec: keyword arguments that name a RunSpec field set it, the others go into spec.comm."""
    names = {f.name for f in dataclasses.fields(RunSpec)}
    fields = {k: v for k, v in given.items() if k in names}
    comm = {**COMM_DEFAULTS, **{k: v for k, v in given.items() if k not in names}}
    return train_spec(
        backend,
        None,
        world_size,
        **{
            **dict(
                task="comm",
                batch_size=None,
                image_size=None,
                num_classes=None,
                steps_per_window=None,
                warmup_steps=None,
                windows=None,
                comm=comm,
            ),
            **fields,
        },
    )


def fault_spec(backend: str = "elastic", world_size: int = 2, **fault) -> RunSpec:
    fault = {**FAULT_DEFAULTS, **fault}
    if fault["scenario"] == "join":
        fault.update(rank=0, signal=None)
    return train_spec(
        backend, "mnist_mlp", world_size, task="fault", batch_size=8, warmup_steps=0, windows=0, fault=fault
    )


# ---------------------------------------------------------------- per-rank pieces
def rank_row(rank: int, world_size: int, role: str = "worker", role_rank: int | None = None, **fields) -> RankRow:
    values = dict(
        rank=rank,
        world_size=world_size,
        local_rank=rank,
        local_world_size=world_size,
        group_rank=0,
        role_rank=rank if role_rank is None else role_rank,
        host="node",
        role=role,
        pid=4000 + rank,
        time=LAUNCHED_AT + 1.0,
    )
    return RankRow(**{**values, **fields})


def times(rank: int, first_step: bool = True) -> Times:
    """Rank r starts 0.5 + 0.1 r s after the launch, joins in 0.5 + 0.1 r s, takes its first step at 2 + 0.1 r s."""
    start = LAUNCHED_AT + 0.5 + 0.1 * rank
    return Times(
        process_start=start,
        init_start=start + 0.1,
        init_end=start + 0.6 + 0.1 * rank,
        first_step_end=LAUNCHED_AT + 2.0 + 0.1 * rank if first_step else None,
        end=LAUNCHED_AT + 9.0,
    )


def train_output(window_times: list[float], loss_last: float = 0.5, checksum: float = 1.25) -> dict:
    """What one training worker writes in its result file (bench.tasks.train.train_rank)."""
    return {
        "window_times": list(window_times),
        "window_losses": [1.0] * (len(window_times) - 1) + [loss_last],
        "loss_first": 2.0,
        "steps": 0,
        "step_delay_s": 0.0,
        "param_count": 1000,
        "param_checksum": checksum,
        "param_abs_checksum": abs(checksum),
        "cuda_peak_bytes": None,
        "threads": {"torch": 1, "interop": 1, "OMP_NUM_THREADS": "1", "affinity": [0]},
    }


def comm_output(rows: list[tuple[str, int, float, int]], chunks: int = 2) -> dict:
    """One communication worker's result: (op, size in bytes, seconds per op, wrong elements) per row;
    every timed chunk took the row's time."""
    return {
        "comm_rows": [
            {"op": op, "size": size, "count": size // 4, "time_s": t, "chunk_times_s": [t] * chunks, "wrong": wrong}
            for op, size, t, wrong in rows
        ]
    }


def rank_result(
    rank: int,
    world_size: int,
    output: dict,
    role: str = "worker",
    role_rank: int | None = None,
    peak_rss_bytes: int | None = None,
) -> RankResult:
    return RankResult(
        rank_info=rank_row(rank, world_size, role, role_rank),
        pid=4000 + rank,
        times=times(rank),
        peak_rss_bytes=peak_rss_bytes or (100 + rank) * 2**20,
        output=output,
    )


def train_results(spec: RunSpec, per_rank_windows: list[list[float]], served: dict | None = None) -> dict:
    """{rank: RankResult} of a training run: its workers' window times, then its servers (if any)."""
    results = {r: rank_result(r, spec.world_size, train_output(w)) for r, w in enumerate(per_rank_windows)}
    for s in range(spec.processes - spec.world_size):
        rank = spec.world_size + s
        results[rank] = rank_result(
            rank,
            spec.processes,
            {"served": served or {"pushes": 0}},
            role="server",
            role_rank=s,
            peak_rss_bytes=900 * 2**20,
        )
    return results


# ---------------------------------------------------------------- records
def record(
    spec: RunSpec,
    metrics,
    run_id: str = "r1",
    created_at: float = LAUNCHED_AT,
    status: str = "ok",
    error: RunError | None = None,
    **fields,
) -> RunRecord:
    values = dict(
        schema_version=SCHEMA_VERSION,
        run_id=run_id,
        created_at=created_at,
        duration_s=10.0,
        status=status,
        error=error,
        spec=spec,
        command=["bench", "run"],
        rank_map=[rank_row(r, spec.world_size) for r in range(spec.world_size)],
        metrics=metrics,
        events=[{"time": created_at, "kind": "launch"}],
        environment=dict(ENVIRONMENT),
        gpu_usage={"sampled": False, "reason": "a CPU run"},
        run_dir=f"/runs/{run_id}",
    )
    return RunRecord(**{**values, **fields})


def train_metrics_for(spec: RunSpec, per_window: list[float]) -> TrainMetrics:
    """Training metrics whose throughput per window (samples/s) is `per_window`."""
    k = spec.steps_per_window
    window_times = [spec.global_batch * k / thr for thr in per_window]
    thr = Summary(**summarize(per_window), unit="samples/s", per_window=list(per_window))
    rank = RankFigures(
        rank=0,
        throughput=thr,
        step_time_mean_s=sum(window_times) / (len(window_times) * k),
        peak_rss_bytes=2**27,
        cuda_peak_bytes=None,
        loss_first=2.0,
        loss_last=0.5,
        param_checksum=1.25,
        threads={"torch": spec.threads},
    )
    return TrainMetrics(
        throughput=thr,
        window_times_s=window_times,
        step_time_s=Summary(**summarize([t / k for t in window_times])),
        per_rank=[rank],
        straggler_ratio=1.0,
        startup=Startup(0.5, 0.25, 2.0),
        peak_rss_bytes_max=2**27,
        param_count=1000,
        loss_last=0.5,
    )


def train_record(
    run_id: str = "r1",
    backend: str = "elastic",
    world_size: int = 2,
    per_window: list[float] | None = (100.0, 100.0),
    created_at: float = LAUNCHED_AT,
    status: str = "ok",
    sweep_id: str | None = "s1",
    workload: str = "mnist_mlp",
    spec_fields: dict | None = None,
    **fields,
) -> RunRecord:
    """A training run whose windows had throughputs `per_window` (samples/s)."""
    spec = train_spec(backend, workload, world_size, sweep_id=sweep_id, **(spec_fields or {}))
    metrics = train_metrics_for(spec, per_window) if status == "ok" else None
    error = None if status == "ok" else RunError(message=f"rank 1 ended with {status}", rank=1)
    return record(spec, metrics, run_id, created_at, status, fields.pop("error", error), **fields)


def large_record(i: int) -> RunRecord:
    """Run number `i`: ok, or crashed for every third; its environment padded so that a write spans several pages."""
    rec = train_record(
        f"run-{i:06d}",
        per_window=[990.0 + i, 1010.0 + i],
        created_at=1.0e9 + i,
        status="ok" if i % 3 else "crashed",
        sweep_id=None,
    )
    rec.environment["payload"] = "x" * 20000
    return rec


def sweep_records(sweep_id: str, launches: dict[tuple[str, int], list[float]], t0: float = 1000.0) -> list[RunRecord]:
    """One sweep: each (backend, world size) launched once per value (its throughput), in rounds."""
    recs, t = [], t0
    rounds = max(len(v) for v in launches.values())
    for r in range(rounds):
        for (backend, n), values in launches.items():
            if r < len(values):
                t += 1
                v = values[r]
                recs.append(
                    train_record(
                        f"{sweep_id}-{backend}-{n}-{r}",
                        backend,
                        n,
                        per_window=[v * 0.99, v, v * 1.01],
                        created_at=t,
                        sweep_id=sweep_id,
                        spec_fields={"repeat": r, "cpu_bind": "cores"},
                    )
                )
    return recs


# throughputs of three launches per case whose comparisons are clear: elastic ahead at two workers, horovod at one
CLEAR = {
    ("single", 1): [100, 102, 98],
    ("elastic", 1): [95, 96, 94],
    ("horovod", 1): [99, 101, 100],
    ("elastic", 2): [150, 155, 148],
    ("horovod", 2): [120, 118, 123],
}


def comm_row(
    op: str = "allreduce",
    size: int = 1024,
    time_us: float = 100.0,
    world_size: int = 2,
    window_time_us: list[float] | None = None,
    wrong: int = 0,
    limit_gbps: float | None = None,
) -> CommRow:
    """A row as nccl-tests defines it: algbw = size / time, busbw = algbw x the op's bus factor."""
    algbw = size / (time_us * 1e-6) / GB
    busbw = algbw * OPS[op].factor(world_size)
    return CommRow(
        op=op,
        size=size,
        count=size // 4,
        type="float32",
        redop=OPS[op].redop,
        time_us=time_us,
        algbw_gbps=algbw,
        busbw_gbps=busbw,
        wrong=wrong,
        per_rank_time_us=[time_us] * world_size,
        window_time_us=window_time_us,
        busbw_fraction_of_limit=busbw / limit_gbps if limit_gbps else None,
    )


def ceiling(limit_gbps: float = 4.0) -> dict:
    return {
        "measured_gbps": {"memory_copy": 10.0, "loopback_tcp": limit_gbps},
        "limit_name": "loopback TCP",
        "limit_gbps": limit_gbps,
    }


def comm_record(
    run_id: str = "c1",
    backend: str = "elastic",
    world_size: int = 2,
    rows: list[CommRow] | None = None,
    limit_gbps: float | None = 4.0,
    created_at: float = LAUNCHED_AT,
    status: str = "ok",
    sweep_id: str | None = "s1",
    **fields,
) -> RunRecord:
    rows = (
        rows
        if rows is not None
        else [comm_row(size=s, world_size=world_size, limit_gbps=limit_gbps) for s in (4, 1024)]
    )
    ops = list(dict.fromkeys(r.op for r in rows)) or ["allreduce"]
    spec = comm_spec(backend, world_size, ops=ops, sweep_id=sweep_id)
    avg = {op: sum(r.busbw_gbps for r in rows if r.op == op) / sum(1 for r in rows if r.op == op) for op in ops}
    metrics = (
        None
        if status != "ok"
        else CommMetrics(
            avg_busbw_gbps=avg,
            wrong=sum(r.wrong for r in rows),
            model="ring",
            fit={"alpha_s": 5e-5, "bandwidth_gbps": 1.5, "r2_weighted": 0.99},
            rows=rows,
            startup=Startup(0.5, 0.25),
            peak_rss_bytes_max=2**27,
            ceiling=ceiling(limit_gbps) if limit_gbps else None,
        )
    )
    return record(spec, metrics, run_id, created_at, status, **fields)


def fault_metrics_for(spec: RunSpec, **fields) -> FaultMetrics:
    """What a kill run that recovered in 1.5 s measured (the journals of fault_journals)."""
    f = spec.fault
    fired = {
        "scenario": f.scenario,
        "time": 2.0,
        "signal": f.signal,
        "pid": 4001,
        "rank": f.rank,
        "step": f.at_step,
        "delivered": True,
    }
    before = [rank_row(r, spec.world_size, attempt=0) for r in range(spec.world_size)]
    after = [rank_row(r, spec.world_size, attempt=1, restart_count=1) for r in range(spec.world_size)]
    values = dict(
        scenario=f.scenario,
        signal=f.signal,
        at_step=f.at_step,
        total_steps=f.total_steps,
        checkpoint_every=f.checkpoint_every,
        max_restarts=f.max_restarts,
        steps_completed=f.total_steps,
        timeline={"t": [], "samples_per_s": [], "bin_s": None},
        fault=fired,
        resume_checks=[{"step": 4, "pid": 4001, "restored_checksum": 1.0, "committed_checksum": 1.0, "equal": True}],
        commits=3,
        world_before=spec.world_size,
        ended_after_fault_s=5.0,
        rank_map_before=before,
        step_at_fault=f.at_step,
        detection_s=0.1,
        detected_by="elastic agent saw the worker group fail",
        resets=0,
        restarts=1,
        recovery_s=1.5,
        resumed_from_step=4,
        world_after=spec.world_size,
        rank_map_after=after,
        steps_redone=2,
    )
    return FaultMetrics(**{**values, **fields})


# what a run whose worker hung (SIGSTOP) and never came back measured: no recovery, no world after it
HUNG_METRICS = {
    "recovery_s": None,
    "world_after": None,
    "steps_redone": None,
    "resumed_from_step": None,
    "rank_map_after": None,
    "restarts": 0,
    "hang_observed_s": 3.0,
}


def fault_record(
    run_id: str = "f1",
    backend: str = "elastic",
    world_size: int = 2,
    status: str = "ok",
    fault: dict | None = None,
    metrics: dict | None = None,
    sweep_id: str | None = None,
    **fields,
) -> RunRecord:
    spec = dataclasses.replace(fault_spec(backend, world_size, **(fault or {})), sweep_id=sweep_id)
    m = fault_metrics_for(spec, **(metrics or {}))
    rank_map = [
        dataclasses.replace(r, phase=phase)
        for phase, rows in (("before", m.rank_map_before), ("after", m.rank_map_after))
        for r in rows or []
    ]
    error = None if status == "ok" else RunError(message="hung: no training step within 90 s of the fault")
    return record(spec, m, run_id, status=status, error=error, rank_map=rank_map, **fields)  # kept whatever the status


# ---------------------------------------------------------------- run directories
def outcome(
    ending: str = "exited",
    returncode: int | None = 0,
    ended_after: float = 10.0,
    log_bytes: int | None = None,
    launched_at: float = LAUNCHED_AT,
) -> Outcome:
    return Outcome(
        ending=ending,
        returncode=returncode,
        launched_at=launched_at,
        ended_at=launched_at + ended_after,
        log_bytes_before_teardown=log_bytes,
    )


def exit_row(
    rank: int, t: float, returncode: int = 1, terminated_by: str | None = None, attempt: int = 0, tail: str = ""
) -> dict:
    """An exit file as bench.harness.guard writes it."""
    signals = {-9: "SIGKILL", -15: "SIGTERM", -11: "SIGSEGV"}
    return {
        "rank": rank,
        "attempt": attempt,
        "pid": 4000 + rank,
        "time": t,
        "returncode": returncode,
        "exit_code": returncode if returncode >= 0 else None,
        "signal": signals.get(returncode),
        "terminated_by": terminated_by,
        "tail": tail,
    }


class RunDirBuilder:
    """A run directory written file by file, as the guards and workers of a run write theirs."""

    def __init__(self, path, spec: RunSpec):
        self.run_dir = RunDir(path).create()
        self.spec = spec
        self.run_dir.spec_file.write_text(json.dumps(spec.to_dict()))

    def started(self, rank: int, attempt: int = 0) -> RunDirBuilder:
        self.run_dir.write(rank, attempt, "start", {"pid": 4000 + rank, "time": LAUNCHED_AT + 0.5})
        return self

    def joined(self, rank: int, attempt: int = 0) -> RunDirBuilder:
        self.started(rank, attempt)
        n = self.spec.world_size  # servers follow the workers, as the parameter server lays them out
        role, role_rank = ("worker", rank) if rank < n else ("server", rank - n)
        self.run_dir.write(rank, attempt, "joined", rank_row(rank, self.spec.processes, role, role_rank).to_dict())
        return self

    def progress(self, rank: int, window: int, attempt: int = 0) -> RunDirBuilder:
        self.joined(rank, attempt)
        self.run_dir.write(
            rank,
            attempt,
            "progress",
            {"steps": 5 + window * self.spec.steps_per_window, "window": window, "time": LAUNCHED_AT + 3 + window},
        )
        return self

    def finished(self, result: RankResult, attempt: int = 0) -> RunDirBuilder:
        """A rank that ended cleanly: its start, joined and result files, and a guard's exit 0."""
        rank = result.rank_info.rank
        self.joined(rank, attempt)
        self.run_dir.write(rank, attempt, "result", result.to_dict())
        return self.exited(rank, 0, t=LAUNCHED_AT + 9.0 + 0.01 * rank, attempt=attempt)

    def exited(
        self, rank: int, returncode: int, t: float, terminated_by: str | None = None, attempt: int = 0, tail: str = ""
    ) -> RunDirBuilder:
        self.run_dir.write(rank, attempt, "exit", exit_row(rank, t, returncode, terminated_by, attempt, tail))
        return self

    def raised(self, rank: int, exception: str, message: str, t: float, attempt: int = 0) -> RunDirBuilder:
        self.run_dir.write(rank, attempt, "error", {"time": t, "type": exception, "message": message})
        return self

    def launcher_log(self, text: str) -> RunDirBuilder:
        self.run_dir.launcher_log.write_text(text)
        return self

    def journal(self, rank: int, attempt: int, *lines: dict) -> RunDirBuilder:
        """A fault run's journal lines of one process, appended as bench.tasks.fault.Journal does."""
        with open(self.run_dir.journal_file(rank, attempt), "a") as fh:
            for line in lines:
                fh.write(json.dumps(line) + "\n")
        return self

    def fault_fired(self, **fired) -> RunDirBuilder:
        write_json_atomic(self.run_dir.fault_fired, fired)
        return self

    def agent_events(self, *events: dict) -> RunDirBuilder:
        self.run_dir.agent_events.write_text("".join(json.dumps(e) + "\n" for e in events))
        return self


def finished_run(path, spec: RunSpec, results: dict[int, RankResult]) -> RunDir:
    """A run directory in which every process ended cleanly with these results."""
    builder = RunDirBuilder(path, spec)
    for result in results.values():
        builder.finished(result)
    return builder.run_dir


# ---------------------------------------------------------------- fault journals
# what a launcher that reports nothing of its own observed (bench.backends.base.ElasticMode.observations)
OBSERVED = {"events": [], "rendezvous": [], "detections": []}


def resumed(t: float, step: int, rank: int, size: int, pid: int, checksum: float, restart_count: int = 0) -> dict:
    return {
        "kind": "resumed",
        "t": t,
        "step": step,
        "rank": rank,
        "size": size,
        "local_rank": rank,
        "restart_count": restart_count,
        "pid": pid,
        "host": "node",
        "checksum": checksum,
    }


def steps(first: int, last: int, t0: float, rank: int, size: int, every: float = 0.1) -> list[dict]:
    return [
        {"kind": "step", "t": t0 + i * every, "step": s, "rank": rank, "size": size}
        for i, s in enumerate(range(first, last + 1))
    ]


def commit(t: float, step: int, rank: int, checksum: float) -> dict:
    return {"kind": "commit", "t": t, "step": step, "rank": rank, "checksum": checksum}


def fault_journals(
    builder: RunDirBuilder,
    *,
    last_step: int = 12,
    restored: float = 4.0,
    recovered: bool = True,
    detected_at: float | None = 2.3,
    fired: bool = True,
) -> RunDirBuilder:
    """A 2-worker kill run, times in seconds from 0: both train steps 1..6 from t = 1.0 (rank 0 commits
    step 4 with checksum 4.0 at t = 1.35); rank 1 is signalled at t = 2.0 at step 6; rank 0 notices at
    `detected_at`; both restart (attempt 1) and resume from step 4 at t = 3.0 and 3.05 with checksum
    `restored`, then train steps 5..last_step from t = 3.5 (unless not `recovered`)."""
    for rank in (0, 1):
        builder.journal(rank, 0, resumed(0.5 + 0.01 * rank, 0, rank, 2, 100 + rank, 0.0), *steps(1, 6, 1.0, rank, 2))
    builder.journal(0, 0, commit(1.35, 4, 0, 4.0))
    if detected_at is not None:
        builder.journal(0, 0, {"kind": "detected", "t": detected_at, "rank": 0, "what": "allreduce failed"})
    if fired:
        builder.fault_fired(scenario="kill", time=2.0, signal="KILL", pid=101, rank=1, step=6, delivered=True)
    if recovered:
        for rank in (0, 1):
            builder.journal(
                rank,
                1,
                resumed(3.0 + 0.05 * rank, 4, rank, 2, 200 + rank, restored, restart_count=1),
                *steps(5, last_step, 3.5, rank, 2),
            )
    return builder


# ---------------------------------------------------------------- input files
def write_mnist(
    folder: Path, n: int = 50, *, gz: bool = False, images_magic: int = 2051, label: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """MNIST's two training files in `folder` (made if missing) with n random samples (label: sample 3 gets it);
    returns the images and labels written."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, size=n, dtype=np.uint8)
    if label is not None:
        labels[3] = label
    opener, ext = (gzip.open, ".gz") if gz else (open, "")
    with opener(folder / f"train-images-idx3-ubyte{ext}", "wb") as fh:
        fh.write(struct.pack(">IIII", images_magic, n, 28, 28) + images.tobytes())
    with opener(folder / f"train-labels-idx1-ubyte{ext}", "wb") as fh:
        fh.write(struct.pack(">II", 2049, n) + labels.tobytes())
    return images, labels


# a user's workload that loads and checks: a tiny MLP, TINY
TINY_WORKLOAD = '''
from workloads import Size, Workload


def build(num_classes, image):
    import torch.nn as nn

    return nn.Sequential(nn.Flatten(), nn.Linear(image * image, 32), nn.ReLU(), nn.Linear(32, num_classes))


TINY = Workload(name="tiny", summary="a tiny MLP", channels=1, gpu=Size(64, 12, 4, 50), cpu=Size(16, 12, 4, 5),
                fixed_image=False, build=build)
'''


def write_source(folder: Path, name: str, text: str) -> Path:
    """A file `name` in `folder` holding `text` (dedented): a user's workload module, say."""
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def blocks_text(blocks: list) -> str:
    """The words of a page section's blocks: tables' cells and disclosures, paragraphs, headings."""
    out = []
    for b in blocks:
        if b.kind == "table":
            out += [c.text for row in b.rows for c in row.cells] + [b.details or ""]
        elif b.kind == "paragraph":
            out += [s.text for s in b.text]
        elif b.kind == "heading":
            out.append(b.text)
    return "\n".join(out)
