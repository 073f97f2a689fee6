"""Clusters as the scaling model sees them: N workers on nodes of `workers_per_node`, each node's link to the others
(bandwidth in bytes/s, one direction, and a latency per message), and, within a node, the link between its workers
(None: the backend's own cost on one host, measured by its communication sweep, is all it pays there).

The named profiles describe hardware that is not here. Their figures are the vendors' and standards' nominal rates,
with the share a transport delivers stated: they are assumptions of a projection, each with its source, never
measurements."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from bench.core.errors import UsageError

# TCP over Ethernet with a 1500-byte MTU: 1448 payload bytes (timestamps on) per 1514-byte frame as a qdisc counts it
TCP_GOODPUT = 1448 / 1514
MAX_WORKERS = 1024
DEFAULT_CLUSTER = "cpu-10g"  # the profile `bench predict` and the page take first: nodes like the measured one


@dataclass(frozen=True)
class Link:
    bandwidth: float  # bytes/s, one direction, as the transport delivers it (payload)
    latency_s: float  # per message, one way


@dataclass(frozen=True)
class Cluster:
    name: str
    summary: str
    device: str  # "cuda" or "cpu": which compute the projection needs
    workers_per_node: int
    max_nodes: int
    network: Link | None  # between nodes; None: one node only
    node_link: Link | None = None  # between the workers of one node; None: the backend's one-host cost only
    shared_cores: int | None = None  # test hosts: every host runs on these cores (compute slows past them)
    source: str = ""
    link_measured: bool = False  # the network link was fitted from a backend's allreduce there: processing included

    @property
    def max_workers(self) -> int:
        return self.workers_per_node * self.max_nodes

    def nodes_for(self, workers: int) -> int:
        return max(1, math.ceil(workers / self.workers_per_node))

    def worker_counts(self, limit: int = MAX_WORKERS) -> list[int]:
        """1, 2, 4, ... up to the cluster's size (and `limit`), and the size itself."""
        top = min(self.max_workers, limit)
        counts = [1 << k for k in range(0, 11) if 1 << k <= top]
        return counts if counts[-1] == top else [*counts, top]


GBIT = 1e9 / 8

PROFILES = {
    "nvlink-8": Cluster(
        "nvlink-8",
        "one node of 8 H100 SXM GPUs over NVLink 4",
        "cuda",
        8,
        1,
        None,
        node_link=Link(450e9 * 0.8, 3e-6),
        source="NVIDIA H100 datasheet: NVLink 900 GB/s per GPU, both directions (450 GB/s each way); 80% of it as "
        "the payload rate NCCL reaches and 3 us per step are this profile's assumptions",
    ),
    "ib-100g": Cluster(
        "ib-100g",
        "nodes of 8 H100 GPUs (NVLink 4) over 100 Gbit/s InfiniBand, 1 NIC per node",
        "cuda",
        8,
        128,
        Link(100 * GBIT * 0.95, 5e-6),
        node_link=Link(450e9 * 0.8, 3e-6),
        source="InfiniBand EDR: 100 Gbit/s per port (IBTA); 95% payload and 5 us per message across nodes are this "
        "profile's assumptions; NVLink as nvlink-8",
    ),
    "eth-25g": Cluster(
        "eth-25g",
        "nodes of 4 GPUs over 25 Gbit/s Ethernet (TCP), as in Horovod's published 128-GPU benchmark",
        "cuda",
        4,
        256,
        Link(25 * GBIT * TCP_GOODPUT, 30e-6),
        node_link=Link(16e9, 10e-6),
        source="IEEE 802.3by (25 Gbit/s Ethernet); TCP payload share of a 1500-byte frame; 30 us per message "
        "and PCIe 3.0 x16 (16 GB/s) within a node are this profile's assumptions; Horovod's README describes "
        "32 servers of 4 Pascal GPUs on 25 Gbit/s RoCE",
    ),
    "cpu-10g": Cluster(
        "cpu-10g",
        "CPU nodes like the measured one (its workers per node), over 10 Gbit/s Ethernet (TCP)",
        "cpu",
        0,
        512,
        Link(10 * GBIT * TCP_GOODPUT, 30e-6),
        source="IEEE 802.3ae (10 Gbit/s Ethernet); TCP payload share of a 1500-byte frame; 30 us per message is this "
        "profile's assumption; workers per node: as many as the measured runs had on one host",
    ),
}


def profile(name: str, workers_per_node: int | None = None) -> Cluster:
    """A named profile; cpu-10g takes the measured runs' workers per host."""
    if name not in PROFILES:
        raise UsageError(
            f"unknown cluster profile {name!r}; choose one of {', '.join(PROFILES)}, or describe one "
            "with --cluster NODESxWORKERS:RATE[:LATENCY]"
        )
    cluster = PROFILES[name]
    if cluster.workers_per_node == 0:
        cluster = replace(cluster, workers_per_node=max(1, workers_per_node or 1))
    return cluster


# each matched whole (fullmatch: `$` alone would let a "\n" after it through)
RATE = re.compile(r"(\d+(?:\.\d+)?)(mbit|gbit)", re.IGNORECASE)
LATENCY = re.compile(r"(\d+(?:\.\d+)?)(us|ms)", re.IGNORECASE)
DESCRIPTION = re.compile(r"(\d+)x(\d+):([^:]+)(?::([^:]+))?", re.IGNORECASE)


def parse_cluster(text: str, device: str = "cpu") -> Cluster:
    """NODESxWORKERS:RATE[:LATENCY], such as 64x8:100gbit:5us: nodes, workers per node, each node's link rate (TCP's
    payload share is taken off) and the latency per message (30us when not given)."""
    match = DESCRIPTION.fullmatch(text.strip())
    if not match:
        raise UsageError(
            f"--cluster {text!r}: give a profile ({', '.join(PROFILES)}) or NODESxWORKERS:RATE[:LATENCY], "
            "such as 64x8:100gbit:5us"
        )
    nodes, per_node, rate, latency = int(match[1]), int(match[2]), match[3], match[4] or "30us"
    rate_match, latency_match = RATE.fullmatch(rate), LATENCY.fullmatch(latency)
    if not rate_match:
        raise UsageError(f"--cluster {text!r}: the rate must be a number with mbit or gbit, such as 100gbit")
    if not latency_match:
        raise UsageError(f"--cluster {text!r}: the latency must be a number with us or ms, such as 5us")
    if nodes < 1 or per_node < 1 or nodes * per_node > 65536:
        raise UsageError(f"--cluster {text!r}: give at least 1 node of at least 1 worker (65,536 workers at most)")
    bits = float(rate_match[1]) * (1e6 if rate_match[2].lower() == "mbit" else 1e9)
    if bits <= 0:
        raise UsageError(f"--cluster {text!r}: the rate must be positive")
    seconds = float(latency_match[1]) * (1e-6 if latency_match[2].lower() == "us" else 1e-3)
    return Cluster(
        text,
        f"{nodes} node(s) of {per_node} worker(s) over {rate} ({latency} per message)",
        device,
        per_node,
        nodes,
        Link(bits / 8 * TCP_GOODPUT, seconds),
        source="described on the command line; TCP payload share of a 1500-byte frame",
    )


def shaped_test_hosts(link: dict, hosts: int, cores: int, measured: Link | None = None) -> Cluster:
    """The test hosts of a run across hosts (bench/testbed): one worker per host, every host sharing this machine's
    `cores`. Their link: `measured` where a backend's allreduce across 2 hosts measured it
    (bench.projection.fit.measured_link), else nominal: tc's rate (tbf counts whole frames, so TCP's payload share of
    it is what moves) and a latency of 50 us (the veth pair under load: an assumption) plus any netem delay."""
    delay = link.get("delay")
    extra = 0.0
    if delay:
        value = float(re.sub(r"[a-z]+$", "", delay))
        extra = value * {"us": 1e-6, "ms": 1e-3, "s": 1.0}[re.sub(r"^[\d.]+", "", delay)]
    nominal = Link(link["rate_bytes_per_s"] * TCP_GOODPUT, 50e-6 + extra)
    how = "as the backend's allreduce across 2 hosts measured it" if measured else "nominal"
    return Cluster(
        f"test hosts at {link['rate']}",
        f"{hosts} test hosts on one machine, links shaped to {link['rate']} ({how})",
        "cpu",
        1,
        hosts,
        measured or nominal,
        shared_cores=cores,
        link_measured=measured is not None,
        source="tc's rate on each host's link"
        + (
            "; the link's bandwidth and latency fitted from the backend's allreduce there"
            if measured
            else "; TCP payload share of a 1500-byte frame"
        ),
    )
