"""The plug-in interface. A backend holds only what differs between backends.

Launcher side (runs in the parent; must not import torch at module level): availability, the
command line that starts the ranks, and how a rank reads its identity from its environment.
Worker side (runs in each rank): init, wrap model and optimizer, barrier, shutdown.
Timing, records, statistics and reports never branch on the backend's name.
"""

from __future__ import annotations

import socket
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class BackendOption:
    """A knob users tune on one backend; shown in --help and recorded in spec.backend_options."""

    name: str  # key in spec.backend_options; the CLI flag is --name with dashes
    default: object
    help: str
    type: type = str
    choices: tuple | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


@dataclass
class RankInfo:
    """One row of the rank map, as the launcher assigned it."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    group_rank: int  # node index (torchrun's GROUP_RANK, Horovod's cross rank)
    role_rank: int
    restart_count: int
    host: str
    role: str = "worker"

    def to_dict(self) -> dict:
        return asdict(self)


def hostname() -> str:
    return socket.gethostname()


class Backend(ABC):
    name = ""
    summary = ""
    max_world_size: int | None = None
    options: tuple[BackendOption, ...] = ()
    comm_ops: tuple[str, ...] = ()  # collectives run_op can time (bench allreduce --ops)
    comm_dtypes: tuple[str, ...] = ("float32", "float16", "bfloat16")
    elastic_modes: tuple[str, ...] = ()  # fault scenarios its elastic mode supports (bench.fault.SCENARIOS)

    def resolve_options(self, given: dict) -> dict:
        """Every option of this backend with its value (given or default), for the record."""
        return {opt.name: given.get(opt.name, opt.default) for opt in self.options}

    def roles(self, options: dict, world_size: int) -> dict[str, int]:
        """Processes per role. Only workers train and count in throughput and world size."""
        return {"worker": world_size}

    def check_options(self, options: dict, device: str) -> str | None:
        """None when the option values can run on `device`, else what is wrong."""
        return None

    def backward_passes(self, options: dict) -> int:
        """Backward passes (micro-batches) per optimizer step; the worker loop runs that many."""
        return 1

    # ------------------------------------------------------------ launcher side
    def unavailable_reason(self, device: str) -> str | None:
        """None when this backend can run on `device` here, else what is missing and how to get it."""
        return None

    def doctor_lines(self) -> list[str]:
        """Extra facts for `bench doctor`."""
        return []

    @abstractmethod
    def launch_command(self, spec, rank_command: list[str], run_id: str) -> list[str]:
        """The full command that starts spec.world_size copies of rank_command."""

    def launch_env(self, spec) -> dict[str, str]:
        return {}

    @abstractmethod
    def rank_identity(self, env) -> tuple[int, int]:
        """(global rank, attempt) of the rank started with this environment."""

    # ------------------------------------------------------------ worker side
    @abstractmethod
    def init(self, spec) -> RankInfo:
        """Join the group (rendezvous) and say who this rank is."""

    def wrap(self, model, optimizer, spec):
        return model, optimizer

    def barrier(self) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def cost_model(self, spec) -> tuple[str, float, float]:
        """(name, alpha coefficient, beta coefficient) of this backend's allreduce algorithm:
        T = alpha_coef * a + beta_coef * S * b. Ring allreduce by default."""
        n = spec.world_size
        return "ring", 2.0 * (n - 1), 2.0 * (n - 1) / n

    def run_op(self, op: str, inp, out):
        """Run one collective (bench.comm.OPS) and return the tensor holding its result."""
        raise RuntimeError(f"backend {self.name} has no collective {op!r}")

    def serve(self, spec, info: RankInfo, fault: dict | None) -> dict:
        """The loop of a process whose role is not "worker" (a parameter server); returns its result."""
        raise RuntimeError(f"backend {self.name} has no role {info.role!r}")

    # ------------------------------------------------------------ elastic mode (bench fault)
    def fault_problem(self, scenario: str, world_size: int) -> str | None:
        """None when this scenario can run at this world size, else why not."""
        return None

    def fault_launch(self, spec, rank_command: list[str], run_id: str, run_dir) -> tuple[list[str], dict]:
        """(command, extra environment) that starts spec.world_size workers in the backend's elastic mode."""
        raise RuntimeError(f"backend {self.name} has no elastic mode")

    def fault_join(self, spec, rank_command: list[str], run_id: str, run_dir) -> list[str] | None:
        """Scale-up: a command that starts the joining worker(s), or None when the backend was told
        another way (a discovery script's answer changed)."""
        raise RuntimeError(f"backend {self.name} has no elastic mode")

    def run_elastic(self, ctx) -> int:
        """Worker side: train ctx.total_steps steps through faults (bench.worker.FaultContext), resuming
        from the backend's checkpoint or committed state; returns the last step."""
        raise RuntimeError(f"backend {self.name} has no elastic mode")
