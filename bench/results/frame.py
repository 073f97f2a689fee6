"""Records as a pandas DataFrame (one row per run), and which launches replicate each other. The columns
every run has are spelled here; each task adds its own (Task.columns). Figures across runs (efficiency,
vs the plain loop) are the training task's (bench.tasks.train.results.replicated_cases)."""

from __future__ import annotations

from bench.core.inputs import printable
from bench.core.records import RunStatus
from bench.core.registry import all_tasks, get_backend
from bench.core.spec import numerics_words
from bench.results.sweeps import looks_of

GENERIC_COLUMNS = [
    "run_id",
    "created_at",
    "status",
    "task",
    "case",
    "backend",
    "workload",
    "world_size",
    "device",
    "batch_size",
    "backward_passes",
    "global_batch",
    "threads",
    "cpu_bind",
    "numerics",
    "data",
    "input",
    "image_size",
    "network",
    "hardware",
    "sweep_id",
    "repeat",
    "shared",
    "error",
    "record",
]
TRAINING_COUNTS = ("batch_size", "image_size", "global_batch")
# Runs are comparable only when these conditions are equal (docs/method.md, "Fairness"); world size varies.
CONDITIONS = [
    "workload",
    "device",
    "batch_size",
    "backward_passes",
    "threads",
    "cpu_bind",
    "numerics",
    "data",
    "input",
    "image_size",
    "network",
    "hardware",
]


def frame_columns() -> list[str]:
    extra = [c for task in all_tasks() for c in task.columns]
    return GENERIC_COLUMNS[:-1] + list(dict.fromkeys(c for c in extra if c not in GENERIC_COLUMNS)) + ["record"]


def record_row(rec) -> dict:
    """The frame row of one RunRecord: what every run has, then what its task adds."""
    spec = rec.spec
    row = {
        "run_id": rec.run_id,
        "created_at": rec.created_at,
        "status": rec.status,
        "task": spec.task,
        "case": rec.task.case(spec),
        "backend": spec.backend,
        "workload": spec.workload,
        "world_size": spec.world_size,
        "device": spec.device,
        "batch_size": spec.batch_size,
        "backward_passes": spec.backward_passes,
        "global_batch": spec.global_batch,
        "threads": spec.threads,
        "cpu_bind": spec.cpu_bind,
        "numerics": numerics(spec),
        "data": spec.data,
        "input": input_path(spec),
        "image_size": spec.image_size,
        "network": network(spec),
        "hardware": hardware(rec),
        "sweep_id": spec.sweep_id,
        "repeat": spec.repeat,
        "shared": bool(rec.shared_with),
        "error": rec.error.message if rec.error else None,
        "record": rec,
    }
    row.update(rec.task.frame_columns(rec))
    # a column of text holds it as UTF-8 (pandas' string columns are Arrow's): a path that is not, in an error or a
    # workload's address, is held with its odd bytes escaped (the record keeps it as it is)
    return {k: printable(v) if type(v) is str else v for k, v in row.items()}


def numerics(spec) -> str:
    """A run's numerics as a condition (bench.core.spec.numerics_words), with any backend option that changes the
    arithmetic set away from its default (BackendOption.numerics: Horovod's fp16 compression)."""
    words = numerics_words(spec.precision, spec.channels_last, spec.cudnn_benchmark)
    for option in get_backend(spec.backend).options:
        value = spec.backend_options.get(option.name, option.default)
        if option.numerics and value != option.default:
            words += f", {option.flag} {value}"
    return words


def input_path(spec) -> str:
    """How the data reach the model: held on the device, or through a DataLoader with K loader processes."""
    return "on device" if spec.loader != "dataloader" else f"DataLoader x{spec.loader_workers}"


def network(spec) -> str:
    """Where a run's processes talk: on this host, or across hosts and over which link."""
    if not spec.hosts:
        return "one host"
    link = f", link {spec.link['rate']}" + (f" {spec.link['delay']}" if spec.link["delay"] else "") if spec.link else ""
    return f"{len(spec.hosts)} hosts{link}"


def hardware(rec) -> str:
    """The machine a run measured: its CPU model and count, and its GPU model where it ran on GPUs. Runs of two
    machines are never one case nor compared with each other (a store may hold both)."""
    env = rec.environment or {}
    # no comma in it: `--where hardware=...` splits its values on commas
    label = f"{env.get('cpu_model') or 'unknown CPU'} ({env.get('cpu_count') or '?'} CPUs)"
    gpus = env.get("cuda_devices") or []
    if rec.spec.device == "cuda" and gpus:
        label += f" + {len(gpus)} x {gpus[0]}"
    return label


def records_to_frame(records: list):
    import pandas as pd

    frame = pd.DataFrame([record_row(r) for r in records], columns=frame_columns())
    frame["created_at"] = pd.to_datetime(frame["created_at"], unit="s", utc=True)
    # whole numbers that a run training nothing (a communication sweep) lacks: missing there, never 64.0 elsewhere
    for column in TRAINING_COUNTS:
        frame[column] = frame[column].astype("Int64")
    return frame


def load_frame(store):
    """Every run of a store as a frame, with the Looks of its sequential sweeps (bench.results.sweeps.looks_of) in
    its attrs["looks"], which the frame's slices keep: the views judge those sweeps' comparisons at their looks."""
    frame = records_to_frame(store.records())
    frame.attrs["looks"] = looks_of(store.sweeps())
    return frame


def comparable_runs(frame):
    """The runs whose figures enter comparisons, verdicts and the gate (RunRecord.comparable): ok, and alone on their
    cores (a run that shared them with another bench run measured that run too)."""
    return frame[(frame["status"] == RunStatus.OK) & ~frame["shared"].astype(bool)]


def shared_runs(frame):
    """The ok runs left out of every comparison because another bench run shared their cores."""
    return frame[(frame["status"] == RunStatus.OK) & frame["shared"].astype(bool)]


def of_task(frame, task: str):
    """The rows of one task's runs (the report hands each task its own)."""
    return frame[frame["task"] == task]


def blank_single_machine(frame):
    """The frame with its machine column blank when it holds runs of one machine only: the views key their cases
    by machine (runs of two machines are never one case nor compared), and name it only where two must be told
    apart."""
    return frame.assign(hardware="") if frame["hardware"].nunique() <= 1 else frame


def code_version(rec) -> tuple:
    """The code a run measured with: its checkout's commit, and whether that checkout had changes."""
    git = (rec.environment or {}).get("git") or {}
    return git.get("commit"), git.get("dirty")


def pooled_launches(frame, keys: list[str]) -> dict[tuple, list]:
    """The records of each case (one value of `keys`), oldest first: every launch group (sweep) of the case made
    with the same code as its latest one, pooled, so that running a sweep again narrows a case's interval
    (docs/method.md, "Replication"). A group made with other code, or a checkout with changes after one without,
    is left out: it measured something else. Cases in sorted order; a run missing a key is in none (as pandas'
    groupby has it). Plain Python over the columns: it runs once per sweep of a store in the rerun check,
    thousands of times on a large one, where a groupby's fixed cost would be most of the report's time."""
    import pandas as pd

    ordered = frame.sort_values("created_at")
    records = ordered["record"].tolist()
    cases: dict[tuple, list[int]] = {}
    for i, key in enumerate(zip(*(ordered[k].tolist() for k in keys))):
        if not any(pd.isna(value) for value in key):
            cases.setdefault(key, []).append(i)
    out = {}
    for key, rows in sorted(cases.items()):
        latest = code_version(records[rows[-1]])
        out[key] = [records[i] for i in rows if code_version(records[i]) == latest]
    return out


def sweeps_in(records: list) -> int:
    """How many launch groups (sweeps, or runs made on their own) a case's records come from."""
    return len({rec.spec.sweep_id or rec.run_id for rec in records})


# What each mark of distortion() means, said once under a table that shows it.
DISTORTION_NOTE = (
    "Distorted conditions: unpinned on one host, each backend's helper threads (Horovod's background "
    "loop, gloo's I/O) run on the other workers' cores, so the backend with more threads loses; hosts "
    "not shown to be separate machines (runs recorded by older versions of bench did not say) or on fewer machines "
    "than hosts share those machines' cores, as test hosts share this one's; oversubscribed, the "
    "workers' threads outnumber the cores."
)


def distortion(cond: dict, records: list, speed: bool = True) -> str:
    """Why runs under these conditions distort a comparison of backends, in a few words ("" when nothing is known
    to): unpinned CPU workers on one host, hosts that share one machine's cores (test hosts), or more threads than
    cores (DISTORTION_NOTE). Such cases are shown, marked, and never drive a recommendation (docs/method.md,
    "Artefacts"). `speed` False for a measure that pinning does not bear on (a recovery)."""
    why = []
    spec = records[-1].spec
    if speed and cond.get("device") == "cpu" and not spec.hosts and cond.get("cpu_bind") != "cores":
        why.append("unpinned on one host")
    if spec.hosts:
        machines = {rec.spec.machines for rec in records}
        if None in machines:
            why.append("hosts not shown to be separate machines")
        elif min(machines) < len(spec.hosts):
            why.append(f"{len(spec.hosts)} hosts on {min(machines)} machine(s)")
    cores = min(((rec.environment or {}).get("cpu_count") or 0) for rec in records)
    if cond.get("device") == "cpu" and not spec.hosts and cores and spec.threads * spec.processes > cores:
        why.append(f"oversubscribed: {spec.processes} x {spec.threads} threads on {cores} cores")
    return "; ".join(why)
