"""horovod-tf: Horovod's TensorFlow side, horovodrun (the same launchers as the horovod backend: Gloo by default, MPI on
request) + hvd.DistributedGradientTape, variables broadcast from rank 0 before the first step.

One Horovod build holds both frameworks (bench.tools.horovod_build builds against TensorFlow too where it is
installed); this backend needs its TensorFlow library. The step is a tf.function: forward and loss under a
GradientTape, the tape wrapped by DistributedGradientTape (its gradients averaged over the workers, or Adasum;
fp16 compression on request), then the Keras optimizer's update. Fusion threshold and cycle time are Horovod's own
variables, as for the horovod backend. Horovod's Keras layer (horovod.tensorflow.keras) would need TF_USE_LEGACY_KERAS=1
from TF 2.16 on; the tape needs no Keras of Horovod's.

Its elastic mode (`bench fault`) is the horovod backend's (the same horovodrun --min-np/--max-np, discovery script,
hosts and scenarios) over horovod.tensorflow.elastic: hvd.elastic.run and a TensorFlowKerasState holding the Keras
model's and optimizer's variables and the step (commit, restore, and sync by broadcast from rank 0). Horovod's other
TensorFlow state, TensorFlowState (a list of variables), broadcasts them only when it is made under eager execution,
never in sync: a joining worker would then make a collective the others never join.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from bench.backends.base import ProcessGroup, rank_row
from bench.backends.horovod import (HorovodBackend, HorovodElastic, HorovodElasticState, HorovodLauncher,
                                    built_frameworks)
from bench.backends.tf_training import (NOT_PROJECTED, TF_ENV, TF_TASKS, KerasElasticTraining, KerasTraining,
                                        TFBuffers, collective_function, optimizer_variables, set_tf_threads,
                                        tensorflow_problem, visible_gpu)


HOROVOD_OPS = HorovodBackend.comm_ops  # the same four collectives, and the same dtypes, as on the PyTorch side


class HorovodTFLauncher(HorovodLauncher):
    def env(self, spec):
        return {**super().env(spec), **TF_ENV}


class HorovodTFGroup(ProcessGroup):
    def set_threads(self, threads):
        set_tf_threads(threads)

    def init(self, spec):
        import horovod.tensorflow as hvd
        import tensorflow as tf

        hvd.init()
        if spec.device == "cuda":
            visible_gpu(hvd.local_rank())
        self.hvd, self.tf, self.spec = hvd, tf, spec
        self._collective = None
        return rank_row(rank=hvd.rank(), world_size=hvd.size(), local_rank=hvd.local_rank(),
                        local_world_size=hvd.local_size(), group_rank=hvd.cross_rank(),
                        role_rank=hvd.rank(), restart_count=0)

    def barrier(self):
        # horovod.tensorflow has no barrier: an allreduce every rank takes part in is one
        self.hvd.allreduce(self.tf.constant(0.0), op=self.hvd.Sum, name="bench.barrier").numpy()

    def shutdown(self):
        self.hvd.shutdown()

    def training(self, joined, workload):
        return KerasTraining(joined, workload, self)

    def elastic_training(self, spec, workload):
        return KerasElasticTraining(spec, workload, self)

    def buffers(self, spec, member):
        return TFBuffers(spec.comm["dtype"], spec.device)

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


# the operations whose failure horovod.tensorflow.elastic.run takes for a lost peer (an UnknownError naming one)
PEER_LOST_OPS = ("HorovodAllreduce", "HorovodAllgather", "HorovodBroadcast")


class HorovodTFElasticState(HorovodElasticState):
    """The horovod backend's worker state over horovod.tensorflow: hvd.elastic.run and a TensorFlowKerasState. A
    collective that meets a lost peer raises TensorFlow's UnknownError naming the Horovod operation, which
    hvd.elastic.run takes for a HorovodInternalError (restore the last commit, reset, go on)."""

    def __init__(self, hvd, model, optimizer, on_reset):
        import tensorflow as tf

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


class HorovodTFElastic(HorovodElastic):
    """The horovod backend's elastic mode, its workers Horovod's TensorFlow side."""

    def unavailable_reason(self):
        return BACKEND.unavailable_reason("cpu")

    def worker_state(self, group, model, optimizer, run_dir, spec, on_reset):
        return HorovodTFElasticState(group.hvd, model, optimizer, on_reset)


class HorovodTFBackend(HorovodBackend):
    name = "horovod-tf"
    summary = "horovodrun (Gloo or MPI controller) + hvd.DistributedGradientTape (TensorFlow, Keras models)"
    framework = "tensorflow"
    tasks = (*TF_TASKS, "fault")
    counterpart = "horovod"  # the same launcher and library, in the other framework
    rival = "tf-mwms"  # within TensorFlow: Horovod against TensorFlow's own
    # the horovod backend's options less local accumulation (DistributedGradientTape has no backward passes per step)
    options = tuple(o for o in HorovodBackend.options if o.name != "hvd_backward_passes")
    launcher = HorovodTFLauncher()
    group_type = HorovodTFGroup
    elastic = HorovodTFElastic()

    def unavailable_reason(self, device):
        problem = tensorflow_problem(device) or super().unavailable_reason(device)
        if problem:
            return problem
        if "TensorFlow" not in built_frameworks():
            return "this Horovod was built without TensorFlow; with TensorFlow installed, rebuild it: " \
                   "python -m bench.tools.horovod_build --force"
        return None

    def check_options(self, options, device):
        return super().check_options({**options, "hvd_backward_passes": 1}, device)

    def backward_passes(self, options):
        return 1

    def projection_problem(self):
        return NOT_PROJECTED

    def doctor_lines(self):
        return []  # the horovod backend's lines say which build this is and which frameworks it holds


BACKEND = HorovodTFBackend()
