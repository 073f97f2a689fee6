"""Runs across hosts: the hosts and their slots, where each process goes, the interface, and commands run on
a host over ssh.

Hosts are given as horovodrun and mpirun take them: `--hosts h1:2,h2:2` or `--hostfile FILE` (one `host
slots=N` per line). Processes fill the hosts in order, slot by slot (mpirun's -map-by slot), so with
`--nproc` below the slots the last hosts get fewer. Every host reaches the others by the names given, runs
the same checkout and environment at the same path (a shared filesystem, or the same path everywhere), and
accepts ssh without a password from this machine and from each other (as horovodrun and mpirun need).
Every remote command goes through `ssh_command`, with the run's environment written into the command
(ssh passes none) and a connection timeout, so an unreachable host is an error within seconds.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import socket
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from bench.core.dryrun import NOT_CHECKED, PLANNED_IFACE, PLANNED_PORT, planning
from bench.core.environment import PROJECT_ROOT
from bench.core.errors import UsageError
from bench.core.gpu_node import nccl_variables
from bench.core.hostlist import Host

CONNECT_TIMEOUT_S = 5
CHECK_TIMEOUT_S = 20.0
SSH_OPTIONS = ("-o", "BatchMode=yes", "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}")


# ---------------------------------------------------------------- remote commands
def remote_shell(argv: list[str], env: dict[str, str] | None = None, cwd: str | None = None) -> str:
    """One shell line that runs argv on a host with `env` set (ssh carries no environment)."""
    line = ""
    if cwd:
        line += f"cd {shlex.quote(cwd)} && "
    line += "exec "
    if env:
        line += "env " + " ".join(shlex.quote(f"{k}={v}") for k, v in sorted(env.items())) + " "
    return line + " ".join(shlex.quote(a) for a in argv)


def ssh_command(host: str, argv: list[str], env: dict[str, str] | None = None, cwd: str | None = None) -> list[str]:
    return ["ssh", *SSH_OPTIONS, host, remote_shell(argv, env, cwd)]


def run_on(
    host: str, argv: list[str], timeout: float = CHECK_TIMEOUT_S, in_checkout: bool = True
) -> subprocess.CompletedProcess:
    """argv on `host` over ssh (exit 255 with the reason when ssh could not run it); in_checkout: in this checkout
    (the same path on every host), with it importable."""
    if planning():  # a dry run contacts no host: whatever asks is answered that nothing was asked
        return subprocess.CompletedProcess(argv, 255, "", NOT_CHECKED)
    where = ({"PYTHONPATH": str(PROJECT_ROOT)}, str(PROJECT_ROOT)) if in_checkout else (None, None)
    try:
        return subprocess.run(
            ssh_command(host, argv, *where), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 255, "", f"no answer within {timeout:g} s")
    except OSError as exc:
        return subprocess.CompletedProcess(argv, 255, "", f"ssh could not start: {exc}")


def json_answer(proc: subprocess.CompletedProcess) -> dict:
    """The JSON object a bench helper run on a host printed last (bench.harness.supervisor, bench.cluster.netcut), or
    {"error": the host's last words} when there is none."""
    import json

    try:
        answer = json.loads(proc.stdout.strip().splitlines()[-1])
        if isinstance(answer, dict):
            return answer
    except (ValueError, IndexError):
        pass
    return {"error": (proc.stderr.strip().splitlines() or ["no answer"])[-1][:200]}


def on_every_host(
    hosts: list[str], argv_of, timeout: float = CHECK_TIMEOUT_S, in_checkout: bool = True
) -> dict[str, subprocess.CompletedProcess]:
    """argv_of(host) on each host at once (run_on): {host: completed process}."""
    if not hosts:
        return {}
    with ThreadPoolExecutor(max_workers=min(16, len(hosts))) as pool:
        return dict(zip(hosts, pool.map(lambda h: run_on(h, argv_of(h), timeout, in_checkout), hosts)))


# ---------------------------------------------------------------- checks before a launch
PROBE = """
import json, os, socket, subprocess, sys
from bench.core.cgroups import usable_cpus  # the host's CPUs less what its CPU quota throttles
iface, peer, gpus = sys.argv[1], sys.argv[2], sys.argv[3] == "gpus"
with open("/proc/sys/kernel/random/boot_id") as f:
    boot = f.read().strip()
out = {"hostname": socket.gethostname(), "cpus": usable_cpus(), "machine": boot}
if gpus:  # torch only when GPUs are asked for: its import takes seconds
    out["visible"] = os.environ.get("CUDA_VISIBLE_DEVICES")
    try:
        import torch
        out["gpus"] = torch.cuda.device_count() if torch.cuda.is_available() else 0
        out["cuda"] = torch.version.cuda
        try:
            out["nccl"] = ".".join(map(str, torch.cuda.nccl.version())) if out["gpus"] else None
        except Exception:
            out["nccl"] = None
    except Exception as exc:
        out["gpus"], out["gpu_error"] = 0, f"{type(exc).__name__}: {exc}"[:160]
out["interfaces"] = [name for _, name in socket.if_nameindex()]
if iface:
    out["iface_ok"] = iface in out["interfaces"]
if peer:
    try:
        route = subprocess.run(["ip", "-o", "route", "get", socket.gethostbyname(peer)], capture_output=True,
                               text=True, timeout=5).stdout.split()
        out["route_dev"] = route[route.index("dev") + 1] if "dev" in route else None
    except (OSError, ValueError, subprocess.SubprocessError):
        out["route_dev"] = None
print(json.dumps(out))
"""


@dataclass(frozen=True)
class HostCheck:
    iface: str
    iface_chosen_by: str  # "given" or how it was found (and the interface variables kept from the environment)
    machines: dict  # host as given -> {"hostname", "cpus", "id"}: hosts with one id share a machine (its cores)
    gpus: dict | None = None  # with GPUs asked for: host -> {"gpus", "cuda", "nccl"} as the host's torch says

    def cluster(self, hosts: list[Host]) -> dict:
        """What a spec builder takes for a run across these hosts (bench.core.spec.check_placement)."""
        return {"hosts": [h.to_dict() for h in hosts], "iface": self.iface, "machines": self.machines}


def check_hosts(hosts: list[Host], python: str, iface: str | None, gpus: int | None = None, environ=None) -> HostCheck:
    """Every host answers over ssh, runs this environment's python, and has the interface; without `iface`, the
    one each host routes to its peer (the first host to the second, the others to the first) when they agree. The
    interfaces that the environment's GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME name (`environ`, os.environ by
    default: kept, kept_interface_variables) must be on every host as `iface` must. With `gpus` (per host), every
    host has at least that many CUDA devices, as its own torch counts them, and says its CUDA and NCCL versions."""
    import json

    environ = os.environ if environ is None else environ
    kept = kept_interface_variables(environ, iface)
    names = [h.name for h in hosts]
    # the launch passes this shell's CUDA_VISIBLE_DEVICES to every host's processes (forwarded_devices): the GPUs
    # counted are those they will see
    visible = ["env", f"CUDA_VISIBLE_DEVICES={environ['CUDA_VISIBLE_DEVICES']}"] if forwarded_devices(environ) else []

    def peer(host):
        if len(names) == 1:
            return ""
        return names[1] if host == names[0] else names[0]

    results = on_every_host(
        names, lambda h: [*(visible if gpus else []), python, "-c", PROBE, iface or "", peer(h), "gpus" if gpus else ""]
    )
    answers = {}
    for host, proc in results.items():
        if proc.returncode == 255:
            why = (proc.stderr.strip().splitlines() or ["no answer"])[-1]
            raise UsageError(
                f"host {host} cannot be reached over ssh ({why}); check its name, that it is up, and "
                "that ssh to it needs no password"
            )
        if proc.returncode != 0:
            why = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise UsageError(
                f"host {host} cannot run {python} ({why}); every host needs this checkout and its "
                "environment at the same path"
            )
        try:
            answers[host] = json.loads(proc.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise UsageError(
                f"host {host} gave no readable answer to the check ({proc.stdout.strip()[:80]!r})"
            ) from None
    machines = {h: {"hostname": a["hostname"], "cpus": a["cpus"], "id": a["machine"]} for h, a in answers.items()}
    found = gpu_answers(answers, gpus)
    if iface:
        missing = [h for h, a in answers.items() if not a.get("iface_ok")]
        if missing:
            raise UsageError(
                f"--iface {iface}: no such interface on {', '.join(missing)}; give the interface the "
                "hosts share (`ip -o link` on a host lists them)"
            )
    check_kept_on_hosts(kept, answers)
    if iface:
        return HostCheck(iface, "given" + kept_said(kept, "on every host"), machines, found)
    if len(names) == 1:
        return HostCheck("lo", "one host: loopback" + kept_said(kept, "on the host"), machines, found)
    devices = {h: a.get("route_dev") for h, a in answers.items()}
    chosen = set(devices.values())
    if len(chosen) != 1 or None in chosen:
        seen = ", ".join(f"{h}: {d}" for h, d in devices.items())
        raise UsageError(f"the hosts reach each other through different interfaces ({seen}); choose one with --iface")
    how = "the interface the hosts route to each other through" + kept_said(kept, "on every host")
    return HostCheck(chosen.pop(), how, machines, found)


def gpu_answers(answers: dict, gpus: int | None) -> dict | None:
    """Each host's GPUs, CUDA and NCCL from the check's answers; a host with fewer GPUs than `gpus` refused in one
    line that names it (the first such host, in the order given)."""
    if not gpus:
        return None
    for host, answer in answers.items():
        have = answer.get("gpus", 0)
        if have < gpus:
            visible = answer.get("visible")  # counted: the GPUs that CUDA_VISIBLE_DEVICES leaves visible there
            why = f" visible with CUDA_VISIBLE_DEVICES={visible}" if visible is not None else ""
            why += f": {answer['gpu_error']}" if answer.get("gpu_error") else ""
            unset = ", unset CUDA_VISIBLE_DEVICES" if visible is not None else ""
            raise UsageError(
                f"host {host} has {have} CUDA device(s){why}, fewer than --gpus {gpus}; give --gpus {have} or "
                f"fewer{unset}, or leave that host out"
                if have
                else f"host {host} has no CUDA device{why}, and --gpus {gpus} asks for {gpus} on every host; "
                f"leave that host out{unset}, or use --nproc for CPU processes"
            )
    return {h: {k: a.get(k) for k in ("gpus", "cuda", "nccl")} for h, a in answers.items()}


def planned_check(hosts: list[Host], iface: str | None, gpus: int | None) -> HostCheck:
    """What a dry run takes instead of check_hosts, which it may not run (it contacts every host): each host its own
    machine, its cores unknown (0; bench.core.spec.cluster_threads takes --threads or 1 in a dry run), the interface
    given (or PLANNED_IFACE), and the GPUs asked for, all as given and not checked."""
    machines = {h.name: {"hostname": h.name, "cpus": 0, "id": h.name} for h in hosts}
    found = {h.name: {"gpus": gpus, "cuda": NOT_CHECKED, "nccl": NOT_CHECKED} for h in hosts} if gpus else None
    kept = kept_interface_variables(os.environ, iface)  # a contradiction of --iface needs no host to be refused
    return HostCheck(iface or PLANNED_IFACE, NOT_CHECKED + kept_said(kept, NOT_CHECKED), machines, found)


# The variables that choose a library's network interface, and how they name one: "name" exactly one, "names" a
# comma-separated list (entries with a "/" are Open MPI's subnets, not names), "nccl" NCCL's list of prefixes ("=" in
# front: exact names; "^" in front: interfaces to exclude, nothing to check).
INTERFACE_VARIABLES = {
    "GLOO_SOCKET_IFNAME": "names",
    "NCCL_SOCKET_IFNAME": "nccl",
    "TP_SOCKET_IFNAME": "name",
    "HOROVOD_GLOO_IFACE": "name",
    "OMPI_MCA_btl_tcp_if_include": "names",
    "OMPI_MCA_oob_tcp_if_include": "names",
}
# across hosts, bench.harness.runner sets each that the environment leaves unset to --iface (or the interface found);
# one set is the user's, kept (kept_interface_variables) and checked on every host by the host check
SET_FROM_IFACE = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


def _named_interfaces(style: str, value: str) -> tuple[list[str], bool]:
    """(the interface names a variable's value asks for, whether a name may be a prefix of one)."""
    if style == "nccl":
        if value.startswith("^"):
            return [], False
        exact = value.startswith("=")
        return [n.strip() for n in value.lstrip("=").split(",") if n.strip()], not exact
    if style == "name":
        return [value.strip()], False
    return [n.strip() for n in value.split(",") if n.strip() and "/" not in n], False


def _matches(name: str, interface: str, prefix: bool) -> bool:
    return interface == name or (prefix and interface.startswith(name))


def kept_interface_variables(environ, iface: str | None) -> dict[str, str]:
    """The SET_FROM_IFACE variables set in `environ`, which a run across hosts keeps as they are: {variable: value}.
    With `iface` (--iface given) each must agree with it, else one line: the interfaces it names must be iface (NCCL's
    names by prefix, as NCCL reads them, unless written `=NAME`), and an exclusion (NCCL's `^`) must not exclude it.
    Whether the interfaces are on the hosts is the host check's (check_kept_on_hosts)."""
    kept = {v: environ[v] for v in SET_FROM_IFACE if environ.get(v)}
    for variable, value in kept.items() if iface else ():
        style = INTERFACE_VARIABLES[variable]
        names, prefix = _named_interfaces(style, value)
        excluded = style == "nccl" and value.startswith("^")
        if excluded:
            exact = value.startswith("^=")
            names, prefix = [n.strip() for n in value.lstrip("^=").split(",") if n.strip()], not exact
        matching = [_matches(n, iface, prefix) for n in names]
        if any(matching) if excluded else not all(matching):
            raise UsageError(
                f"{variable}={value} in the environment disagrees with --iface {iface}; unset "
                f"{variable} to use --iface {iface} for it too, or drop --iface to keep {variable}"
            )
    return kept


def check_kept_on_hosts(kept: dict[str, str], answers: dict) -> None:
    """Every interface a kept variable names is on every host (each host's `interfaces` in its answer to the check),
    as --iface must be; the first one missing refused in one line naming the host and what it has."""
    for variable, value in kept.items():
        names, prefix = _named_interfaces(INTERFACE_VARIABLES[variable], value)
        for host, answer in answers.items():
            have = answer.get("interfaces") or []
            for name in names:
                if not any(_matches(name, i, prefix) for i in have):
                    raise UsageError(
                        f"{variable}={value} in the environment: no interface {name}{'*' if prefix else ''} on host "
                        f"{host} (it has {', '.join(have)}); name an interface every host has, or unset {variable} "
                        "to use --iface (or the interface the hosts route through)"
                    )


def kept_said(kept: dict[str, str], checked: str) -> str:
    """What the host check says of the kept variables, after how the interface was chosen."""
    return "".join(f"; {k}={v} kept from the environment, {checked}" for k, v in kept.items())


def forwarded_devices(environ) -> bool:
    """Whether a launch across hosts passes CUDA_VISIBLE_DEVICES on to every host's processes: when it is set here,
    as the user's choice of GPUs, the same on every host (as horovodrun and mpirun -x pass it); the host check then
    counts only those GPUs on each host (check_hosts)."""
    return environ.get("CUDA_VISIBLE_DEVICES") is not None


def host_plan_notes(environ, device: str) -> list[str]:
    """A plan's notes on what of this shell's environment chooses the hosts' interfaces and GPUs: the kept interface
    variables, and a CUDA_VISIBLE_DEVICES passed on (a dry run contacts no host, so neither is checked there)."""
    notes = [
        f"{k}={v} is the environment's, kept rather than set to the run's interface; that every host has the "
        f"interfaces it names: {NOT_CHECKED} (a run checks it on every host first)"
        for k, v in kept_interface_variables(environ, None).items()
    ]
    if device == "cuda" and forwarded_devices(environ):
        notes.append(
            f"CUDA_VISIBLE_DEVICES={environ['CUDA_VISIBLE_DEVICES']} of this shell is passed on to every host: each "
            "host's processes see only those of its GPUs, and the host check counts only those "
            f"({NOT_CHECKED}); unset it to use every GPU of each host"
        )
    return notes


def check_interface_variables(environ, iface: str | None = None) -> None:
    """The interface variables set in the environment (INTERFACE_VARIABLES), checked before anything is launched as
    --iface is: on this machine, every interface they name must exist (one that does not would break one backend
    and not another); across hosts (`iface`), the ones bench does not set from --iface must name it, and those it
    sets where unset (SET_FROM_IFACE) are kept, and checked on every host by the host check
    (kept_interface_variables). A one-line error otherwise."""
    interfaces = [name for _, name in socket.if_nameindex()]
    for variable, style in INTERFACE_VARIABLES.items():
        value = environ.get(variable)
        if not value or (iface and variable in SET_FROM_IFACE):
            continue
        names, prefix = _named_interfaces(style, value)
        if iface:
            if names and names != [iface]:
                raise UsageError(
                    f"{variable}={value} in the environment: across hosts every backend uses --iface "
                    f"{iface}; unset {variable}, or give --iface {names[0]}"
                )
            continue
        for name in names:
            if not any(i == name or (prefix and i.startswith(name)) for i in interfaces):
                raise UsageError(
                    f"{variable}={value} in the environment: no interface {name}"
                    f"{'*' if prefix else ''} on this machine (it has {', '.join(interfaces)}); unset "
                    f"{variable} or name one of those"
                )


def free_port_on(host: str, python: str) -> int | str:
    """A TCP port free on `host` now (the rendezvous endpoint every agent must know in advance); a dry run names it
    (PLANNED_PORT) instead of asking the host."""
    if planning():
        return PLANNED_PORT
    proc = run_on(
        host, [python, "-c", "import socket; s = socket.socket(); s.bind(('', 0)); print(s.getsockname()[1])"]
    )
    try:
        return int(proc.stdout.strip())
    except ValueError:
        raise UsageError(f"host {host} did not give a free port ({proc.stderr.strip()[-120:]})") from None


# ---------------------------------------------------------------- what each host's GPU node is made of
_GPU_NODES: dict[tuple[tuple[str, ...], str], dict[str, dict]] = {}  # (hosts, python) -> {host: hardware facts}
GPU_NODE_TIMEOUT_S = 60.0  # a GPU host imports torch for its NCCL version: longer than the host check's


def gpu_nodes(hosts: list[str], python: str, worker_env: dict[str, str]) -> list[dict]:
    """Each host's GPU node facts (bench.core.gpu_node, run there over ssh; asked once per bench process for a set
    of hosts), with the NCCL variables of the workers' environment, which the launch carries to every host. A host
    that gives no answer is recorded as not available, with its last words."""
    key = (tuple(hosts), python)
    if key not in _GPU_NODES:
        answers = on_every_host(hosts, lambda h: [python, "-m", "bench.core.gpu_node", h], GPU_NODE_TIMEOUT_S)
        _GPU_NODES[key] = {}
        for host, proc in answers.items():
            answer = json_answer(proc)
            if "error" in answer and "status" not in answer:
                answer = {
                    "host": host,
                    "status": "not available",
                    "reason": f"no answer: {answer['error']}",
                    "gpus": [],
                }
            _GPU_NODES[key][host] = answer
    variables = nccl_variables(worker_env)
    return [{**_GPU_NODES[key][h], "nccl_variables": variables} for h in hosts]


# ---------------------------------------------------------------- teardown on every host
def reap_on_hosts(hosts: list[str], tag: str, python: str) -> list[dict]:
    """End every process of the run on each host (bench.harness.supervisor's reap, run there): what it ended, each with
    its host (or the host's error)."""
    ended = []
    for host, proc in on_every_host(hosts, lambda h: [python, "-m", "bench.harness.supervisor", "reap", tag]).items():
        answer = json_answer(proc)
        ended += [{**p, "host": host} for p in answer.get("reaped", [{"error": answer.get("error", "no answer")}])]
    return ended


# ---------------------------------------------------------------- shaped links
# each matched whole (fullmatch: `$` alone would let a "\n" after it through, into tc's command line)
RATE = re.compile(r"\d+(\.\d+)?(bit|kbit|mbit|gbit|tbit)", re.IGNORECASE)
DELAY = re.compile(r"\d+(\.\d+)?(us|ms|s)", re.IGNORECASE)
UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}


def parse_link(text: str) -> dict:
    """`RATE[:DELAY]` (tc's units: 1gbit, 100mbit; 0.1ms, 50us) as {"rate", "delay", "rate_bytes_per_s"}."""
    rate, _, delay = text.strip().partition(":")
    if not RATE.fullmatch(rate):
        raise UsageError(f"--link {text!r}: the rate must be a number with tc's unit, such as 1gbit or 100mbit")
    if delay and not DELAY.fullmatch(delay):
        raise UsageError(f"--link {text!r}: the delay must be a number with a unit, such as 0.1ms or 50us")
    unit = re.sub(r"^[\d.]+", "", rate).lower()
    bits = float(rate[: len(rate) - len(unit)]) * UNITS[unit]
    if bits <= 0:
        raise UsageError(f"--link {text!r}: the rate must be positive")
    return {"rate": rate.lower(), "delay": delay.lower() or None, "rate_bytes_per_s": bits / 8}


def tc_shape(iface: str, link: dict) -> list[str]:
    """The qdisc on the host's end of its link that limits what it sends: netem (a rate and a delay) when a delay
    is asked for; else a token bucket (tbf, in every kernel) with a burst of 4 ms at the rate, at least 10 frames,
    and up to 50 ms queued."""
    if link["delay"]:
        return ["tc", "qdisc", "replace", "dev", iface, "root", "netem", "rate", link["rate"], "delay", link["delay"]]
    burst = max(15000, int(link["rate_bytes_per_s"] * 0.004))
    return [
        "tc",
        "qdisc",
        "replace",
        "dev",
        iface,
        "root",
        "tbf",
        "rate",
        link["rate"],
        "burst",
        str(burst),
        "latency",
        "50ms",
    ]


def shape_links(hosts: list[str], iface: str, link: dict) -> None:
    """Shape every host's link, or undo what was shaped and refuse with the host's own words."""
    results = on_every_host(hosts, lambda h: tc_shape(iface, link))
    failed = {h: p for h, p in results.items() if p.returncode != 0}
    if failed:
        unshape_links([h for h in hosts if h not in failed], iface)
        host, proc = next(iter(failed.items()))
        why = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        hint = (
            "this kernel has no netem, which a delay needs: give the rate alone"
            if link["delay"] and "unknown" in why
            else "shaping needs root and tc (iproute2) on every host"
        )
        raise UsageError(f"--link: tc on {host} failed ({why}); {hint}")


def unshape_links(hosts: list[str], iface: str) -> None:
    on_every_host(hosts, lambda h: ["tc", "qdisc", "del", "dev", iface, "root"])


def restore_links(spec) -> None:
    """Undo the shaping of a run across hosts (a cut a fault run made is healed by its task's conclude)."""
    if spec.hosts and spec.link:
        unshape_links([h["name"] for h in spec.hosts], spec.iface)


@contextlib.contextmanager
def shaped_links(spec):
    """Every host's link shaped as spec.link says for the duration of the block (nothing when it says nothing)."""
    if not (spec.hosts and spec.link):
        yield
        return
    shape_links([h["name"] for h in spec.hosts], spec.iface, spec.link)
    try:
        yield
    finally:
        restore_links(spec)
