"""A real Slurm cluster on the test hosts (bench/testbed/hosts.py), for trying launches under Slurm without one: a
test cluster of bench.testbed.protocol.

slurmctld runs in the root namespace and listens on the bridge's address; each test host runs one slurmd in its
network namespace and with its hostname (the UTS namespace of the host's sshd), so a job's tasks run on the
hosts as over ssh. One munged of its own signs their messages: its key, socket, pid file and log are under the
state directory, and slurm.conf points every daemon and client at that socket (AuthInfo=socket=..., read by
the auth and the credential plugin alike). Nothing of the packages' /etc/slurm or /etc/munge is read: the
configuration, state, spool, logs and pid files are all under STATE_DIR, and SLURM_CONF (environment())
points the client commands at it.

down() cancels the jobs, then ends every process of the cluster, found by pid file and by scanning for those
that name or hold open something under STATE_DIR (the daemons, every slurmstepd) or belong to one of its jobs,
so it also clears what a crashed up() left.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import psutil

from bench.core.cgroups import usable_cpus
from bench.harness.supervisor import end_found, name_of, processes_of
from bench.testbed import hosts as testhosts
from bench.testbed.protocol import (
    SetupError,
    StateFile,
    build_or_roll_back,
    daemon_leftovers,
    finish_removal,
    last_line,
    names_path_under,
    require_port_free,
    require_usable,
    run,
    start_logged,
    tails_of,
    tool,
)

NAME = "Slurm test cluster"
ROOT_ONLY = f"the {NAME} is root's (its daemons run as root)"
STATE_DIR = Path("/run/bench-testslurm")
STATE = StateFile(STATE_DIR)
CLUSTER = "benchtest"
PARTITION = "bench"
CTLD_PORT = 16817  # not Slurm's default 6817/6818: a packaged cluster on this machine keeps its own
SLURMD_PORT = 16818
KILL_WAIT_S = 30  # Slurm's default: SIGTERM to SIGKILL, the time bench has to record a cancelled run
READY_TIMEOUT = 30  # every node idle in sinfo
START_TIMEOUT = 15  # a daemon writing its pid file (munged: its socket)
CANCEL_TIMEOUT = KILL_WAIT_S + 10  # the jobs gone from squeue after scancel
CLIENT_TIMEOUT = 15
INSTALL = "apt-get install -y slurm-wlm munge"
DAEMONS = ("munged", "slurmctld", "slurmd")
PROGRAMS = DAEMONS + ("munge", "sinfo", "squeue", "scancel", "scontrol", "srun", "sbatch")
OURS_BY_NAME = DAEMONS + ("slurmstepd", "slurmscriptd")
UP_STATES = ("idle", "mixed", "allocated", "completing")  # sinfo %T of a node that answers and takes jobs


# ---------------------------------------------------------------- paths
def conf_path() -> Path:
    return STATE_DIR / "slurm.conf"


def munge_dir() -> Path:
    return STATE_DIR / "munge"


def munge_socket() -> Path:
    return munge_dir() / "munge.socket"


def key_file() -> Path:
    return STATE_DIR / "munge.key"


def env_file() -> Path:
    return STATE_DIR / "env"


def pid_files(nodes: list[str]) -> dict[str, Path]:
    """Each daemon's pid file, by a name for it."""
    files = {"munged": munge_dir() / "munged.pid", "slurmctld": STATE_DIR / "slurmctld.pid"}
    files.update({f"slurmd {n}": STATE_DIR / f"slurmd-{n}.pid" for n in nodes})
    return files


def log_files(nodes: list[str]) -> list[Path]:
    """The daemons' logs, and what each printed while starting."""
    logs = [munge_dir() / "munged.log", STATE_DIR / "slurmctld.log"]
    logs += [STATE_DIR / f"slurmd-{n}.log" for n in nodes]
    return logs + sorted(STATE_DIR.glob("*.out"))


def environment() -> dict[str, str]:
    """What a caller adds to its environment to run sinfo, srun, sbatch, ... against this cluster."""
    return {"SLURM_CONF": str(conf_path())}


def export_line() -> str:
    return f"export SLURM_CONF={conf_path()}"


# ---------------------------------------------------------------- preconditions
def unavailable_reason() -> str | None:
    """Why the cluster cannot be built here, or None (the test hosts must still be up for up())."""
    problem = testhosts.unavailable_for_cluster(NAME)
    if problem:
        return problem
    missing = [name for name in PROGRAMS if tool(name) is None]
    if missing:
        return f"{', '.join(missing)} not found: install Slurm and MUNGE ({INSTALL})"
    return None


# ---------------------------------------------------------------- configuration
def controller_name() -> str:
    """slurmctld runs only where the short hostname is SlurmctldHost's name."""
    return socket.gethostname().split(".")[0]


def slurm_conf(hosts: list[testhosts.TestHost], controller: str, address: str, cpus: int, cgroups: bool = True) -> str:
    """slurm.conf. Tasks bound to their cores (task/affinity) and, with `cgroups`, confined as production partitions
    confine them (proctrack/cgroup, task/cgroup with cgroup.conf's ConstrainCores); without, where cgroup_problem
    says why, processes tracked by their parents (proctrack/linuxproc)."""
    d = STATE_DIR
    lines = [
        "# bench testslurm up wrote this; bench testslurm down removes it",
        f"ClusterName={CLUSTER}",
        f"SlurmctldHost={controller}({address})",
        f"SlurmctldPort={CTLD_PORT}",
        f"SlurmdPort={SLURMD_PORT}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={munge_socket()}",  # this cluster's own munged, for daemons and clients alike
        f"StateSaveLocation={d}/slurmctld",
        f"SlurmdSpoolDir={d}/slurmd/%n",
        f"SlurmctldPidFile={d}/slurmctld.pid",
        f"SlurmdPidFile={d}/slurmd-%n.pid",  # one PID namespace: a pid file per node
        f"SlurmctldLogFile={d}/slurmctld.log",
        f"SlurmdLogFile={d}/slurmd-%n.log",
        f"PlugStackConfig={d}/plugstack.conf",  # not the package's /etc/slurm/plugstack.conf
        *(
            ("ProctrackType=proctrack/cgroup", "TaskPlugin=task/cgroup,task/affinity")
            if cgroups
            else ("ProctrackType=proctrack/linuxproc", "TaskPlugin=task/affinity")
        ),
        # each task bound to its cores, as sites that bind by default do (and without cgroups, all there is): a
        # step that asks for fewer CPUs than its processes need shows as the task's affinity, not only as contention
        "TaskPluginParam=cores",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "SlurmdParameters=config_overrides",  # every node claims this machine's CPUs, as configured below
        "MpiDefault=none",
        "ReturnToService=2",
        "SchedulerParameters=batch_sched_delay=0",  # a batch job starts within a second, not 3 s after the last
        f"KillWait={KILL_WAIT_S}",
        "OverTimeLimit=0",
        f"MailProg={tool('true') or '/bin/true'}",
    ]
    lines += [f"NodeName={h.name} NodeAddr={h.address} NodeHostname={h.name} CPUs={cpus} State=UNKNOWN" for h in hosts]
    lines.append(
        f"PartitionName={PARTITION} Nodes={','.join(h.name for h in hosts)} Default=YES MaxTime=INFINITE State=UP"
    )
    return "\n".join(lines) + "\n"


# The cgroup v1 controllers slurmd uses: cpuset (task/cgroup's ConstrainCores) and freezer (proctrack/cgroup).
CGROUP_CONTROLLERS = ("cpuset", "freezer")


def cgroup_mount() -> Path:
    """Where each slurmd mounts the controllers (CgroupMountpoint): `ip netns exec` gives it a fresh /sys without
    /sys/fs/cgroup's mounts, and sysfs takes no new folder, so they are mounted (CgroupAutomount) in a folder of the
    state directory instead, in the slurmd's own mount namespace (nothing of it shows outside)."""
    return STATE_DIR / "cgroup"


def cgroup_problem(mounts: str | None = None) -> str | None:
    """Why slurmd cannot confine tasks with cgroups here, or None: the cluster uses the cgroup v1 plugin, which needs
    this machine's cpuset and freezer controllers in v1 hierarchies (slurmd mounts them again in its namespace). A
    machine with the unified v2 hierarchy alone would need the cgroup/v2 plugin set up without systemd
    (IgnoreSystemd), which the cluster does not do: it runs without cgroups there, and says so."""
    if mounts is None:
        try:
            mounts = Path("/proc/self/mounts").read_text()
        except OSError as exc:
            return f"/proc/self/mounts cannot be read ({exc.strerror})"
    v1 = {
        option
        for line in mounts.splitlines()
        if len(line.split()) >= 4 and line.split()[2] == "cgroup"
        for option in line.split()[3].split(",")
    }
    missing = [c for c in CGROUP_CONTROLLERS if c not in v1]
    if missing:
        return (
            f"this machine mounts no cgroup v1 hierarchy of {' and '.join(missing)}, which the cluster's cgroup/v1 "
            "plugin confines tasks with (a cgroup v2 hierarchy alone is not set up for it)"
        )
    return None


def cgroup_hierarchies(mounts: str | None = None) -> list[Path]:
    """Where this machine mounts the v1 hierarchies of CGROUP_CONTROLLERS (each slurmd's mount of one is the same
    hierarchy)."""
    try:
        mounts = Path("/proc/self/mounts").read_text() if mounts is None else mounts
    except OSError:
        return []
    found = []
    for line in mounts.splitlines():
        words = line.split()
        if len(words) >= 4 and words[2] == "cgroup" and set(words[3].split(",")) & set(CGROUP_CONTROLLERS):
            found.append(Path(words[1]))
    return found


def cgroup_leftovers() -> list[Path]:
    """The cgroups the nodes' slurmd left (each makes slurm_<node> in each hierarchy, and keeps it after it ends)."""
    return sorted(p for root in cgroup_hierarchies() for p in root.glob(f"slurm_{testhosts.PREFIX}*") if p.is_dir())


def remove_cgroups(log) -> list[str]:
    """Remove cgroup_leftovers(), deepest first (a cgroup is removed by rmdir once it holds no process and no
    child); what could not be removed, in words."""
    failed = []
    for top in cgroup_leftovers():
        for folder, _, _ in sorted(os.walk(top), key=lambda walked: -walked[0].count("/")):
            try:
                os.rmdir(folder)
            except OSError as exc:
                failed.append(f"{folder} ({exc.strerror})")
        if not top.exists():
            log(f"removed the cgroup {top}")
    return failed


def cgroup_conf(cgroups: bool) -> str:
    if not cgroups:
        # slurmd 22.05 always loads a cgroup plugin, and autodetecting one needs /sys/fs/cgroup, which `ip netns
        # exec`'s fresh /sys lacks: naming the v1 plugin skips the detection, and with proctrack/linuxproc and
        # task/affinity alone it creates no cgroup
        return "# bench testslurm: no cgroups (proctrack/linuxproc, task/affinity)\nCgroupPlugin=cgroup/v1\n"
    return "\n".join(
        [
            "# bench testslurm: each job and step in cgroups of the cores Slurm gave it, as on a production partition",
            "CgroupPlugin=cgroup/v1",
            f"CgroupMountpoint={cgroup_mount()}",
            "CgroupAutomount=yes",
            "ConstrainCores=yes",
            "",
        ]
    )


# ---------------------------------------------------------------- state and processes
def node_names(state: dict | None) -> list[str]:
    return [n["name"] for n in (state or {}).get("nodes", [])]


def pid_alive(path: Path) -> int | None:
    """The pid in the file if that process is alive (not a zombie)."""
    try:
        pid = int(path.read_text().split()[0])
        if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
            return pid
    except (OSError, ValueError, IndexError, psutil.Error):
        pass
    return None


def _is_ours(proc: psutil.Process) -> bool:
    """A daemon of the cluster (it names or holds open a file under STATE_DIR), or a task of one of its jobs."""
    try:
        if proc.name() in OURS_BY_NAME:
            if any(names_path_under(arg, STATE_DIR) for arg in proc.cmdline()):
                return True
            if any(names_path_under(f.path, STATE_DIR) for f in proc.open_files()):  # slurmstepd: the slurmd's log
                return True
        env = proc.environ()
        return "SLURM_JOB_ID" in env and env.get("SLURM_CONF") == str(conf_path())
    except (psutil.Error, OSError):
        return False


def _by_pid_file() -> list[psutil.Process]:
    """The daemons their pid files name (when the pid is still a daemon of that name)."""
    paths = [*pid_files([]).values(), *STATE_DIR.glob("slurmd-*.pid")]
    found = []
    for pid in filter(None, map(pid_alive, paths)):
        try:
            proc = psutil.Process(pid)
            if proc.name() in DAEMONS:
                found.append(proc)
        except psutil.Error:
            pass
    return found


def processes() -> list[psutil.Process]:
    """Every live process of the cluster and its descendants, never this process or one it runs under."""
    return processes_of(
        [(proc, True) for proc in _by_pid_file()] + [(proc, False) for proc in psutil.process_iter()], _is_ours
    )


def controller_here(state: dict | None) -> bool:
    """Whether slurmctld's address (the bridge's) is one of this machine's: once the test hosts are down it is
    not, and a client would send its request out by the default route instead."""
    address = ((state or {}).get("controller") or {}).get("address")
    if not address:
        return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((address, 0))
        except OSError:
            return False
    return True


def leftovers() -> list[str]:
    """What of the cluster is on this machine now, in words (empty when nothing is)."""
    return daemon_leftovers(STATE_DIR, processes()) + [f"the cgroup {p}" for p in cgroup_leftovers()]


# ---------------------------------------------------------------- commands
def client(args: list[str], timeout: float = CLIENT_TIMEOUT) -> str:
    """A Slurm client command against this cluster; its stdout (SetupError when it fails)."""
    return run(args, timeout=timeout, env={**os.environ, **environment()}).stdout


def log_tails(nodes: list[str]) -> str:
    return tails_of(log_files(nodes), "(the daemons wrote no log)")


def start_daemon(name: str, cmd: list[str], nodes: list[str]) -> None:
    """Run a daemon that forks into the background itself; what it prints goes to STATE_DIR/<name>.out."""
    start_logged(
        name,
        cmd,
        STATE_DIR / f"{name.replace(' ', '-')}.out",
        START_TIMEOUT,
        {**os.environ, **environment()},
        lambda: log_tails(nodes),
    )


def wait_for(what: str, ready, nodes: list[str], timeout: float = START_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise SetupError(f"{what} within {timeout:g} s\n{log_tails(nodes)}")
        time.sleep(0.05)


def node_states() -> dict[str, str]:
    """Each node's state as sinfo reports it (%T: idle, allocated, down*, ...)."""
    states = {}
    for line in client(["sinfo", "--noheader", "--Node", "--format=%N %T"]).splitlines():
        words = line.split()
        if len(words) == 2:
            states[words[0]] = words[1]
    return states


# ---------------------------------------------------------------- up, down, status
def up(log=None) -> list[testhosts.TestHost]:
    """Start the cluster on the test hosts that are up, replacing one already here; returns the hosts, each a
    node named as the host. A failure removes everything this call started and raises SetupError with the end
    of the daemons' logs."""
    log = log or (lambda text: None)
    require_usable(unavailable_reason())
    hosts, address = testhosts.running_hosts()
    if leftovers():
        log(f"taking down the {NAME} already here first")
        down()
    require_port_free(CTLD_PORT, "slurmctld's")
    build_or_roll_back(lambda: build(hosts, address, log), down, log)
    return hosts


def build(hosts: list[testhosts.TestHost], address: str, log) -> None:
    start = time.monotonic()
    # every node offers the CPUs a run's threads can keep busy here (a CPU quota counted), as bench run counts them
    nodes, cpus = [h.name for h in hosts], usable_cpus()
    # munged wants every directory above its socket searchable by all and writable only by its owner
    STATE_DIR.mkdir(mode=0o755)
    for sub in ("munge", "slurmctld", "slurmd", *(f"slurmd/{n}" for n in nodes)):
        (STATE_DIR / sub).mkdir(mode=0o755)
    state = {
        "nodes": [vars(h) for h in hosts],
        "controller": {"name": controller_name(), "address": address, "port": CTLD_PORT},
        "cpus": cpus,
        "complete": False,
    }
    STATE.write(state)
    fd = os.open(key_file(), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(os.urandom(1024))
    files = pid_files(nodes)

    start_daemon(
        "munged",
        [
            tool("munged"),
            f"--socket={munge_socket()}",
            f"--key-file={key_file()}",
            f"--pid-file={files['munged']}",
            f"--log-file={munge_dir() / 'munged.log'}",
            f"--seed-file={munge_dir() / 'munged.seed'}",
        ],
        nodes,
    )
    wait_for("munged did not create its socket", lambda: pid_alive(files["munged"]) and munge_socket().exists(), nodes)
    log(f"munged: key and socket {munge_socket()}")

    problem = cgroup_problem()
    if problem:
        log(f"note: no cgroups, tasks are bound to their cores but not confined to them: {problem}")
    else:
        for controller in CGROUP_CONTROLLERS:
            (cgroup_mount() / controller).mkdir(parents=True)
        log("cgroups: every job and step confined to the cores Slurm gave it (cgroup/v1: cpuset, freezer)")
    state["cgroups"] = problem or "cgroup/v1"
    STATE.write(state)
    conf_path().write_text(slurm_conf(hosts, controller_name(), address, cpus, cgroups=not problem))
    (STATE_DIR / "cgroup.conf").write_text(cgroup_conf(not problem))
    (STATE_DIR / "plugstack.conf").write_text("# bench testslurm: no SPANK plugins\n")
    env_file().write_text(export_line() + "\n")

    start_daemon("slurmctld", [tool("slurmctld"), "-f", str(conf_path())], nodes)
    wait_for("slurmctld did not write its pid file", lambda: pid_alive(files["slurmctld"]), nodes)
    log(f"slurmctld: {controller_name()} on {address}:{CTLD_PORT}")
    for host in hosts:
        # the host's network namespace (its /etc/hosts too) and its hostname: the UTS namespace of its sshd
        start_daemon(
            f"slurmd {host.name}",
            [
                tool("ip"),
                "netns",
                "exec",
                host.name,
                tool("nsenter"),
                f"--target={testhosts.sshd_pid(host)}",
                "--uts",
                tool("slurmd"),
                "-f",
                str(conf_path()),
                "-N",
                host.name,
            ],
            nodes,
        )
        wait_for(
            f"slurmd of {host.name} did not write its pid file", lambda: pid_alive(files[f"slurmd {host.name}"]), nodes
        )
        log(f"slurmd: {host.name} ({host.address}:{SLURMD_PORT})")

    log(f"waiting for {len(nodes)} node(s) to be idle")
    deadline, states = time.monotonic() + READY_TIMEOUT, {}
    while True:
        dead = [name for name, path in files.items() if not pid_alive(path)]
        if dead:
            raise SetupError(f"{', '.join(dead)} ended while the cluster started\n{log_tails(nodes)}")
        if not controller_here(state):
            raise SetupError(f"{address} (the test hosts' bridge) went away while the cluster started")
        try:
            states = node_states()
        except SetupError:
            states = {}
        if all(states.get(n) == "idle" for n in nodes):
            break
        if time.monotonic() > deadline:
            shown = ", ".join(f"{n} {states.get(n, 'not listed')}" for n in nodes)
            raise SetupError(f"the nodes were not all idle within {READY_TIMEOUT} s ({shown})\n{log_tails(nodes)}")
        time.sleep(0.2)
    state.update(complete=True, built_s=round(time.monotonic() - start, 2))
    STATE.write(state)


def cancel_jobs(log) -> None:
    """scancel every job and wait (bounded) until squeue lists none, so that no job step outlives the cluster;
    nothing to do without a running slurmctld, reachable here, and the configuration that names it."""
    if (
        not conf_path().exists()
        or tool("scancel") is None
        or not controller_here(STATE.read())
        or not any(name_of(p) == "slurmctld" for p in processes())
    ):
        return
    try:
        jobs = client(["squeue", "--noheader", "--format=%A"]).split()
        if not jobs:
            return
        log(f"cancelling {len(jobs)} job(s)")
        client(["scancel", *jobs])
        deadline = time.monotonic() + CANCEL_TIMEOUT
        # a job stays listed (completing) until its slurmd's report it ended: not worth waiting for without them
        while (
            client(["squeue", "--noheader", "--format=%A"]).split()
            and time.monotonic() < deadline
            and any(name_of(p) == "slurmd" for p in processes())
        ):
            time.sleep(0.2)
    except SetupError as exc:  # the processes are ended below in any case
        log(f"cancelling the jobs: {exc}")


def down(log=None) -> bool:
    """Stop the cluster: cancel its jobs, end every process of it (munged last), remove STATE_DIR and the
    nodes' cgroups. False
    when nothing of it was here. Safe to call again, and after a crashed up()."""
    log = log or (lambda text: None)
    if not leftovers():
        return False
    cancel_jobs(log)
    ended, survivors = [], []
    for keep_munged in (True, False):  # slurmctld and the slurmd's may still talk to munged while stopping
        # a stepd forked meanwhile is found by end_found's next look
        more, survivors = end_found(
            lambda: [p for p in processes() if not (keep_munged and name_of(p) == "munged")], log
        )
        ended += more
    finish_removal(STATE_DIR, ended, survivors, NAME)  # (its processes reaped: their cgroups are empty)
    stuck = remove_cgroups(log)
    if stuck:
        raise SetupError(f"the {NAME}'s cgroups could not be removed: {', '.join(stuck)}")
    return True


def status() -> list[dict]:
    """One row per node: name, address, state (sinfo's, or why there is none); empty when the cluster is down."""
    state = STATE.read()
    nodes = (state or {}).get("nodes", [])
    if not nodes:
        return []
    if not pid_alive(STATE_DIR / "slurmctld.pid"):
        states, missing = {}, "slurmctld not running"
    elif not controller_here(state):
        states, missing = {}, f"slurmctld's address {state['controller']['address']} is gone (test hosts down?)"
    else:
        try:
            states, missing = node_states(), "not listed by sinfo"
        except SetupError as exc:
            states, missing = {}, f"sinfo failed: {last_line(str(exc))}"
    return [{"name": n["name"], "address": n["address"], "state": states.get(n["name"], missing)} for n in nodes]


def all_up(rows: list[dict]) -> bool:
    return bool(rows) and all(r["state"] in UP_STATES for r in rows)
