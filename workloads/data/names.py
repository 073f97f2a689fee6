"""The names the data sources and loaders go by (`--data`, `--loader`), the error a source that cannot be used
raises (DataError, its message saying what to do), and the rules every source shares: each rank's seed (rank_seed)
and the samples each rank takes per epoch (samples_per_rank). It imports nothing: the parent loads it for the
command line's choices and the spec's checks."""

from __future__ import annotations

SOURCES = ("synthetic", "digits", "mnist", "imagefolder", "workload")
READ_BY_LOADER = ("imagefolder", "workload")  # sources with no in-memory path: always a DataLoader
LOADERS = ("memory", "dataloader")
DIGIT_CLASSES = 10  # the classes of the handwritten-digit sources (digits, mnist)


class DataError(Exception):
    """The data source cannot be used as asked; the message says what to do."""


def rank_seed(seed: int, rank: int) -> int:
    # Distinct, reproducible streams per rank that do not depend on the world size.
    return seed * 1_000_003 + rank


def samples_per_rank(samples: int, world: int, batch: int) -> int:
    """Samples each rank takes per epoch (DistributedSampler's cut), or DataError when that is less than
    one batch: the rule the parent checks before launch and every rank's ShardedBatches relies on."""
    per_rank = samples // world
    if per_rank < batch:
        raise DataError(
            f"the data set has {samples} samples: too few for {world} worker(s) x batch {batch} "
            "(every worker needs a full batch); lower --batch-size or the world size"
        )
    return per_rank
