"""The page's "GPU nodes" part of the environment section, and what the scope line says of the GPU data: what each
host's GPU node is made of (environment.gpu_nodes, bench.core.gpu_node) and its GPUs' use through the measured
span (gpu_usage, bench.harness.gpu_sampler), host by host across hosts. Runs recorded before bench looked (schema 9
and older) add nothing."""

from __future__ import annotations

import json
from typing import Any

from bench.core.gpu_node import NO_GPU, TOPO_WORDS, interconnect
from bench.report.sections import Heading, Paragraph, Table, fmt, left, right


def recorded_nodes(records: list) -> list[tuple[dict[str, Any], list[str]]]:
    """Each distinct host's facts the runs recorded (the NCCL variables included), with the runs that recorded
    them, first seen first."""
    seen: dict[str, tuple[dict[str, Any], list[str]]] = {}
    for rec in records:
        for node in (rec.environment or {}).get("gpu_nodes") or []:
            seen.setdefault(json.dumps(node, sort_keys=True), (node, []))[1].append(rec.run_id)
    return list(seen.values())


def gpus_text(node: dict[str, Any]) -> str:
    """ "8 x NVIDIA H100 80GB HBM3 (81559 MiB)", "no GPU", or "not available: why"."""
    if node.get("status") == NO_GPU:
        return NO_GPU
    if node.get("status") != "GPUs":
        return f"not available: {node.get('reason') or 'no reason recorded'}"
    counts: dict[str, int] = {}
    for gpu in node.get("gpus") or []:
        kind = f"{gpu.get('name')}" + (f" ({gpu['memory_mib']} MiB)" if gpu.get("memory_mib") else "")
        counts[kind] = counts.get(kind, 0) + 1
    return "; ".join(f"{n} x {kind}" for kind, n in counts.items())


def links_text(node: dict[str, Any]) -> str:
    topology = node.get("topology") or {}
    if node.get("status") != "GPUs":
        return "-"
    if not topology.get("available"):
        return f"not available: {topology.get('reason')}"
    return interconnect(topology)


def network_text(node: dict[str, Any]) -> str:
    ports = node.get("network") or []
    if not ports:
        return "none"
    return "; ".join(
        f"{p['device']} port {p['port']}: {p.get('kind') or '?'}, "
        + (f"{p['rate_gbps']:g} Gb/s" if p.get("rate_gbps") is not None else (p.get("rate") or "rate ?"))
        + (f", {p['state']}" if p.get("state") else "")
        for p in ports
    )


def variables_text(node: dict[str, Any]) -> str:
    variables = node.get("nccl_variables") or {}
    return ", ".join(f"{k}={v}" for k, v in variables.items()) or "none set"


def gpu_node_blocks(records: list) -> list:
    """The part of the environment section; none where no run recorded its GPU nodes."""
    nodes = recorded_nodes(records)
    if not nodes:
        return []
    rows = [
        [
            node.get("host"),
            gpus_text(node),
            node.get("driver") or "-",
            node.get("cuda") or "-",
            node.get("nccl") or "-",
            links_text(node),
            network_text(node),
            variables_text(node),
            len(ids),
        ]
        for node, ids in nodes
    ]
    blocks: list = [
        Heading("GPU nodes"),
        Paragraph(
            "What each host of the runs is made of, as recorded when each run started: its GPUs, driver, CUDA (the "
            "driver's), NCCL (torch's), the links between its GPUs (nvidia-smi topo -m: NV# for # bonded NVLinks, "
            "else the PCIe path), its InfiniBand and RoCE ports, and the NCCL variables the workers saw.",
            "note",
        ),
        Table(
            [left(c) for c in ("host", "GPUs", "driver", "CUDA", "NCCL", "GPU links", "network", "NCCL variables")]
            + [right("runs")],
            rows,
        ),
    ]
    pairs = [
        [node.get("host"), f"{p['a']}-{p['b']}", p["link"], _link_words(p["link"])]
        for node, _ in nodes
        for p in (node.get("topology") or {}).get("pairs") or []
    ]
    if pairs:
        blocks.append(
            Table([left("host"), left("GPUs"), left("link"), left("path")], pairs, details="Each GPU pair's link")
        )
    blocks += usage_blocks(records)
    return blocks


def _link_words(link: str) -> str:
    return f"NVLink, {link[2:]} bonded link(s)" if link.startswith("NV") else TOPO_WORDS.get(link, link)


def host_usages(use: dict[str, Any]) -> list[dict[str, Any]]:
    """A run's GPU use host by host, each entry as a run on one host stores its own ({"host", "sampled", "via",
    "interval_s", "gpus"}, or "reason" where not sampled): a run across hosts's `hosts`; a run on one host, itself. A
    run across hosts recorded before every host was sampled kept the launching host's GPUs at the top and its hosts
    without theirs: the launching host's entry takes them."""
    entries = use.get("hosts")
    if not isinstance(entries, list):
        return [{k: use.get(k) for k in ("host", "sampled", "via", "interval_s", "gpus", "reason")}]
    top = {k: use.get(k) for k in ("via", "interval_s", "gpus")}
    return [
        {**top, **entry}
        if entry.get("sampled") and "gpus" not in entry and entry.get("host") == use.get("host")
        else entry
        for entry in entries
        if isinstance(entry, dict)
    ]


def usage_blocks(records: list) -> list:
    """Each GPU run's GPU use through its measured span, each host's GPUs (a run across hosts samples every host), or
    why a run or a host was not sampled."""
    gpu_runs = [r for r in records if r.spec.device == "cuda" and isinstance(r.gpu_usage, dict)]
    if not gpu_runs:
        return []
    rows = []
    for rec in gpu_runs:
        use = rec.gpu_usage
        if not use.get("sampled") and not isinstance(use.get("hosts"), list):
            rows.append([rec.run_id, "-", "-", "-", "-", "-", f"not sampled: {use.get('reason')}"])
            continue
        for host in host_usages(use):
            if not host.get("sampled") or not host.get("gpus"):
                rows.append([rec.run_id, host.get("host"), "-", "-", "-", "-", f"not sampled: {host.get('reason')}"])
                continue
            how = f"{host.get('via')} every {host.get('interval_s')} s over {fmt(use.get('span_s'), '.1f')} s" + (
                f"; its sampler stopped {host['stopped']}" if host.get("stopped") else ""
            )
            for gpu in host["gpus"]:
                rows.append(
                    [
                        rec.run_id,
                        f"{host.get('host')} GPU {gpu['index']}",
                        gpu["samples"],
                        fmt(gpu.get("util_mean_pct"), ".0f"),
                        fmt(gpu.get("util_max_pct"), ".0f"),
                        fmt(gpu.get("memory_max_mib"), ".0f"),
                        how,
                    ]
                )
    return [
        Table(
            [left("run"), left("GPU"), right("samples"), right("mean use %"), right("max use %")]
            + [right("max memory MiB"), left("sampled")],
            rows,
            details="GPU use through each GPU run's steps, on each of its hosts (sampled outside the step loop)",
        )
    ]


def gpu_scope(records: list) -> str | None:
    """What the GPU data of the ok runs cover, for the scope line ("GPU data: 2 nodes of 8 x NVIDIA H100 ...,
    NVLink ..."); None where no run recorded a GPU: the scope line then says nothing more of GPUs."""
    described = []
    for node, _ in recorded_nodes(records):
        if node.get("status") == "GPUs":
            text = f"{node.get('host')}: {gpus_text(node)}, {links_text(node)}"
            ports: dict[str, int] = {}
            for p in node.get("network") or []:
                rate = f"{p['rate_gbps']:g} Gb/s" if p.get("rate_gbps") is not None else "rate unknown"
                kind = f"{p.get('kind') or 'network'} port(s) at {rate}"
                ports[kind] = ports.get(kind, 0) + 1
            text += "".join(f", {n} {kind}" for kind, n in ports.items())
            described.append(text)
    if not described:
        return None
    return "GPU data: " + "; ".join(sorted(set(described)))
