"""Where a GPU worker's threads go: the cores of its GPU's NUMA node (--cpu-bind numa), read from sysfs. A thread
feeding a GPU from the other socket crosses the inter-socket link on every copy, so each GPU's workers take their
node's cores, split among them. Pure functions over a sysfs root (a test builds one); no torch here."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class GpuPlacement:
    """Where one GPU worker may run: its GPU's NUMA node and its share of that node's cores, or why it is left
    unbound (`unbound`, a sentence; node and cores None)."""

    numa_node: int | None
    cpus: list[int] | None
    unbound: str | None = None


def sysfs_bus_id(bus_id: str) -> str:
    """A PCI address as sysfs names its folder, '0000:3b:00.0', from nvidia-smi's '00000000:3B:00.0' or torch's."""
    domain, bus, rest = bus_id.strip().lower().split(":")
    return f"{int(domain, 16):04x}:{bus}:{rest}"


def torch_bus_id(props) -> str | None:
    """The PCI address of one torch.cuda.get_device_properties(i), or None where this torch does not give it."""
    parts = [getattr(props, name, None) for name in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
    if any(p is None for p in parts):
        return None
    domain, bus, device = parts
    return f"{domain:04x}:{bus:02x}:{device:02x}.0"


def parse_cpulist(text: str) -> list[int]:
    """The kernel's cpulist format, '0-3,8,10-11', as the sorted cores it names."""
    cores: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        cores.update(range(int(low), int(high or low) + 1))
    return sorted(cores)


def pci_numa_node(bus_id: str, sysfs: str | Path = "/sys") -> int | None:
    """The NUMA node of a PCI device, or None where the kernel does not know it (-1: one node, or firmware that does
    not say) or the device is not there."""
    try:
        node = int((Path(sysfs) / "bus/pci/devices" / sysfs_bus_id(bus_id) / "numa_node").read_text())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


def node_cpus(node: int, sysfs: str | Path = "/sys") -> list[int]:
    """The cores of NUMA node `node` (none where sysfs does not list it)."""
    try:
        return parse_cpulist((Path(sysfs) / f"devices/system/node/node{node}/cpulist").read_text())
    except OSError:
        return []


def gpu_worker_cpus(bus_ids: list[str | None], local_rank: int, sysfs: str | Path = "/sys") -> GpuPlacement:
    """Where the worker of `local_rank` (on GPU `local_rank` of `bus_ids`, this host's GPUs in the order the workers
    take them) may run: its node's cores split into equal contiguous shares among the workers whose GPU is on that
    node, in local-rank order (a node with fewer cores than workers gives each one core, shared round robin)."""
    if local_rank >= len(bus_ids) or bus_ids[local_rank] is None:
        return GpuPlacement(None, None, f"GPU {local_rank}'s PCI address is not known: not bound")
    nodes = [pci_numa_node(b, sysfs) if b else None for b in bus_ids]
    node = nodes[local_rank]
    if node is None:
        return GpuPlacement(None, None, f"GPU {local_rank}'s NUMA node is not known (numa_node -1): not bound")
    cores = node_cpus(node, sysfs)
    if not cores:
        return GpuPlacement(node, None, f"NUMA node {node} lists no cores: not bound")
    sharing = [r for r, n in enumerate(nodes) if n == node]
    index, count = sharing.index(local_rank), len(sharing)
    if len(cores) < count:
        return GpuPlacement(node, [cores[index % len(cores)]])
    return GpuPlacement(node, cores[index * len(cores) // count : (index + 1) * len(cores) // count])
