"""Typed, versioned run records: one JSON round trip, one place that builds them, explicit upgrades.

A record is a `RunRecord`; its `metrics` are the dataclass its task declares (`Task.metrics_type`), so
each kind of run owns the shape of its own figures. `to_dict()` gives the JSON stored in the results
store and baseline files; `RunRecord.from_dict()` reads one back, checking `schema_version` and running
every upgrade from the version it was written with (UPGRADES) before the fields are typed. Unknown or
missing fields are an error (`RecordError`), never silently dropped.
"""

from __future__ import annotations

import dataclasses
import enum
import typing
from dataclasses import dataclass, field

from bench.core.codec import Figure, JsonObject, Record, RecordError, decode, from_json, hints_of, nesting_problem
from bench.core.inputs import name_problem, shown, workload_problem
from bench.core.registry import get_task
from bench.core.spec import RunSpec

SCHEMA_VERSION = 10  # bump it, and add an upgrade, when a stored field changes meaning or place, or is added


class RunStatus(str, enum.Enum):
    """How a run ended (docs/method.md, "Status of a run"); stored as its value. A str, so that a status read from
    a store or a frame compares and prints as its word."""

    OK = "ok"
    FAILED = "failed"  # the launcher failed with no rank to blame, a rank produced no result, or a check failed
    TIMEOUT = "timeout"  # the deadline (or a Slurm time limit) ended it
    CRASHED = "crashed"  # a rank exited non-zero or by a signal the harness did not send
    INTERRUPTED = "interrupted"  # the user (Ctrl-C, SIGTERM, scancel) ended it
    DIVERGED = "diverged"  # it ran to its end, but a loss or the parameters became non-finite (NaN or infinite)

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


# ---------------------------------------------------------------- parts every record shares
@dataclass
class Summary(Record):
    """Mean over a run's windows with its t confidence interval (bench.core.stats.summarize). The mean and the
    windows' values are figures (finite, bench.core.codec.Figure); the spread of fewer than two windows is NaN."""

    mean: Figure
    stdev: float
    n: int
    confidence: float
    ci_low: float
    ci_high: float
    ci_half_width: float
    rel_stdev: float
    unstable: bool
    unit: str | None = None
    per_window: list[Figure] | None = None


@dataclass
class Startup(Record):
    """Seconds from the launch: to the last worker process, rendezvous (slowest rank), first step."""

    launch_to_process_s: Figure
    rendezvous_s: Figure
    launch_to_first_step_s: Figure | None = None
    # the launcher's own start-up phases as it reports them (Launcher.startup_phases: name -> seconds, such as
    # starting a runtime and placing the workers); empty where the launcher reports none
    launcher_phases: dict[str, Figure] = field(default_factory=dict)


@dataclass
class RankRow(Record):
    """One row of the rank map: what the launcher gave one process (and, in fault runs, when)."""

    rank: int
    world_size: int
    local_rank: int | None = None
    local_world_size: int | None = None
    group_rank: int | None = None  # node index (torchrun's GROUP_RANK, Horovod's cross rank)
    role_rank: int | None = None
    restart_count: int | None = 0
    host: str | None = None
    role: str = "worker"
    pid: int | None = None
    time: float | None = None  # when it joined the group
    attempt: int | None = None  # which process of that rank (fault runs start replacements)
    cpus: list[int] | None = None  # the cores the worker may run on after binding (None: not known)
    numa_node: int | None = None  # a GPU worker's: its GPU's NUMA node, whose cores it is bound to (None: unknown)

    @property
    def worker_index(self) -> int:
        """Which of the workers this is (0..world size - 1): its data shard. The global rank, unless the backend
        numbers its roles apart (a parameter server's workers need not hold the first global ranks)."""
        return self.role_rank if self.role_rank is not None else self.rank

    phase: str | None = None  # fault runs: "before" or "after" the fault


@dataclass
class RunError(Record):
    """Why a run is not ok: a sentence, and the evidence behind it."""

    message: str
    tail: str = ""
    rank: int | None = None
    attempt: int | None = None
    exit_code: int | None = None
    signal: str | None = None
    exception: str | None = None
    exception_message: str | None = None
    ranks: list[JsonObject] | None = None  # where each rank was when the run was ended
    step: int | None = None  # a diverged run: the step at whose check the non-finite value was seen (or earlier)


@dataclass
class Times(Record):
    """Wall-clock times one process reports (comparable with the parent's launch time)."""

    process_start: float
    init_start: float
    init_end: float
    end: float
    first_step_end: float | None = None


@dataclass
class RankResult(Record):
    """The result file one process writes when it ends cleanly: who it was, when, and its task's output
    (a dict whose shape the task owns: window times, communication rows, a server's counters ...)."""

    rank_info: RankRow
    pid: int
    times: Times
    peak_rss_bytes: int
    output: JsonObject = field(default_factory=dict)


# ---------------------------------------------------------------- the record
@dataclass
class RunRecord(Record):
    schema_version: int
    run_id: str
    created_at: Figure
    duration_s: Figure
    status: RunStatus
    error: RunError | None
    spec: typing.Any  # bench.core.spec.RunSpec
    command: list[str]
    rank_map: list[RankRow]
    metrics: typing.Any  # the task's metrics dataclass (Task.metrics_type), or None when it produced none
    events: list[JsonObject]
    environment: JsonObject
    # the GPUs' utilisation and memory through the measured span (bench.harness.gpu_sampler), or why not sampled;
    # across hosts each host's under `hosts`. A v10 run across hosts recorded before every host was sampled kept the
    # launching host's GPUs at the top and its `hosts` without GPUs: no field changed meaning, so no upgrade, and the
    # page reads both (bench.report.gpu_nodes.host_usages)
    gpu_usage: JsonObject
    run_dir: str
    launch: JsonObject = field(default_factory=dict)  # what the launcher chose at run time (ports, hosts files)
    # other bench runs that ran on any of this run's cores while it ran ({"run_id", "label", "store"}: one of them
    # ran with --allow-shared; bench.harness.cores): such a run measured them too, and is compared with nothing
    shared_with: list[JsonObject] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.status = RunStatus(self.status)  # a word is checked and typed here, wherever the record was made

    @property
    def task(self) -> typing.Any:  # bench.tasks.base.Task, a layer above
        return get_task(self.spec.task)

    @property
    def ok(self) -> bool:
        return self.status is RunStatus.OK

    @property
    def comparable(self) -> bool:
        """Whether its figures may enter a comparison, a verdict or the gate: ok, and alone on its cores."""
        return self.ok and not self.shared_with

    @classmethod
    def from_dict(cls, data: typing.Any) -> RunRecord:
        """A stored record of any version this bench knows, upgraded to the current one."""
        if not isinstance(data, dict):
            raise RecordError("a record must be a JSON object")
        problem = nesting_problem(data)  # before anything recurses into it (the upgrades, the decoding, a message)
        if problem:
            raise RecordError(f"record {shown(data.get('run_id'))}: {problem}")
        data = upgrade(data)
        where = f"record {shown(data.get('run_id'))}"
        if not isinstance(data.get("spec"), dict):
            raise RecordError(f"{where}.spec: expected an object, found {type(data.get('spec')).__name__}")
        try:
            task = get_task(data["spec"].get("task"))
        except Exception as exc:
            raise RecordError(f"{where}: {exc}") from None
        spec = decode(RunSpec, data["spec"], f"{where}.spec")
        metrics = (
            None if data.get("metrics") is None else decode(task.metrics_type, data["metrics"], f"{where}.metrics")
        )
        hints = hints_of(cls)
        values = {}
        for f in dataclasses.fields(cls):
            if f.name in ("spec", "metrics"):
                continue
            if f.name in data:
                values[f.name] = from_json(hints[f.name], data[f.name], f"{where}.{f.name}")
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise RecordError(f"{where}: missing field {f.name}")
        unknown = set(data) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise RecordError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
        # names become folder names and table cells: a record from a file or a store is checked like a flag
        for field_name, problem in (
            ("run_id", name_problem(values["run_id"])),
            ("spec.sweep_id", spec.sweep_id and name_problem(spec.sweep_id)),
            ("spec.workload", workload_problem(spec.workload)),
        ):
            if problem:
                raise RecordError(f"{where}.{field_name}: not a valid name ({problem})")
        return cls(spec=spec, metrics=metrics, **values)


# ---------------------------------------------------------------- upgrades of stored records
def _v1_to_v2(rec: dict[str, typing.Any]) -> dict[str, typing.Any]:
    """Version 1 (before task plug-ins): specs written before `task`, `step_delay` and `repeat` existed,
    metrics nested per task and communication rows at the top level (`allreduce`): each task moves its
    own (Task.upgrade); rank map rows named the world size `size`."""
    rec = dict(rec)
    spec = dict(rec["spec"])
    spec.setdefault("task", "train")
    for name, empty in (("step_delay", None), ("repeat", 0), ("fault", None), ("comm", None)):
        spec.setdefault(name, empty)
    rec["spec"] = spec
    rec["rank_map"] = [v1_rank_row(r) for r in rec.get("rank_map") or []]
    rec = get_task(spec["task"]).upgrade(1, rec)
    rec.pop("allreduce", None)
    rec.setdefault("launch", {})
    rec["schema_version"] = 2
    return rec


def v1_rank_row(row: dict[str, typing.Any]) -> dict[str, typing.Any]:
    row = dict(row)
    if "size" in row:
        row["world_size"] = row.pop("size")
    return row


def _v2_to_v3(rec: dict[str, typing.Any]) -> dict[str, typing.Any]:
    """v3 adds runs across hosts (spec.hosts, spec.iface, spec.link): a v2 run ran on one host."""
    rec = dict(rec, spec={**rec["spec"], "hosts": None, "iface": None, "link": None})
    rec["schema_version"] = 3
    return rec


def _v3_to_v4(rec: dict[str, typing.Any]) -> dict[str, typing.Any]:
    """v4 adds runs inside a scheduler's allocation (spec.scheduler), users' workloads (spec.workload_source), the
    saved model (spec.save_model) and the image folder's loader processes (spec.loader_workers): a v3 run ran
    under none, on a built-in workload held in memory, and saved no model."""
    rec = dict(
        rec, spec={**rec["spec"], "scheduler": None, "workload_source": None, "save_model": None, "loader_workers": 0}
    )
    rec["schema_version"] = 4
    return rec


def _v4_to_v5(rec: dict[str, typing.Any]) -> dict[str, typing.Any]:
    """v5 adds the input loader (spec.loader), time-to-accuracy runs (spec.converge) and the launcher's own
    start-up phases (metrics.startup.launcher_phases, empty by default: no launcher of v4 reported any): a v4
    run held its in-memory data on the device and was no converge run."""
    rec = dict(rec, spec={**rec["spec"], "loader": "memory", "converge": None})
    rec["schema_version"] = 5
    return rec


TRAINING_FIELDS = ("workload", "batch_size", "image_size", "num_classes", "steps_per_window", "warmup_steps", "windows")


def _by_task(rec: dict[str, typing.Any], from_version: int) -> dict[str, typing.Any]:
    """The record with its task's part moved on from `from_version` (Task.upgrade): what changed for one kind of
    run is that task's to say."""
    try:
        task = get_task(rec["spec"].get("task"))
    except Exception as exc:
        raise RecordError(f"record {rec.get('run_id')}: {exc}") from None
    upgraded: dict[str, typing.Any] = task.upgrade(from_version, dict(rec, spec=dict(rec["spec"])))
    return upgraded


def _v5_to_v6(rec: dict[str, typing.Any]) -> dict[str, typing.Any]:
    """v6: a run that trains nothing (a communication sweep) has no training fields (TRAINING_FIELDS, None); v5
    wrote placeholders there (workload "comm", zeros): its task clears them (Task.upgrade)."""
    rec = _by_task(rec, 5)
    rec["schema_version"] = 6
    return rec


def _v6_to_v7(rec: dict[str, typing.Any]) -> dict[str, typing.Any]:
    """v7 adds the status `diverged` (a loss or the parameters became non-finite), the error's step, and writes
    non-finite floats as the words "NaN", "Infinity", "-Infinity" (Python's json reads a v6 record's bare NaN as
    a float; it is written as its word when the record is written again). A v6 `ok` run meant only that every
    process ended cleanly: each task says which of its v6 runs diverged (Task.upgrade)."""
    rec = _by_task(rec, 6)
    rec["schema_version"] = 7
    return rec


def _v7_to_v8(rec: dict[str, typing.Any]) -> dict[str, typing.Any]:
    """v8 adds `shared_with`, the other bench runs that ran on the run's cores while it ran (before v8 no bench
    looked, so a v7 run is recorded as sharing with none it knew of), and, for a run across hosts, how many
    machines the hosts are on (spec.machines; v7 did not say, so None: not known to be separate machines)."""
    rec = dict(rec, shared_with=[], spec=dict(rec["spec"], machines=None))
    rec["schema_version"] = 8
    return rec


def _v8_to_v9(rec: dict[str, typing.Any]) -> dict[str, typing.Any]:
    """v9 adds, to a training run's metrics, its warm-up timed in parts (`profile`: the scaling model's inputs);
    a v8 run was not profiled, so None."""
    rec = _by_task(rec, 8)
    rec["schema_version"] = 9
    return rec


def _v9_to_v10(rec: dict[str, typing.Any]) -> dict[str, typing.Any]:
    """v10 adds a run's numerics (spec.precision, spec.channels_last, spec.cudnn_benchmark) and each rank's cores
    and GPU NUMA node in the rank map (cpus, numa_node): a v9 run ran fp32 in the default memory format with
    cudnn.benchmark off (torch's default; no bench set it), and its rank map did not say where ranks ran. It also
    records what each host's GPU node is made of (environment.gpu_nodes; a v9 run did not look: None) and its GPUs'
    use through the measured span (gpu_usage; a v9 run was not sampled), and, to a fault run's metrics, what was in
    force for NCCL (`nccl`: its timeout and async error handling; a v9 fault run ran on CPUs over gloo: None)."""
    rec = _by_task(rec, 9)
    spec = dict(rec["spec"], precision="fp32", channels_last=False, cudnn_benchmark=False)
    rank_map = [dict(row, cpus=None, numa_node=None) for row in rec.get("rank_map") or []]
    environment = rec.get("environment")
    if isinstance(environment, dict):
        environment = {**environment, "gpu_nodes": None}
    rec = dict(
        rec,
        spec=spec,
        rank_map=rank_map,
        environment=environment,
        gpu_usage={"sampled": False, "reason": "recorded before bench sampled"},
    )
    rec["schema_version"] = 10
    return rec


UPGRADES = {
    1: _v1_to_v2,
    2: _v2_to_v3,
    3: _v3_to_v4,
    4: _v4_to_v5,
    5: _v5_to_v6,
    6: _v6_to_v7,
    7: _v7_to_v8,
    8: _v8_to_v9,
    9: _v9_to_v10,
}  # version -> function that returns the record at version + 1


def upgrade(data: dict[str, typing.Any]) -> dict[str, typing.Any]:
    version = data.get("schema_version")
    if "schema_version" not in data:
        raise RecordError(f"record {shown(data.get('run_id'))} has no schema_version")
    if isinstance(version, bool) or not isinstance(version, int):  # "5" or 5.5: no bench writes those
        raise RecordError(f"record {shown(data.get('run_id'))}: schema_version {version!r} is not an integer")
    if version > SCHEMA_VERSION:
        raise RecordError(
            f"record {shown(data.get('run_id'))} has schema {version}, newer than this bench "
            f"({SCHEMA_VERSION}); update bench"
        )
    while version < SCHEMA_VERSION:
        if version not in UPGRADES:
            raise RecordError(
                f"record {shown(data.get('run_id'))} has schema {version}, which this bench cannot upgrade"
            )
        data = UPGRADES[version](data)
        version = data["schema_version"]
    return data
