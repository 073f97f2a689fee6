"""Test hosts: N real network hosts on this one machine, for multi-host runs without a cluster.

Test host i is the network namespace bench-th<i>: a veth (eth0, address SUBNET.(10+i)) to the bridge bench-th0
(SUBNET.1) in the root namespace, loopback up, no default route, its own hostname (a UTS namespace for its
sshd and everything started over ssh) and its own /etc/hosts (/etc/netns/bench-th<i>/hosts, which `ip netns
exec` binds over /etc/hosts). Its sshd listens on eth0:22 only and accepts only the key made here. A marked
block in root's ~/.ssh/config makes plain `ssh ADDRESS` (what torchrun over ssh, horovodrun and mpirun run)
work from the root namespace and from every host. The file system is shared, so the checkout and its
environment are at the same path everywhere.

A test cluster of bench.testbed.protocol, the one the others run on. down() finds everything by name, so it
also clears what a crashed up() left; the state file only adds what up() created outside those names (root's
~/.ssh/config or ~/.ssh, sshd's privilege-separation directory). It takes down only the hosts:
bench.testbed.teardown takes the clusters on them down first.
"""

from __future__ import annotations

import ipaddress
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench.cluster.hosts import on_every_host
from bench.core.errors import BenchError, UsageError
from bench.core.rundir import write_atomic
from bench.testbed.protocol import (
    CMD_TIMEOUT,
    SetupError,
    StateFile,
    build_or_roll_back,
    last_line,
    port_open,
    require_usable,
    root_problem,
    run,
    tool,
)

NAME = "test hosts"
ROOT_ONLY = "test hosts must be built by root (network namespaces, sshd on port 22)"
PREFIX = "bench-th"
BRIDGE = PREFIX + "0"
VETH = PREFIX + "v"  # root-side end of host i's veth: bench-thv<i>
DEFAULT_SUBNET = "10.213.7.0/24"
MAX_HOSTS = 50
FIRST_HOST = 10  # host i is SUBNET.(10+i)
STATE_DIR = Path("/run/bench-testhosts")
STATE = StateFile(STATE_DIR)
NETNS_ETC = Path("/etc/netns")
PRIVSEP_DIR = Path("/run/sshd")  # compiled into sshd; the Debian package creates it only when it starts sshd
PRIVATE_NETS = [ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")]
BEGIN = "# >>> bench testhosts >>>\n"
END = "# <<< bench testhosts <<<\n"
INSTALL_SSHD = "install openssh-server (apt-get install -y openssh-server)"
# ssh's keepalive on the test hosts (interval s, count): a session to a host lost without a word ends after 10 s,
# as on a cluster set up for Horovod elastic (README, "Faults across hosts"); OpenSSH's default is never
SERVER_ALIVE = (5, 2)
SSH_TIMEOUT = 15
READY_TIMEOUT = 10  # sshd writing its pid file and answering ssh


@dataclass(frozen=True)
class TestHost:
    """A test host: its namespace's name (also its hostname) and address."""

    __test__ = False  # a product class, not a pytest test class, whatever its name
    name: str
    address: str


# ---------------------------------------------------------------- input and preconditions
def parse_count(n: int) -> int:
    if not 1 <= n <= MAX_HOSTS:
        raise UsageError(f"the number of test hosts must be between 1 and {MAX_HOSTS}, not {n}")
    return n


def parse_subnet(text: str) -> ipaddress.IPv4Network:
    try:
        network = ipaddress.ip_network(text, strict=True)
    except ValueError as exc:
        raise UsageError(f"--subnet {text!r} is not a network such as {DEFAULT_SUBNET} ({exc})") from None
    if network.version != 4 or network.prefixlen != 24:
        raise UsageError(f"--subnet {text!r} must be an IPv4 /24, such as {DEFAULT_SUBNET}")
    if not any(network.subnet_of(private) for private in PRIVATE_NETS):
        raise UsageError(f"--subnet {text!r} is not in a private range (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16)")
    return network


def plan(n: int, subnet: str = DEFAULT_SUBNET) -> list[TestHost]:
    network = parse_subnet(subnet)
    parse_count(n)
    return [TestHost(f"{PREFIX}{i}", str(network.network_address + FIRST_HOST + i)) for i in range(1, n + 1)]


def netns_problem() -> str | None:
    if tool("ip") is None:
        return "`ip` (iproute2) is not installed"
    if not Path("/proc/self/ns/net").exists():
        return "this kernel has no network namespaces"
    try:
        proc = subprocess.run([tool("ip"), "netns", "list"], capture_output=True, text=True, timeout=CMD_TIMEOUT)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"`ip netns list` failed: {exc}"
    if proc.returncode != 0:
        return f"`ip netns` is not usable here: {last_line(proc.stderr)}"
    return None


def unavailable_reason() -> str | None:
    """Why test hosts cannot be built here, or None."""
    if not sys.platform.startswith("linux"):
        return f"test hosts need Linux network namespaces; this is {sys.platform}"
    problem = root_problem(ROOT_ONLY) or netns_problem()
    if problem:
        return problem
    for name in ("sshd", "ssh-keygen", "ssh"):
        if tool(name) is None:
            return f"{name} not found: {INSTALL_SSHD}"
    for name in ("unshare", "hostname"):
        if tool(name) is None:
            return f"{name} not found (util-linux, hostname)"
    return None


def unavailable_for_cluster(name: str) -> str | None:
    """Why a cluster whose daemons run in the test hosts' namespaces (entered with nsenter) cannot be built here,
    as far as the hosts go, or None."""
    problem = unavailable_reason()
    if problem:
        return f"the {name} runs on the test hosts, and {problem[0].lower()}{problem[1:]}"
    if tool("nsenter") is None:
        return "nsenter not found (util-linux)"
    return None


def subnet_conflict(network: ipaddress.IPv4Network, route_lines: list[str], addr_lines: list[str] = ()) -> str | None:
    """The first route (`ip -4 -o route show table all`) or address (`ip -4 -o addr show`: also those of links
    that are down, which have no route yet) of this machine that overlaps the network, other than the test
    hosts' own bridge; None if there is none."""
    kinds = {
        "unicast",
        "local",
        "broadcast",
        "multicast",
        "blackhole",
        "unreachable",
        "prohibit",
        "throw",
        "nat",
        "anycast",
    }
    candidates = []
    for line in route_lines:
        words = line.split()
        if words:
            dst = words[1] if words[0] in kinds and len(words) > 1 else words[0]
            dev = words[words.index("dev") + 1] if "dev" in words[:-1] else None
            candidates.append((dst, dev, line))
    for line in addr_lines:
        words = line.split()
        if "inet" in words[:-1] and len(words) > 1:
            candidates.append((words[words.index("inet") + 1], words[1], line.split("\\")[0]))
    for dst, dev, line in candidates:
        if dst == "default" or dev == BRIDGE:
            continue
        try:
            taken = ipaddress.ip_network(dst, strict=False)
        except ValueError:
            continue
        if taken.version == 4 and taken.overlaps(network):
            return " ".join(line.split())
    return None


# ---------------------------------------------------------------- commands
def ip(*args: str) -> str:
    return run(["ip", *args]).stdout


def namespaces() -> list[str]:
    names = [line.split()[0] for line in ip("netns", "list").splitlines() if line.strip()]
    return sorted((n for n in names if re.fullmatch(PREFIX + r"[1-9][0-9]*", n)), key=lambda n: int(n[len(PREFIX) :]))


def links() -> list[str]:
    """Root-namespace links of the test hosts (the bridge and the hosts' veth ends)."""
    names = []
    for line in ip("-o", "link", "show").splitlines():
        parts = line.split(":", 2)
        if len(parts) > 1:
            names.append(parts[1].strip().split("@")[0])
    return [n for n in names if n.startswith(PREFIX)]


def netns_pids(ns: str) -> list[int]:
    try:
        return [int(p) for p in ip("netns", "pids", ns).split()]
    except SetupError:  # the namespace is gone
        return []


def disable_ipv6(ns: str | None, interface: str) -> None:
    """No IPv6 link-local address on the test network: it carries only the addresses made here. Done before
    the link goes up, so none is ever configured."""
    path = f"/proc/sys/net/ipv6/conf/{interface}/disable_ipv6"
    if not Path("/proc/sys/net/ipv6").exists():
        return
    if ns is None:
        try:
            Path(path).write_text("1\n")
        except OSError as exc:
            raise SetupError(f"writing {path}: {exc}") from None
    else:
        run(["ip", "netns", "exec", ns, "sh", "-c", f"echo 1 > {path}"])


# ---------------------------------------------------------------- state
def hostfile() -> Path:
    return STATE_DIR / "hostfile"


def key_file() -> Path:
    return STATE_DIR / "id_ed25519"


def hosts_of(state: dict | None) -> list[TestHost]:
    return [TestHost(h["name"], h["address"]) for h in (state or {}).get("hosts", [])]


def running_hosts() -> tuple[list[TestHost], str]:
    """The test hosts that are up, each with its sshd running, and the root namespace's address on their bridge
    (.1 of their subnet); a UsageError when there are none."""
    state = STATE.read()
    hosts = hosts_of(state)
    if not (state and state.get("complete") and hosts):
        raise UsageError("no test hosts are up: run `bench testhosts up 2` first")
    gone = [h.name for h in hosts if sshd_pid(h) is None]
    if gone:
        raise UsageError(
            f"test host(s) {', '.join(gone)} are not running (no sshd): run `bench testhosts up {len(hosts)}` first"
        )
    return hosts, str(ipaddress.ip_network(state["subnet"]).network_address + 1)


def hosts_option(hosts: list[TestHost]) -> str:
    """The `--hosts` value for these hosts, one slot each."""
    return ",".join(f"{h.address}:1" for h in hosts)


# ---------------------------------------------------------------- root's ssh client configuration
def ssh_config_path() -> Path:
    # ssh reads ~ from the password database, not $HOME
    return Path(pwd.getpwuid(os.geteuid()).pw_dir) / ".ssh" / "config"


def ssh_block(hosts: list[TestHost], key: Path) -> str:
    lines = [BEGIN.rstrip("\n"), "# test hosts of this machine; `bench testhosts down` removes this block"]
    for h in hosts:
        lines += [f"Host {h.name}", f"    HostName {h.address}"]
    lines += [
        "Host " + " ".join([h.address for h in hosts] + [h.name for h in hosts]),
        "    User root",
        f"    IdentityFile {key}",
        "    IdentitiesOnly yes",
        "    StrictHostKeyChecking no",
        "    UserKnownHostsFile /dev/null",
        "    LogLevel ERROR",
        "    BatchMode yes",
        "    ConnectTimeout 5",
        # a silent host loss ends an ssh session only by these; horovodrun's elastic driver waits for it
        f"    ServerAliveInterval {SERVER_ALIVE[0]}",
        f"    ServerAliveCountMax {SERVER_ALIVE[1]}",
        "Host *",  # what follows in the file stays global, as it was before this block
        END.rstrip("\n"),
    ]
    return "\n".join(lines) + "\n"


def ssh_block_is_current(hosts: list[TestHost]) -> bool:
    """Whether root's ~/.ssh/config holds the block this version writes for these hosts."""
    try:
        return split_block(ssh_config_path().read_text())[1] == ssh_block(hosts, key_file())
    except (OSError, BenchError):
        return False


def split_block(text: str) -> tuple[str, str | None]:
    """(the text without the marked block, the block or None)."""
    start = text.find(BEGIN)
    if start < 0 or (start > 0 and text[start - 1] != "\n"):
        return text, None
    end = text.find(END, start)
    if end < 0:
        raise SetupError(
            f"{ssh_config_path()}: '{BEGIN.strip()}' has no '{END.strip()}' line after it; remove the block by hand"
        )
    end += len(END)
    return text[:start] + text[end:], text[start:end]


def install_ssh_block(path: Path, block: str) -> dict:
    """Put the block first in the file (ssh takes the first value it finds), replacing an earlier one.
    Returns what had to be created."""
    created = {"ssh_dir": False, "ssh_config": False}
    path = Path(os.path.realpath(path))
    if not path.parent.exists():
        path.parent.mkdir(mode=0o700, parents=True)
        created["ssh_dir"] = True
    if path.exists():
        rest, _ = split_block(path.read_text())
        mode = path.stat().st_mode & 0o777
    else:
        rest, mode = "", 0o600
        created["ssh_config"] = True
    write_atomic(path, block + rest, mode=mode)
    return created


def remove_ssh_block(path: Path, created: dict | None = None) -> bool:
    """Remove the block, leaving the rest of the file as it was; the file and ~/.ssh go too when up() created
    them and nothing else is in them. True if there was a block."""
    created = created or {}
    path = Path(os.path.realpath(path))
    if not path.exists():
        return False
    rest, block = split_block(path.read_text())
    if block is None:
        return False
    if rest == "" and created.get("ssh_config"):
        path.unlink()
        if created.get("ssh_dir"):
            try:
                path.parent.rmdir()
            except OSError:
                pass
    else:
        write_atomic(path, rest, mode=path.stat().st_mode & 0o777)
    return True


# ---------------------------------------------------------------- sshd per host
def sshd_config(host: TestHost) -> str:
    home = STATE_DIR / host.name
    return "\n".join(
        [
            f"ListenAddress {host.address}:22",
            f"HostKey {home}/ssh_host_ed25519_key",
            f"PidFile {home}/sshd.pid",
            f"AuthorizedKeysFile {STATE_DIR}/authorized_keys",
            "AuthenticationMethods publickey",
            "PubkeyAuthentication yes",
            "PermitRootLogin prohibit-password",
            "AllowUsers root",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "StrictModes no",  # the key and its directory are root's, under /run
            "UseDNS no",
            "PrintMotd no",
            "X11Forwarding no",
            "MaxStartups 64:30:128",  # launchers may open many connections at once
            "Subsystem sftp internal-sftp",
            "",
        ]
    )


def sshd_pid(host: TestHost) -> int | None:
    """The pid of the host's sshd if it is alive in the host's namespace."""
    try:
        pid = int((STATE_DIR / host.name / "sshd.pid").read_text().split()[0])
        if os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat(f"/run/netns/{host.name}").st_ino:
            return pid
    except (OSError, ValueError, IndexError):
        pass
    return None


def start_sshd(host: TestHost) -> int:
    home = STATE_DIR / host.name
    home.mkdir(mode=0o700)
    run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", host.name, "-f", str(home / "ssh_host_ed25519_key")],
        timeout=30,
    )
    config = home / "sshd_config"
    config.write_text(sshd_config(host))
    sshd = tool("sshd")
    run([sshd, "-t", "-f", str(config)])
    # sshd daemonizes itself; its UTS namespace gives it, and every session, the host's name
    run(
        [
            "ip",
            "netns",
            "exec",
            host.name,
            tool("unshare"),
            "--uts",
            "sh",
            "-c",
            'hostname "$1" && exec "$2" -f "$3" -E "$4"',
            "sh",
            host.name,
            sshd,
            str(config),
            str(home / "sshd.log"),
        ]
    )
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        pid = sshd_pid(host)
        if pid is not None and port_open(host.address, 22):
            return pid
        time.sleep(0.05)
    raise SetupError(
        f"sshd of {host.name} did not start listening on {host.address}:22 within {READY_TIMEOUT} s "
        f"(its log: {home / 'sshd.log'})"
    )


def ssh_answers(hosts: list[TestHost]) -> list[str]:
    """For each host, 'ok' when plain `ssh ADDRESS` (root's ssh configuration, as every launcher runs it) reaches
    it and it answers with its own name; otherwise what went wrong (bench.cluster.hosts runs the ssh)."""
    answers = on_every_host([h.address for h in hosts], lambda _: ["hostname"], SSH_TIMEOUT, in_checkout=False)
    out = []
    for host in hosts:
        proc = answers[host.address]
        name = proc.stdout.strip()
        out.append(
            f"ssh failed (exit {proc.returncode}): {last_line(proc.stderr)}"
            if proc.returncode != 0
            else "ok"
            if name == host.name
            else f"answered as {name!r}"
        )
    return out


# ---------------------------------------------------------------- up, down, status
def leftovers() -> list[str]:
    """What of the test hosts is on this machine now, in words (empty when nothing is)."""
    found = [f"namespace {ns}" for ns in namespaces()] + [f"link {link}" for link in links()]
    found += [str(p) for p in sorted(NETNS_ETC.glob(PREFIX + "*"))]
    if STATE_DIR.exists():
        found.append(str(STATE_DIR))
    try:
        if split_block(ssh_config_path().read_text())[1] is not None:
            found.append(f"the block in {ssh_config_path()}")
    except OSError:
        pass
    return found


def up(n: int, subnet: str = DEFAULT_SUBNET, log=None, take_down=None) -> list[TestHost]:
    """Build n test hosts (reusing identical ones that all answer); returns them. A failure removes everything
    this call created and raises SetupError. take_down() removes the hosts already here, and after a failure what
    the call built: down() by default, bench.testbed.teardown.down to take the clusters on them down first."""
    log = log or (lambda text: None)
    take_down = take_down or down
    hosts = plan(n, subnet)
    network = parse_subnet(subnet)
    require_usable(unavailable_reason())
    conflict = subnet_conflict(
        network,
        ip("-4", "-o", "route", "show", "table", "all").splitlines(),
        ip("-4", "-o", "addr", "show").splitlines(),
    )
    if conflict:
        raise UsageError(f"--subnet {network} overlaps a route or address of this machine ({conflict}); choose another")
    state = STATE.read()
    if (
        state
        and state.get("complete")
        and hosts_of(state) == hosts
        and state.get("subnet") == str(network)
        and ssh_block_is_current(hosts)
        and all(sshd_pid(h) for h in hosts)
        and all(a == "ok" for a in ssh_answers(hosts))
    ):
        log(f"{len(hosts)} identical test host(s) already up and answering: reusing them")
        return hosts
    if leftovers():
        why = (
            "left over from an unfinished set-up"
            if not (state and state.get("complete"))
            else "different hosts"
            if hosts_of(state) != hosts
            else "not all answering"
        )
        log(f"taking down the test hosts already here first ({why})")
        take_down()
    build_or_roll_back(lambda: build(hosts, network), take_down, log)
    return hosts


def build(hosts: list[TestHost], network: ipaddress.IPv4Network) -> None:
    start = time.monotonic()
    STATE_DIR.mkdir(mode=0o700)
    state = {
        "subnet": str(network),
        "hosts": [vars(h) for h in hosts],
        "complete": False,
        "created": {"privsep_dir": False, "netns_etc": False, "ssh_dir": False, "ssh_config": False},
    }
    for key, path, mode in (("privsep_dir", PRIVSEP_DIR, 0o755), ("netns_etc", NETNS_ETC, 0o755)):
        if not path.exists():
            path.mkdir(mode=mode)
            state["created"][key] = True
    STATE.write(state)
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "bench-testhosts", "-f", str(key_file())], timeout=30)
    public = key_file().with_suffix(".pub").read_text().strip()
    (STATE_DIR / "authorized_keys").write_text(f'from="{network}" {public}\n')

    ip("link", "add", BRIDGE, "type", "bridge")
    disable_ipv6(None, BRIDGE)
    ip("addr", "add", f"{network.network_address + 1}/{network.prefixlen}", "dev", BRIDGE)
    ip("link", "set", BRIDGE, "up")
    names = "".join(f"{h.address} {h.name}\n" for h in hosts)
    for i, host in enumerate(hosts, start=1):
        ns, veth = host.name, f"{VETH}{i}"
        ip("netns", "add", ns)
        ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        disable_ipv6(None, veth)
        disable_ipv6(ns, "eth0")
        ip("link", "set", veth, "master", BRIDGE)
        ip("link", "set", veth, "up")
        ip("-n", ns, "addr", "add", f"{host.address}/{network.prefixlen}", "dev", "eth0")
        ip("-n", ns, "link", "set", "eth0", "up")
        ip("-n", ns, "link", "set", "lo", "up")
        etc = NETNS_ETC / ns
        etc.mkdir()
        (etc / "hosts").write_text(f"127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n{names}")
        (etc / "hostname").write_text(host.name + "\n")
        start_sshd(host)

    hostfile().write_text("".join(f"{h.address} slots=1\n" for h in hosts))
    state["created"].update(install_ssh_block(ssh_config_path(), ssh_block(hosts, key_file())))
    STATE.write(state)
    answers = ssh_answers(hosts)
    for host, answer in zip(hosts, answers):
        if answer != "ok":
            raise SetupError(f"`ssh {host.address} hostname`: {answer}")
    state.update(complete=True, built_s=round(time.monotonic() - start, 2))
    STATE.write(state)


def kill_all(ns: str, ended: list[int]) -> None:
    """End every process in the namespace: SIGTERM, then SIGKILL what is left after 3 s."""
    for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
        pids = netns_pids(ns)
        if not pids:
            return
        ended += pids
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while netns_pids(ns) and time.monotonic() < deadline:
            time.sleep(0.05)
    left = netns_pids(ns)
    if left:
        raise SetupError(f"processes {left} in {ns} survived SIGKILL")


def down(log=None) -> bool:
    """Remove everything of the test hosts, not what runs on them (bench.testbed.teardown: that first); False when
    nothing was there. Every step is tried; the first failure is raised at the end. It reports no progress: `log`
    is the protocol's."""
    if not leftovers():
        return False
    state = STATE.read() or {}
    created = state.get("created", {})
    errors = []

    def attempt(step, *args):
        try:
            step(*args)
        except (SetupError, OSError) as exc:
            errors.append(exc)

    spaces, ended = namespaces(), []
    for ns in spaces:
        attempt(kill_all, ns, ended)
    for link in sorted(links(), key=lambda name: name == BRIDGE):  # the bridge last
        if link in links():  # deleting one end of a veth deletes the other
            attempt(ip, "link", "del", link)
    for ns in spaces:
        attempt(ip, "netns", "del", ns)
    for path in NETNS_ETC.glob(PREFIX + "*"):
        attempt(shutil.rmtree, path)
    attempt(remove_ssh_block, ssh_config_path(), created)
    for key, path in (("netns_etc", NETNS_ETC), ("privsep_dir", PRIVSEP_DIR)):
        if created.get(key):
            try:
                path.rmdir()  # only when empty: someone else may have started using it
            except OSError:
                pass
    if STATE_DIR.exists():
        attempt(shutil.rmtree, STATE_DIR)
    # the daemons' parent is init: give it a moment to reap them, so no <defunct> entry is left behind
    deadline = time.monotonic() + 2
    while any(Path(f"/proc/{pid}").exists() for pid in ended) and time.monotonic() < deadline:
        time.sleep(0.05)
    if errors:
        raise errors[0] if isinstance(errors[0], SetupError) else SetupError(f"removing test hosts: {errors[0]}")
    return True


def status() -> list[dict]:
    """One row per test host: name, address, sshd pid (None when not running), ssh ('ok' or the problem)."""
    hosts = hosts_of(STATE.read())
    answers = ssh_answers(hosts) if hosts else []
    return [{"name": h.name, "address": h.address, "sshd_pid": sshd_pid(h), "ssh": a} for h, a in zip(hosts, answers)]


def all_up(rows: list[dict]) -> bool:
    return bool(rows) and all(r["sshd_pid"] and r["ssh"] == "ok" for r in rows)
