"""What a backend's process-group hooks return (bench.backends.base.ProcessGroup), as the tasks' rank programs use
it: `training` gives a Training (the train task's loop), `elastic_training` an ElasticTraining (the fault task's),
`buffers` a Buffers (the communication sweep's), `server` a Server (the loops of a process whose role is not
"worker"). Each implementation subclasses its protocol, so that a member it lacks fails at its first instance and
under mypy; the PyTorch ones are bench.rank.training's and bench.rank.collectives', TensorFlow's
bench.backends.shared.keras', the parameter server's bench.backends.ps.group's. No framework is imported here."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class ParamSums:
    """What a model's parameters sum to, in double precision: replicas that hold the same parameters agree."""

    count: int  # elements
    total: float  # the sum of every element
    absolute: float  # the sum of their absolute values (a total of zero is not a model of zeros)


class TimedInput(Protocol):
    """A batch stream that counts the time the loop waited for it (a DataLoader's: workloads.data.timing)."""

    wait_s: float  # seconds waited since the loop last set it to 0


class Profiler(Protocol):
    """What times the parts of the warm-up's steps (bench.rank.profile.StepProfiler)."""

    @abstractmethod
    def close(self) -> dict | None:
        """Stop timing; the profile for the record, or None when no step was profiled."""


class Training(Protocol):
    """A training run's framework side on one worker, for the train task's loop (bench/tasks/train/rank.py): the
    model and optimizer as the backend trains them, the worker's batches, and one step. The loop never reads a loss
    inside a timed window: a loss stays as the framework holds it until value() is called."""

    timed_input: TimedInput | None  # the batches, where the loop's wait for them is timed; None: nothing to time
    sync: Callable[[], None]  # wait until the device has done the work queued so far (the timing's edges)

    @abstractmethod
    def step(self) -> Any:
        """Train one optimizer step on the next batch; return its loss as the framework holds it."""

    @abstractmethod
    def value(self, loss: Any) -> float:
        """A loss step() returned, as a number (it may wait for the device)."""

    @abstractmethod
    def profiled(self) -> tuple[Profiler | None, Callable[[], Any] | None]:
        """(a Profiler, a step that feeds it) for the warm-up; (None, None) where the framework gives no profile."""

    @abstractmethod
    def param_sums(self) -> ParamSums:
        """The sums of the trained parameters (the model without its data-parallel wrapper)."""

    @abstractmethod
    def save_params(self, path: Any) -> None:
        """Write every parameter to `path` (--save-params)."""

    @abstractmethod
    def save_model(self, path: str) -> str:
        """Save the trained model at `path` (--save-model); return where it went."""

    @abstractmethod
    def device_peak_bytes(self) -> int | None:
        """The most device memory the run held (GPU runs); None on the CPU."""

    @abstractmethod
    def threads(self) -> dict:
        """The framework's thread pools as they are now (the record's threads)."""


class ElasticTraining(Protocol):
    """A fault run's framework side on one worker, for the fault task's loop (bench/tasks/fault/rank.py): the seeded
    model and optimizer, plain (the elastic mode's ElasticState wraps and restores them), one step of a given step
    number and rank (the same batch after any restart or rank change), the checksum a resumed process is checked by."""

    model: Any  # as built from the run's seed, handed to ProcessGroup.elastic_state
    optimizer: Any

    @abstractmethod
    def step(self, model: Any, optimizer: Any, step: int, rank: int) -> Any:
        """Step number `step` (0-based) on the batch of (step, rank), of the model and optimizer as the elastic
        mode trains them; return its loss. It ends when the device has done it (a step is journaled as done)."""

    @abstractmethod
    def checksum(self) -> float:
        """The sum of the model's parameters (every process that resumed from one commit gives the same)."""

    @abstractmethod
    def save_params(self, path: Any) -> None:
        """Write every parameter to `path` (--save-params)."""


class Buffers(Protocol):
    """A communication sweep's buffers in the framework's tensors of the sweep's dtype, on the worker's device
    (bench.rank.collectives.time_messages); what the group's run_op takes and returns."""

    @abstractmethod
    def zeros(self, count: int) -> Any:
        """A tensor of `count` zeros."""

    @abstractmethod
    def pattern(self, count: int, rank: int) -> Any:
        """`count` small integers that depend on `rank`, exact in every dtype for the sums of a few ranks."""

    @abstractmethod
    def concat(self, parts: list) -> Any:
        """The tensors of `parts`, one after another."""

    @abstractmethod
    def wrong(self, result: Any, want: Any) -> int:
        """Elements of `result` that differ from `want` (all of them where the shapes differ)."""

    @abstractmethod
    def sync(self, last: Any = None) -> None:
        """Wait until the device has done the ops queued so far (`last`: the last op's result)."""


class Server(Protocol):
    """The protocol a process whose role is not "worker" (a parameter server) speaks, for the tasks' loops of that
    role: serve_parameters in bench/tasks/train/rank.py (a training run's steps) and serve_sums in
    bench/tasks/comm/rank.py (a communication sweep's allreduces)."""

    workers: list[int]  # the global ranks of the workers it serves

    @property
    @abstractmethod
    def updates_per_step(self) -> int:
        """Updates it applies in one of the workers' steps (receive, update, answer, that many times)."""

    @abstractmethod
    def shard(self, model: Any) -> Any:
        """A flat copy of the parameters of `model` this process owns (the loop applies the optimizer to it)."""

    @abstractmethod
    def start(self, weights: Any) -> None:
        """Send the initial `weights` (its shard) to the workers: their first pull."""

    @abstractmethod
    def receive(self) -> Any:
        """The gradient for the next update, summed over the pushes it averages (the loop divides by workers)."""

    @abstractmethod
    def answer(self, weights: Any) -> None:
        """The updated shard to the workers whose push it answers (some may be held back)."""

    @abstractmethod
    def answer_held_back(self, weights: Any) -> None:
        """The answers still held back once every push has been applied."""

    @abstractmethod
    def counters(self) -> dict:
        """What it did, for its result file."""

    @abstractmethod
    def sum_rounds(self, count: int, rounds: int, dtype: str) -> int:
        """A sweep's allreduce of `count` elements of `dtype`, `rounds` times: its part of the sums; returns the
        pushes it received."""
