"""What a launch across real hosts meets first, checked here without them: the host check as it runs over ssh (a
stand-in `ssh` that runs the remote command line with bash on this machine, with none of this process's choices of
interfaces and GPUs in its environment, so what reaches the "host" is what the command line carries), and torchrun's
c10d rendezvous at a first host named by an address its hostname does not resolve to (two agents in a network
namespace of the test's own)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.backends.shared.torchrun import agents_on_hosts
from bench.cluster.fanout import fanout_steps
from bench.cluster.hosts import planned_check
from bench.core.dryrun import PLANNED_PORT, plan_only
from bench.core.hostlist import Host
from bench.tasks.train import build_spec
from conftest import assert_one_line_error, bench_in_process
from needs import needs

# what the user's shell may set that a host must get from the command line, not from this process
CHOICES = ("CUDA_VISIBLE_DEVICES", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")


def stand_in_ssh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`ssh [OPTIONS] HOST LINE` runs LINE with bash here, without CHOICES; each LINE is appended to the file returned,
    ended by a NUL (a line may hold newlines)."""
    folder, lines = tmp_path / "bin", tmp_path / "lines"
    folder.mkdir()
    ssh = folder / "ssh"
    unset = " ".join(f"-u {name}" for name in ("PYTHONPATH", *CHOICES))
    ssh.write_text(
        "#!/bin/bash\n"
        f'printf "%s\\0" "${{@: -1}}" >> {shlex.quote(str(lines))}\n'
        f'exec env {unset} bash -c "${{@: -1}}"\n'
    )
    ssh.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return lines


def remote_lines(lines: Path) -> list[str]:
    return lines.read_text().split("\0")[:-1]


def test_the_host_check_refuses_a_host_without_the_interface_a_kept_variable_names(tmp_path, monkeypatch, store):
    """NCCL_SOCKET_IFNAME set by the user is kept across hosts, so every host must have what it names, as --iface's
    interface must be there: one line naming the host, before anything is planned."""
    lines = stand_in_ssh(tmp_path, monkeypatch)
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "ib0")
    proc = bench_in_process("run", "--backend", "elastic", "--hosts", "h1:1,h2:1", "--store", store)
    assert_one_line_error(proc, "NCCL_SOCKET_IFNAME=ib0 in the environment: no interface ib0* on host h1 (it has lo")
    assert len(remote_lines(lines)) == 2 and not store.exists()  # each host asked, nothing made
    # a prefix of one of the host's interfaces (NCCL's reading) passes, and the check says it is kept
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "l")
    from bench.cluster.hosts import check_hosts

    check = check_hosts([Host("h1", 1)], sys.executable, None)
    assert check.iface == "lo" and check.iface_chosen_by.endswith(
        "NCCL_SOCKET_IFNAME=l kept from the environment, on the host"
    )


def test_the_host_check_counts_the_gpus_a_forwarded_cuda_visible_devices_leaves(tmp_path, monkeypatch, store):
    """The launching shell's CUDA_VISIBLE_DEVICES reaches every host's processes, so the host check counts the GPUs
    it leaves visible there: it is on the probe's command line, and a shortfall names it (this machine's torch has no
    CUDA device, so the stand-in host has none either)."""
    lines = stand_in_ssh(tmp_path, monkeypatch)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    proc = bench_in_process("run", "--backend", "elastic", "--hosts", "h1:8", "--gpus", "8", "--store", store)
    assert_one_line_error(
        proc, "host h1 has no CUDA device visible with CUDA_VISIBLE_DEVICES=0,1", "unset CUDA_VISIBLE_DEVICES"
    )
    [line] = remote_lines(lines)
    assert "CUDA_VISIBLE_DEVICES=0,1" in shlex.split(line)


# ---------------------------------------------------------------- a real rendezvous (root: a network namespace)
def free_port_in(namespace: str) -> int:
    probe = "import socket; s = socket.socket(); s.bind(('', 0)); print(s.getsockname()[1])"
    out = subprocess.run(
        ["ip", "netns", "exec", namespace, sys.executable, "-c", probe], capture_output=True, text=True
    )
    return int(out.stdout)


@pytest.mark.slow
@needs("hosts")
def test_torchrun_agents_meet_at_a_first_host_named_by_an_address_its_hostname_does_not_resolve_to(tmp_path):
    """Two agents as bench plans them for two hosts named by addresses (a second NIC's, as on a cluster whose nodes
    are reached over their fabric), both in one namespace of this test's own: torch's guess from the hostname finds
    neither address its own, so before the store host was named no agent hosted it and both gave up; named, they meet
    and start their workers."""
    from torch.distributed.elastic.rendezvous.utils import _matches_machine_hostname

    namespace, first, second = f"bench-rdzv{os.getpid()}", "10.213.250.1", "10.213.250.2"
    assert not _matches_machine_hostname(first)  # the premise: this machine's name does not resolve to it
    with plan_only():
        hosts = [Host(first, 1), Host(second, 1)]
        cluster = {**planned_check(hosts, "lo", None).cluster(hosts), "link": None, "scheduler": None}
        spec = build_spec(backend="elastic", workload="mnist_mlp", world_size=2, device="cpu", cluster=cluster)
        command, _ = agents_on_hosts(spec, ["true"], "first-contact")  # each worker: `true`, once the agents meet
    subprocess.run(["ip", "netns", "add", namespace], check=True)
    agents: list[subprocess.Popen] = []
    try:
        subprocess.run(["ip", "-n", namespace, "link", "set", "lo", "up"], check=True)
        for address in (first, second):
            subprocess.run(["ip", "-n", namespace, "addr", "add", f"{address}/32", "dev", "lo"], check=True)
        port = str(free_port_in(namespace))
        for host, argv in fanout_steps(command):
            argv = [a.replace(PLANNED_PORT, port) for a in argv]
            log = open(tmp_path / f"{host}.log", "w")
            agents.append(
                subprocess.Popen(["ip", "netns", "exec", namespace, *argv], stdout=log, stderr=subprocess.STDOUT)
            )
        deadline = time.monotonic() + 120
        codes = [agent.wait(timeout=max(1.0, deadline - time.monotonic())) for agent in agents]
        logs = {host: (tmp_path / f"{host}.log").read_text()[-2000:] for host in (first, second)}
        assert codes == [0, 0], logs
    finally:
        for agent in agents:
            if agent.poll() is None:
                agent.kill()
                agent.wait()
        subprocess.run(["ip", "netns", "del", namespace], check=False)
