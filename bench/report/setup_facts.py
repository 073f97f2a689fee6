"""Dated, cited facts about each primary backend's releases, for the page's "What it takes to run" (bench.report.setup):
each fact with the public source it was read from and the day it was checked. Facts only, as the source states them;
what this machine's set-up did is its own record, not this module's (bench.tools.horovod_build).
"""

from __future__ import annotations

from dataclasses import dataclass

CHECKED = "2026-12-06"  # the day every source below was read


@dataclass(frozen=True)
class Fact:
    what: str  # "latest release", ...
    said: str  # the fact, in the source's terms
    source: str  # the address it was read from


FACTS: dict[str, tuple[Fact, ...]] = {
    "horovod": (
        Fact(
            "latest release",
            "0.28.1, released 2023-06-12; no release since",
            "https://github.com/horovod/horovod/blob/v0.28.1/CHANGELOG.md",
        ),
        Fact(
            "frameworks that release was tested with",
            "PyTorch 1.5.0 to 2.0.0 and TensorFlow 1.15 to 2.12.0 (its test matrix at v0.28.1)",
            "https://github.com/horovod/horovod/blob/v0.28.1/docker-compose.test.yml",
        ),
    ),
    "elastic": (
        Fact(
            "how it ships",
            "torchrun is a console script of torch itself, declared in torch's entry points (python -m "
            "torch.distributed.run): each torch release carries its own",
            "https://docs.pytorch.org/docs/stable/elastic/run.html",
        ),
    ),
}
