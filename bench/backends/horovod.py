"""horovod: horovodrun (Gloo controller by default, MPI on request) + hvd.DistributedOptimizer.

Launchers (--hvd-launcher): `gloo` = horovodrun --gloo; `mpi` = horovodrun --mpi; `mpirun` = plain
OpenMPI mpirun in the classic form (-bind-to none -map-by slot -x VAR ...). Both MPI launchers need
a Horovod built with MPI (`horovodrun --check-build`). Fusion threshold and cycle time go through
HOROVOD_FUSION_THRESHOLD / HOROVOD_CYCLE_TIME, which every launcher passes on.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from bench.backends.base import (Backend, BackendOption, CommSchedule, ElasticMode, ElasticState, Launcher, Position, ProcessGroup,
                                 rank_row)
from bench.cluster.fanout import fanout_command
from bench.cluster.hosts import run_on
from bench.core.console import note
from bench.core.environment import package_version
from bench.core.hostlist import Host, placement
from bench.core.rundir import write_atomic

SETUP_HINT = "run `python -m bench.tools.horovod_build` (nox -s tests and nox -s bench do it for you)"
LAUNCHERS = ("gloo", "mpi", "mpirun")
MAX_CYCLE_MS = 60_000.0  # --hvd-cycle-ms at most: a minute (every collective may wait a cycle)
# Variables mpirun must carry to the ranks (it passes the environment only to local ranks by itself):
# those the harness always sets, and those passed on when they are set.
MPIRUN_EXPORTS = ("BENCH_RUN_TAG", "PYTHONPATH", "PYTHONUNBUFFERED", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                  "PATH")
MPIRUN_EXPORTS_IF_SET = ("CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "HOROVOD_FUSION_THRESHOLD",
                         "HOROVOD_CYCLE_TIME", "NCCL_DEBUG", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")


def horovodrun_path() -> str | None:
    beside = Path(sys.executable).parent / "horovodrun"
    return str(beside) if beside.exists() else shutil.which("horovodrun")


# The probe reads the build flags Horovod's own `horovodrun --check-build` prints, in one child that imports
# horovod.torch only; --check-build itself imports every framework in a child each, several times slower, which
# every horovod command would otherwise pay. `bench doctor` still prints --check-build in full.
_PROBE = ("import json, horovod, horovod.torch as hvd; print(json.dumps({'version': horovod.__version__, "
          "'MPI': bool(hvd.mpi_built()), 'Gloo': bool(hvd.gloo_built()), 'NCCL': bool(hvd.nccl_built()), "
          "'DDL': bool(hvd.ddl_built()), 'CCL': bool(hvd.ccl_built())}))")


@functools.lru_cache(maxsize=None)
def check_build() -> tuple[str | None, dict]:
    """(problem or None, the build's flags: version and which of MPI, Gloo, NCCL, DDL, CCL it has).
    Imported in a child: a broken build (say, one made against another torch) fails there, not here."""
    if horovodrun_path() is None:
        return f"Horovod is not installed; {SETUP_HINT}", {}
    probe = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120)
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["unknown error"])[-1]
        return f"Horovod is installed but does not import ({last}); build it for this torch: " \
               f"python -m bench.tools.horovod_build --force", {}
    return None, json.loads(probe.stdout.strip().splitlines()[-1])


# each framework's library in an installed Horovod, as its build leaves it (horovod/<dir>/mpi_lib*.so)
FRAMEWORK_LIBRARIES = {"PyTorch": ("torch", "mpi_lib_v2"), "TensorFlow": ("tensorflow", "mpi_lib")}


@functools.lru_cache(maxsize=None)
def built_frameworks() -> list[str]:
    """The frameworks this Horovod was built with, from the libraries it installed (no framework imported)."""
    import importlib.util

    spec = importlib.util.find_spec("horovod")
    if spec is None or not spec.submodule_search_locations:
        return []
    root = Path(list(spec.submodule_search_locations)[0])
    return [name for name, (folder, lib) in FRAMEWORK_LIBRARIES.items()
            if any((root / folder).glob(f"{lib}.*.so")) or (root / folder / f"{lib}.so").exists()]


def built_with(feature: str) -> bool:
    """Whether this Horovod was built with a controller or tensor operation, e.g. 'MPI', 'Gloo' or 'NCCL'."""
    return bool(check_build()[1].get(feature))


def is_open_mpi(mpirun: str) -> bool:
    try:
        out = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "Open MPI" in out or "OpenRTE" in out


def horovod_env(spec) -> dict[str, str]:
    """What every Horovod launcher passes on: the tuned fusion threshold and cycle time, and OpenMPI's
    permission to run as root (containers and CI often do)."""
    env = {}
    opts = spec.backend_options
    if opts["hvd_fusion_mb"] is not None:
        env["HOROVOD_FUSION_THRESHOLD"] = str(int(opts["hvd_fusion_mb"] * 2**20))
    if opts["hvd_cycle_ms"] is not None:
        env["HOROVOD_CYCLE_TIME"] = str(opts["hvd_cycle_ms"])
    if opts["launcher"] != "gloo" and os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def on_first_host(spec, command: list[str]) -> list[str]:
    """Across hosts, horovodrun and mpirun run on the first host, as users start them from one of the nodes:
    their rendezvous server and daemons then sit on the network the hosts share. Inside a Slurm allocation they
    run where bench runs: the batch script's node, the allocation's first."""
    if not spec.hosts or spec.scheduler:
        return command

    return fanout_command([(spec.hosts[0]["name"], command)])


def ssh_keepalive(hosts: list[str], recovery_timeout: float) -> float | None:
    """How long the first host's ssh takes to give up on a silent peer (the longest over the others; None: never),
    from `ssh -G` there; said when it exceeds the recovery timeout."""
    def seconds(proc) -> float | None:
        values = dict(line.split(None, 1) for line in proc.stdout.splitlines() if " " in line)
        if proc.returncode != 0 or "serveraliveinterval" not in values:
            raise ValueError(proc.stderr.strip()[-120:])
        interval, count = int(values["serveraliveinterval"]), int(values.get("serveralivecountmax", 3))
        return interval * count if interval > 0 else None

    try:  # asked on the first host: that is where horovodrun's ssh runs
        answers = [seconds(run_on(hosts[0], ["ssh", "-G", peer], in_checkout=False)) for peer in hosts[1:]]
    except ValueError as exc:
        note(f"bench fault: could not read ssh's keepalive on {hosts[0]} ({exc}); Horovod elastic's recovery from "
             "a host loss waits for it")
        return None
    longest = None if None in answers or not answers else max(answers)
    if longest is None or longest > recovery_timeout:
        note(f"bench fault: horovodrun's ssh on {hosts[0]} gives up on a silent host "
             + ("never" if longest is None else f"after {longest:g} s") + f" (ServerAliveInterval x ServerAliveCountMax);"
             f" Horovod elastic waits that long after a host loss, beyond --recovery-timeout {recovery_timeout:g} s")
    return longest


class HorovodLauncher(Launcher):
    """horovodrun --gloo / --mpi, or plain mpirun in the classic form."""

    def env(self, spec):
        return horovod_env(spec)

    spans_hosts = True

    def command(self, spec, rank_command, run_id):
        n, launcher = spec.world_size, spec.backend_options["launcher"]
        if spec.hosts:  # its own ssh launch: -H with the processes placed on each host

            hosts = ",".join(f"{h.name}:{k}" for h, k in placement([Host(**h) for h in spec.hosts], n))
        else:
            hosts = f"localhost:{n}"
        if launcher in ("gloo", "mpi"):
            iface = ["--network-interface", spec.iface] if spec.iface else []
            return on_first_host(spec, [horovodrun_path(), f"--{launcher}", "-np", str(n), "-H", hosts, *iface,
                                        *rank_command])
        mpirun = shutil.which("mpirun")
        command = [mpirun, "-np", str(n), "-H", hosts, "-bind-to", "none", "-map-by", "slot"]
        if is_open_mpi(mpirun):
            command += ["-mca", "pml", "ob1", "-mca", "btl", "^openib"]
            if spec.iface:
                command += ["-mca", "btl_tcp_if_include", spec.iface, "-mca", "oob_tcp_if_include", spec.iface]
        present = {*os.environ, *self.env(spec)} | ({"CUDA_VISIBLE_DEVICES"} if spec.device == "cpu" else set()) | \
            ({"GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"} if spec.iface else set())
        for var in MPIRUN_EXPORTS + tuple(v for v in MPIRUN_EXPORTS_IF_SET if v in present):
            command += ["-x", var]
        return on_first_host(spec, command + list(rank_command))

    def rank_identity(self, env):
        for var in ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
            if var in env:
                return int(env[var]), 0
        return 0, 0


class HorovodGroup(ProcessGroup):
    def init(self, spec):
        import horovod.torch as hvd
        import torch

        hvd.init()
        if spec.device == "cuda":
            torch.cuda.set_device(hvd.local_rank())
        self.hvd = hvd
        return rank_row(rank=hvd.rank(), world_size=hvd.size(), local_rank=hvd.local_rank(),
                        local_world_size=hvd.local_size(), group_rank=hvd.cross_rank(),
                        role_rank=hvd.rank(), restart_count=0)

    def wrap(self, model, optimizer, spec):
        hvd, opts = self.hvd, spec.backend_options
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        optimizer = hvd.DistributedOptimizer(
            optimizer, named_parameters=model.named_parameters(),
            compression=hvd.Compression.fp16 if opts["hvd_compression"] == "fp16" else hvd.Compression.none,
            backward_passes_per_step=opts["hvd_backward_passes"],
            op=hvd.Adasum if opts["hvd_op"] == "adasum" else hvd.Average)
        return model, optimizer

    def barrier(self):
        self.hvd.barrier()

    def run_op(self, op, inp, out):
        hvd = self.hvd  # hvd.allreduce and friends: fusion, the controller and its cycle are measured too
        if op == "allreduce":
            return hvd.allreduce_(inp, op=hvd.Sum)
        if op == "broadcast":
            return hvd.broadcast_(inp, root_rank=0)
        if op == "allgather":
            return hvd.allgather(inp)
        if op == "reduce_scatter":
            return hvd.reducescatter(inp, op=hvd.Sum)
        return super().run_op(op, inp, out)

    def shutdown(self):
        self.hvd.shutdown()


class HorovodElastic(ElasticMode):
    """horovodrun --min-np/--max-np with a host discovery script that prints the run's hosts file. One
    machine acts as two hosts, `localhost` and `127.0.0.1` (horovodrun treats both as local, no ssh).
    Horovod blacklists the whole host of a failed worker, so a kill needs the survivors on the other
    "host". Workers learn of new hosts only at a commit, and the discovery script runs once a second.
    Across hosts (a host lost or cut off) the script lists the run's hosts with the processes placed on each,
    and horovodrun runs on the first host; the lost host stays listed, and only Horovod's blacklist keeps it out.
    Its driver learns that a host's workers ended only when their ssh session ends (its registry waits for every
    worker's state before the survivors go on), so after a silent host loss the recovery waits for ssh's
    keepalive (ServerAliveInterval x ServerAliveCountMax of the first host's ssh): recorded, and said when it
    exceeds --recovery-timeout."""

    scenarios = ("kill", "join", "kill-host", "partition-host")

    def unavailable_reason(self) -> str | None:
        """Why its backend cannot run a fault run (on CPU processes) here, if it cannot."""
        return BACKEND.unavailable_reason("cpu")

    def problem(self, scenario, world_size, options=None):
        problem = self.unavailable_reason()
        if problem:
            return problem
        if scenario == "kill" and world_size < 2:
            return "a Horovod kill needs --nproc 2 or more: the survivors must be on the other host"
        return None

    @staticmethod
    def _write_hosts(run_dir, counts: dict[str, int]) -> None:
        write_atomic(run_dir.hosts_file, "".join(f"{host}:{n}\n" for host, n in counts.items() if n))

    def launch(self, spec, rank_command, run_id, run_dir):
        n, f = spec.world_size, spec.fault
        info = {}
        if spec.hosts:
            hosts = {h.name: k for h, k in placement([Host(**h) for h in spec.hosts], n)}
            min_np, max_np = 1, n
            info["ssh_keepalive_s"] = ssh_keepalive(list(hosts), f["recovery_timeout"])
        elif f["scenario"] == "kill":
            hosts = {"localhost": (n + 1) // 2, "127.0.0.1": n // 2}
            min_np, max_np = 1, n
        else:
            hosts = {"localhost": n}
            min_np, max_np = n, n + 1
        self._write_hosts(run_dir, hosts)
        script = run_dir.discovery_script
        script.write_text(f"#!/bin/sh\ncat '{run_dir.hosts_file}'\n")
        script.chmod(0o755)
        command = [horovodrun_path(), "--gloo", "-np", str(n), "--min-np", str(min_np), "--max-np", str(max_np),
                   "--host-discovery-script", str(script), "--network-interface", spec.iface or "lo",
                   "--gloo-timeout-seconds", str(max(1, int(f["comm_timeout"]))),
                   # how long to wait for enough slots after a failure (Horovod's default is 600 s)
                   "--elastic-timeout", str(max(1, int(f["recovery_timeout"]))),
                   "--reset-limit", str(f["max_restarts"]), *rank_command]
        return on_first_host(spec, command), horovod_env(spec), {"hosts": hosts, **info}

    def join(self, spec, rank_command, run_id, run_dir, info):
        self._write_hosts(run_dir, {"localhost": spec.world_size, "127.0.0.1": 1})
        return None

    def worker_state(self, group, model, optimizer, run_dir, spec, on_reset):
        return HorovodElasticState(group.hvd, model, optimizer, on_reset)


class HorovodElasticState(ElasticState):
    """hvd.elastic.run over a TorchState committed every C steps: after a failure the survivors restore the last
    commit and go on at the new size; a joining worker receives the state by broadcast. `hvd` is the framework's
    Horovod module (horovod.torch here), whose hvd.elastic.run and State a subclass of another framework's takes
    (tracked)."""

    def __init__(self, hvd, model, optimizer, on_reset):
        from horovod.common.exceptions import HorovodInternalError

        self.hvd = hvd
        self.failures = (HorovodInternalError,)
        self.model, self.optimizer, self.state = self.tracked(hvd, model, optimizer)
        self.state.register_reset_callbacks([lambda: on_reset(hvd.rank(), hvd.size())])

    @staticmethod
    def tracked(hvd, model, optimizer):
        """(the model and optimizer as trained, the hvd.elastic State that commits, restores and syncs them and the
        step): hvd.DistributedOptimizer's gradients averaged, in a TorchState."""
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
        return model, optimizer, hvd.elastic.TorchState(model=model, optimizer=optimizer, step=0)

    def run(self, train) -> int:
        return self.hvd.elastic.run(lambda state: train(self))(self.state)

    def resume(self) -> Position:
        hvd = self.hvd
        return Position(self.state.step, hvd.rank(), hvd.size(), hvd.local_rank(), 0, hvd.cross_rank())

    def commit(self, step, committed, detected) -> None:
        from horovod.common.exceptions import HostsUpdatedInterrupt

        self.state.step = step
        committed()
        self.state.save()
        try:
            self.state.check_host_updates()
        except HostsUpdatedInterrupt:
            detected("hosts updated")
            raise


class HorovodBackend(Backend):
    name = "horovod"
    summary = "horovodrun (Gloo or MPI controller) + hvd.DistributedOptimizer"
    comm_ops = ("allreduce", "allgather", "reduce_scatter", "broadcast")
    comm_dtypes = ("float32", "float16")  # 0.28.1 has no bfloat16 tensors on CPU
    options = (
        # recorded as `launcher`, as every stored horovod run holds it; the flag names it as Horovod's, beside --hvd-*
        BackendOption("launcher", "gloo", "gloo: horovodrun --gloo; mpi: horovodrun --mpi; "
                      "mpirun: plain mpirun", str, LAUNCHERS, invalid=("ssh",), cli_flag="--hvd-launcher"),
        BackendOption("hvd_compression", "none", "gradient compression on the wire", str, ("none", "fp16"),
                      invalid=("fp8",)),
        BackendOption("hvd_backward_passes", 1, "backward passes per step (local accumulation)", int,
                      invalid=("0", "-1", "x")),
        BackendOption("hvd_op", "average", "gradient reduction", str, ("average", "adasum"), invalid=("sum",)),
        BackendOption("hvd_fusion_mb", None, "fusion threshold in MiB (HOROVOD_FUSION_THRESHOLD)", float,
                      invalid=("-1", "nan", "x"), default_words="Horovod's own"),
        BackendOption("hvd_cycle_ms", None, f"cycle time in ms (HOROVOD_CYCLE_TIME), at most {MAX_CYCLE_MS:g}, a "
                      "minute, as every collective may wait a cycle", float, invalid=("-1", "nan", "inf", "x", "1e10"),
                      default_words="Horovod's own"),
    )
    launcher = HorovodLauncher()
    group_type = HorovodGroup
    elastic = HorovodElastic()

    def unavailable_reason(self, device):
        problem, _ = check_build()
        if problem:
            return problem
        if device == "cuda" and not (built_with("NCCL") or built_with("MPI")):
            return "this Horovod has no GPU operations; rebuild with HOROVOD_GPU_OPERATIONS=NCCL " \
                   "python -m bench.tools.horovod_build --force on a CUDA machine"
        return None

    def check_options(self, options, device):
        if options["hvd_backward_passes"] < 1:
            return "--hvd-backward-passes must be at least 1"
        for name in ("hvd_fusion_mb", "hvd_cycle_ms"):
            if options[name] is not None and options[name] < 0:
                return f"--{name.replace('_', '-')} must be 0 or more"
        if options["hvd_cycle_ms"] is not None and options["hvd_cycle_ms"] > MAX_CYCLE_MS:
            return f"--hvd-cycle-ms must be at most {MAX_CYCLE_MS:g}, a minute"
        if options["launcher"] in ("mpi", "mpirun"):
            if shutil.which("mpirun") is None:
                return f"--hvd-launcher {options['launcher']} needs mpirun (apt-get install openmpi-bin libopenmpi-dev)"
            if not built_with("MPI"):
                return (f"--hvd-launcher {options['launcher']} needs a Horovod built with MPI; install "
                        "libopenmpi-dev and rebuild: python -m bench.tools.horovod_build --force")
        return None

    def doctor_lines(self):
        problem, _ = check_build()
        lines = [f"Horovod {package_version('horovod') or 'not installed'}"]
        if problem:
            return lines
        lines.append(f"Horovod built with: {', '.join(built_frameworks()) or 'no framework'}")
        out = subprocess.run([horovodrun_path(), "--check-build"], capture_output=True, text=True, timeout=120)
        return lines + ["horovodrun --check-build:"] + ["  " + line for line in out.stdout.splitlines() if line.strip()]

    def backward_passes(self, options):
        return options["hvd_backward_passes"]

    def comm_schedule(self, options):
        """Horovod's background loop: each cycle fuses the gradients ready by then up to the fusion threshold. Its
        defaults since 0.21: a 1 ms cycle and a 128 MiB threshold; fp16 compression halves the bytes sent."""
        fusion_mb = options["hvd_fusion_mb"] if options["hvd_fusion_mb"] is not None else DEFAULT_FUSION_MB
        cycle_ms = options["hvd_cycle_ms"] if options["hvd_cycle_ms"] is not None else DEFAULT_CYCLE_MS
        return CommSchedule("cycles", cap_bytes=fusion_mb * 2**20 or 1.0, cycle_s=cycle_ms / 1e3,
                            wire_scale=0.5 if options["hvd_compression"] == "fp16" else 1.0)


DEFAULT_FUSION_MB = 128.0  # HOROVOD_FUSION_THRESHOLD's default (0.21 and later)
DEFAULT_CYCLE_MS = 1.0  # HOROVOD_CYCLE_TIME's default (0.21 and later)
BACKEND = HorovodBackend()
