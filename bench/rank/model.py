"""The model and optimizer every process of every backend starts from (first or replacement), and the workload
a run names (built in, or the user's own)."""

from __future__ import annotations

import functools

from bench.core.errors import UsageError
from bench.core.rundir import write_atomic


def workload_of(reference: str):
    """(the reference as the spec keeps it, the Workload, where its code came from or None for a built-in one); a
    user's workload is loaded and its model tried on a batch here, before any process starts."""
    from workloads import WorkloadError
    from workloads.external import canonical, is_reference

    try:
        return _checked(canonical(reference) if is_reference(reference) else reference)
    except WorkloadError as exc:
        raise UsageError(str(exc)) from None


@functools.lru_cache(maxsize=None)
def _checked(reference: str):
    """workload_of for a canonical reference: once per process, however many specs name it (a sweep's)."""
    from workloads import WORKLOADS, get_workload
    from workloads.external import check, source

    if reference in WORKLOADS:
        return reference, WORKLOADS[reference], None
    workload = get_workload(reference)
    check(reference, workload)
    return reference, workload, source(reference)


def initial_model(spec, device):
    """The workload's model with the run's seeded initial parameters, on `device`."""
    import torch

    from workloads import get_workload

    torch.manual_seed(spec.seed)
    return get_workload(spec.workload).build(spec.num_classes, spec.image_size).to(device)


def build_model(spec, device):
    """(model, SGD optimizer with the run's lr and momentum)."""
    import torch

    model = initial_model(spec, device)
    return model, torch.optim.SGD(model.parameters(), lr=spec.lr, momentum=spec.momentum)


def save_model(model, path: str) -> str:
    """The model's state_dict (on the CPU) written to `path` atomically: a run killed meanwhile leaves the old file
    or none, never half of one."""
    import torch

    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    write_atomic(path, write=lambda tmp: torch.save(state, tmp))
    return path


def save_params(model, path) -> None:
    """A model's parameters on the CPU, for equivalence checks (--save-params)."""
    import torch

    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, path)
