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
    # NCCL's double binary tree across nodes: NCCL 2.4 (2019) and later; a profile of an older era has the ring only
    tree: bool = True
    era: str = ""  # when such a cluster was built, and the NCCL it ran: what its figures hold for
    # the fabric between nodes, R:1 (R = 1, non-blocking, unless described): a node's traffic to the others crosses
    # uplinks that carry 1/R of what the nodes below them can send, so it gets 1/R of its NIC's rate
    oversubscription: float = 1.0
    # the PCIe link a GPU node's NIC shares with its GPUs (None: not described, taken as not limiting), and the share
    # of it the NIC's traffic gets (NIC_SHARE: by the transport, unless described)
    pcie_link: Link | None = None
    nic_share: float = 1.0
    # the share of the network's payload rate NCCL's collectives get (NCCL_SOCKET_SHARE over TCP before NCCL 2.4.8;
    # all of it otherwise); a system whose bytes between nodes NCCL does not carry gets all of it
    nccl_socket_share: float = 1.0

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
GBYTE = 1e9
# The share of a link's rate a collective's payload gets: assumptions of every GPU profile and description, stated
# with them (not fitted to any figure the model is judged on): NVLink and PCIe as NCCL's bus bandwidth reaches about
# 80% of the nominal rate in nccl-tests' published tables; InfiniBand and RoCE 95% (their 4 KiB MTU's headers and the
# verbs' overhead); Ethernet under TCP the payload of a 1500-byte frame.
PAYLOAD = {"nvlink": 0.8, "pcie": 0.8, "ib": 0.95, "roce": 0.95, "eth": TCP_GOODPUT}
# one-way latency per message, where a description gives none: assumptions, stated with the profiles
DEFAULT_LATENCY_S = {"nvlink": 3e-6, "pcie": 5e-6, "ib": 5e-6, "roce": 5e-6, "eth": 30e-6}
INTRA = ("nvlink", "pcie")  # the links between the GPUs of one node
INTER = ("ib", "roce", "eth")  # the links between nodes
# what each link of a description is, said in its summary: the network's kind decides the transport NCCL takes
KIND_WORDS = {
    "nvlink": "NVLink within a node",
    "pcie": "PCIe within a node",
    "ib": "InfiniBand between nodes (RDMA)",
    "roce": "RoCE between nodes (RDMA)",
    "eth": "Ethernet between nodes (TCP sockets)",
    "nccl": "NCCL",
}
TREE_SINCE = (2, 4)  # NCCL's tree (double binary trees across nodes) came with NCCL 2.4, in 2019
# NCCL's socket transport (TCP, eth=) drove each connection with one thread and one socket until 2.4.8 (June 2019:
# "improve socket transport performance": transfers split over several sockets, several threads to drive them,
# NCCL_SOCKET_NTHREADS and NCCL_NSOCKS_PERTHREAD). Before it, NCCL's collectives over TCP got NCCL_SOCKET_SHARE of the
# link's payload rate: fitted (bench.projection.published.fit_nccl_socket_share) on the only published comparison of
# one cluster over both transports, Horovod's 2017 benchmark of 4 servers of 4 GPUs at 25 Gbit/s, NCCL over TCP
# against RDMA (cases.json's fit set: hvd17-tcp25-*); taken as a share of the link, as the other payload shares are.
SOCKET_THREADS_SINCE = (2, 4, 8)
NCCL_SOCKET_SHARE = 0.6212
# The share of the PCIe link it shares with the node's GPUs that a NIC's traffic gets, by transport, where the
# description gives that link (`pcie=`): over RDMA (ib=, roce=) GPUDirect RDMA moves the bytes between the GPU and
# the NIC through their PCIe switch, peer to peer (NVIDIA's GPUDirect RDMA documentation; the DGX-1 white paper's
# topology: two GPUs and a NIC on each PCIe switch), so they cross no shared link: all of it; over TCP sockets (eth=)
# NCCL stages the bytes in host memory, so each byte sent and each byte received crosses the switch's link to the
# CPU in the same direction (GPU to host, NIC to host): half. `nicshare=` overrides it.
NIC_SHARE = {"ib": 1.0, "roce": 1.0, "eth": 0.5}
MAX_OVERSUBSCRIPTION = 64.0


def gpu_link(kind: str, bits_per_s: float, latency_s: float | None = None) -> Link:
    """A link of `kind` at a nominal rate, with its payload share and default latency (PAYLOAD, DEFAULT_LATENCY_S)."""
    return Link(bits_per_s / 8 * PAYLOAD[kind], DEFAULT_LATENCY_S[kind] if latency_s is None else latency_s)


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
        era="H100 (2022 on), NCCL 2.18 or later: ring and tree",
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
        era="H100 nodes (2022 on) with one EDR-rate NIC each, NCCL 2.18 or later: ring and tree",
    ),
    "eth-25g": Cluster(
        "eth-25g",
        "nodes of 4 Pascal GPUs (PCIe 3.0) over 25 Gbit/s RoCE, as in Horovod's published 128-GPU benchmark",
        "cuda",
        4,
        32,
        gpu_link("roce", 25e9),
        node_link=gpu_link("pcie", 16 * GBYTE * 8),
        tree=False,
        source="Horovod's README (2017-2018): 128 Pascal GPUs on 32 servers of 4, connected by 25 Gbit/s RoCE; "
        "PCIe 3.0 x16 (16 GB/s) within a node; payload shares and latencies as the GPU descriptions assume",
        era="2017: NCCL 2.0-2.3, ring only (NCCL's tree came with 2.4 in 2019)",
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
        era="any: gloo over TCP",
    ),
}


def profile(name: str, workers_per_node: int | None = None) -> Cluster:
    """A named profile; cpu-10g takes the measured runs' workers per host."""
    if name not in PROFILES:
        raise UsageError(
            f"unknown cluster profile {name!r}; choose one of {', '.join(PROFILES)}, or describe one "
            f"with --cluster NODESxWORKERS:RATE[:LATENCY] or {GPU_EXAMPLE}"
        )
    cluster = PROFILES[name]
    if cluster.workers_per_node == 0:
        cluster = replace(cluster, workers_per_node=max(1, workers_per_node or 1))
    return cluster


# each matched whole (fullmatch: `$` alone would let a "\n" after it through)
RATE = re.compile(r"(\d+(?:\.\d+)?)(mbit|gbit)", re.IGNORECASE)
LATENCY = re.compile(r"(\d+(?:\.\d+)?)(us|ms)", re.IGNORECASE)
DESCRIPTION = re.compile(r"(\d+)x(\d+):([^:=]+)(?::([^:=]+))?(?::oversub=([^:]+))?", re.IGNORECASE)
# a GPU cluster: NODESxGPUS:LINK=RATE[@LATENCY],...[,nccl=VERSION]
GPU_DESCRIPTION = re.compile(r"(\d+)x(\d+):((?:[a-z]+=[^,=\s]+,)*[a-z]+=[^,=\s]+)", re.IGNORECASE)
NUMBER = re.compile(r"\d+(?:\.\d+)?")
GPU_RATE = re.compile(r"(\d+(?:\.\d+)?)(mbit|gbit|g|gbyte)", re.IGNORECASE)
VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")
GPU_EXAMPLE = "4x8:nvlink=1200gbit,ib=100g"


def split_clusters(text: str) -> list[str]:
    """--cluster's comma-separated list, where a GPU description's own `key=value` items stay with it."""
    out: list[str] = []
    for piece in text.split(","):
        piece = piece.strip()
        if out and "=" in piece and ":" not in piece:
            out[-1] += "," + piece
        elif piece:
            out.append(piece)
    return out


def oversubscription(text: str, value: str) -> float:
    """`oversub=R` (R:1) of a description: a number from 1 (non-blocking) to MAX_OVERSUBSCRIPTION."""
    if not NUMBER.fullmatch(value) or not 1 <= float(value) <= MAX_OVERSUBSCRIPTION:
        raise UsageError(
            f"--cluster {text!r}: oversub= takes the fabric's oversubscription R of R:1, from 1 (non-blocking, the "
            f"default) to {MAX_OVERSUBSCRIPTION:g}, such as oversub=2"
        )
    return float(value)


def parse_cluster(text: str, device: str = "cpu") -> Cluster:
    """NODESxWORKERS:RATE[:LATENCY][:oversub=R], such as 64x8:100gbit:5us: CPU nodes, workers per node, each node's
    link rate (TCP's payload share is taken off), the latency per message (30us when not given) and the fabric's
    oversubscription R:1 (1 when not given); or a GPU cluster (parse_gpu_cluster), told by its `key=value` links. A
    GPU's step (`device` cuda) on the CPU form is refused: that form says nothing of what links a node's GPUs, whether
    the network is TCP or RDMA, or the era's NCCL."""
    match = DESCRIPTION.fullmatch(text.strip())
    if "=" in text and not match:
        return parse_gpu_cluster(text)
    if not match:
        raise UsageError(
            f"--cluster {text!r}: give a profile ({', '.join(PROFILES)}), NODESxWORKERS:RATE[:LATENCY][:oversub=R] "
            f"such as 64x8:100gbit:5us, or a GPU cluster such as {GPU_EXAMPLE}"
        )
    nodes, per_node, rate, latency = int(match[1]), int(match[2]), match[3], match[4] or "30us"
    oversub = oversubscription(text, match[5]) if match[5] is not None else 1.0
    rate_match, latency_match = RATE.fullmatch(rate), LATENCY.fullmatch(latency)
    if not rate_match:
        raise UsageError(f"--cluster {text!r}: the rate must be a number with mbit or gbit, such as 100gbit")
    if not latency_match:
        raise UsageError(f"--cluster {text!r}: the latency must be a number with us or ms, such as 5us")
    _check_size(text, nodes, per_node)
    bits = float(rate_match[1]) * (1e6 if rate_match[2].lower() == "mbit" else 1e9)
    if bits <= 0:
        raise UsageError(f"--cluster {text!r}: the rate must be positive")
    if device == "cuda":
        at = f"@{match[4]}" if match[4] else ""
        inside = "pcie=128gbit," if per_node > 1 else ""
        raise UsageError(
            f"--cluster {text}: NODESxWORKERS:RATE is CPU nodes (TCP's share of the link, 30 us a message, nothing "
            "between a node's workers) and the step is a GPU's: say what links the GPUs, such as "
            f"{nodes}x{per_node}:{inside}roce={rate}{at} or {nodes}x{per_node}:"
            f"{'nvlink=1200gbit,' if per_node > 1 else ''}eth={rate}{at} (within a node nvlink= or pcie=, each GPU's "
            "rate; between nodes ib= or roce= for RDMA, eth= for TCP; nccl=VERSION for NCCL before 2.4, 2019)"
        )
    seconds = float(latency_match[1]) * (1e-6 if latency_match[2].lower() == "us" else 1e-3)
    return Cluster(
        text,
        f"{nodes} node(s) of {per_node} worker(s) over {rate} ({latency} per message), {fabric_words(oversub)}",
        device,
        per_node,
        nodes,
        Link(bits / 8 * TCP_GOODPUT, seconds),
        source="described on the command line; TCP payload share of a 1500-byte frame",
        era="any: gloo over TCP, a ring",
        oversubscription=oversub,
    )


def fabric_words(oversub: float) -> str:
    if oversub == 1:
        return "a non-blocking fabric (1:1, the default: oversub=R says otherwise)"
    return f"a fabric oversubscribed {oversub:g}:1 (each node gets 1/{oversub:g} of its link across it)"


def check_device(name: str, device: str, given: bool = True) -> None:
    """Refuses, in one line, a cluster that cannot carry a `device` step: a GPU's on CPU nodes (a CPU profile, or
    the CPU form of a description). `given`: whether the user named the cluster (else it is the default)."""
    if device != "cuda":
        return
    if name in PROFILES:
        if PROFILES[name].device != "cuda":
            gpus = ", ".join(n for n, c in PROFILES.items() if c.device == "cuda")
            raise UsageError(
                f"--cluster {name}{'' if given else ' (the default)'} is {PROFILES[name].summary} and "
                f"the step is a GPU's: give a GPU cluster, {gpus} or NODESxGPUS:LINK=RATE,... such as {GPU_EXAMPLE}"
            )
        return
    parse_cluster(name, device)


def short_of(cluster: Cluster, asked: int) -> str | None:
    """One line when the cluster has fewer workers than `asked` (the projection stops at its size), else None."""
    if asked <= cluster.max_workers:
        return None
    return (
        f"--cluster {cluster.name} has {cluster.max_nodes} node(s) of {cluster.workers_per_node}: projected up to "
        f"{cluster.max_workers} workers, not the {asked} asked (describe a cluster of as many nodes to go further)"
    )


def _check_size(text: str, nodes: int, per_node: int) -> None:
    if nodes < 1 or per_node < 1 or nodes * per_node > 65536:
        raise UsageError(f"--cluster {text!r}: give at least 1 node of at least 1 worker (65,536 workers at most)")


def _gpu_rate(text: str, key: str, value: str) -> tuple[float, float | None]:
    """(bits/s, latency in s or None) of `RATE[@LATENCY]`."""
    rate, _, latency = value.partition("@")
    rate_match = GPU_RATE.fullmatch(rate)
    if not rate_match or float(rate_match[1]) <= 0:
        raise UsageError(
            f"--cluster {text!r}: {key}= takes a positive rate with mbit, gbit (or g) or gbyte (GB/s), such as "
            f"{key}=100g or {key}=100g@5us"
        )
    unit = rate_match[2].lower()
    bits = float(rate_match[1]) * {"mbit": 1e6, "gbit": 1e9, "g": 1e9, "gbyte": 8e9}[unit]
    if not latency:
        return bits, None
    latency_match = LATENCY.fullmatch(latency)
    if not latency_match:
        raise UsageError(f"--cluster {text!r}: {key}=...@LATENCY takes us or ms, such as {key}=100g@5us")
    return bits, float(latency_match[1]) * (1e-6 if latency_match[2].lower() == "us" else 1e-3)


def parse_gpu_cluster(text: str) -> Cluster:
    """NODESxGPUS:LINK=RATE[@LATENCY],...[,nccl=VERSION][,oversub=R][,nicshare=F], such as 4x8:nvlink=1200gbit,ib=100g:
    nodes of GPUS GPUs, the link between the GPUs of a node (nvlink= or pcie=: each GPU's rate, one direction) and
    each node's link to the others (ib=, roce= or eth=: the node's NIC rate), each with its payload share (PAYLOAD)
    and a latency per message (DEFAULT_LATENCY_S unless @LATENCY gives one); nccl= the NCCL version of the era
    (NCCL's tree from 2.4 on, its sockets' threads from 2.4.8: NCCL_SOCKET_SHARE of a TCP link before; the newest
    when not given); oversub= the fabric's oversubscription R:1 (1 when not given); pcie= beside nvlink= the PCIe
    link the NIC shares with the GPUs, and nicshare= the share of that link the NIC's traffic gets (NIC_SHARE by the
    transport when not given)."""
    match = GPU_DESCRIPTION.fullmatch(text.strip())
    if not match:
        raise UsageError(
            f"--cluster {text!r}: describe a GPU cluster as NODESxGPUS:LINK=RATE[@LATENCY],... such as "
            f"{GPU_EXAMPLE} (links: {', '.join(INTRA + INTER)}; nccl=VERSION, oversub=R, nicshare=F)"
        )
    nodes, per_node = int(match[1]), int(match[2])
    _check_size(text, nodes, per_node)
    links: dict[str, Link] = {}
    given: dict[str, str] = {}
    for item in match[3].split(","):
        key, _, value = item.partition("=")
        key = key.lower()
        if key in links or key in given:
            raise UsageError(f"--cluster {text!r}: {key}= is given twice")
        if key in ("nccl", "oversub", "nicshare"):
            given[key] = value
        elif key in PAYLOAD:
            bits, latency = _gpu_rate(text, key, value)
            links[key] = gpu_link(key, bits, latency)
        else:
            raise UsageError(
                f"--cluster {text!r}: unknown link {key}=; give {', '.join(INTRA)} within a node and "
                f"{', '.join(INTER)} between nodes (and nccl=VERSION, oversub=R, nicshare=F)"
            )
    nccl = None
    if "nccl" in given:
        version = VERSION.fullmatch(given["nccl"])
        if not version:
            raise UsageError(f"--cluster {text!r}: nccl= takes a version such as 2.4 or 2.4.8")
        nccl = (int(version[1]), int(version[2]), int(version[3] or 0))
    oversub = oversubscription(text, given["oversub"]) if "oversub" in given else 1.0
    inter = [k for k in links if k in INTER]
    # nvlink= and pcie= together: NVLink between the GPUs, PCIe the link their NIC shares with them
    intra = ["nvlink"] if set(links) & set(INTRA) == set(INTRA) else [k for k in links if k in INTRA]
    if len(inter) > 1:
        raise UsageError(f"--cluster {text!r}: give one link within a node and one between nodes")
    if per_node > 1 and not intra:
        raise UsageError(f"--cluster {text!r}: nodes of {per_node} GPUs need the link between them: nvlink= or pcie=")
    if nodes > 1 and not inter:
        raise UsageError(f"--cluster {text!r}: {nodes} nodes need the link between them: ib=, roce= or eth=")
    share = NIC_SHARE[inter[0]] if inter else 1.0
    if "nicshare" in given:
        if not NUMBER.fullmatch(given["nicshare"]) or not 0 < float(given["nicshare"]) <= 1:
            raise UsageError(
                f"--cluster {text!r}: nicshare= takes the share of its PCIe link the NIC's traffic gets, above 0 and "
                "at most 1, such as nicshare=0.5"
            )
        if "pcie" not in links:
            raise UsageError(f"--cluster {text!r}: nicshare= is a share of the PCIe link: give pcie= too")
        share = float(given["nicshare"])
    tree = nccl is None or nccl >= TREE_SINCE
    one_socket = inter == ["eth"] and nccl is not None and nccl < SOCKET_THREADS_SINCE
    words = ", ".join(
        f"{KIND_WORDS.get(k.lower(), k)} {v}"
        for k, v in (item.partition("=")[::2] for item in match[3].split(","))
        if k.lower() not in ("oversub", "nicshare") and not (k.lower() == "pcie" and intra == ["nvlink"])
    )
    # the PCIe link the NIC shares: beside NVLink, or a PCIe node's own where the NIC gets less than all of it (with
    # all of it, a ring's bytes between nodes cross that link anyway: the node's link already prices it)
    pcie = links.get("pcie") if inter and (intra == ["nvlink"] or share < 1) else None
    if pcie is not None:
        words += (
            f"; the NIC's traffic gets {share:.0%} of the PCIe link"
            + (f" ({links_rate(match[3], 'pcie')}) it shares with the GPUs" if intra == ["nvlink"] else "")
            + ("" if "nicshare" in given else f" ({inter[0]}'s default: nicshare=F says otherwise)")
        )
    if one_socket:
        words += (
            f"; NCCL before 2.4.8 drives each socket with one thread: its collectives get {NCCL_SOCKET_SHARE:.0%} of "
            "the link's TCP payload rate (fitted on Horovod's 2017 benchmark over TCP and RDMA)"
        )
    if nodes > 1:
        words += f"; {fabric_words(oversub)}"
    return Cluster(
        text,
        f"{nodes} node(s) of {per_node} GPU(s): {words}",
        "cuda",
        per_node,
        nodes,
        links[inter[0]] if inter else None,
        node_link=links[intra[0]] if intra else None,
        tree=tree,
        source="described on the command line; payload shares "
        + ", ".join(f"{k} {PAYLOAD[k]:.0%}" for k in links)
        + " and latencies (unless given) "
        + ", ".join(f"{k} {DEFAULT_LATENCY_S[k] * 1e6:g} us" for k in links)
        + " are the description's assumptions",
        era=(f"NCCL {given['nccl']}" if nccl else "NCCL 2.4 or later")
        + (": ring and tree" if tree else ": ring only (NCCL's tree came with 2.4, in 2019)"),
        oversubscription=oversub,
        pcie_link=pcie,
        nic_share=share,
        nccl_socket_share=NCCL_SOCKET_SHARE if one_socket else 1.0,
    )


def links_rate(items: str, key: str) -> str:
    """The rate a description gives `key=`, as typed."""
    return next(v for k, v in (i.partition("=")[::2] for i in items.split(",")) if k.lower() == key)


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
