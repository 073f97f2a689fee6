"""Backend registry: name -> plug-in module holding BACKEND (bench.backends.base.Backend)."""

from __future__ import annotations

import importlib

from bench.errors import UsageError

BACKEND_MODULES = {
    "elastic": "bench.backends.elastic",
    "horovod": "bench.backends.horovod",
    "ps": "bench.backends.ps",
    "single": "bench.backends.single",
    "ray": "bench.backends.ray",
}
COMPARED = ("elastic", "horovod", "ps", "ray")  # what `--backend all` runs (where each can run)
PRIMARY = ("elastic", "horovod")  # the pair the report's verdict compares; the others are reference points
PLAIN_LOOP = "single"  # the plain loop every backend is also measured against
DEFAULT_BACKEND = "elastic"  # `bench run` and `bench fault` without --backend


def get_backend(name: str):
    if name not in BACKEND_MODULES:
        raise UsageError(f"unknown backend {name!r}; choose one of {', '.join(BACKEND_MODULES)}")
    return importlib.import_module(BACKEND_MODULES[name]).BACKEND


def elastic_backends() -> list[str]:
    """The backends with an elastic mode (what `bench fault` takes)."""
    return [name for name in BACKEND_MODULES if get_backend(name).elastic is not None]
