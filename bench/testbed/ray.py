"""A real Ray cluster on the test hosts (bench/testbed/hosts.py), for runs of the ray backend across hosts without one:
a test cluster of bench.testbed.protocol.

The head node runs in the root namespace on the bridge's address with no CPUs (Ray's advice for a head node: it
holds the cluster's control plane, and bench's driver and Ray Train's controller, which Ray Train places on the
driver's node, with no CPU), so the Train workers land on the test hosts; each host runs one worker node in its
network namespace and with its hostname (the UTS namespace of the host's sshd), with the CPUs given to it. Every
node keeps its temporary files (sockets, logs, session) under STATE_DIR. Token authentication is on, with a token
of the cluster's own (STATE_DIR/auth_token, not ~/.ray/auth_token); environment() is what a client adds to join.

down() ends every process of the cluster, found by the marker in their environment (every `ray start` is given
it, and Ray's daemons and workers inherit it) and by their paths under STATE_DIR, so it also clears what a
crashed up() left; it never touches another Ray runtime on the machine (no `ray stop`).
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import time
from pathlib import Path

import psutil

from bench.backends import ray as ray_backend
from bench.backends.ray.launcher import ray_program
from bench.core.cgroups import usable_cpus
from bench.core.errors import UsageError
from bench.harness.supervisor import end_found, processes_of
from bench.testbed import hosts as testhosts
from bench.testbed.protocol import (
    SetupError,
    StateFile,
    bounded,
    build_or_roll_back,
    daemon_leftovers,
    finish_removal,
    last_line,
    names_path_under,
    port_open,
    require_port_free,
    require_usable,
    start_logged,
    tails_of,
    tool,
)

NAME = "Ray test cluster"
ROOT_ONLY = f"the {NAME} is root's (its nodes run in the test hosts' namespaces)"
STATE_DIR = Path("/run/bench-testray")
STATE = StateFile(STATE_DIR)
MARKER = "BENCH_TESTRAY"  # in the environment of every process of the cluster: STATE_DIR
# the GCS port of the head node; outside Ray's default worker port range (10002-19999), which Ray refuses to
# overlap, and not Ray's default 6379, so that a cluster of the user's own on this machine keeps it
GCS_PORT = 26379
AGENT_PORT = 26381  # the head's dashboard agent (Ray's default 52365 may be another runtime's on this machine)
OBJECT_STORE_BYTES = 100 * 1000 * 1000  # per node; Ray's default (30% of memory per node) is far more than runs use
START_TIMEOUT = 60  # one `ray start`
READY_TIMEOUT = 30  # every node alive in the GCS's node table
QUERY_TIMEOUT = 20
INSTALL = "pip install -e '.[ray]'"


def token_file() -> Path:
    return STATE_DIR / "auth_token"


def environment() -> dict[str, str]:
    """What a client (bench run --backend ray --ray-address ..., ray itself) adds to its environment to join."""
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token_file())}


def export_line() -> str:
    return "export " + " ".join(f"{k}={v}" for k, v in environment().items())


# ---------------------------------------------------------------- preconditions
def unavailable_reason() -> str | None:
    """Why the cluster cannot be built here, or None (the test hosts must still be up for up())."""
    problem = testhosts.unavailable_for_cluster(NAME) or ray_backend.ray_problem()
    if problem or ray_program() is None:
        return problem or f"the `ray` command was not found: {INSTALL}"
    return None


# ---------------------------------------------------------------- state and processes
def head_address(state: dict | None) -> str | None:
    head = (state or {}).get("head")
    return f"{head['address']}:{head['port']}" if head else None


def _is_ours(proc: psutil.Process) -> bool:
    try:
        if proc.environ().get(MARKER) == str(STATE_DIR):
            return True
        return any(names_path_under(arg, STATE_DIR) for arg in proc.cmdline())
    except (psutil.Error, OSError):
        return False


def processes() -> list[psutil.Process]:
    """Every live process of the cluster and its descendants, never this process or one it runs under."""
    return processes_of([(proc, False) for proc in psutil.process_iter()], _is_ours)


def leftovers() -> list[str]:
    """What of the cluster is on this machine now, in words (empty when nothing is)."""
    return daemon_leftovers(STATE_DIR, processes())


def log_tails() -> str:
    return tails_of(sorted(STATE_DIR.glob("*.out")), "(ray start printed nothing)")


# ---------------------------------------------------------------- the node table
# The GCS's own client (ray._raylet.GcsClient, as `ray status` uses it): it reads the node table without starting a
# driver (ray.init would register a job, and take seconds). In a child process, so that neither Ray's import nor a
# GCS that does not answer can hold bench.
NODES_SNIPPET = """
import json, sys
from ray._raylet import GcsClient
nodes = GcsClient(address=sys.argv[1]).get_all_node_info().values()
print(json.dumps([{"address": n.node_manager_address, "alive": n.state == 0,
                   "cpus": dict(n.resources_total).get("CPU", 0)} for n in nodes]))
"""


def node_table(address: str) -> list[dict]:
    """Each node the cluster's GCS knows: its address, whether it is alive and its CPUs (SetupError when it cannot
    be read)."""
    host, port = address.rsplit(":", 1)
    if not port_open(host, int(port)):
        raise SetupError(f"nothing answers at {address} (the head node's GCS)")
    proc = bounded(
        [sys.executable, "-c", NODES_SNIPPET, address],
        QUERY_TIMEOUT,
        f"the GCS at {address}",
        "list its nodes",
        capture_output=True,
        text=True,
        env={**os.environ, **environment()},
    )
    if proc.returncode != 0:
        raise SetupError(f"reading the node table at {address} failed: {last_line(proc.stderr)}")
    return json.loads(proc.stdout)


# ---------------------------------------------------------------- up, down, status
def up(cpus: int | None = None, log=None) -> tuple[list[testhosts.TestHost], str]:
    """Start the cluster on the test hosts that are up, replacing one already here, with `cpus` CPUs per host
    (default: the CPUs this machine's runs can keep busy, its CPU quota counted, shared by the hosts); returns the
    hosts and the head's address. A failure removes everything this call started and raises SetupError with the end
    of what `ray start` printed."""
    log = log or (lambda text: None)
    require_usable(unavailable_reason())
    hosts, bridge = testhosts.running_hosts()
    if cpus is not None and cpus < 1:
        raise UsageError(f"--cpus must be at least 1, not {cpus}")
    cpus = cpus or max(1, usable_cpus() // len(hosts))
    if leftovers():
        log(f"taking down the {NAME} already here first")
        down()
    for port, whose in ((GCS_PORT, "the head node's GCS"), (AGENT_PORT, "the head node's agent")):
        require_port_free(port, whose, bridge)
    build_or_roll_back(lambda: build(hosts, bridge, cpus, log), down, log)
    return hosts, f"{bridge}:{GCS_PORT}"


def start_node(name: str, cmd: list[str]) -> None:
    """`ray start` (it starts the node's daemons in the background and returns); its output goes to
    STATE_DIR/<name>.out."""
    env = {**os.environ, **environment(), MARKER: str(STATE_DIR), "RAY_USAGE_STATS_ENABLED": "0"}
    start_logged(f"the {name} node", cmd, STATE_DIR / f"{name}.out", START_TIMEOUT, env, log_tails)


def build(hosts: list[testhosts.TestHost], bridge: str, cpus: int, log) -> None:
    started = time.monotonic()
    STATE_DIR.mkdir(mode=0o755)
    fd = os.open(token_file(), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
    state = {
        "head": {"address": bridge, "port": GCS_PORT},
        "nodes": [{**vars(h), "cpus": cpus} for h in hosts],
        "complete": False,
    }
    STATE.write(state)
    ray, common = ray_program(), ["--disable-usage-stats", f"--object-store-memory={OBJECT_STORE_BYTES}"]
    start_node(
        "head",
        [
            ray,
            "start",
            "--head",
            f"--node-ip-address={bridge}",
            f"--port={GCS_PORT}",
            "--num-cpus=0",
            "--num-gpus=0",
            "--include-dashboard=false",
            f"--dashboard-agent-listen-port={AGENT_PORT}",
            f"--temp-dir={STATE_DIR / 'head'}",
            *common,
        ],
    )
    address = f"{bridge}:{GCS_PORT}"
    log(f"head node: {address} (no CPUs)")
    for host in hosts:
        start_node(
            host.name,
            [
                tool("ip"),
                "netns",
                "exec",
                host.name,
                tool("nsenter"),
                f"--target={testhosts.sshd_pid(host)}",
                "--uts",
                ray,
                "start",
                f"--address={address}",
                f"--node-ip-address={host.address}",
                f"--num-cpus={cpus}",
                "--num-gpus=0",
                f"--temp-dir={STATE_DIR / host.name}",
                *common,
            ],
        )
        log(f"worker node: {host.name} ({host.address}, {cpus} CPU)")
    wanted = {bridge, *(h.address for h in hosts)}
    deadline, alive = time.monotonic() + READY_TIMEOUT, set()
    while True:
        try:
            alive = {n["address"] for n in node_table(address) if n["alive"]}
        except SetupError as exc:
            if time.monotonic() > deadline:
                raise SetupError(f"{exc}\n{log_tails()}") from None
        if wanted <= alive:
            break
        if time.monotonic() > deadline:
            raise SetupError(
                f"not every node was alive within {READY_TIMEOUT} s (missing: "
                f"{', '.join(sorted(wanted - alive))})\n{log_tails()}"
            )
        time.sleep(0.5)
    state.update(complete=True, built_s=round(time.monotonic() - started, 2))
    STATE.write(state)


def down(log=None) -> bool:
    """Stop the cluster: end every process of it (SIGTERM, then SIGKILL; bench.harness.supervisor's one way) and remove
    STATE_DIR. False when nothing of it was here. Safe to call again, and after a crashed up()."""
    log = log or (lambda text: None)
    if not leftovers():
        return False
    ended, survivors = end_found(processes, log)  # a worker a raylet starts meanwhile: found by its next look
    finish_removal(STATE_DIR, ended, survivors, NAME)
    return True


def status() -> list[dict]:
    """One row per node (the head first): name, address, CPUs and state (alive, dead, or why there is none);
    empty when the cluster is down."""
    state = STATE.read()
    if not state or not state.get("head"):
        return []
    rows = [{"name": "head", "address": state["head"]["address"], "cpus": 0}]
    rows += [{"name": n["name"], "address": n["address"], "cpus": n["cpus"]} for n in state.get("nodes", [])]
    try:
        table = {n["address"]: n for n in node_table(head_address(state))}
        for row in rows:
            node = table.get(row["address"])
            row["state"] = "not in the node table" if node is None else "alive" if node["alive"] else "dead"
    except SetupError as exc:
        for row in rows:
            row["state"] = str(exc)
    return rows


def all_up(rows: list[dict]) -> bool:
    return bool(rows) and all(r["state"] == "alive" for r in rows)
