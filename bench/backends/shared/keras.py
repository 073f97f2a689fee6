"""The workers' TensorFlow side shared by the two TensorFlow backends (tf-mwms: MultiWorkerMirroredStrategy;
horovod-tf: Horovod's TensorFlow side): threads, the train task's framework side (KerasTraining), the
counterpart of bench.rank.training.TorchTraining, and the fault task's (KerasElasticTraining, the counterpart of
bench.rank.training.TorchElasticTraining). Each backend's group gives what differs: the scope the model is
built in, what happens once it is built (Horovod broadcasts from rank 0), and the step.

The same model as the PyTorch backends (the workload's build_keras: the same layers and parameter count, checked by
tests/test_tf.py), the same optimizer (SGD with the run's lr and momentum: Keras's v = m*v - lr*g, p += v equals
PyTorch's v = m*v + g, p -= lr*v at a constant lr), the same loss (mean cross-entropy of the logits) and the same
per-worker batch. Synthetic data are the PyTorch backends' own numbers (workloads.data.synthetic.synthetic_arrays,
numpy's generator, so no torch is loaded); a real data set (--data digits or mnist, --loader memory) is the PyTorch
backends' own batch stream, the same samples in the same order, converted per batch (it loads torch into the
process). Inputs are channels-last (NHWC).

Only a TensorFlow backend's processes import this module: TensorFlow is imported at the top (the parent's side,
which never loads it, is bench.backends.shared.tensorflow).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

from bench.backends.shared.keras_batches import channels_last_arrays, open_arrays
from bench.core.rundir import write_atomic
from bench.rank.hooks import Buffers, ElasticTraining, ParamSums, Training
from workloads.keras import keras


def set_tf_threads(threads: int) -> None:
    """--threads as TensorFlow's intra-op pool (what torch.set_num_threads sets); its inter-op pool gets as many,
    at least 2: a collective waiting for a peer holds one inter-op thread, and one pool thread would deadlock."""
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(max(2, threads))


def keras_sgd(spec):
    return keras().optimizers.SGD(learning_rate=spec.lr, momentum=spec.momentum)


def per_example_loss():
    """Cross-entropy of the logits per example: the caller averages (PyTorch's CrossEntropyLoss, mean)."""
    k = keras()
    return k.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=k.losses.Reduction.NONE)


def optimizer_variables(optimizer) -> list:
    """The optimizer's own variables (iterations, momentum slots), a property or a method by Keras version."""
    found = optimizer.variables
    return list(found() if callable(found) else found)


def seeded_model(spec, workload, group):
    """(the workload's Keras model, its SGD optimizer, built) from the run's seed, in the group's scope."""
    if workload.build_keras is None:
        raise RuntimeError(
            f"workload {workload.name} has no Keras model (build_keras): the TensorFlow backends cannot run it"
        )
    if spec.backward_passes != 1:
        raise RuntimeError("the TensorFlow backends take one backward pass per step")
    keras().utils.set_random_seed(spec.seed)  # Python's, numpy's and TensorFlow's: the same initial weights
    with group.scope():
        model = workload.build_keras(spec.num_classes, spec.image_size)
        optimizer = keras_sgd(spec)
        optimizer.build(model.trainable_variables)
    return model, optimizer


def mean_loss(model):
    """loss_of(x, y): the mean cross-entropy of `model`'s logits on a batch, as the groups' train_step takes it."""
    losses = per_example_loss()

    def loss_of(x, y):
        return tf.reduce_mean(losses(y, model(x, training=True)))

    return loss_of


def keras_param_sums(model) -> ParamSums:
    """The parameter sums of a Keras model's trainable weights (bench.rank.training.param_sums' counterpart)."""
    params = [np.asarray(w.numpy(), dtype=np.float64) for w in model.trainable_weights]
    return ParamSums(
        count=sum(p.size for p in params),
        total=float(sum(p.sum() for p in params)),
        absolute=float(sum(np.abs(p).sum() for p in params)),
    )


def save_keras_params(model, path) -> None:
    """Every weight (trainable or not) by its Keras name, as a numpy .npz file at `path`."""
    with open(path, "wb") as fh:
        np.savez(fh, **{w.name: w.numpy() for w in model.weights})


class KerasTraining(Training):
    """A training run's framework side under a TensorFlow backend, with TorchTraining's methods. `group` gives
    scope() (where the model and optimizer are built), replicated(model, optimizer) (called once they exist, before
    the first step) and train_step(model, optimizer, loss_of) (the step as a tf.function of a batch, returning this
    worker's loss)."""

    timed_input = None  # batches come from memory: no input wait to time

    def __init__(self, joined, workload, group):
        spec, info = joined.spec, joined.info
        self.spec, self.tf = spec, tf
        self.device = "/GPU:0" if spec.device == "cuda" else "/CPU:0"
        self.model, self.optimizer = seeded_model(spec, workload, group)
        group.replicated(self.model, self.optimizer)
        self._step = group.train_step(self.model, self.optimizer, mean_loss(self.model))
        self.batches = open_arrays(spec, info, workload)
        self._last = None

    def step(self):
        x, y = next(self.batches)
        self._last = self._step(x, y)
        return self._last

    @staticmethod
    def profiled():
        """No profile: the scaling model's per-gradient ready times come from PyTorch's hooks (bench.rank.profile)."""
        return None, None

    @staticmethod
    def value(loss) -> float:
        return float(loss.numpy())

    def sync(self) -> None:
        """Wait for the last step's work: its loss is the last thing it computes (the updates come before)."""
        if self._last is not None:
            self._last.numpy()

    def param_sums(self) -> ParamSums:
        return keras_param_sums(self.model)

    def save_params(self, path) -> None:
        save_keras_params(self.model, path)

    def save_model(self, path: str) -> str:
        write_atomic(path, write=lambda tmp: self.save_params(tmp))
        return path

    def device_peak_bytes(self) -> int | None:
        if self.spec.device != "cuda":
            return None
        return int(self.tf.config.experimental.get_memory_info("GPU:0")["peak"])

    def threads(self) -> dict:
        threading = self.tf.config.threading
        return {
            "tensorflow": threading.get_intra_op_parallelism_threads(),
            "interop": threading.get_inter_op_parallelism_threads(),
        }


class KerasElasticTraining(ElasticTraining):
    """A fault run's framework side under a TensorFlow backend, with bench.rank.training.TorchElasticTraining's
    methods: the seeded Keras model and optimizer (nothing broadcast here: the elastic mode's state syncs them from
    rank 0 when training starts and after each reset), one step on the batch of a given step number and rank
    (workloads.data.synthetic.synthetic_arrays' batch number step % SYNTHETIC_BATCHES of that rank, channels last: the
    PyTorch backends' numbers, the same after any restart or rank change),
    the checksum and the parameters saved (.npz). `group` gives scope() and train_step(model, optimizer, loss_of) as
    for KerasTraining; the step is traced once per model and optimizer."""

    def __init__(self, spec, workload, group):
        self.spec, self.workload, self.group = spec, workload, group
        self.model, self.optimizer = seeded_model(spec, workload, group)
        self._steps: dict[tuple[int, int], Callable[..., Any]] = {}
        self._arrays: dict[int, tuple] = {}

    def batch(self, step: int, rank: int):
        """The batch of step `step` for rank `rank`, as (inputs, labels) numpy arrays."""
        if rank not in self._arrays:
            spec = self.spec
            self._arrays[rank] = channels_last_arrays(
                batch=spec.batch_size,
                channels=self.workload.channels,
                image=spec.image_size,
                classes=spec.num_classes,
                seed=spec.seed,
                rank=rank,
            )
        xs, ys = self._arrays[rank]
        return xs[step % len(xs)], ys[step % len(ys)]

    def step(self, model, optimizer, step: int, rank: int):
        """Step number `step` (0-based) on rank `rank`, of the model and optimizer as the elastic mode trains them."""
        key = (id(model), id(optimizer))
        if key not in self._steps:
            self._steps[key] = self.group.train_step(model, optimizer, mean_loss(model))
        return self._steps[key](*self.batch(step, rank))

    def checksum(self) -> float:
        return keras_param_sums(self.model).total

    def save_params(self, path) -> None:
        save_keras_params(self.model, path)


class TFBuffers(Buffers):
    """A communication sweep's buffers as TensorFlow tensors of the sweep's dtype on the worker's device, with the
    methods of bench.rank.collectives.TorchBuffers. TensorFlow's collectives return a new tensor (there is no
    in-place op): the group's run_op returns it and leaves `out` unused. Waiting for the last op: on the CPU,
    TensorFlow's eager runtime returns from an op or a function call when its kernels have run (synchronous
    execution, its default), so there is nothing to wait for; on a GPU kernels are queued, and reading one element of
    the last result waits for them."""

    def __init__(self, dtype: str, device: str):
        self.tf, self.dtype = tf, getattr(tf, dtype)
        self.device, self.cuda = ("/GPU:0", True) if device == "cuda" else ("/CPU:0", False)

    def zeros(self, count: int):
        with self.tf.device(self.device):
            return self.tf.zeros([count], dtype=self.dtype)

    def pattern(self, count: int, rank: int):
        tf = self.tf
        with tf.device(self.device):
            return tf.cast((tf.range(count, dtype=tf.int64) % 7 + 1) * (rank + 1), self.dtype)

    def concat(self, parts: list):
        return self.tf.concat(parts, axis=0)

    def wrong(self, result, want) -> int:
        tf = self.tf
        if tuple(result.shape) != tuple(want.shape):
            return int(want.shape[0])
        return int(tf.reduce_sum(tf.cast(tf.not_equal(result, want), tf.int64)).numpy())

    def sync(self, last=None) -> None:
        if self.cuda and last is not None:
            self.tf.reshape(last, [-1])[:1].numpy()


def collective_function(tf, body):
    """body(op, tensor) as one tf.function per collective, as the training steps run them (traced once per message
    size in the untimed warm-up ops)."""
    functions = {}

    def run(op, tensor):
        if op not in functions:
            functions[op] = tf.function(lambda x: body(op, x))
        return functions[op](tensor)

    return run


def visible_gpu(local_rank: int) -> None:
    """On a GPU run, this worker sees only the GPU of its local rank (as torch.cuda.set_device picks it)."""
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        tf.config.set_visible_devices(gpus[local_rank % len(gpus)], "GPU")
        tf.config.experimental.set_memory_growth(gpus[local_rank % len(gpus)], True)
