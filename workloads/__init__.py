"""Workloads: one module each, registered by name; or a user's own, named `PKG.MODULE:NAME` or
`path/to/file.py:NAME` (workloads.external)."""

from workloads import mnist_mlp, resnet18
from workloads.base import Size, Workload
from workloads.external import WorkloadError, is_reference

WORKLOADS: dict[str, Workload] = {w.name: w for w in (mnist_mlp.WORKLOAD, resnet18.WORKLOAD)}
_LOADED: dict[str, Workload] = {}


def get_workload(reference: str) -> Workload:
    """A built-in workload by name, or the user's workload a reference names (loaded once per process)."""
    if reference in WORKLOADS:
        return WORKLOADS[reference]
    if not is_reference(reference):
        raise WorkloadError(
            f"unknown workload {reference!r}; choose one of {', '.join(WORKLOADS)}, or give your "
            "own as PKG.MODULE:NAME or path/to/file.py:NAME"
        )
    if reference not in _LOADED:
        from workloads.external import load

        _LOADED[reference] = load(reference)
    return _LOADED[reference]


__all__ = ["WORKLOADS", "Size", "Workload", "WorkloadError", "get_workload"]
