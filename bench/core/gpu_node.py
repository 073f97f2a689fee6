"""What a GPU node is made of (docs/method.md, "GPU nodes"): its GPUs, driver, CUDA and NCCL, the links between
its GPUs (`nvidia-smi topo -m`), its InfiniBand/RoCE devices, and the NCCL variables in force.

The parsers are pure functions of the tools' text; `node_facts` runs the tools. A host with no GPU records
"no GPU"; a tool that is missing or fails is recorded as not available, with the reason, never as an error.
`python -m bench.core.gpu_node` prints this host's facts as one JSON line (how a run across hosts gathers each
host's: bench.cluster.hosts.gpu_nodes).
"""

from __future__ import annotations

import csv
import datetime
import functools
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

NO_GPU = "no GPU"
TOOL_TIMEOUT_S = 20.0  # nvidia-smi answers in well under a second on a healthy node; a hung driver must not hang a run
IB_ROOT = Path("/sys/class/infiniband")
# the GPUs nvidia-smi is asked about, in this order (`nvidia-smi --help-query-gpu` documents each field)
GPU_FIELDS = ("index", "name", "memory.total", "driver_version", "pci.bus_id")
# the NCCL variables a run's workers saw: NCCL's own and torch's NCCL settings (async error handling, timeouts)
NCCL_PREFIXES = ("NCCL_", "TORCH_NCCL_")

# `nvidia-smi topo -m`'s legend: what each entry of the matrix says of the path between two devices
TOPO_WORDS = {
    "X": "self",
    "SYS": "PCIe and the interconnect between NUMA nodes",
    "SOC": "PCIe and the interconnect between CPU sockets",  # older drivers' word for SYS
    "NODE": "PCIe and the host bridges within one NUMA node",
    "PHB": "PCIe and a host bridge",
    "PXB": "several PCIe bridges, no host bridge",
    "PIX": "at most one PCIe bridge",
}


def not_available(why: str) -> dict[str, Any]:
    return {"available": False, "reason": why}


# ---------------------------------------------------------------- parsers (pure)
def parse_query_gpu(text: str, fields: tuple[str, ...] = GPU_FIELDS) -> list[dict[str, str | None]]:
    """`nvidia-smi --query-gpu=F1,F2,... --format=csv,noheader,nounits`: one row per GPU, values in field order,
    separated by ", "; "[N/A]" (a value the GPU does not report) becomes None."""
    rows = []
    for cells in csv.reader(text.splitlines(), skipinitialspace=True):
        if not cells:
            continue
        if len(cells) != len(fields):
            raise ValueError(f"expected {len(fields)} values per line ({', '.join(fields)}), found {len(cells)}")
        rows.append(
            {
                f: (None if c.strip() in ("[N/A]", "N/A", "[Not Supported]") else c.strip())
                for f, c in zip(fields, cells)
            }
        )
    return rows


def parse_cuda_version(text: str) -> str | None:
    """The CUDA version the driver supports, from `nvidia-smi`'s banner ("CUDA Version: 12.4")."""
    match = re.search(r"CUDA Version\s*:\s*([0-9][0-9.]*)", text)
    return match.group(1) if match else None


def parse_topology(text: str) -> dict[str, Any]:
    """`nvidia-smi topo -m`: its matrix, a header row of devices (GPU0.., NIC0.., then the affinity columns) and a
    row per device. Returns the GPUs, each GPU pair's entry (NV# for # bonded NVLinks, else the PCIe path words of
    TOPO_WORDS) and the NICs with their names from the NIC legend."""
    lines = [line for line in text.splitlines() if line.strip()]
    at = next((i for i, line in enumerate(lines) if line.split()[0] == "GPU0"), None)
    if at is None:
        raise ValueError("no matrix header (a line of device names starting with GPU0)")
    header = lines[at].split()
    devices = []
    for token in header:
        if not re.fullmatch(r"(GPU|NIC)\d+|mlx\w+", token):
            break  # the affinity columns follow the devices
        devices.append(token)
    gpus = [d for d in devices if d.startswith("GPU")]
    rows: dict[str, list[str]] = {}
    for line in lines[at + 1 :]:
        tokens = line.split()
        if tokens[0] in devices and len(tokens) > len(devices):
            rows[tokens[0]] = tokens[1 : 1 + len(devices)]
    missing = [g for g in gpus if g not in rows]
    if missing:
        raise ValueError(f"no matrix row for {', '.join(missing)}")
    pairs = []
    for i, a in enumerate(gpus):
        for b in gpus[i + 1 :]:
            entry = rows[a][devices.index(b)]
            if not (entry in TOPO_WORDS or re.fullmatch(r"NV\d+", entry)):
                raise ValueError(f"{a}-{b}: {entry!r} is not an entry of the legend")
            pairs.append({"a": a, "b": b, "link": entry})
    nic_names = dict(re.findall(r"^\s*(NIC\d+)\s*:\s*(\S+)", text, flags=re.M))
    nics = [{"nic": d, "name": nic_names.get(d, d)} for d in devices if not d.startswith("GPU")]
    return {"gpus": gpus, "pairs": pairs, "nics": nics}


def interconnect(topology: dict[str, Any]) -> str:
    """The GPU pairs' links in a few words: "NVLink (NV18, all 28 pairs)", "PCIe (PIX 2, SYS 4)", or both."""
    pairs = topology.get("pairs") or []
    if not pairs:
        return "one GPU" if len(topology.get("gpus") or []) == 1 else "no GPU pair"
    counts: dict[str, int] = {}
    for pair in pairs:
        counts[pair["link"]] = counts.get(pair["link"], 0) + 1
    nv = {k: n for k, n in counts.items() if k.startswith("NV")}
    pcie = {k: n for k, n in counts.items() if not k.startswith("NV")}

    def listed(part: dict[str, int]) -> str:
        if len(part) == 1 and sum(part.values()) == len(pairs):
            return f"{next(iter(part))}, all {len(pairs)} pairs"
        return ", ".join(f"{k} {n}" for k, n in sorted(part.items()))

    said = ([f"NVLink ({listed(nv)})"] if nv else []) + ([f"PCIe ({listed(pcie)})"] if pcie else [])
    return "; ".join(said)


def parse_ib_rate(text: str) -> float | None:
    """A port's rate file ("100 Gb/sec (4X EDR)", "25 Gb/sec (1X EDR)") in Gb/s."""
    match = re.match(r"\s*([0-9.]+)\s*Gb/sec", text)
    return float(match.group(1)) if match else None


def read_network_devices(root: Path = IB_ROOT) -> list[dict[str, Any]]:
    """Each InfiniBand or RoCE port under sysfs (`root`/<device>/ports/<port>/rate, link_layer, state): RoCE is a
    port whose link layer is Ethernet."""
    ports = []
    for device in sorted(root.iterdir()) if root.is_dir() else ():
        for port in sorted((device / "ports").iterdir()) if (device / "ports").is_dir() else ():

            def read(name: str) -> str | None:
                try:
                    return (port / name).read_text().strip() or None
                except OSError:
                    return None

            rate = read("rate")
            link_layer = read("link_layer")
            ports.append(
                {
                    "device": device.name,
                    "port": port.name,
                    "rate": rate,
                    "rate_gbps": parse_ib_rate(rate) if rate else None,
                    "link_layer": link_layer,
                    "kind": "RoCE" if link_layer == "Ethernet" else link_layer,
                    "state": read("state"),
                }
            )
    return ports


# what the sampler asks nvidia-smi for, every SAMPLE_INTERVAL_S, where NVML is not importable
SAMPLE_FIELDS = ("timestamp", "index", "utilization.gpu", "memory.used")


def parse_sample_line(line: str) -> tuple[float, int, float | None, float | None] | None:
    """One line of `nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used --format=csv,noheader,nounits
    -lms N` ("2026/12/02 21:15:44.123, 0, 87, 40321"): (its time in seconds since the epoch, the GPU's index,
    utilisation %, memory used MiB), a value the GPU does not report as None; None for a line that is not one."""
    try:
        rows = parse_query_gpu(line, SAMPLE_FIELDS)
    except ValueError:
        return None
    if len(rows) != 1:
        return None
    row = rows[0]
    try:
        # nvidia-smi writes the host's local time: read as local time, as it was written
        when = datetime.datetime.strptime(row["timestamp"] or "", "%Y/%m/%d %H:%M:%S.%f").timestamp()
        index = int(row["index"] or "")
        util = float(row["utilization.gpu"]) if row["utilization.gpu"] is not None else None
        memory = float(row["memory.used"]) if row["memory.used"] is not None else None
    except ValueError:
        return None
    return when, index, util, memory


def usage_summary(
    samples: list[tuple[float, int, float | None, float | None]], start: float, end: float
) -> list[dict[str, Any]]:
    """Per GPU, over the samples taken from `start` to `end` (seconds since the epoch): how many, mean and max
    utilisation (%), max memory used (MiB). A GPU with no sample in the span is left out."""
    by_gpu: dict[int, list[tuple[float | None, float | None]]] = {}
    for when, index, util, memory in samples:
        if start <= when <= end:
            by_gpu.setdefault(index, []).append((util, memory))
    out = []
    for index, values in sorted(by_gpu.items()):
        utils = [u for u, _ in values if u is not None]
        memories = [m for _, m in values if m is not None]
        out.append(
            {
                "index": index,
                "samples": len(values),
                "util_mean_pct": sum(utils) / len(utils) if utils else None,
                "util_max_pct": max(utils) if utils else None,
                "memory_max_mib": max(memories) if memories else None,
            }
        )
    return out


def nccl_variables(environ: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in sorted(environ.items()) if k.startswith(NCCL_PREFIXES)}


# ---------------------------------------------------------------- this host's facts
def _tool(argv: list[str]) -> tuple[str | None, str]:
    """(its output, ""), or (None, why it is not available)."""
    if shutil.which(argv[0]) is None:
        return None, f"{argv[0]} not found on PATH"
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None, f"`{' '.join(argv)}` did not answer in {TOOL_TIMEOUT_S:.0f} s"
    except OSError as exc:
        return None, f"`{' '.join(argv)}` could not start ({exc})"
    if proc.returncode != 0:
        last = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        return None, f"`{' '.join(argv)}` exited {proc.returncode}" + (f": {last[-1][:200]}" if last else "")
    return proc.stdout, ""


def _driver_sees_gpus() -> bool:
    """Whether the NVIDIA driver has a GPU on this host, without nvidia-smi (its /proc entries, its device files)."""
    gpus = Path("/proc/driver/nvidia/gpus")
    return (gpus.is_dir() and any(gpus.iterdir())) or Path("/dev/nvidia0").exists()


def _nccl_version() -> str | None:
    try:
        import torch  # the parent's fingerprint loads torch already (bench.core.environment.torch_facts)

        if not torch.cuda.is_available():
            return None
        return ".".join(map(str, torch.cuda.nccl.version()))
    except Exception:  # no torch, or a torch built without NCCL: recorded as None
        return None


# The least Linux driver each CUDA major release's builds run on (minor version compatibility), a fact from NVIDIA's
# CUDA Toolkit release notes ("CUDA Toolkit and Minimum Required Driver Version for CUDA Minor Version
# Compatibility"; the CUDA Compatibility guide's table "CUDA Toolkit 11.x, 12.x, and 13.x Driver Version Ranges"):
# CUDA 13.x needs driver 580 or later, 12.x 525 or later, 11.x 450 or later.
MIN_DRIVER_OF_CUDA = {11: 450, 12: 525, 13: 580}


def unseen_gpus_words(
    gpus: int, driver: str | None, driver_cuda: str | None, torch_version: str, torch_cuda: str | None
) -> str:
    """Why torch sees none of the `gpus` GPUs nvidia-smi lists (with `driver`, which supports CUDA up to
    `driver_cuda`), as far as the versions tell: a torch built without CUDA, or a driver older than the one its CUDA
    needs (MIN_DRIVER_OF_CUDA); else what is left to look at."""
    listed = f"nvidia-smi lists {gpus} GPU(s), driver {driver or 'of unknown version'}"
    if torch_cuda is None:
        return f"{listed}, but torch {torch_version} is built without CUDA: install a CUDA build of torch"
    needed = MIN_DRIVER_OF_CUDA.get(int(torch_cuda.split(".")[0]))
    try:
        driver_major = int((driver or "").split(".")[0])
    except ValueError:
        driver_major = None
    if needed is not None and driver_major is not None and driver_major < needed:
        supports = f" (it supports CUDA {driver_cuda} at most)" if driver_cuda else ""
        return (
            f"{listed}{supports}, but torch {torch_version} is built for CUDA {torch_cuda}, which needs driver "
            f"{needed} or later: upgrade the driver, or install a torch built for the CUDA the driver supports"
        )
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    known = needed is not None and driver_major is not None  # else whether the driver is enough is not known here
    seen = (
        f"enough for torch {torch_version}'s CUDA {torch_cuda}, yet torch sees none"
        if known
        else f"yet torch {torch_version} (CUDA {torch_cuda}) sees none"
    )
    return f"{listed}, {seen}: " + (
        f"CUDA_VISIBLE_DEVICES={visible!r} hides them"
        if visible is not None
        else "python -c 'import torch; torch.cuda.init()' says why"
    )


def unseen_gpus() -> str | None:
    """Where torch sees no GPU: why, if nvidia-smi lists GPUs on this host (unseen_gpus_words); None where it lists
    none or is not there."""
    if shutil.which("nvidia-smi") is None:
        return None
    facts = hardware_facts(socket.gethostname())
    if facts["status"] != "GPUs":
        return None
    import torch

    return unseen_gpus_words(len(facts["gpus"]), facts["driver"], facts["cuda"], torch.__version__, torch.version.cuda)


def node_facts(environ: dict[str, str], host: str | None = None) -> dict[str, Any]:
    """This host's GPU node facts (the module's docstring); `environ`: the workers' environment, whose NCCL
    variables are recorded."""
    return {**hardware_facts(host or socket.gethostname()), "nccl_variables": nccl_variables(environ)}


@functools.cache  # a node's parts do not change between the runs of one bench process
def hardware_facts(host: str) -> dict[str, Any]:
    facts: dict[str, Any] = {
        "host": host,
        "status": NO_GPU,
        "gpus": [],
        "driver": None,
        "cuda": None,
        "nccl": None,
        "topology": not_available(NO_GPU),
        "network": read_network_devices(),
    }
    listing, why = _tool(["nvidia-smi", f"--query-gpu={','.join(GPU_FIELDS)}", "--format=csv,noheader,nounits"])
    if listing is None:
        if _driver_sees_gpus():  # GPUs there, but nothing to describe them with
            facts.update(status="not available", reason=why, topology=not_available(why))
        else:
            facts["tool"] = not_available(why)  # said too, though a host without GPU needs no nvidia-smi
        return facts
    try:
        rows = parse_query_gpu(listing)
    except ValueError as exc:
        why = f"nvidia-smi's GPU list unreadable: {exc}"
        return {**facts, "status": "not available", "reason": why, "topology": not_available(why)}
    if not rows:
        return facts
    facts["status"] = "GPUs"
    facts["gpus"] = [
        {
            "index": int(r["index"]) if r["index"] else i,
            "name": r["name"],
            "memory_mib": int(float(r["memory.total"])) if r["memory.total"] else None,
            "pci_bus_id": r["pci.bus_id"],
        }
        for i, r in enumerate(rows)
    ]
    facts["driver"] = rows[0]["driver_version"]
    banner, _ = _tool(["nvidia-smi"])
    facts["cuda"] = parse_cuda_version(banner or "")
    facts["nccl"] = _nccl_version()
    matrix, why = _tool(["nvidia-smi", "topo", "-m"])
    if matrix is None:
        facts["topology"] = not_available(why)
    else:
        try:
            facts["topology"] = {"available": True, **parse_topology(matrix)}
        except ValueError as exc:
            facts["topology"] = not_available(f"`nvidia-smi topo -m` unreadable: {exc}")
    return facts


if __name__ == "__main__":
    print(json.dumps(node_facts(dict(os.environ), sys.argv[1] if len(sys.argv) > 1 else None)))
