"""The backend plug-in interface. A backend holds only what differs between backends; timing, records, statistics
and reports never branch on its name. It is one folder, bench/backends/<name>/, split by the process that runs
each part:

- `__init__.py` (the parent; no framework import): `Backend`, what the parent needs: the name, options, limits,
  availability, the cost model, its `Launcher`, its `ElasticMode` (None when it has none), and the dotted path of
  its process group's module (`group`), which only a run's processes import;
- `launcher.py` (the parent; no framework import): `Launcher`, the command that starts the ranks, the environment
  it needs and how a rank reads its identity from the environment it was started with; and `ElasticMode`, a
  fault run's launch in the backend's elastic mode, a joining worker's start, what the launcher reported;
- `group.py` (a run's processes; its framework imported at the top): `ProcessGroup`, one per process: join the
  group, wrap model and optimizer, barrier, collectives, shutdown, the worker's state through faults
  (`ElasticState`: resume, commit; the loop is the fault task's) and the protocol of processes whose role is not
  "worker" (parameter servers), whose loops are the tasks'. The module ends with `GROUP = ...`.

What a backend must give (everything else has a default here, used unless it has reason to differ; what the
group's hooks return is typed in bench.rank.hooks):

| part | required |
|---|---|
| `Backend` | `name`, `summary`, `launcher`, `group`; `comm_schedule`, or why not projected (`projection_problem`) |
| `Launcher` | `command`, `rank_identity` |
| `ProcessGroup` | `init` |
| `ElasticMode` (only with an elastic mode) | `launch`, `join`; its `ProcessGroup.elastic_state` |
| `ElasticState` | `resume`, `commit` |

Code that several backends share (the torchrun launcher, DistributedDataParallel's group, the TensorFlow side) is
in bench/backends/shared/.
"""

from __future__ import annotations

import math
import socket
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Protocol, final

from bench.core.dryrun import planning
from bench.core.hostlist import placement
from bench.core.records import RankRow
from bench.rank.collectives import TorchBuffers, bus_factor
from bench.rank.hooks import Buffers, ElasticTraining, Server, Training
from bench.rank.training import TorchElasticTraining, TorchTraining


@dataclass(frozen=True)
class CommSchedule:
    """When a backend moves a step's gradients, as the scaling model (bench.projection.model) replays it:

    - "buckets": the gradients, in the order they become ready, are grouped into buckets of at most cap_bytes (the
      first of at most first_cap_bytes); a bucket's collective starts once its last gradient is ready, one at a time;
    - "cycles": a background loop wakes every cycle_s (a cycle begins no sooner than the last one's collectives
      ended) and fuses the gradients ready by then into collectives of at most cap_bytes;
    - "after_backward": one exchange of every gradient once the backward pass is over (nothing overlaps);
    - "none": nothing is exchanged.
    wire_scale: bytes sent per byte of gradient (0.5 when gradients are compressed to 16 bits)."""

    kind: str
    cap_bytes: float = float("inf")
    first_cap_bytes: float | None = None
    cycle_s: float = 0.0
    wire_scale: float = 1.0


@dataclass(frozen=True)
class Exchange:
    """What one collective of S bytes puts on the links between hosts, for the scaling model: `steps` messages one
    after another (each pays a link's latency) and `link_bytes` that cross the busiest host's link in one direction,
    one after another (so the link's time is link_bytes / its bandwidth). `name` says which algorithm."""

    name: str
    steps: float
    link_bytes: float
    local_steps: float = 0.0  # of `steps`, those between the workers of one node (each paying that link's latency)
    # bytes each worker's link within its node carries in a phase of their own (an aggregation inside the node
    # before the exchange across nodes); a ring's and a tree's bytes cross both links at once and have none
    local_bytes: float = 0.0


@dataclass(frozen=True)
class BackendOption:
    """A knob users tune on one backend; shown in --help and recorded in spec.backend_options."""

    name: str  # key in spec.backend_options; the CLI flag is --name with dashes unless `cli_flag` says otherwise
    default: object
    help: str
    type: type = str
    choices: tuple | None = None
    invalid: tuple[str, ...] = ()  # values the flag must refuse (tests/test_bad_input_table.py gives each)
    default_words: str | None = None  # what the default means, where its value (None) says nothing to a reader
    cli_flag: str | None = None  # the flag, where it is not the name: a name kept as stored records hold it
    fault_only: bool = False  # an option of the elastic mode's fault runs: shown in `bench fault --help` only
    # it changes the arithmetic of training (Horovod's fp16 compression): a value other than its default is part of the
    # run's numerics condition (bench.results.frame), so such a run is never compared as the equal of one without it
    numerics: bool = False

    @property
    def flag(self) -> str:
        return self.cli_flag or "--" + self.name.replace("_", "-")

    @property
    def shown_default(self) -> str:
        """The default as help says it: in words where given, else the value."""
        return self.default_words or str(self.default)


def hostname() -> str:
    return socket.gethostname()


def rank_row(**fields):
    """One row of the rank map, as the launcher assigned it (bench.core.records.RankRow)."""
    return RankRow(host=fields.pop("host", None) or hostname(), **fields)


class Launcher(ABC):
    """Parent side: how the ranks of a run are started (launcher.py; no framework import)."""

    spans_hosts = False  # whether command() starts ranks on several hosts (spec.hosts); else one host at most

    @abstractmethod
    def command(self, spec, rank_command: list[str], run_id: str) -> list[str]:
        """The full command that starts spec.processes copies of rank_command."""

    def env(self, spec) -> dict[str, str]:
        return {}

    @abstractmethod
    def rank_identity(self, env) -> tuple[int, int]:
        """(global rank, attempt) of the rank started with this environment."""

    def plan_notes(self, spec) -> list[str]:
        """What a dry run's plan says of the launch beyond its command and environment: by default, where each process
        of a GPU run takes its GPU (bench.rank.kit: cuda:LOCAL_RANK, LOCAL_RANK as the launcher numbers the processes
        of a host)."""
        if spec.device != "cuda":
            return []
        return [
            "each process takes cuda:LOCAL_RANK, its local rank on its host (CUDA_VISIBLE_DEVICES is not set by "
            "bench: every process sees its host's GPUs); NCCL carries the collectives"
        ]

    def startup_phases(self, run_dir) -> dict[str, float]:
        """The launcher's own start-up phases of a finished run, as it reported them in the run directory:
        name -> seconds, in the order they happened (kept in the record's startup; none by default)."""
        return {}

    def pod_agent(self, place, rank_command: list[str]) -> list[str] | None:
        """The command that makes one pod of a Kubeflow job one agent of a run spread over the job's pods (`place`, a
        bench.cluster.kubeflow_pod.PodPlace); None for a launcher that has none (the run is refused)."""
        return None


class ProcessGroup(ABC):
    """Worker side: one instance in each process of a run (group.py). Its framework is PyTorch unless it says
    otherwise (set_threads, training, elastic_training, buffers): a TensorFlow backend's group gives its own."""

    def set_threads(self, threads: int) -> None:
        """The framework's compute threads in this process (--threads), set before the group is joined."""
        import torch  # here, not at the top: a TensorFlow backend's processes never load torch

        torch.set_num_threads(threads)

    def training(self, joined, workload) -> Training:
        """The train task's framework side (bench.rank.hooks.Training): the model and optimizer, wrapped by this
        group (wrap), the worker's batches and one step. PyTorch's by default: bench.rank.training.TorchTraining."""
        return TorchTraining(joined, workload)

    def elastic_training(self, spec, workload) -> ElasticTraining:
        """The fault task's framework side (bench.rank.hooks.ElasticTraining): the model and optimizer the elastic
        mode's worker state tracks, the step of a given step number and rank, the checksum. PyTorch's by default:
        bench.rank.training.TorchElasticTraining."""
        return TorchElasticTraining(spec, workload)

    @abstractmethod
    def init(self, spec):
        """Join the group (rendezvous) and say who this process is: a bench.core.records.RankRow."""

    def rendezvous_began(self, init_called: float) -> float:
        """When this process's rendezvous began (wall clock): when init was called, unless the launcher set the
        group up before the rank's own code ran (Ray Train does), in which case when that set-up began."""
        return init_called

    def wrap(self, model, optimizer, spec):
        """(model, optimizer) as this group trains them (a data-parallel wrapper, a distributed optimizer), for
        TorchTraining and the converge task's PyTorch loop (bench/tasks/converge/rank.py); unchanged by default."""
        return model, optimizer

    def barrier(self) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def buffers(self, dtype: str, member) -> Buffers:
        """A communication sweep's buffers (bench.rank.hooks.Buffers), by default bench.rank.collectives.TorchBuffers:
        torch tensors of `dtype` on the worker's device; a group of another framework gives its own."""
        return TorchBuffers(dtype, member.device, member.sync)

    def run_op(self, op: str, inp, out):
        """Run one collective (bench.rank.collectives.OPS) and return the tensor holding its result."""
        raise RuntimeError(f"this backend has no collective {op!r}")

    def server(self, spec, info) -> Server:
        """The protocol a process whose role is not "worker" (a parameter server) speaks (bench.rank.hooks.Server):
        what the tasks' loops for that role call; a group whose backend has such roles (Backend.roles) gives it."""
        raise RuntimeError(f"this backend has no role {info.role!r}")

    def elastic_state(self, model, optimizer, run_dir, spec, on_reset) -> ElasticState:
        """The training state of this process through faults, under the backend's elastic mode, for the fault
        task's loop (bench/tasks/fault/rank.py); on_reset(rank, size) is called when the backend resets the group."""
        raise RuntimeError("this backend has no elastic mode")


class FaultScenario(Protocol):
    """What an elastic mode reads of a fault scenario (an entry of bench.tasks.fault.scenarios): its traits, never
    its name, which is the fault task's."""

    @property
    def across_hosts(self) -> bool: ...  # one of the run's hosts is lost, cut off or dropped

    @property
    def joins(self) -> bool: ...  # one more worker joins, rather than one lost

    @property
    def hook(self) -> type | None: ...  # the protocol of the mode's own work that delivers it; None: none


class ElasticMode(ABC):
    """A backend's elastic mode, as `bench fault` drives it: its parent side (launcher.py; the worker's side is
    ProcessGroup.elastic_state). `fault` is the fault task's settings (bench.tasks.fault.settings.FaultSettings),
    given by the fault task: what an elastic mode reads of them is `joining` (one more worker joins, rather than
    one lost), `max_restarts`, `recovery_timeout` and `host` (the host a fault across hosts takes out)."""

    across_hosts = False  # whether its launcher runs across hosts, where the fault scenarios across hosts are made

    def supports(self, scenario: FaultScenario) -> bool:
        """Whether it makes this fault scenario: every one on one machine; one across hosts where it runs there
        (`across_hosts`); one delivered by work of the mode's own (`scenario.hook`, a protocol) where it has it."""
        if scenario.across_hosts and not self.across_hosts:
            return False
        return scenario.hook is None or isinstance(self, scenario.hook)

    def problem(
        self, scenario: FaultScenario, world_size: int, options: dict | None = None, hosts: list[dict] | None = None
    ) -> str | None:
        """None when this scenario can run at this world size with these backend options (across `hosts`, a run
        across hosts), else why not."""
        return None

    @abstractmethod
    def launch(self, spec, fault, rank_command: list[str], run_id: str, run_dir) -> tuple[list[str], dict, dict]:
        """(command, extra environment, launch info kept in the record) that starts spec.world_size workers."""

    @abstractmethod
    def join(self, spec, fault, rank_command: list[str], run_id: str, run_dir, info: dict) -> list[str] | None:
        """Scale-up: a command that starts the joining worker, or None when the backend was told another
        way (a discovery script's answer changed)."""

    def nccl_env(self, spec, fault) -> dict[str, str]:
        """What a fault run on GPUs sets so that a collective over NCCL that meets a dead or hung peer ends within
        the collective timeout (RunSpec.collective_timeout), and the launcher sees it; empty on CPUs and by
        default. The fault task adds it to the launch's environment and stores it in the record."""
        return {}

    def observations(self, run_dir) -> dict:
        """What the launcher itself reported: {"events": [...], "rendezvous": [...],
        "detections": [(wall time, what it saw), ...]}."""
        return {"events": [], "rendezvous": [], "detections": []}


@dataclass(frozen=True)
class Position:
    """Where a process of an elastic run stands when it (re)starts training."""

    step: int  # the last committed step: the next step to train
    rank: int
    size: int  # workers in the group now
    local_rank: int
    restart_count: int  # how many times the launcher restarted the workers (0 where it does not say)
    group_rank: int | None  # the host's (node's) rank


class ElasticState(ABC):
    """Worker side of an elastic mode: how one process resumes, trains and commits through faults. The loop over
    the steps is the fault task's (bench/tasks/fault/rank.py); the backend owns restart, restore and commit."""

    failures: tuple[type[BaseException], ...] = (Exception,)  # what a step that met a fault raises
    model: Any = None  # the model as the backend trains it (wrapped for data parallelism)
    optimizer: Any = None

    def run(self, train) -> int:
        """train(self) under the backend's recovery (it may be called again after a fault); its last step."""
        return train(self)

    @abstractmethod
    def resume(self) -> Position:
        """Restore the committed state (a checkpoint, a broadcast) and say where this process stands."""

    @abstractmethod
    def commit(self, step: int, committed, detected) -> None:
        """Make `step` the state a restart resumes from; committed() runs once it is durable and before it is
        visible (a journal entry), detected(what) when committing finds the membership changed."""


class Backend(ABC):
    """What the parent knows of a backend (its folder's `__init__.py`, which ends with `BACKEND = ...`). Required:
    `name`, `summary`, `launcher` and `group` (abstract: a backend without one cannot be made), and, for the scaling
    model, `comm_schedule` or a `projection_problem` saying why it cannot be projected (a class with neither is
    refused as it is defined). The rest are optional, with the defaults below; `problem_here` is given to every
    backend and not one to override. docs/architecture.md, "The interface of a backend", has the table."""

    @property
    @abstractmethod
    def name(self) -> str:
        """Its registry name (bench.core.registry.BACKEND_MODULES)."""

    @property
    @abstractmethod
    def summary(self) -> str:
        """A line for `bench doctor`."""

    @property
    @abstractmethod
    def launcher(self) -> Launcher:
        """How its ranks are started."""

    @property
    @abstractmethod
    def group(self) -> str:
        """The dotted path of the module holding its process group (GROUP, a ProcessGroup class): imported by a run's
        processes only (bench.rank.kit), so that the parent never loads the backend's framework."""

    framework = "torch"  # what trains the model: "torch" or "tensorflow" (the page compares within and across)
    tasks: tuple[str, ...] = ("train", "comm", "fault", "converge")  # the kinds of run it takes (bench.core.registry)
    max_world_size: int | None = None
    # the Kubeflow jobs whose operator starts it as its users run it there (bench k8s: bench.cluster.k8s.KINDS)
    kubeflow_kinds: tuple[str, ...] = ()
    options: tuple[BackendOption, ...] = ()
    comm_ops: tuple[str, ...] = ()  # collectives run_op can time (bench allreduce --ops)
    comm_dtypes: tuple[str, ...] = ("float32", "float16", "bfloat16")
    elastic: ElasticMode | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Refuse, as the class is defined, what a backend cannot leave to a default: where the scaling model would
        replay no communication at all (a step with none is a schedule to say, CommSchedule("none")), and a converge
        task under another framework than PyTorch (its rank program is PyTorch's: bench/tasks/converge/rank.py)."""
        super().__init_subclass__(**kwargs)
        if cls.comm_schedule is Backend.comm_schedule and cls.projection_problem is Backend.projection_problem:
            raise TypeError(
                f"backend class {cls.__name__} gives no comm_schedule: say when it moves gradients (the scaling "
                "model's rule), or why the scaling model cannot project it (projection_problem)"
            )
        if "converge" in cls.tasks and cls.framework != "torch":
            raise TypeError(
                f"backend class {cls.__name__} takes converge runs, whose rank program is PyTorch's, but trains "
                f"with {cls.framework}: drop converge from its tasks"
            )

    def resolve_options(self, given: dict, world_size: int | None = None, hosts: list[dict] | None = None) -> dict:
        """Every option of this backend with its value (given or default), for the record; a default may depend on
        the world size and, across hosts, the hosts."""
        return {opt.name: given.get(opt.name, opt.default) for opt in self.options}

    def host_plan(self, hosts: list, world_size: int, options: dict) -> list[tuple[object, int, dict]]:
        """Across hosts: (bench.cluster.hosts.Host, processes started there, environment they get) per host used, in
        order. By default every process takes a slot, filled in order (mpirun's -map-by slot)."""
        return [(host, n, {}) for host, n in placement(hosts, sum(self.roles(options, world_size).values()))]

    def roles(self, options: dict, world_size: int) -> dict[str, int]:
        """Processes per role. Only workers train and count in throughput and world size."""
        return {"worker": world_size}

    def check_options(self, options: dict, device: str) -> str | None:
        """None when the option values can run on `device`, else what is wrong."""
        return None

    def numerics_problem(self, precision: str, channels_last: bool) -> str | None:
        """None when the backend can train at `precision` (bench.core.spec.PRECISIONS) in the memory format asked,
        else why not (the TensorFlow backends' fp32-only rule is bench.core.spec.resolve_numerics')."""
        return None

    def places_on_this_host(self, options: dict) -> bool:
        """Whether the run's workers are this host's processes, numbered by local rank (so --cpu-bind auto may pin
        them); False where something else places them (an existing cluster's scheduler)."""
        return True

    def transport(self, device: str, options: dict) -> str:
        """What carries its collectives on `device`, in a word or two (the line printed before a run)."""
        return "NCCL" if device == "cuda" else "gloo"

    def backward_passes(self, options: dict) -> int:
        """Backward passes (micro-batches) per optimizer step; the worker loop runs that many."""
        return 1

    def synchronous(self, options: dict) -> bool:
        """Whether every worker applies the same averaged update each step, so all hold the same parameters
        (asynchronous updates let them differ by design)."""
        return True

    def unavailable_reason(self, device: str) -> str | None:
        """None when this backend can run on `device` here, else what is missing and how to get it."""
        return None

    @final
    def problem_here(self, device: str) -> str | None:
        """unavailable_reason, but for a dry run's GPU plan, which any machine may make: the GPUs, and the NCCL that
        drives them, are the hosts' to have (their check runs with the run)."""
        return None if device == "cuda" and planning() else self.unavailable_reason(device)

    def doctor_lines(self) -> list[str]:
        """Extra facts for `bench doctor`."""
        return []

    def projection_problem(self) -> str | None:
        """None when the scaling model (bench.projection) can project this backend, else why not. A backend that
        gives no comm_schedule must say why here."""
        return None

    def comm_schedule(self, options: dict) -> CommSchedule:
        """When this backend moves gradients during a step (the scaling model's rule). Required of every backend the
        scaling model projects (no default: a forgotten one would be replayed as no communication at all); called
        only where projection_problem() is None."""
        raise NotImplementedError(f"{self.name} is not projected: {self.projection_problem()}")

    def exchanges(self, nbytes: float, world_size: int, hosts: int, device: str, options: dict) -> list[Exchange]:
        """The ways an exchange of `nbytes` among `world_size` workers spread evenly over `hosts` hosts can go over
        the links between them (the scaling model takes the fastest, as NCCL's tuner picks an algorithm). A ring by
        default: 2(n-1) steps, and each host's link carries 2(n-1)/n of the bytes (one ring edge leaves each host);
        on GPUs NCCL may also take a tree: 2 log2(hosts) steps across hosts plus the steps within one, and the same
        bytes (NCCL's tree reaches about the ring's bus bandwidth: it saves latency, not bytes)."""
        n = world_size
        if hosts <= 1 or n <= 1:
            return [Exchange("within a host", 2.0 * (n - 1), 0.0)]
        ring = Exchange("ring", 2.0 * (n - 1), 2.0 * (n - 1) / n * nbytes)
        if device != "cuda":
            return [ring]
        per_host = max(1, round(n / hosts))
        tree = Exchange(
            "tree", 2.0 * (math.ceil(math.log2(hosts)) + per_host - 1), ring.link_bytes, 2.0 * (per_host - 1)
        )
        return [ring, tree]

    def cost_model(self, world_size: int, options: dict) -> tuple[str, float, float]:
        """(name, alpha coefficient, beta coefficient) of this backend's allreduce algorithm:
        T = alpha_coef * a + beta_coef * S * b. Ring allreduce by default: 2(n-1) latency steps, and each
        rank moves the bus factor's share of S."""
        return "ring", 2.0 * (world_size - 1), bus_factor("allreduce", world_size)
