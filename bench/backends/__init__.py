"""Backend registry: name -> plug-in module holding BACKEND."""

from __future__ import annotations

import importlib

from bench.errors import UsageError

# The distributed backends a sweep compares, and the plain loop they are all measured against.
BACKEND_MODULES = {
    "elastic": "bench.backends.elastic",
    "horovod": "bench.backends.horovod",
    "ps": "bench.backends.ps",
    "single": "bench.backends.single",
}
COMPARED = ("elastic", "horovod", "ps")
BASELINE = "single"


def get_backend(name: str):
    if name not in BACKEND_MODULES:
        raise UsageError(f"unknown backend {name!r}; choose one of {', '.join(BACKEND_MODULES)}")
    return importlib.import_module(BACKEND_MODULES[name]).BACKEND
