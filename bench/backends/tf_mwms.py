"""tf-mwms: TensorFlow's own distribution, tf.distribute.MultiWorkerMirroredStrategy, N worker processes on this
machine started by the suite, each with its TF_CONFIG (the cluster's worker addresses, ports free at launch, and
its own index), as TensorFlow's documentation starts them. Gradients are all-reduced by the strategy inside
optimizer.apply_gradients: on the CPU its collectives are RING over gRPC, on a GPU NCCL (--tf-collective auto).

The train task's loop is the same as every backend's (bench/tasks/train/rank.py); the step is a tf.function that
runs the replica's forward, backward and update under strategy.run, the loss scaled by 1/workers so that the
strategy's sum is the average (as DistributedDataParallel and Horovod average). Initial variables are made equal on
every worker by the strategy itself (worker 0's initial values are broadcast when a variable is created).
"""

from __future__ import annotations

import json
import os

from bench.backends.base import Backend, BackendOption, Launcher, ProcessGroup, rank_row
from bench.backends.tf_training import (NOT_PROJECTED, TF_ENV, TF_TASKS, KerasTraining, TFBuffers,
                                        collective_function, set_tf_threads, tensorflow_problem, visible_gpu)
from bench.backends.torchrun import free_port
from bench.cluster.fanout import local_processes_command

COLLECTIVES = ("auto", "ring", "nccl")
# the collectives a replica context offers (all_reduce, all_gather): the strategy has no public broadcast or
# reduce-scatter of a replica's tensor
MWMS_OPS = ("allreduce", "allgather")


def tf_config(addresses: list[str], index: int) -> str:
    return json.dumps({"cluster": {"worker": addresses}, "task": {"type": "worker", "index": index}})


class TFConfigLauncher(Launcher):
    """One guard per worker, started by bench.cluster.fanout as processes of this machine, each with its TF_CONFIG."""

    def env(self, spec):
        return dict(TF_ENV)

    def command(self, spec, rank_command, run_id):
        addresses = [f"127.0.0.1:{free_port()}" for _ in range(spec.world_size)]
        return local_processes_command([({"TF_CONFIG": tf_config(addresses, i)}, list(rank_command))
                                        for i in range(spec.world_size)])

    def rank_identity(self, env):
        if "TF_CONFIG" not in env:
            return 0, 0
        return int(json.loads(env["TF_CONFIG"])["task"]["index"]), 0


class MWMSGroup(ProcessGroup):
    def set_threads(self, threads):
        set_tf_threads(threads)

    def init(self, spec):
        import tensorflow as tf

        config = json.loads(os.environ["TF_CONFIG"])
        index, world = int(config["task"]["index"]), len(config["cluster"]["worker"])
        if spec.device == "cuda":
            visible_gpu(index)
        choice = spec.backend_options["tf_collective"]
        if choice == "auto":
            choice = "nccl" if spec.device == "cuda" else "ring"
        implementation = {"ring": tf.distribute.experimental.CommunicationImplementation.RING,
                          "nccl": tf.distribute.experimental.CommunicationImplementation.NCCL}[choice]
        # a stopped peer is noticed within the run's timeout, as gloo's is under the other backends
        options = tf.distribute.experimental.CommunicationOptions(implementation=implementation,
                                                                  timeout_seconds=max(60.0, spec.timeout))
        self.tf, self.index, self.world, self.timeout_s = tf, index, world, max(60.0, spec.timeout)
        self.strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
        self._barrier = self._collective = None
        self.barrier()  # the rendezvous: every worker's server is up and the collective group formed
        return rank_row(rank=index, world_size=world, local_rank=index, local_world_size=world, group_rank=0,
                        role_rank=index, restart_count=0)

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
        from tensorflow.python.eager import context

        coordination = context.context()
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

    def training(self, joined, workload):
        return KerasTraining(joined, workload, self)

    def buffers(self, spec, member):
        return TFBuffers(spec.comm["dtype"], spec.device)

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


class MWMSBackend(Backend):
    name = "tf-mwms"
    summary = "TensorFlow's MultiWorkerMirroredStrategy (TF_CONFIG per worker; RING on CPU, NCCL on GPU)"
    framework = "tensorflow"
    tasks = TF_TASKS
    counterpart = "elastic"  # each framework's own distribution: the comparison across frameworks
    options = (
        BackendOption("tf_collective", "auto", "the strategy's all-reduce: ring (gRPC), nccl (GPU), auto: ring on "
                      "the CPU, nccl on a GPU", str, COLLECTIVES, invalid=("gloo",)),
    )
    comm_ops = MWMS_OPS
    comm_dtypes = ("float32", "float16")  # its collectives take no bfloat16 (TensorFlow 2.21)
    launcher = TFConfigLauncher()
    group_type = MWMSGroup

    def unavailable_reason(self, device):
        return tensorflow_problem(device)

    def projection_problem(self):
        return NOT_PROJECTED

    def transport(self, device, options):
        choice = options["tf_collective"]
        return "NCCL" if choice == "nccl" or (choice == "auto" and device == "cuda") else "RING over gRPC"

    def check_options(self, options, device):
        if options["tf_collective"] == "nccl" and device != "cuda":
            return "--tf-collective nccl needs --device cuda"
        return None


BACKEND = MWMSBackend()
