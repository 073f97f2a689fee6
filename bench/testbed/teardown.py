"""The test clusters top-down, and their teardown in that order: what runs on the test hosts goes before them.
Without the bridge's address, Slurm's controller would reach for the hosts' addresses through the default route,
and Ray's head node would be left here without its nodes."""

from __future__ import annotations

from bench.testbed import hosts, ray, slurm
from bench.testbed.protocol import Cluster

# top-down: a cluster before the one it runs on (Ray and Slurm on the test hosts)
CLUSTERS: tuple[Cluster, ...] = (ray, slurm, hosts)


def down(log=None) -> list[str]:
    """Take down every test cluster, top-down; the names of those that were here. A cluster that fails to go
    (SetupError) stops the teardown there: the hosts under it stay for another try."""
    return [cluster.NAME for cluster in CLUSTERS if cluster.down(log and named(log, cluster.NAME))]


def named(log, name: str):
    """The log, each line saying which cluster it is about."""
    return lambda text: log(f"{name}: {text}")
