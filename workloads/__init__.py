"""Workloads: one module each, registered by name; or a user's own, named `PKG.MODULE:NAME` or
`path/to/file.py:NAME` (workloads.external)."""

from workloads import mnist_mlp, resnet18
from workloads.base import Size, Workload
from workloads.external import WorkloadError, is_address

WORKLOADS: dict[str, Workload] = {w.name: w for w in (mnist_mlp.WORKLOAD, resnet18.WORKLOAD)}
_LOADED: dict[str, Workload] = {}


def get_workload(address: str) -> Workload:
    """A built-in workload by name, or the user's workload an address names (loaded once per process)."""
    if address in WORKLOADS:
        return WORKLOADS[address]
    if not is_address(address):
        raise WorkloadError(
            f"unknown workload {address!r}; choose one of {', '.join(WORKLOADS)}, or give your "
            "own as PKG.MODULE:NAME or path/to/file.py:NAME"
        )
    if address not in _LOADED:
        from workloads.external import load

        _LOADED[address] = load(address)
    return _LOADED[address]


__all__ = ["WORKLOADS", "Size", "Workload", "WorkloadError", "get_workload"]
