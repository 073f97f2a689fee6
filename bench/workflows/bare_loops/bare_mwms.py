"""A bare MultiWorkerMirroredStrategy loop, the yardstick `bench selfcheck` holds the tf-mwms backend against.

    python bench/workflows/bare_loops/bare_mwms.py --num-workers 2 --threads 1
    python bench/workflows/bare_loops/bare_mwms.py --num-workers 2 --threads 1 --allreduce 16777216

Started as TensorFlow's multi-worker guide starts it: one process per worker, each with a TF_CONFIG naming every
worker's address and its own index. Without a TF_CONFIG the script is that launcher: it starts --num-workers copies
of itself on this machine (free local ports), waits for them, and exits with the first failure's status (ending
the others, which would wait for the failed one in a collective). Each worker
builds the model under strategy.scope() and runs a tf.function step under strategy.run, the loss scaled by
1/workers (the strategy sums the replicas' gradients). No harness: only the workload's Keras model and sizes are
shared, and the loops the bare Keras loops share (bare_keras_common.py, beside it). Worker 0 prints one JSON line,
{"throughput": samples/s} or {"busbw_GBps": ...} (nccl-tests: t the mean time per op, max over ranks).
"""

import json
import os
import socket
import subprocess
import sys
import time

import bare_keras_common as common  # beside this file, which python runs as a file

p = common.parser()
p.add_argument("--num-workers", type=int, default=2)
a = p.parse_args()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_workers() -> int:
    """The guide's launch, on one machine: N copies of this script, each with its TF_CONFIG."""
    addresses = [f"127.0.0.1:{free_port()}" for _ in range(a.num_workers)]
    workers = []
    for index in range(a.num_workers):
        config = {"cluster": {"worker": addresses}, "task": {"type": "worker", "index": index}}
        workers.append(
            subprocess.Popen([sys.executable, *sys.argv], env={**os.environ, "TF_CONFIG": json.dumps(config)})
        )
    # a worker that failed leaves the others waiting in a collective: end them, and exit with its status
    while True:
        codes = [w.poll() for w in workers]
        failed = next((c for c in codes if c), None)
        if failed is not None or all(c == 0 for c in codes):
            for w in workers:
                if w.poll() is None:
                    w.kill()
                    w.wait()
            return 128 - failed if failed and failed < 0 else failed or 0  # a signal as a shell reports it
        time.sleep(0.1)


if "TF_CONFIG" not in os.environ:
    sys.exit(launch_workers())

tf = common.start_tensorflow(a)
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
if a.cpu_bind == "cores":
    common.pin(index, a.threads)
if a.device == "cuda":
    common.use_gpu(tf, index)
implementation = tf.distribute.experimental.CommunicationImplementation
strategy = tf.distribute.MultiWorkerMirroredStrategy(
    communication_options=tf.distribute.experimental.CommunicationOptions(
        implementation=implementation.NCCL if a.device == "cuda" else implementation.RING
    )
)
world = strategy.num_replicas_in_sync


@tf.function
def _meet():
    return strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)), axis=None)


def barrier():
    _meet().numpy()


def build(make):
    with strategy.scope():
        return make()


def make_step(model, optimizer, loss_of):
    def replica(x, y):
        with tf.GradientTape() as tape:
            loss = loss_of(x, y)
            scaled = loss / world
        grads = tape.gradient(scaled, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function
    def step(x, y):
        return strategy.experimental_local_results(strategy.run(replica, args=(x, y)))[0]

    return step


def all_reduce(buf):
    def replica(value):
        with tf.device(strategy.extended.worker_devices[0]):  # the collective's destination is its input's device
            value = tf.identity(value)
        return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, value)

    return strategy.experimental_local_results(strategy.run(replica, args=(buf,)))[0]


@tf.function
def _max_of(seconds):
    def replica(value):  # the strategy reduces by SUM or MEAN only: gather every worker's, take the largest
        with tf.device(strategy.extended.worker_devices[0]):
            value = tf.reshape(value, [1])
        return tf.reduce_max(tf.distribute.get_replica_context().all_gather(value, axis=0))

    return strategy.experimental_local_results(strategy.run(replica, args=(seconds,)))[0]


def slowest_rank(seconds):
    return float(_max_of(tf.constant(seconds, dtype=tf.float64)).numpy())


def leave_last_from_worker_0():
    """Peers fetch a collective's data from each other's servers: worker 0 exits once every other worker said, in
    the strategy's coordination service (which worker 0 holds), that its last collective is done."""
    from tensorflow.python.eager import context

    if index == 0:
        for peer in range(1, world):
            context.context().get_config_key_value(f"bare.left/{peer}")
    else:
        try:
            context.context().set_config_key_value(f"bare.left/{index}", "1")
        except tf.errors.OpError:  # worker 0 took it and left before its answer came back: nothing is lost
            pass


if a.allreduce:
    out = common.allreduce_figure(tf, a, world, tf.function(all_reduce), barrier, slowest_rank)
else:
    out = common.train_figure(tf, a, index, world, barrier, build, make_step)
leave_last_from_worker_0()
common.print_figure_and_leave(out, index)
