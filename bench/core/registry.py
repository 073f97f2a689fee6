"""The plug-in registries: backend name -> package holding BACKEND (bench.backends.base.Backend), task name ->
package holding TASK (bench.tasks.base.Task); and how the backends are compared with one another.

Plug-ins are imported by name when first asked for, so the layers below them (the rank entry point, the
harness, the store) reach a run's backend and task without importing them: the plug-ins sit above.
Adding a backend or a task is a folder in bench/backends or bench/tasks and one line here.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from types import ModuleType
from typing import Any

from bench.core.errors import UsageError

BACKEND_MODULES = {
    "elastic": "bench.backends.elastic",
    "horovod": "bench.backends.horovod",
    "ps": "bench.backends.ps",
    "single": "bench.backends.single",
    "ray": "bench.backends.ray",
    "tf-mwms": "bench.backends.tf_mwms",  # TensorFlow's MultiWorkerMirroredStrategy
    "horovod-tf": "bench.backends.horovod.tf",  # Horovod's TensorFlow side
}
# the backends compared with one another, the plain loop being what they are measured against: what `--backend all`
# chooses from on every verb (all_backends)
COMPARED = ("elastic", "horovod", "ps", "ray", "tf-mwms", "horovod-tf")
PRIMARY = ("elastic", "horovod")  # the pair the report's verdict compares; the others are companion backends
PROJECTED = ("elastic", "horovod", "ps")  # what the scaling model covers by default: the backends its study checked
PLAIN_LOOP = "single"  # the plain loop every backend is also measured against
DEFAULT_BACKEND = "elastic"  # `bench run` and `bench fault` without --backend
# What a companion backend is weighed against on the page where it is not the faster primary: the primary whose
# data-parallel path it runs under its own runtime (Ray: the same DDP over the same gloo/NCCL, so any difference is
# Ray's), or, for another framework's backend, its counterpart across frameworks (TensorFlow's own distribution
# against PyTorch's; Horovod's TensorFlow side against its PyTorch side).
COUNTERPART = {"ray": "elastic", "tf-mwms": "elastic", "horovod-tf": "horovod"}
# the backend of the same framework a backend of another framework than the primary pair's is also compared with on
# the page ("within TensorFlow": Horovod against TensorFlow's own)
RIVAL = {"horovod-tf": "tf-mwms"}

TASK_MODULES = {
    "train": "bench.tasks.train",  # the measured training loop
    "comm": "bench.tasks.comm",  # a communication sweep in nccl-tests' conventions
    "fault": "bench.tasks.fault",  # training through an injected fault under a backend's elastic mode
    "converge": "bench.tasks.converge",  # time to a held-out accuracy on a real data set
}


FRAMEWORK_NAMES = {"torch": "PyTorch", "tensorflow": "TensorFlow"}


def framework_words(a: str, b: str) -> str:
    """How the page labels a comparison of backend a against b: "within TensorFlow", "across frameworks (TensorFlow
    against PyTorch)", or "" for two PyTorch backends (the suite's first question, unlabelled)."""
    fa, fb = (FRAMEWORK_NAMES.get(get_backend(n).framework if n in BACKEND_MODULES else "torch") for n in (a, b))
    if fa == fb:
        return "" if fa == "PyTorch" else f"within {fa}"
    return f"across frameworks ({fa} against {fb})"


def get_backend(name: str) -> Any:  # a bench.backends.base.Backend, of a layer above
    if name not in BACKEND_MODULES:
        raise UsageError(f"unknown backend {name!r}; choose one of {', '.join(BACKEND_MODULES)}")
    return importlib.import_module(BACKEND_MODULES[name]).BACKEND


def compared_for(task: str) -> tuple[str, ...]:
    """The compared backends that take runs of `task` (a backend's `tasks`)."""
    return tuple(name for name in COMPARED if task in get_backend(name).tasks)


def all_backends(task: str, capable: Callable[[str], bool] | None = None) -> tuple[str, ...]:
    """What `--backend all` means, the same on every verb: every compared backend that takes runs of the verb's task
    (compared_for) and, where the verb needs more of a backend, has that capability (`capable`: an elastic mode to
    fault, a bare loop to check against). Which of them can run here is for the verb to find out, and say."""
    return tuple(name for name in compared_for(task) if capable is None or capable(name))


def against_the_plain_loop(backend: str) -> bool:
    """Whether `backend`'s runs are compared with the plain loop's (vs plain, the communication not hidden): only a
    backend of the plain loop's framework, whose step computes what the plain loop's does. Another framework's
    compute differs from the plain loop's, so it is measured against its own run at one worker (efficiency)."""
    return bool(get_backend(backend).framework == get_backend(PLAIN_LOOP).framework)


def kubeflow_backend(kind: str) -> str | None:
    """The backend a Kubeflow job of `kind` runs (bench k8s), None if none does."""
    return next((name for name in BACKEND_MODULES if kind in get_backend(name).kubeflow_kinds), None)


def elastic_backends() -> list[str]:
    """The backends with an elastic mode (what `bench fault` takes)."""
    return [name for name in BACKEND_MODULES if get_backend(name).elastic is not None]


def get_task(name: str) -> Any:  # a bench.tasks.base.Task, of a layer above
    if name not in TASK_MODULES:
        raise UsageError(f"unknown task {name!r}; this bench knows {', '.join(TASK_MODULES)}")
    return importlib.import_module(TASK_MODULES[name]).TASK


def all_tasks() -> list[Any]:
    return [get_task(name) for name in TASK_MODULES]


# The parts of a task that belong to higher layers, each a module of the task's folder, found by name:
TASK_PARTS = {
    "rank": "what one process of its runs does: run_rank(spec, run_dir, rank, attempt, t_process_start)",
    "results": "what its stored runs say: gate_figures(records, all_records), comparisons(frame)",
    "report": "its part of the page: report_part(frame, context)",
}


# The parts of a backend that belong to higher layers, each a module of the backend's folder, found by name:
BACKEND_PARTS = {
    "setup": "what it takes to run (bench.report.setup): FACTS, cited, and installed(env), from a run's set-up record"
}


def task_part(name: str, part: str) -> ModuleType | None:
    """The module of task `name` that holds its `part` (TASK_PARTS), or None when the task has none."""
    get_task(name)  # an unknown task is a UsageError, as everywhere
    return _part(TASK_MODULES[name], part, TASK_PARTS, "task")


def backend_part(name: str, part: str) -> ModuleType | None:
    """The module of backend `name` that holds its `part` (BACKEND_PARTS), or None when the backend has none."""
    get_backend(name)  # an unknown backend is a UsageError, as everywhere
    return _part(BACKEND_MODULES[name], part, BACKEND_PARTS, "backend")


def _part(package: str, part: str, parts: dict[str, str], of: str) -> ModuleType | None:
    if part not in parts:
        raise ValueError(f"unknown {of} part {part!r}")
    module = f"{package}.{part}"
    if importlib.util.find_spec(module) is None:
        return None
    return importlib.import_module(module)
