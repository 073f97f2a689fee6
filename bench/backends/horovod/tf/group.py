"""horovod-tf's process group: horovod.tensorflow's ranks, DistributedGradientTape in the Keras step
(bench.backends.shared.keras), Horovod's TensorFlow collectives, and Horovod elastic's state over a
TensorFlowKerasState. Imported by a run's processes only: TensorFlow and Horovod's TensorFlow side at the top."""

from __future__ import annotations

import contextlib

import horovod.tensorflow as hvd
import tensorflow as tf

from bench.backends.base import ProcessGroup, rank_row
from bench.backends.horovod import HorovodBackend
from bench.backends.horovod.state import HorovodElasticState
from bench.backends.shared.keras import (
    KerasElasticTraining,
    KerasTraining,
    TFBuffers,
    collective_function,
    optimizer_variables,
    set_tf_threads,
    visible_gpu,
)
from bench.rank.hooks import Buffers, ElasticTraining, Training

HOROVOD_OPS = HorovodBackend.comm_ops  # the same four collectives, and the same dtypes, as on the PyTorch side


class HorovodTFGroup(ProcessGroup):
    def set_threads(self, threads):
        set_tf_threads(threads)

    def init(self, spec):
        hvd.init()
        if spec.device == "cuda":
            visible_gpu(hvd.local_rank())
        self.hvd, self.tf, self.spec = hvd, tf, spec
        self._collective = None
        return rank_row(
            rank=hvd.rank(),
            world_size=hvd.size(),
            local_rank=hvd.local_rank(),
            local_world_size=hvd.local_size(),
            group_rank=hvd.cross_rank(),
            role_rank=hvd.rank(),
            restart_count=0,
        )

    def barrier(self):
        # horovod.tensorflow has no barrier: an allreduce every rank takes part in is one
        self.hvd.allreduce(self.tf.constant(0.0), op=self.hvd.Sum, name="bench.barrier").numpy()

    def shutdown(self):
        self.hvd.shutdown()

    def training(self, joined, workload) -> Training:
        return KerasTraining(joined, workload, self)

    def elastic_training(self, spec, workload) -> ElasticTraining:
        return KerasElasticTraining(spec, workload, self)

    def buffers(self, dtype, member) -> Buffers:
        return TFBuffers(dtype, self.spec.device)

    def run_op(self, op, inp, out):
        """Horovod's TensorFlow collectives, each in a tf.function as DistributedGradientTape's allreduce runs in the
        training step's (fusion, the controller and its cycle are measured too)."""
        if op not in HOROVOD_OPS:
            return super().run_op(op, inp, out)
        if self._collective is None:
            hvd = self.hvd

            def body(name, x):
                if name == "allreduce":
                    return hvd.allreduce(x, op=hvd.Sum, name="bench.allreduce")
                if name == "broadcast":
                    return hvd.broadcast(x, root_rank=0, name="bench.broadcast")
                if name == "allgather":
                    return hvd.allgather(x, name="bench.allgather")
                return hvd.reducescatter(x, op=hvd.Sum, name="bench.reduce_scatter")

            self._collective = collective_function(self.tf, body)
        return self._collective(op, inp)

    # ------------------------------------------------------------ KerasTraining's hooks
    def scope(self):
        return contextlib.nullcontext()

    def replicated(self, model, optimizer):
        """Rank 0's initial parameters and optimizer state, everywhere (hvd.broadcast_variables)."""
        self.hvd.broadcast_variables(model.variables, root_rank=0)
        self.hvd.broadcast_variables(optimizer_variables(optimizer), root_rank=0)

    def train_step(self, model, optimizer, loss_of):
        hvd, tf, opts = self.hvd, self.tf, self.spec.backend_options
        compression = hvd.Compression.fp16 if opts["hvd_compression"] == "fp16" else hvd.Compression.none
        op = hvd.Adasum if opts["hvd_op"] == "adasum" else hvd.Average

        @tf.function
        def step(x, y):
            with tf.GradientTape() as tape:
                loss = loss_of(x, y)
            tape = hvd.DistributedGradientTape(tape, compression=compression, op=op)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        return step

    def elastic_state(self, model, optimizer, run_dir, spec, on_reset):
        return HorovodTFElasticState(self.hvd, model, optimizer, on_reset)


# the operations whose failure horovod.tensorflow.elastic.run takes for a lost peer (an UnknownError naming one)
PEER_LOST_OPS = ("HorovodAllreduce", "HorovodAllgather", "HorovodBroadcast")


class HorovodTFElasticState(HorovodElasticState):
    """The horovod backend's worker state over horovod.tensorflow: hvd.elastic.run and a TensorFlowKerasState. A
    collective that meets a lost peer raises TensorFlow's UnknownError naming the Horovod operation, which
    hvd.elastic.run takes for a HorovodInternalError (restore the last commit, reset, go on)."""

    def __init__(self, hvd, model, optimizer, on_reset):
        super().__init__(hvd, model, optimizer, on_reset)
        self.tf = tf
        self.failures = (*self.failures, tf.errors.UnknownError)

    @staticmethod
    def tracked(hvd, model, optimizer):
        """The model and optimizer as they are (the group's train_step averages the gradients through
        DistributedGradientTape), in a TensorFlowKerasState."""
        return model, optimizer, hvd.elastic.TensorFlowKerasState(model, optimizer, step=0)

    def run(self, train) -> int:
        def guarded(state):
            try:
                return train(self)
            except self.tf.errors.UnknownError as exc:
                if any(op in exc.message for op in PEER_LOST_OPS):
                    raise
                # hvd.elastic.run for TensorFlow (0.28.1) swallows any other UnknownError and returns None
                raise RuntimeError(f"TensorFlow: {exc.message}") from exc

        return self.hvd.elastic.run(guarded)(self.state)


GROUP = HorovodTFGroup
