"""The task plug-in interface: one kind of run, split along its jobs, each in its own module of the task's folder.

- `Task` (the folder's `__init__`, imported by the parent): the run's life in the parent process — `describe`
  (the line printed before a run), `launch` (the command, extra environment and the watcher the supervisor
  polls), `before_launch` (anything measured in the parent just before, such as a communication ceiling),
  `conclude` (status, error, metrics and rank map from the run directory), `upgrade` (its part of an old
  record), `measured` (whether its status is a result, even when not ok: what a sweep's exit status leaves
  out) — and its terminal views: `case` (what ran, in words), `kind` (in a word or two), `one_line`,
  `ok_figure`, `summary_lines`, `list_figure`, `frame_columns` (the columns `bench list`, `--where` and the
  report filter on). Plug-ins implement the abstract methods; a missing one fails when the plug-in is built.
- `rank.py`: `run_rank`, what one process of a run does (bench.rank.entry calls it; it may import torch).
- `results.py` (results layer): `gate_figures` (what the regression gate compares) and `comparisons` (the
  comparisons across launches that the page and `bench agreement` make).
- `report.py` (report layer): `report_part`, the page's sections for this task's runs.
The parts are found by name (bench.core.registry.task_part); a task without a part has no such module.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.core.records import RunStatus


@dataclass
class Launch:
    """How the parent starts a run: the command, extra environment, what the supervisor polls
    (a progress printer, a fault driver; it may end the run by returning an ending), how often, and
    what was decided at launch time (kept in the record's `launch`, never written into the spec)."""

    command: list[str]
    env: dict[str, str] = field(default_factory=dict)
    watcher: Callable[[], str | None] | None = None
    poll_interval: float = 0.2
    info: dict = field(default_factory=dict)


@dataclass
class Conclusion:
    """What a task makes of a finished run."""

    status: RunStatus
    error: object | None  # bench.core.records.RunError
    metrics: object | None  # the task's metrics_type
    rank_map: list
    events: list[dict] = field(default_factory=list)

    def __post_init__(self):
        self.status = RunStatus(self.status)


class Task(ABC):
    name = ""
    label = ""  # what a run of this task is called: "training", "communication sweep", "fault injection"
    metrics_type: type = object
    columns: tuple[str, ...] = ()  # frame_columns' names, declared so that every frame has them all
    # its own settings (a bench.core.spec.TaskSettings dataclass), held in the spec's field named after the task
    # (bench.core.spec.TASK_SETTINGS); None for a task whose runs need none beyond the spec's own fields
    settings_type: type | None = None
    # what its runs give the scaling model (bench.projection): "step" (a measured, profiled training step),
    # "collective" (an alpha-beta fit of the backend's allreduce), or "" (nothing)
    model_input = ""

    # ------------------------------------------------------------ parent side
    @abstractmethod
    def describe(self, spec) -> str:
        """The line printed before a run: what will run, where, and how long it is measured."""

    def before_launch(self, spec) -> dict | None:
        return None

    def launch(
        self, spec, backend, rank_command: list[str], run_id: str, run_dir, env: dict, show_progress: bool
    ) -> Launch:
        return Launch(
            command=backend.launcher.command(spec, rank_command, run_id),
            watcher=self.progress(spec, run_dir) if show_progress else None,
        )

    def progress(self, spec, run_dir):
        """What the supervisor polls to print the run's progress (when asked), or None."""
        return None

    @abstractmethod
    def conclude(self, spec, run_dir, outcome, before: dict | None) -> Conclusion:
        """Status, error, metrics and rank map of a finished run, from its run directory and how the
        launcher ended (bench.harness.supervisor.Outcome); `before` is what before_launch measured."""

    def upgrade(self, from_version: int, record: dict) -> dict:
        """A stored record of this task at `from_version`, with this task's part moved to the next
        version's layout (bench.core.records.UPGRADES does the rest)."""
        return record

    # ------------------------------------------------------------ views
    def case(self, spec) -> str:
        """What ran, in a few words (a workload's name; "communication sweep"; the fault)."""
        return self.label

    def kind(self, spec) -> str:
        """The kind of run in a word or two, for a figure's title ("train"; a fault run's fault: "kill", "hang")."""
        return self.name

    def measured(self, record) -> bool:
        """Whether the run measured what it set out to, so that its status is a result even when not ok (a fault
        that training did not come through); a sweep's exit status counts only the runs that did not."""
        return record.ok

    def one_line(self, record) -> str:
        """A run in one line: how it failed, or `ok` and its headline figure (ok_figure)."""
        if not record.ok:
            return f"{record.status}: {record.error.message if record.error else ''}"
        return f"ok {self.ok_figure(record)}"

    @abstractmethod
    def ok_figure(self, record) -> str:
        """The headline figure of an ok run."""

    def summary_lines(self, record) -> list[str]:
        return [f"status: {record.status}"] + ([f"error: {record.error.message}"] if record.error else [])

    def list_figure(self, record) -> str:
        """The result column of `bench list`."""
        return "-"

    def frame_columns(self, record) -> dict:
        return {}
