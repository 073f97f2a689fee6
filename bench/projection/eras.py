"""Horovod's defaults by version: the cycle of its background loop and its Tensor Fusion threshold, which decide how a
projection of Horovod moves the gradients (`bench predict --hvd-version`, --hvd-cycle-ms, --hvd-fusion-mb).

From horovod/horovod's history (each a commit of its repository, with the first release that has it):
- v0.9.0 (August 2017, the first release): the loop sleeps a fixed 5 ms between its rounds
  (`std::this_thread::sleep_for(std::chrono::milliseconds(5))` in horovod/tensorflow/mpi_ops.cc) and every tensor
  is reduced alone: no fusion yet;
- v0.9.3 (25 August 2017, commit 0972bb8e, pull request 15): Tensor Fusion, a 64 MiB buffer
  (`tensor_fusion_threshold = 64 * 1024 * 1024`, HOROVOD_FUSION_THRESHOLD overrides it); the 5 ms sleep stays
  (the README of 5 September 2017, whose tables docs/studies/published.md holds the model against, ran this);
- v0.13.3 (June 2018, commit 92454dae, pull request 276): the cycle becomes HOROVOD_CYCLE_TIME, 5 ms by default;
- v0.21.0 (November 2020, commit 3ffe479e, pull request 2468, CHANGELOG: "Changed default cycle time from 5ms to
  1ms and fusion threshold from 64MB to 128MB"): 1 ms and 128 MiB, Horovod's defaults since."""

from __future__ import annotations

import re
from dataclasses import dataclass

from bench.core.errors import UsageError


@dataclass(frozen=True)
class HorovodEra:
    since: tuple[int, int, int]  # the first release with these defaults
    when: str
    cycle_ms: float
    fusion_mb: float  # 0: no fusion (each tensor reduced alone)
    source: str

    @property
    def version(self) -> str:
        return ".".join(map(str, self.since))

    def words(self) -> str:
        fusion = f"Tensor Fusion up to {self.fusion_mb:g} MiB" if self.fusion_mb else "no Tensor Fusion"
        return f"Horovod {self.version} on ({self.when}): a {self.cycle_ms:g} ms cycle, {fusion} ({self.source})"


HOROVOD_ERAS = (
    HorovodEra((0, 9, 0), "August 2017", 5.0, 0.0, "a fixed 5 ms sleep in its loop, each tensor alone"),
    HorovodEra((0, 9, 3), "25 August 2017", 5.0, 64.0, "pull request 15, Tensor Fusion"),
    HorovodEra((0, 13, 3), "June 2018", 5.0, 64.0, "pull request 276, HOROVOD_CYCLE_TIME"),
    HorovodEra((0, 21, 0), "November 2020", 1.0, 128.0, "pull request 2468"),
)
NEWEST = HOROVOD_ERAS[-1]
VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def horovod_era(text: str | None) -> HorovodEra:
    """The defaults of Horovod VERSION (MAJOR.MINOR[.PATCH]): those of the newest era it is not older than; the
    newest when not given."""
    if text is None:
        return NEWEST
    match = VERSION.fullmatch(text.strip())
    if not match:
        raise UsageError(f"--hvd-version {text!r}: give a Horovod version such as 0.9.3, 0.19 or 0.28.1")
    version = (int(match[1]), int(match[2]), int(match[3] or 0))
    if version < HOROVOD_ERAS[0].since:
        raise UsageError(f"--hvd-version {text}: Horovod's first release was {HOROVOD_ERAS[0].version} (August 2017)")
    return [era for era in HOROVOD_ERAS if era.since <= version][-1]


def era_help() -> str:
    """Each era's defaults, for the options' help and the docs."""
    return "; ".join(
        f"{e.version}: {e.cycle_ms:g} ms, " + (f"{e.fusion_mb:g} MiB" if e.fusion_mb else "no fusion")
        for e in HOROVOD_ERAS
    )
