"""What the bare Keras loops (bare_mwms.py, bare_horovod_tf.py) share, none of it about a backend: their options, the
workload's Keras model and synthetic batches, and the timed loops, so that the two time the same work. Each loop
passes in its backend's own calls (its allreduce, its barrier, how the step averages the gradients).

The textbook custom training loop of both TensorFlow guides (TensorFlow's "custom training loop with
MultiWorkerMirroredStrategy", Horovod's TensorFlow 2 example): a `tf.function` step with a GradientTape, SGD with
momentum, mean cross-entropy of the logits. Like the loops, it imports only the standard library, numpy, TensorFlow,
tf_keras and the workloads' Keras builders; never torch, never the harness. The loops run as files, so their
folder, and this module with it, is first on sys.path.
"""

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # run from the checkout: find `workloads` in it
# TensorFlow then loads tf_keras, the Keras these loops build with, not Keras 3, as tf_keras's instructions have it
# (and as the suite's TensorFlow ranks start)
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
import numpy as np
from bare_options import parser, pin  # noqa: F401  (the loops' options, beside this file)

from workloads import WORKLOADS

BATCHES = 8  # synthetic batches made once, cycled


def start_tensorflow(args):
    """TensorFlow with --threads compute threads (its intra-op pool; the inter-op pool as many, at least 2, since a
    collective that waits for a peer holds one), before anything runs; the module."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(max(2, args.threads))
    if args.device == "cpu":
        tf.config.set_visible_devices([], "GPU")
    return tf


def use_gpu(tf, local_rank: int) -> None:
    """A GPU run: this process sees the GPU of its local rank alone, its memory grown as needed."""
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        tf.config.set_visible_devices(gpus[local_rank % len(gpus)], "GPU")
        tf.config.experimental.set_memory_growth(gpus[local_rank % len(gpus)], True)


def sizes(args):
    """(workload, batch, image, classes, timed steps) from the options, the workload's CPU or GPU size by default."""
    workload = WORKLOADS[args.workload]
    size = workload.gpu if args.device == "cuda" else workload.cpu
    return (
        workload,
        args.batch_size or size.batch,
        args.image_size or size.image,
        args.classes or size.synthetic_classes,
        args.steps or 5 * size.window_steps,
    )


def batches(args, rank: int, workload, batch: int, image: int, classes: int):
    """BATCHES seeded synthetic batches of this rank, channels-last float32 inputs and int64 labels."""
    rng = np.random.default_rng(args.seed * 1_000_003 + rank)
    xs = rng.standard_normal((BATCHES, batch, image, image, workload.channels), dtype=np.float32)
    ys = rng.integers(0, classes, (BATCHES, batch), dtype=np.int64)
    return xs, ys


def train_figure(tf, args, rank: int, world: int, barrier, build, make_step) -> dict:
    """Train the workload's Keras model on synthetic batches: {"throughput": samples/s, all ranks together}.
    build(make) runs make() (model and optimizer) where the backend builds them; make_step(model, optimizer,
    loss_of) is the backend's step, a tf.function of a batch."""
    import tf_keras as keras

    workload, batch, image, classes, steps = sizes(args)
    keras.utils.set_random_seed(args.seed)

    def make():
        model = workload.build_keras(classes, image)
        optimizer = keras.optimizers.SGD(learning_rate=args.lr, momentum=args.momentum)
        optimizer.build(model.trainable_variables)
        return model, optimizer

    model, optimizer = build(make)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=keras.losses.Reduction.NONE)

    def loss_of(x, y):
        return tf.reduce_mean(loss_fn(y, model(x, training=True)))

    step = make_step(model, optimizer, loss_of)
    xs, ys = batches(args, rank, workload, batch, image, classes)
    for i in range(args.warmup_steps):
        loss = step(xs[i % BATCHES], ys[i % BATCHES])
    loss.numpy()
    barrier()
    t0 = time.perf_counter()
    for i in range(args.warmup_steps, args.warmup_steps + steps):
        loss = step(xs[i % BATCHES], ys[i % BATCHES])
    loss.numpy()  # the last step's loss comes after its update: its value waits for all of it
    barrier()
    return {"throughput": batch * world * steps / (time.perf_counter() - t0)}


def allreduce_figure(tf, args, world: int, allreduce, barrier, slowest) -> dict:
    """Time allreduce(buffer) on args.allreduce bytes of float32 (the backend's, a tf.function):
    {"busbw_GBps": ...} (nccl-tests: t the mean time per op of the slowest rank, slowest(seconds))."""
    buf = tf.zeros([args.allreduce // 4], dtype=tf.float32)
    out = buf
    for _ in range(args.warmup_iters):
        out = allreduce(buf)
    barrier()
    if args.device == "cuda":
        tf.reshape(out, [-1])[:1].numpy()
    t0 = time.perf_counter()
    for _ in range(args.iters):
        out = allreduce(buf)
    tf.reshape(out, [-1])[:1].numpy()  # on a GPU the ops are queued: wait for the last
    seconds = (time.perf_counter() - t0) / args.iters
    t = slowest(seconds)
    return {"busbw_GBps": int(buf.shape[0]) * 4 / t / 1e9 * 2 * (world - 1) / world}


def print_figure_and_leave(figure: dict, rank: int) -> None:
    """Rank 0 prints the figure, one JSON line (what bench selfcheck reads); then the process leaves at once."""
    if rank == 0:
        print(json.dumps(figure), flush=True)
    sys.stdout.flush()
    os._exit(0)
