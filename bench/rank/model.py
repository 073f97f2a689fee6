"""The model and optimizer every process of every backend starts from (first or replacement), and the process
that loads and checks a user's own workload before a run (`python -m bench.rank.model REFERENCE [--data]`,
started by bench.harness.workload_check)."""

from __future__ import annotations

import json
import os
import sys

from bench.core.rundir import write_atomic


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


def main(argv: list[str]) -> int:
    """`python -m bench.rank.model REFERENCE [--data]`: the user's workload loaded and checked
    (workloads.external.probe), its answer one line of JSON on the stdout this process was started with:
    {"answer": probe's} or {"error": the one-line refusal}. What the user's code prints goes to stderr, never into
    the answer."""
    answer = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    from workloads import WorkloadError  # the workload's code, and torch with it, in this process only
    from workloads.external import probe

    try:
        reply = {"answer": probe(argv[0], with_data="--data" in argv[1:])}
    except WorkloadError as exc:
        reply = {"error": str(exc)}
    answer.write(json.dumps(reply) + "\n")
    answer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
