"""horovod's parent side: horovodrun (--gloo, --mpi) or plain mpirun starting the ranks, and Horovod elastic's launch
(a host discovery script, --min-np/--max-np). Shared by horovod-tf (bench.backends.horovod.tf), whose ranks run
Horovod's TensorFlow side under the same launchers. No framework imported."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from bench.backends.base import ElasticMode, Launcher
from bench.cluster.fanout import fanout_command
from bench.cluster.hosts import run_on
from bench.cluster.slurm import of_allocation
from bench.core.console import note
from bench.core.dryrun import planning
from bench.core.environment import PROJECT_ROOT
from bench.core.hostlist import Host, placement
from bench.core.rundir import write_atomic

SETUP_HINT = "run `python -m bench.tools.horovod_build` (nox -s tests and nox -s bench do it for you)"
# Variables mpirun must carry to the ranks (it passes the environment only to local ranks by itself):
# those the harness always sets, and those passed on when they are set.
MPIRUN_EXPORTS = ("BENCH_RUN_TAG", "PYTHONPATH", "PYTHONUNBUFFERED", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "PATH")
MPIRUN_EXPORTS_IF_SET = (
    "CUDA_VISIBLE_DEVICES",
    "LD_LIBRARY_PATH",
    "HOROVOD_FUSION_THRESHOLD",
    "HOROVOD_CYCLE_TIME",
    "NCCL_DEBUG",
    "NCCL_SOCKET_IFNAME",
    "GLOO_SOCKET_IFNAME",
)


def horovodrun_path() -> str | None:
    beside = Path(sys.executable).parent / "horovodrun"
    return str(beside) if beside.exists() else shutil.which("horovodrun")


def horovodrun_program() -> str:
    """horovodrun in a command: its path, or its name where it is not installed here. A run refuses that case first
    (unavailable_reason); a plan (--dry-run) for a machine that has it still shows the command."""
    return horovodrun_path() or "horovodrun"


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
    run where bench runs: the batch script's node, the allocation's first. Either way in a folder whose name is a
    plain word of a shell line (in_plain_folder)."""
    if not spec.hosts:
        return command
    if of_allocation(spec.scheduler):
        return in_plain_folder(command, None)
    # (bench.cluster.fanout runs it in the checkout there)
    return fanout_command([(spec.hosts[0]["name"], in_plain_folder(command, str(PROJECT_ROOT)))])


def is_plain_word(text: str) -> bool:
    """Whether a shell reads `text` unquoted as itself: one word, nothing expanded or run."""
    return shlex.quote(text) == text


def in_plain_folder(command: list[str], folder: str | None) -> list[str]:
    """`command` (a launcher started where it reaches other hosts over ssh) run in a folder whose name a shell reads
    as one plain word: horovodrun writes the folder it runs in (`folder`, None: this process's) unquoted into the
    command line each remote worker's shell runs (`cd FOLDER > /dev/null 2>&1 ; ...`, horovod.runner.gloo_run), where
    a name with a space or a quote breaks the line and one with `;` or `$(...)` runs a command. Where it is not one,
    the command runs in the checkout (as across --hosts, on the first host), or in / where that is not one either;
    every path a run's workers are given is absolute."""
    if folder is None:
        try:
            folder = os.getcwd()
        except OSError:  # the current folder was removed: no name at all
            folder = ""
    if is_plain_word(folder):
        return command
    plain = str(PROJECT_ROOT) if is_plain_word(str(PROJECT_ROOT)) else "/"
    return ["env", f"--chdir={plain}", *command]


def ssh_keepalive(hosts: list[str], recovery_timeout: float, here: bool = False) -> float | None:
    """How long the first host's ssh (`here`: this machine's, where horovodrun runs here) takes to give up on a
    silent peer (the longest over the others; None: never), from `ssh -G` there; said when it exceeds the recovery
    timeout."""

    def seconds(proc) -> float | None:
        values = dict(line.split(None, 1) for line in proc.stdout.splitlines() if " " in line)
        if proc.returncode != 0 or "serveraliveinterval" not in values:
            raise ValueError(proc.stderr.strip()[-120:])
        interval, count = int(values["serveraliveinterval"]), int(values.get("serveralivecountmax", 3))
        return interval * count if interval > 0 else None

    def ask(argv: list[str]):
        if here:
            return subprocess.run(argv, capture_output=True, text=True, timeout=30)
        return run_on(hosts[0], argv, in_checkout=False)

    if planning():  # a plan asks no host
        return None
    where = "this machine" if here else hosts[0]
    peers = hosts if here else hosts[1:]
    try:  # asked where horovodrun's ssh runs
        answers = [seconds(ask(["ssh", "-G", peer])) for peer in peers]
    except ValueError as exc:
        note(
            f"bench fault: could not read ssh's keepalive on {where} ({exc}); Horovod elastic's recovery from "
            "a host loss waits for it"
        )
        return None
    longest = None if None in answers or not answers else max(answers)
    if longest is None or longest > recovery_timeout:
        note(
            f"bench fault: horovodrun's ssh on {where} gives up on a silent host "
            + ("never" if longest is None else f"after {longest:g} s")
            + f" (ServerAliveInterval x ServerAliveCountMax);"
            f" Horovod elastic waits that long after a host loss, beyond --recovery-timeout {recovery_timeout:g} s"
        )
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
            return on_first_host(
                spec, [horovodrun_program(), f"--{launcher}", "-np", str(n), "-H", hosts, *iface, *rank_command]
            )
        # where mpirun is not here only a plan gets this far (check_options): it names Open MPI's, as the hosts run it
        mpirun = shutil.which("mpirun")
        command = [mpirun or "mpirun", "-np", str(n), "-H", hosts, "-bind-to", "none", "-map-by", "slot"]
        if mpirun is None or is_open_mpi(mpirun):
            command += ["-mca", "pml", "ob1", "-mca", "btl", "^openib"]
            if spec.iface:
                command += ["-mca", "btl_tcp_if_include", spec.iface, "-mca", "oob_tcp_if_include", spec.iface]
        present = (
            {*os.environ, *self.env(spec)}
            | ({"CUDA_VISIBLE_DEVICES"} if spec.device == "cpu" else set())
            | ({"GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"} if spec.iface else set())
        )
        # every NCCL_* variable too: NCCL reads its settings (NCCL_IB_HCA, NCCL_P2P_LEVEL...) in each rank
        nccl = sorted(v for v in present if v.startswith("NCCL_") and v not in MPIRUN_EXPORTS_IF_SET)
        for var in MPIRUN_EXPORTS + tuple(v for v in MPIRUN_EXPORTS_IF_SET if v in present) + tuple(nccl):
            command += ["-x", var]
        return on_first_host(spec, command + list(rank_command))

    def plan_notes(self, spec):
        if spec.device != "cuda":
            return []
        return [
            "each process takes cuda:hvd.local_rank() (CUDA_VISIBLE_DEVICES is not set by bench); Horovod's "
            "allreduce runs over NCCL where this Horovod was built with it (HOROVOD_GPU_OPERATIONS=NCCL; "
            "`horovodrun --check-build` on a host says), else over MPI"
        ]

    def rank_identity(self, env):
        for var in ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
            if var in env:
                return int(env[var]), 0
        return 0, 0


class HorovodElastic(ElasticMode):
    """horovodrun --min-np/--max-np with a host discovery script that prints the run's hosts file. One
    machine acts as two hosts, `localhost` and `127.0.0.1` (horovodrun treats both as local, no ssh).
    Horovod blacklists the whole host of a failed worker, so a kill needs the survivors on the other
    "host". Workers learn of new hosts only at a commit, and the discovery script runs once a second.
    Across hosts (a host lost, cut off or dropped) the script lists the run's hosts with the processes placed on
    each, and horovodrun runs on the first host; a lost host stays listed, and only Horovod's blacklist keeps it
    out; a dropped one leaves the list (drop_host). With the cluster's own script (--hvd-discovery-script, an
    MPIJob's /etc/mpi/discover_hosts.sh) horovodrun reads that instead, with --slots (the script names none), and
    runs where bench runs: the script is a file of this machine (the launcher pod's).
    Its driver learns that a host's workers ended only when their ssh session ends (its registry waits for every
    worker's state before the survivors go on), so after a silent host loss the recovery waits for ssh's
    keepalive (ServerAliveInterval x ServerAliveCountMax of the first host's ssh): recorded, and said when it
    exceeds --recovery-timeout."""

    across_hosts = True

    def __init__(self, unavailable_reason):
        self.unavailable_reason = unavailable_reason  # () -> why its backend cannot run a fault run here, or None

    def problem(self, scenario, world_size, options=None, hosts=None):
        problem = self.unavailable_reason()
        if problem:
            return problem
        if not (scenario.joins or scenario.across_hosts) and world_size < 2:  # a worker lost on one machine
            return "a Horovod kill needs --nproc 2 or more: the survivors must be on the other host"
        if (options or {}).get("hvd_discovery_script") is not None:
            if not hosts:
                return (
                    "--hvd-discovery-script names the cluster's hosts, for a run across hosts: give --hosts or "
                    "--hostfile too (on one machine bench writes the discovery script)"
                )
            slots = sorted({h["slots"] for h in hosts})
            if len(slots) > 1:
                return (
                    "--hvd-discovery-script: the script names no slots, and horovodrun gives every host it names the "
                    f"same (--slots); the hosts have {', '.join(map(str, slots))} slots: give each the same"
                )
        return None

    @staticmethod
    def cluster_script(spec) -> str | None:
        """The cluster's own discovery script, where the run reads it (--hvd-discovery-script); None: bench's."""
        return spec.backend_options.get("hvd_discovery_script")

    @classmethod
    def cluster_script_path(cls, spec) -> str:
        """The cluster's script as the file the option was checked as (a path from the folder bench runs in), which
        horovodrun, run in another folder (in_plain_folder), and bench both run."""
        return os.path.abspath(cls.cluster_script(spec))

    def nccl_env(self, spec, fault):
        """On GPUs Horovod's collectives run over NCCL where it was built with it (HOROVOD_GPU_OPERATIONS=NCCL),
        outside torch's watchdog: its own stall inspector ends a collective some rank never joined. It warns after
        the collective timeout and shuts Horovod down after twice that, so that Horovod elastic resets; the Gloo
        controller's own timeout (--gloo-timeout-seconds) is the collective timeout as on the CPU."""
        if spec.device != "cuda":
            return {}
        seconds = max(1, int(spec.collective_timeout))
        return {
            "HOROVOD_STALL_CHECK_TIME_SECONDS": str(seconds),
            "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": str(2 * seconds),
        }

    @staticmethod
    def gloo_timeout_s(spec, fault) -> int:
        """Horovod's Gloo timeout (--gloo-timeout-seconds): the collective timeout, except where a worker joins.
        Gloo's timeout bounds every wait in Horovod's rendezvous store too, and after a join the workers wait there
        for the new process, which must first start (TensorFlow's import alone took over 10 s on a loaded 2-core
        machine; with a 10 s timeout every worker aborted). A join is noticed by the discovery script, never by a
        timeout, so there it is the join timeout (RunSpec.join_timeout: the recovery timeout, the longest the run
        waits for the new worker anyway), which one Gloo timeout cannot keep apart from the collectives' as torch's
        group does (join_torchrun_group)."""
        return max(1, int(spec.join_timeout if fault.joining else spec.collective_timeout))

    @staticmethod
    def _write_hosts(run_dir, counts: dict[str, int]) -> None:
        write_atomic(run_dir.hosts_file, "".join(f"{host}:{n}\n" for host, n in counts.items() if n))

    def launch(self, spec, fault, rank_command, run_id, run_dir):
        n = spec.world_size
        info = {}
        theirs = self.cluster_script(spec)
        if spec.hosts:
            hosts = {h.name: k for h, k in placement([Host(**h) for h in spec.hosts], n)}
            min_np, max_np = 1, n
            info["ssh_keepalive_s"] = ssh_keepalive(list(hosts), fault.recovery_timeout, here=theirs is not None)
        elif not fault.joining:  # a worker killed: the survivors on the other "host"
            hosts = {"localhost": (n + 1) // 2, "127.0.0.1": n // 2}
            min_np, max_np = 1, n
        else:
            hosts = {"localhost": n}
            min_np, max_np = n, n + 1
        # horovodrun runs the discovery script through a shell (a command line, not a file's path): the path is
        # one quoted word of it, as is the hosts file's in bench's script, wherever the store's folder is
        if theirs is None:
            self._write_hosts(run_dir, hosts)
            script = run_dir.discovery_script
            # (as bytes: a folder's name need not be UTF-8)
            script.write_bytes(os.fsencode(f"#!/bin/sh\nexec cat {shlex.quote(str(run_dir.hosts_file))}\n"))
            script.chmod(0o755)
            discovery = ["--host-discovery-script", shlex.quote(str(script))]
        else:  # the cluster's answer names hosts only: each gets the slots the run's hosts have (problem: all equal)
            discovery = ["--host-discovery-script", shlex.quote(self.cluster_script_path(spec))]
            discovery += ["--slots", str(spec.hosts[0]["slots"])]
            info["discovery_script"] = theirs
        gloo_timeout = self.gloo_timeout_s(spec, fault)
        info["collective_timeout_s"] = gloo_timeout  # the fault page's, where it is not the spec's
        command = [
            horovodrun_program(),
            "--gloo",
            "-np",
            str(n),
            "--min-np",
            str(min_np),
            "--max-np",
            str(max_np),
            *discovery,
            "--network-interface",
            spec.iface or "lo",
            "--gloo-timeout-seconds",
            str(gloo_timeout),
            # how long to wait for enough slots after a failure (Horovod's default is 600 s)
            "--elastic-timeout",
            str(max(1, int(fault.recovery_timeout))),
            "--reset-limit",
            str(fault.max_restarts),
            *rank_command,
        ]
        if theirs is not None:  # where the script is: this machine
            return in_plain_folder(command, None), horovod_env(spec), {"hosts": hosts, **info}
        return on_first_host(spec, command), horovod_env(spec), {"hosts": hosts, **info}

    def join(self, spec, fault, rank_command, run_id, run_dir, info):
        self._write_hosts(run_dir, {"localhost": spec.world_size, "127.0.0.1": 1})
        return None

    def drop_host(self, spec, fault, run_dir, info):
        """A host the cluster drops (bench.tasks.fault.scenarios.DropsHosts): out of bench's own discovery answer, and
        bench ends its processes; with the cluster's script, the cluster does both (False)."""
        if self.cluster_script(spec) is not None:
            return False
        self._write_hosts(run_dir, {host: n for host, n in info["hosts"].items() if host != fault.host})
        return True

    def discovered(self, spec, timeout_s):
        """The hosts the cluster's script prints, one a line as Horovod reads them (`host` or `host:slots`)."""
        script = self.cluster_script_path(spec)
        try:
            # in a session of its own, so that at the limit whatever the script started (kubectl, say) ends with it
            # and the pipes close: subprocess.run would kill the script alone and wait on its children's output
            proc = subprocess.Popen(
                [script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
            )
        except OSError as exc:
            raise ValueError(f"{script}: {exc.strerror or exc}") from None
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise ValueError(f"{script} took more than {timeout_s:g} s") from None
        proc = subprocess.CompletedProcess([script], proc.returncode, out, err)
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or [""])[-1][:120]
            raise ValueError(f"{script} exited {proc.returncode}" + (f": {last}" if last else ""))
        return [line.strip().split(":")[0] for line in proc.stdout.splitlines() if line.strip()]
