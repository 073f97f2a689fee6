"""The model and optimizer every process of every backend starts from (first or replacement)."""

from __future__ import annotations


def initial_model(spec, device):
    """The workload's model with the run's seeded initial parameters, on `device`."""
    import torch

    from workloads import WORKLOADS

    torch.manual_seed(spec.seed)
    return WORKLOADS[spec.workload].build(spec.num_classes, spec.image_size).to(device)


def build_model(spec, device):
    """(model, SGD optimizer with the run's lr and momentum)."""
    import torch

    model = initial_model(spec, device)
    return model, torch.optim.SGD(model.parameters(), lr=spec.lr, momentum=spec.momentum)


def save_params(model, path) -> None:
    """A model's parameters on the CPU, for equivalence checks (--save-params)."""
    import torch

    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, path)
