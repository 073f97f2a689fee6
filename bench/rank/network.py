"""The network and optimizer every process of every backend starts from (first or replacement), and how a rank
writes it out (a checkpoint, --save-params)."""

from __future__ import annotations

from bench.core.rundir import write_atomic


def initial_model(spec, device):
    """The workload's model with the run's seeded initial parameters, on `device`."""
    import torch

    from workloads import get_workload

    torch.manual_seed(spec.seed)
    model = get_workload(spec.workload).build(spec.num_classes, spec.image_size).to(device)
    # --channels-last: 4-D weights only are converted (an MLP's stay as they are, and so does its step)
    return model.to(memory_format=torch.channels_last) if spec.channels_last else model


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
