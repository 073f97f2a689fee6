"""What a launch across real hosts meets first, checked here without them: torchrun's c10d rendezvous at a first host
named by an address its hostname does not resolve to (two agents in a network namespace of the test's own)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from bench.backends.shared.torchrun import agents_on_hosts
from bench.cluster.fanout import fanout_steps
from bench.cluster.hosts import planned_check
from bench.core.dryrun import PLANNED_PORT, plan_only
from bench.core.hostlist import Host
from bench.tasks.train import build_spec
from needs import needs


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
