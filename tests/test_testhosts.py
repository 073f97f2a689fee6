"""`bench testhosts`: test hosts as network namespaces with their own sshd. The fast tests check the refusals
and the ssh configuration block anywhere; the others build real hosts and need root (CI runs them as root).
They take down any test hosts already on the machine."""

import fcntl
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from bench.testbed import hosts as testhosts
from bench.testbed import teardown
from bench.testbed.hosts import BEGIN, BRIDGE, DEFAULT_SUBNET, PREFIX, TestHost
from bench.testbed.protocol import Cluster, SetupError
from conftest import assert_fails_in_one_line, bench, bench_in_process
from needs import needs


def needs_hosts(test):
    """Real hosts: root only, and slow (they change the machine for everyone on it, so not in the quick run)."""
    skip = needs("hosts")
    return pytest.mark.slow(skip(test))


# what the hosts run over ssh: this environment's python, at the same path on every host (one file system)
PYTHON = sys.executable
SENTINEL = "# a line of the user's own, before any block\nServerAliveInterval 30\nHost example\n    Port 2222\n"


# ---------------------------------------------------------------- refusals (no root needed)
@pytest.mark.parametrize(
    "args, fragments",
    [
        (["up", "0"], ["between 1 and 50, not 0"]),
        (["up", "51"], ["between 1 and 50, not 51"]),
        (["up", "two"], ["invalid int value: 'two'"]),
        (["up", "2", "--subnet", "8.8.8.0/24"], ["not in a private range"]),
        (["up", "2", "--subnet", "192.0.2.0/24"], ["not in a private range"]),
        (["up", "2", "--subnet", "10.1.0.0/16"], ["must be an IPv4 /24"]),
        (["up", "2", "--subnet", "fd00::/64"], ["must be an IPv4 /24"]),
        (["up", "2", "--subnet", "10.213.7.5/24"], ["not a network", "host bits"]),
        (["up", "2", "--subnet", "lan"], ["'lan' is not a network"]),
        (["up"], ["required: N"]),
        ([], ["required: ACTION"]),
        (["sideways"], ["invalid choice: 'sideways'"]),
    ],
)
def test_bad_input_is_refused(args, fragments):
    assert_fails_in_one_line(bench_in_process("testhosts", *args), 2, *fragments)


@pytest.mark.parametrize("action", [["up", "2"], ["down"], ["status"]])
def test_refused_when_not_root(monkeypatch, action):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert_fails_in_one_line(bench_in_process("testhosts", *action), 2, "must be built by root", "sudo")


def test_refused_when_not_linux(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    assert_fails_in_one_line(bench_in_process("testhosts", "up", "2"), 2, "need Linux network namespaces", "darwin")


@pytest.mark.parametrize("missing", ["sshd", "ssh-keygen"])
def test_refused_without_openssh_server(monkeypatch, missing):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(testhosts, "netns_problem", lambda: None)
    monkeypatch.setattr(testhosts, "tool", lambda name: None if name == missing else f"/usr/bin/{name}")
    assert_fails_in_one_line(
        bench_in_process("testhosts", "up", "2"), 2, f"{missing} not found", "install openssh-server"
    )


def test_refused_without_ip(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(testhosts, "tool", lambda name: None)
    assert_fails_in_one_line(bench_in_process("testhosts", "status"), 2, "`ip` (iproute2) is not installed")


def test_every_test_cluster_follows_the_protocol():
    wanted = {name for name in vars(Cluster) if not name.startswith("_")} | set(Cluster.__annotations__)
    for cluster in teardown.CLUSTERS:
        assert sorted(name for name in wanted if not hasattr(cluster, name)) == [], cluster.__name__


def test_down_takes_the_clusters_on_the_hosts_down_first(monkeypatch):
    gone = []
    for cluster in teardown.CLUSTERS:  # the Ray test cluster was not up
        monkeypatch.setattr(
            cluster, "down", lambda log=None, name=cluster.NAME: gone.append(name) or name != "Ray test cluster"
        )
    monkeypatch.setattr(testhosts, "unavailable_reason", lambda: None)
    proc = bench_in_process("testhosts", "down")
    assert proc.returncode == 0 and gone == ["Ray test cluster", "Slurm test cluster", "test hosts"]
    assert proc.stderr == "bench testhosts: Slurm test cluster and test hosts removed\n"
    monkeypatch.setattr(teardown.CLUSTERS[0], "down", lambda log=None: log("ending 3 process(es)") or True)
    proc = bench_in_process("testhosts", "down")
    assert proc.stderr.splitlines() == [
        "bench testhosts: Ray test cluster: ending 3 process(es)",
        "bench testhosts: Ray test cluster, Slurm test cluster and test hosts removed",
    ]


def test_plan_names_and_addresses():
    hosts = testhosts.plan(3, "192.168.40.0/24")
    assert hosts == [
        TestHost("bench-th1", "192.168.40.11"),
        TestHost("bench-th2", "192.168.40.12"),
        TestHost("bench-th3", "192.168.40.13"),
    ]
    assert testhosts.hosts_option(hosts) == "192.168.40.11:1,192.168.40.12:1,192.168.40.13:1"
    assert testhosts.plan(50)[-1] == TestHost("bench-th50", "10.213.7.60")


def test_subnet_conflict():
    network = testhosts.parse_subnet(DEFAULT_SUBNET)
    routes = [
        "default via 192.0.2.1 dev eth0",
        "192.0.2.0/24 dev eth0 proto kernel scope link src 192.0.2.2",
        "local 127.0.0.1 dev lo table local proto kernel scope host src 127.0.0.1",
        f"{DEFAULT_SUBNET} dev {BRIDGE} proto kernel scope link src 10.213.7.1",  # our own
        "local 10.213.7.1 dev bench-th0 table local proto kernel scope host src 10.213.7.1",
    ]
    assert testhosts.subnet_conflict(network, routes) is None
    assert (
        testhosts.subnet_conflict(network, routes + ["10.213.0.0/16 via 10.0.0.1 dev wg0"])
        == "10.213.0.0/16 via 10.0.0.1 dev wg0"
    )
    assert testhosts.subnet_conflict(network, ["local 10.213.7.40 dev eth1 table local"]) is not None
    addresses = [
        "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever",
        f"7: {BRIDGE}    inet 10.213.7.1/24 scope global {BRIDGE}\\       valid_lft forever",
    ]
    assert testhosts.subnet_conflict(network, routes, addresses) is None
    down_link = "9: br9    inet 10.213.0.1/16 scope global br9\\       valid_lft forever preferred_lft forever"
    assert (
        testhosts.subnet_conflict(network, routes, addresses + [down_link])
        == "9: br9 inet 10.213.0.1/16 scope global br9"
    )


# ---------------------------------------------------------------- the ssh configuration block (no root needed)
def test_ssh_block_goes_first_and_comes_out_exactly(tmp_path):
    config = tmp_path / "config"
    config.write_bytes(SENTINEL.encode())
    config.chmod(0o644)
    block = testhosts.ssh_block(testhosts.plan(2), tmp_path / "id_ed25519")
    assert testhosts.install_ssh_block(config, block) == {"ssh_dir": False, "ssh_config": False}
    assert config.read_text() == block + SENTINEL
    assert block.startswith(BEGIN) and block.endswith("Host *\n# <<< bench testhosts <<<\n")
    testhosts.install_ssh_block(config, block)  # a second up replaces the block, never adds one
    assert config.read_text().count(BEGIN) == 1
    assert config.stat().st_mode & 0o777 == 0o644
    assert testhosts.remove_ssh_block(config) is True
    assert config.read_bytes() == SENTINEL.encode()
    assert testhosts.remove_ssh_block(config) is False
    assert config.read_bytes() == SENTINEL.encode()


def test_ssh_config_created_is_removed(tmp_path):
    config = tmp_path / ".ssh" / "config"
    created = testhosts.install_ssh_block(config, testhosts.ssh_block(testhosts.plan(1), tmp_path / "key"))
    assert created == {"ssh_dir": True, "ssh_config": True}
    assert config.stat().st_mode & 0o777 == 0o600 and config.parent.stat().st_mode & 0o777 == 0o700
    testhosts.remove_ssh_block(config, created)
    assert not config.parent.exists()


def test_unclosed_block_is_left_alone(tmp_path):
    config = tmp_path / "config"
    config.write_text(SENTINEL + BEGIN + "Host x\n")
    with pytest.raises(SetupError, match="remove the block by hand"):
        testhosts.remove_ssh_block(config)
    assert config.read_text() == SENTINEL + BEGIN + "Host x\n"


# ---------------------------------------------------------------- real hosts (root)
def ssh(target, *command, timeout=30):
    """Plain `ssh TARGET COMMAND`, as launchers run it: root's ~/.ssh/config does the rest."""
    return subprocess.run(
        ["ssh", target, shlex.join(command)], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def ip_lines(*args):
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=15, check=True).stdout.splitlines()


@pytest.fixture(scope="module")
def machine():
    """Root's ~/.ssh/config holding lines of its own (restored afterwards, as it was), and the test hosts always
    taken down at the end, also when a test fails."""
    lock = open(__file__)
    fcntl.flock(lock, fcntl.LOCK_EX)  # one run of these tests at a time on this machine: the hosts are its own
    path = testhosts.ssh_config_path()
    before = path.read_bytes() if path.exists() else None
    mode = path.stat().st_mode & 0o777 if before is not None else None
    had_dir = path.parent.exists()
    teardown.down()
    path.parent.mkdir(mode=0o700, exist_ok=True)
    path.write_bytes((before or b"") + SENTINEL.encode())
    path.chmod(0o640)  # up must keep a file's mode
    try:
        yield path.read_bytes()
    finally:
        try:
            teardown.down()
        finally:
            if before is None:
                path.unlink(missing_ok=True)
                if not had_dir:
                    path.parent.rmdir()
            else:
                path.write_bytes(before)
                path.chmod(mode)
            lock.close()


@pytest.fixture
def hosts(machine):
    """Two test hosts (reused when up and answering)."""
    return testhosts.up(2)


@needs_hosts
def test_each_host_runs_the_project_python_as_itself(hosts):
    script = "import bench, socket; name = socket.gethostname(); print(name, socket.gethostbyname(name))"
    for host in hosts:
        for target in (host.address, host.name):
            proc = ssh(target, PYTHON, "-c", script)
            assert proc.returncode == 0, proc.stderr
            assert proc.stdout.split() == [host.name, host.address]
    # every host knows the others by name (its own /etc/hosts, no DNS)
    proc = ssh(hosts[0].address, "getent", "hosts", hosts[1].name)
    assert proc.stdout.split() == [hosts[1].address, hosts[1].name]


@needs_hosts
def test_hosts_reach_only_their_own_network(hosts, machine):
    network = testhosts.parse_subnet(DEFAULT_SUBNET)
    for host in hosts:
        assert [
            line.split()[0]
            for line in ip_lines("-n", host.name, "-4", "route", "show", "table", "all")
            if not line.startswith(("local", "broadcast"))
        ] == [str(network)]  # no default route
        # sshd listens on the host's address only
        probe = "import socket; print(socket.socket().connect_ex(('127.0.0.1', 22)))"
        assert ssh(host.address, PYTHON, "-c", probe).stdout.strip() != "0"
    ours = [line for line in ip_lines("-4", "route", "show") if BRIDGE in line or str(network) in line]
    assert len(ours) == 1 and ours[0].startswith(f"{network} dev {BRIDGE} proto kernel scope link")
    assert testhosts.hostfile().read_text() == "10.213.7.11 slots=1\n10.213.7.12 slots=1\n"
    config = testhosts.ssh_config_path()
    assert config.read_bytes().endswith(machine) and config.stat().st_mode & 0o777 == 0o640


@needs_hosts
def test_host1_reaches_a_port_on_host2(hosts):
    one, two = hosts
    server = (
        f"import socket; s = socket.create_server(({two.address!r}, 29500)); s.settimeout(15); "
        "print('ready', flush=True); c, peer = s.accept(); c.sendall(socket.gethostname().encode()); "
        "print(peer[0])"
    )
    listener = subprocess.Popen(
        ["ssh", two.address, shlex.join([PYTHON, "-c", server])],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert listener.stdout.readline().strip() == "ready", listener.stderr.read()
        client = (
            f"import socket; c = socket.create_connection(({two.address!r}, 29500), timeout=10); "
            "print(c.recv(100).decode())"
        )
        proc = ssh(one.address, PYTHON, "-c", client)
        assert proc.stdout.strip() == two.name, proc.stderr
        out, err = listener.communicate(timeout=20)
        assert out.strip() == one.address, err  # the connection came from host 1's own address
    finally:
        if listener.poll() is None:
            listener.kill()
            listener.wait(timeout=10)
    proc = ssh(one.name, "ssh", two.name, "hostname")  # host to host over ssh, by name
    assert (proc.returncode, proc.stdout.strip()) == (0, two.name), proc.stderr


@needs_hosts
def test_status_and_up_again(hosts):
    proc = bench("testhosts", "status", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert [line.split()[:2] + line.split()[-2:] for line in proc.stdout.splitlines()] == [
        [h.name, h.address, "ssh", "ok"] for h in hosts
    ]
    pids = [testhosts.sshd_pid(h) for h in hosts]
    proc = bench("testhosts", "up", "2", timeout=60)
    assert proc.returncode == 0 and "reusing them" in proc.stderr, proc.stderr
    assert [testhosts.sshd_pid(h) for h in hosts] == pids
    assert "--hosts 10.213.7.11:1,10.213.7.12:1" in proc.stdout.splitlines()
    assert f"hostfile {testhosts.hostfile()}" in proc.stdout.splitlines()


@needs_hosts
def test_a_dead_sshd_shows_in_status_and_up_rebuilds(hosts):
    os.kill(testhosts.sshd_pid(hosts[1]), signal.SIGTERM)
    deadline = time.monotonic() + 5
    while testhosts.sshd_pid(hosts[1]) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc = bench("testhosts", "status", timeout=60)
    assert proc.returncode == 1
    assert "sshd not running" in proc.stdout.splitlines()[1] and "ssh ok" in proc.stdout.splitlines()[0]
    proc = bench("testhosts", "up", "2", timeout=60)
    assert proc.returncode == 0 and "first (not all answering)" in proc.stderr, proc.stderr
    assert bench("testhosts", "status", timeout=60).returncode == 0


def nothing_left(config_bytes):
    assert [line for line in ip_lines("netns", "list") if line.startswith(PREFIX)] == []
    assert [line for line in ip_lines("-o", "link", "show") if PREFIX in line] == []
    assert not testhosts.STATE_DIR.exists() and list(Path("/etc/netns").glob(PREFIX + "*")) == []
    assert testhosts.ssh_config_path().read_bytes() == config_bytes
    assert testhosts.leftovers() == []


@needs_hosts
def test_a_failed_up_rolls_back(machine, monkeypatch):
    teardown.down()
    start = testhosts.start_sshd

    def second_fails(host):
        if host.name == "bench-th2":
            raise SetupError("`sshd` of bench-th2: refused for this test")
        return start(host)

    monkeypatch.setattr(testhosts, "start_sshd", second_fails)
    proc = bench_in_process("testhosts", "up", "2")
    assert_fails_in_one_line(proc, 1, "bench testhosts: error: `sshd` of bench-th2: refused for this test")
    nothing_left(machine)


@needs_hosts
def test_down_leaves_nothing(hosts, machine):
    pids = [testhosts.sshd_pid(h) for h in hosts]
    assert pids and all(pids)
    proc = bench("testhosts", "down", timeout=60)
    assert proc.returncode == 0 and "test hosts removed" in proc.stderr, proc.stderr
    nothing_left(machine)
    for pid in pids:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    proc = bench("testhosts", "down", timeout=60)
    assert proc.returncode == 0 and "nothing to do" in proc.stderr
    proc = bench("testhosts", "status", timeout=60)
    assert proc.returncode == 1 and "no test hosts are up" in proc.stderr
