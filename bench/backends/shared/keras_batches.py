"""The TensorFlow workers' batches (bench.backends.shared.keras), as numpy arrays: the PyTorch backends' own numbers,
channels-last. numpy only, no TensorFlow: a process may check them beside torch."""

from __future__ import annotations

import numpy as np

from workloads.data.sources import open_batches
from workloads.data.synthetic import synthetic_arrays


def channels_last_arrays(*, batch: int, channels: int, image: int, classes: int, seed: int, rank: int):
    """The PyTorch backends' synthetic batches (workloads.data.synthetic.synthetic_arrays: the same numbers), inputs
    transposed to NHWC."""
    x, y = synthetic_arrays(batch=batch, channels=channels, image=image, classes=classes, seed=seed, rank=rank)
    return np.ascontiguousarray(x.transpose(0, 1, 3, 4, 2)), y


class TorchBatchesAsArrays:
    """The PyTorch backends' batch stream of a real data set, each batch converted to NHWC numpy arrays."""

    def __init__(self, inner):
        self.inner = inner

    def __iter__(self):
        return self

    def __next__(self):
        x, y = next(self.inner)
        return x.permute(0, 2, 3, 1).contiguous().numpy(), y.numpy()


def open_arrays(spec, info, workload):
    """The worker's batches as (inputs, labels) numpy arrays, cycled forever."""
    if spec.loader != "memory":
        raise RuntimeError(
            f"the TensorFlow backends read batches from memory only (--loader memory), not --loader {spec.loader}"
        )
    if spec.data == "synthetic":
        xs, ys = channels_last_arrays(
            batch=spec.batch_size,
            channels=workload.channels,
            image=spec.image_size,
            classes=spec.num_classes,
            seed=spec.seed,
            rank=info.worker_index,
        )

        def cycle():
            while True:
                for i in range(len(xs)):
                    yield xs[i], ys[i]

        return cycle()
    return TorchBatchesAsArrays(
        open_batches(
            spec.data,
            batch=spec.batch_size,
            channels=workload.channels,
            image=spec.image_size,
            classes=spec.num_classes,
            seed=spec.seed,
            rank=info.worker_index,
            world=info.world_size,
            device="cpu",
            data_dir=spec.data_dir,
            loader="memory",
            workload=workload,
        )
    )
