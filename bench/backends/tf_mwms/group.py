"""tf-mwms's process group: tf.distribute.MultiWorkerMirroredStrategy over the cluster of its TF_CONFIG, the step
under strategy.run (bench.backends.shared.keras), the strategy's collectives. Imported by a run's processes only:
TensorFlow at the top."""

from __future__ import annotations

import json
import os

import tensorflow as tf
from tensorflow.python.eager import context as eager_context

from bench.backends.base import ProcessGroup, rank_row
from bench.backends.shared.keras import KerasTraining, TFBuffers, collective_function, set_tf_threads, visible_gpu
from bench.backends.tf_mwms import MWMS_OPS
from bench.rank.hooks import Buffers, Training


class MWMSGroup(ProcessGroup):
    def set_threads(self, threads):
        set_tf_threads(threads)

    def init(self, spec):
        config = json.loads(os.environ["TF_CONFIG"])
        index, world = int(config["task"]["index"]), len(config["cluster"]["worker"])
        self.device = spec.device
        if spec.device == "cuda":
            visible_gpu(index)
        choice = spec.backend_options["tf_collective"]
        if choice == "auto":
            choice = "nccl" if spec.device == "cuda" else "ring"
        implementation = {
            "ring": tf.distribute.experimental.CommunicationImplementation.RING,
            "nccl": tf.distribute.experimental.CommunicationImplementation.NCCL,
        }[choice]
        # a stopped peer is noticed within the run's collective timeout, as gloo's is under the other backends
        options = tf.distribute.experimental.CommunicationOptions(
            implementation=implementation, timeout_seconds=spec.collective_timeout
        )
        self.tf, self.index, self.world, self.timeout_s = tf, index, world, spec.collective_timeout
        self.strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
        self._barrier = self._collective = None
        self.barrier()  # the rendezvous: every worker's server is up and the collective group formed
        return rank_row(
            rank=index,
            world_size=world,
            local_rank=index,
            local_world_size=world,
            group_rank=0,
            role_rank=index,
            restart_count=0,
        )

    def barrier(self):
        tf, strategy = self.tf, self.strategy
        if self._barrier is None:

            @tf.function
            def meet():
                return strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)), axis=None)

            self._barrier = meet
        self._barrier().numpy()

    def shutdown(self):
        """Worker 0 leaves last. A worker fetches its peers' parts of a collective from their servers (gRPC
        RecvBuf), so a worker that exits as soon as its own last collective returned can cut off a peer still
        fetching from it ("Connection reset by peer"); each other worker says it is done in the strategy's
        coordination service (held by worker 0), and worker 0 waits for every one of them, for at most the run's
        timeout."""
        coordination = eager_context.context()
        if self.index == 0:
            for peer in range(1, self.world):
                coordination.get_config_key_value(f"bench.left/{peer}", int(self.timeout_s * 1000))
        else:
            try:
                coordination.set_config_key_value(f"bench.left/{self.index}", "1")
            except self.tf.errors.OpError:
                # worker 0 took the key and left before its answer came back ("Socket closed"), or is gone: this
                # worker's part is over either way, and worker 0's own ending is its own rank's to record
                pass

    def training(self, joined, workload) -> Training:
        return KerasTraining(joined, workload, self)

    def buffers(self, dtype, member) -> Buffers:
        return TFBuffers(dtype, self.device)

    def run_op(self, op, inp, out):
        """The collective as a training step makes it: inside strategy.run, through the replica context."""
        if op not in MWMS_OPS:
            return super().run_op(op, inp, out)
        if self._collective is None:
            tf, strategy = self.tf, self.strategy

            def body(name, x):
                def replica(value):
                    context = tf.distribute.get_replica_context()
                    # a collective's destination is its tensor's device, which a function's input does not have
                    with tf.device(strategy.extended.worker_devices[0]):
                        value = tf.identity(value)
                    if name == "allreduce":
                        return context.all_reduce(tf.distribute.ReduceOp.SUM, value)
                    return context.all_gather(value, axis=0)

                return strategy.experimental_local_results(strategy.run(replica, args=(x,)))[0]

            self._collective = collective_function(tf, body)
        return self._collective(op, inp)

    # ------------------------------------------------------------ KerasTraining's hooks
    def scope(self):
        return self.strategy.scope()

    def replicated(self, model, optimizer):
        pass  # the strategy broadcast worker 0's initial values as it created each variable

    def train_step(self, model, optimizer, loss_of):
        tf, strategy = self.tf, self.strategy
        workers = strategy.num_replicas_in_sync

        def replica(x, y):
            with tf.GradientTape() as tape:
                loss = loss_of(x, y)
                scaled = loss / workers  # the strategy sums the replicas' gradients: the sum of these is the mean
            grads = tape.gradient(scaled, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        @tf.function
        def step(x, y):
            return strategy.experimental_local_results(strategy.run(replica, args=(x, y)))[0]

        return step


GROUP = MWMSGroup
