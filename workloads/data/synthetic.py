"""The synthetic data's one generator, which no framework owns: a rank's batches as numpy arrays (synthetic_arrays),
the numbers the PyTorch backends hold on the device and the TensorFlow backends train on channels-last. It imports
numpy inside the function only, and never torch: a TensorFlow process loads it."""

from __future__ import annotations

from workloads.data.names import rank_seed

SYNTHETIC_BATCHES = 8  # distinct batches cycled per rank: enough that no step reuses the previous one


def synthetic_arrays(*, batch, channels, image, classes, seed, rank, count=SYNTHETIC_BATCHES):
    """A rank's synthetic batches as numpy arrays, (count, batch, channels, image, image) float32 inputs from a
    standard normal and (count, batch) int64 labels uniform in [0, classes), from numpy's PCG64 seeded with the
    rank's seed: one generator that no framework owns, so the PyTorch and the TensorFlow backends train on the same
    numbers (the TensorFlow side transposes them to channels-last)."""
    import numpy as np

    rng = np.random.default_rng(rank_seed(seed, rank))
    x = rng.standard_normal((count, batch, channels, image, image), dtype=np.float32)
    y = rng.integers(0, classes, (count, batch), dtype=np.int64)
    return x, y
