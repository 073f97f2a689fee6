"""The user's workload's own data sets (`--data workload`, Workload.datasets: train and held-out torch Datasets):
made once per process and checked (own_datasets), what the workload check's process tells the parent of them
(own_data_facts), and the parent's check from those facts alone (own_train_samples, check_own_data). torch is
imported only where the data sets are made: the run's parent, which is told the facts, never loads it."""

from __future__ import annotations

from workloads.data.names import DataError


def own_datasets(workload, image: int | None = None) -> tuple:
    """The workload's own (train, held-out) data sets (Workload.datasets), made once per process and checked
    (check_own_data)."""
    train, held, facts = _made(workload)
    check_own_data(workload, facts, image)
    return train, held


def own_data_facts(workload) -> dict:
    """What check_own_data needs of the workload's own data sets, for a process that never makes them (a run's
    parent, which the workload check's process tells): their sizes, and their first sample's kind, shape and class."""
    return _made(workload)[2]


def own_train_samples(workload, image: int | None = None) -> int:
    """The training samples of the workload's own data sets, checked as every rank will find them, from what the
    workload check found of them (workloads.base.WorkloadInfo.data): the parent never makes them itself."""
    facts = workload.data
    if facts is None:
        raise ValueError(f"workload {workload.name} was described without its data sets (with_data)")
    if "error" in facts:
        raise DataError(facts["error"])
    check_own_data(workload, facts, image)
    return facts["train"]


def check_own_data(workload, facts: dict, image: int | None) -> None:
    """Two non-empty data sets whose first sample is an input of the workload's shape and a class index."""
    name = workload.name
    if min(facts["train"], facts["held_out"]) < 1:
        raise DataError(
            f"--data workload: {name}.datasets() gave {facts['train']} training and {facts['held_out']} "
            "held-out samples; both need some"
        )
    shape = tuple(facts["shape"])
    expected = (workload.channels, image, image) if image else None
    if not facts["tensor"] or (expected and shape != expected):
        raise DataError(
            f"--data workload: {name}'s samples are {facts['kind']} {shape}; the model takes "
            f"tensors of shape {expected or '(channels, image, image)'}"
            + (" (set --image-size to match)" if expected else "")
        )
    label = facts["label"]
    if not 0 <= label < workload.classes:
        raise DataError(
            f"--data workload: {name}'s first sample has class {label}; it declares "
            f"{workload.classes} classes (0..{workload.classes - 1})"
        )


def _made(workload) -> tuple:
    """(train, held-out, their facts), made once per process."""
    name = getattr(workload, "name", workload)
    if workload is None or getattr(workload, "datasets", None) is None:
        raise DataError(
            f"--data workload: workload {name} brings no data sets of its own (its `datasets` is None); "
            "give it a datasets() factory (README, 'Compare on your own model') or choose another --data"
        )
    key = id(workload)
    if key not in _OWN:
        import torch  # here only: a process that is told the facts (the run's parent) never loads it

        try:
            train, held = workload.datasets()
            sizes = len(train), len(held)
            x, y = train[0]
            facts = {
                "train": sizes[0],
                "held_out": sizes[1],
                "kind": type(x).__name__,
                "tensor": isinstance(x, torch.Tensor),
                "shape": [int(d) for d in getattr(x, "shape", ())],
                "label": int(y),
            }
        except Exception as exc:
            raise DataError(
                f"--data workload: {name}.datasets() must return (train, held_out) data sets of "
                f"(input, class index) pairs ({type(exc).__name__}: {str(exc)[:160]})"
            ) from None
        _OWN[key] = (train, held, facts)
    return _OWN[key]


_OWN: dict[int, tuple] = {}
