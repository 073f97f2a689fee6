"""A bare Horovod TensorFlow loop, the yardstick `bench selfcheck` holds the horovod-tf backend against.

    OMP_NUM_THREADS=1 horovodrun --gloo -np 2 -H localhost:2 python bench/workflows/bare_loops/bare_horovod_tf.py
    OMP_NUM_THREADS=1 horovodrun --gloo -np 2 -H localhost:2 python bench/workflows/bare_loops/bare_horovod_tf.py \
        --allreduce 16777216

Horovod's TensorFlow 2 way: hvd.init, the variables broadcast from rank 0 after the first step's build, and a
tf.function step whose tape is a hvd.DistributedGradientTape. No harness: only the workload's Keras model and sizes
are shared, and the loops the bare Keras loops share (bare_keras_common.py, beside it). Rank 0 prints one JSON line,
{"throughput": samples/s} or {"busbw_GBps": ...} (nccl-tests: t the mean time per op, max over ranks).
"""

import bare_keras_common as common  # beside this file, which python runs as a file

a = common.parser().parse_args()
tf = common.start_tensorflow(a)
import horovod.tensorflow as hvd  # noqa: E402  (after TensorFlow's threads are set: it starts none before)

hvd.init()
if a.cpu_bind == "cores":
    common.pin(hvd.local_rank(), a.threads)
if a.device == "cuda":
    common.use_gpu(tf, hvd.local_rank())
rank, world = hvd.rank(), hvd.size()


def barrier():
    hvd.allreduce(tf.constant(0.0), name="bare.barrier").numpy()  # horovod.tensorflow has no barrier of its own


def build(make):
    model, optimizer = make()
    hvd.broadcast_variables(model.variables, root_rank=0)
    found = optimizer.variables
    hvd.broadcast_variables(list(found() if callable(found) else found), root_rank=0)
    return model, optimizer


def make_step(model, optimizer, loss_of):
    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_of(x, y)
        grads = hvd.DistributedGradientTape(tape).gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return step


def slowest_rank(seconds):
    return float(tf.reduce_max(hvd.allgather(tf.constant([seconds], dtype=tf.float64))).numpy())


if a.allreduce:
    out = common.allreduce_figure(
        tf, a, world, tf.function(lambda buf: hvd.allreduce(buf, op=hvd.Sum)), barrier, slowest_rank
    )
else:
    out = common.train_figure(tf, a, rank, world, barrier, build, make_step)
hvd.shutdown()
common.print_figure_and_leave(out, rank)
