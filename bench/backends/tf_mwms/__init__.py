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

from bench.backends.base import Backend, BackendOption
from bench.backends.shared.tensorflow import NOT_PROJECTED, TF_TASKS, tensorflow_problem
from bench.backends.tf_mwms.launcher import TFConfigLauncher

COLLECTIVES = ("auto", "ring", "nccl")
# the collectives a replica context offers (all_reduce, all_gather): the strategy has no public broadcast or
# reduce-scatter of a replica's tensor
MWMS_OPS = ("allreduce", "allgather")


class MWMSBackend(Backend):
    name = "tf-mwms"
    summary = "TensorFlow's MultiWorkerMirroredStrategy (TF_CONFIG per worker; RING on CPU, NCCL on GPU)"
    framework = "tensorflow"
    tasks = TF_TASKS
    options = (
        BackendOption(
            "tf_collective",
            "auto",
            "the strategy's all-reduce: ring (gRPC), nccl (GPU), auto: ring on the CPU, nccl on a GPU",
            str,
            COLLECTIVES,
            invalid=("gloo",),
        ),
    )
    comm_ops = MWMS_OPS
    comm_dtypes = ("float32", "float16")  # its collectives take no bfloat16 (TensorFlow 2.21)
    launcher = TFConfigLauncher()
    group = "bench.backends.tf_mwms.group"

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
