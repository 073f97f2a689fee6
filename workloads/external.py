"""A user's own workload: `PKG.MODULE:NAME` (importable here and on every host) or `path/to/file.py:NAME`, naming
a `workloads.Workload`, the protocol the built-in workloads follow (README, "Compare on your own model").

The address is made canonical in the parent (a file becomes its absolute path) and recorded with where the code
came from (module, file, SHA-256 of the file); every process of the run loads it again from the same address.
What can be checked before any process starts is checked here: that it loads, that the name exists, that it is a
Workload with sensible sizes, and that its model builds and takes a batch of its input shape. That is the user's
code running, so it runs in a process of its own, within a time limit (`probe`, run by bench.harness.workload_check),
and the parent is told what it needs: `describe`'s WorkloadInfo and `source`.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import re
import sys
from pathlib import Path

from workloads.base import Size, Workload, WorkloadInfo
from workloads.data.names import DataError
from workloads.data.own import own_data_facts

MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class WorkloadError(ValueError):
    """An address that cannot give a workload; the message is one line that says what to do."""


def is_address(text: str) -> bool:
    return ":" in text


def _split(address: str) -> tuple[str, str]:
    where, _, name = address.rpartition(":")
    if not where or not NAME.match(name):
        raise WorkloadError(f"--workload {address!r}: give a built-in name, PKG.MODULE:NAME or path/to/file.py:NAME")
    if not (where.endswith(".py") or MODULE.match(where)):
        raise WorkloadError(f"--workload {address!r}: {where!r} is neither a .py file nor a dotted module name")
    return where, name


def canonical(address: str) -> str:
    """The address as every process and the record keep it: a file by its absolute path."""
    where, name = _split(address)
    return f"{os.path.abspath(where)}:{name}" if where.endswith(".py") else address


def _load_module(where: str):
    if where.endswith(".py"):
        path = Path(where)
        if not path.is_file():
            raise WorkloadError(f"--workload: no file {where}")
        # a name of its own per file, so that two files with one stem never share a module
        unique = "bench_workload_" + hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
        if unique in sys.modules:
            return sys.modules[unique]
        spec = importlib.util.spec_from_file_location(unique, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[unique] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            del sys.modules[unique]
            raise WorkloadError(f"--workload: {where} does not import ({type(exc).__name__}: {exc})") from None
        return module
    try:
        return importlib.import_module(where)
    except ModuleNotFoundError as exc:
        raise WorkloadError(
            f"--workload: no module {where!r} here ({exc}); install it, or put its folder on PYTHONPATH"
        ) from None
    except Exception as exc:
        raise WorkloadError(f"--workload: module {where} does not import ({type(exc).__name__}: {exc})") from None


def load(address: str) -> Workload:
    """The Workload an address names (its protocol checked, not its model: see check)."""
    where, name = _split(address)
    module = _load_module(where)
    if not hasattr(module, name):
        public = sorted(k for k, v in vars(module).items() if isinstance(v, Workload))
        raise WorkloadError(
            f"--workload: {where} has no {name!r}"
            + (f"; its workloads: {', '.join(public)}" if public else "; it defines no Workload")
        )
    workload = getattr(module, name)
    if not isinstance(workload, Workload):
        raise WorkloadError(
            f"--workload: {where}:{name} is a {type(workload).__name__}, not a workloads.Workload "
            "(see README, 'Compare on your own model')"
        )
    for device, size in (("cpu", workload.cpu), ("gpu", workload.gpu)):
        if not isinstance(size, Size):
            raise WorkloadError(f"--workload: {where}:{name}.{device} is not a workloads.Size")
        for field in ("batch", "image", "synthetic_classes", "window_steps"):
            value = getattr(size, field)
            if not isinstance(value, int) or value < 1:
                raise WorkloadError(
                    f"--workload: {where}:{name}.{device}.{field} must be a positive integer, not {value!r}"
                )
    if not isinstance(workload.channels, int) or workload.channels < 1:
        raise WorkloadError(f"--workload: {where}:{name}.channels must be a positive integer")
    if not callable(workload.build):
        raise WorkloadError(
            f"--workload: {where}:{name}.build must be callable (num_classes, image side) -> torch.nn.Module"
        )
    if workload.loss is not None and not callable(workload.loss):
        raise WorkloadError(f"--workload: {where}:{name}.loss must be None or callable () -> a loss module")
    if workload.datasets is not None:
        if not callable(workload.datasets):
            raise WorkloadError(f"--workload: {where}:{name}.datasets must be None or callable () -> (train, held_out)")
        if not isinstance(workload.classes, int) or workload.classes < 2:
            raise WorkloadError(
                f"--workload: {where}:{name}.classes must say how many classes its data sets hold "
                f"(an integer of 2 or more), not {workload.classes!r}"
            )
    return workload


def check(address: str, workload: Workload) -> None:
    """Its model builds, has parameters, and maps a CPU batch of its input shape to one score per class."""
    import torch

    size = workload.cpu
    try:
        model = workload.build(size.synthetic_classes, size.image)
    except Exception as exc:
        raise WorkloadError(
            f"--workload {address}: build({size.synthetic_classes}, {size.image}) failed ({type(exc).__name__}: {exc})"
        ) from None
    if not isinstance(model, torch.nn.Module) or not any(True for _ in model.parameters()):
        raise WorkloadError(f"--workload {address}: build() must return a torch.nn.Module with parameters")
    x = torch.zeros(2, workload.channels, size.image, size.image)
    try:
        with torch.no_grad():
            out = model(x)
    except Exception as exc:
        raise WorkloadError(
            f"--workload {address}: the model does not take a batch of shape {tuple(x.shape)} "
            f"({type(exc).__name__}: {str(exc)[:120]})"
        ) from None
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (2, size.synthetic_classes):
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise WorkloadError(
            f"--workload {address}: the model must give (batch, classes) = "
            f"(2, {size.synthetic_classes}) scores, not {shape}"
        )
    try:
        value = workload.make_loss()(out, torch.zeros(2, dtype=torch.long))
        if not isinstance(value, torch.Tensor) or value.numel() != 1:
            raise ValueError(f"it gave {type(value).__name__} {tuple(getattr(value, 'shape', ()))}, not one number")
    except Exception as exc:
        raise WorkloadError(
            f"--workload {address}: its loss does not take (scores, class indices) "
            f"({type(exc).__name__}: {str(exc)[:120]})"
        ) from None


def source(address: str) -> dict:
    """Where the workload's code comes from, for the record: module, file, the file's SHA-256, and the folder the
    processes must import a module from."""
    where, name = _split(address)
    if where.endswith(".py"):
        path = Path(where)
        return {  # "reference": the key records have always stored the address under
            "reference": address,
            "module": None,
            "file": str(path),
            "import_path": None,
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        }
    module = sys.modules[where]
    file = getattr(module, "__file__", None)
    root = None
    if file:  # the sys.path entry it came from: the processes get it on PYTHONPATH
        depth = where.count(".") + (2 if Path(file).name == "__init__.py" else 1)
        root = str(Path(file).resolve().parents[depth - 1])
    return {
        "reference": address,
        "module": where,
        "file": file,
        "import_path": root,
        "sha256": hashlib.sha256(Path(file).read_bytes()).hexdigest() if file else None,
    }


def describe(workload: Workload, with_data: bool = False) -> WorkloadInfo:
    """What the run's parent needs of a workload (WorkloadInfo); with `with_data`, what its own data sets hold."""
    data = None
    if with_data:
        try:
            data = own_data_facts(workload)
        except DataError as exc:  # said where the run asks for them (workloads.data.own.own_train_samples)
            data = {"error": str(exc)}
    return WorkloadInfo(
        name=workload.name,
        summary=workload.summary,
        channels=workload.channels,
        gpu=workload.gpu,
        cpu=workload.cpu,
        fixed_image=workload.fixed_image,
        classes=workload.classes,
        data=data,
    )


def probe(address: str, with_data: bool = False) -> dict:
    """A user's workload (a canonical address) loaded and checked, in the process of its own that
    bench.harness.workload_check starts: {"info": describe's, as a dict; "source": source's}. WorkloadError for
    one that cannot be used."""
    workload = load(address)
    check(address, workload)
    return {"info": describe(workload, with_data).to_dict(), "source": source(address)}
