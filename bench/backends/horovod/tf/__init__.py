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

from bench.backends.horovod import HorovodBackend, built_frameworks
from bench.backends.horovod.tf.launcher import HorovodTFLauncher
from bench.backends.shared.tensorflow import NOT_PROJECTED, TF_TASKS, tensorflow_problem


class HorovodTFBackend(HorovodBackend):
    name = "horovod-tf"
    summary = "horovodrun (Gloo or MPI controller) + hvd.DistributedGradientTape (TensorFlow, Keras models)"
    framework = "tensorflow"
    tasks = (*TF_TASKS, "fault")
    # the horovod backend's options less local accumulation (DistributedGradientTape has no backward passes per step)
    options = tuple(o for o in HorovodBackend.options if o.name != "hvd_backward_passes")
    launcher = HorovodTFLauncher()
    group = "bench.backends.horovod.tf.group"

    def unavailable_reason(self, device):
        problem = tensorflow_problem(device) or super().unavailable_reason(device)
        if problem:
            return problem
        if "TensorFlow" not in built_frameworks():
            return (
                "this Horovod was built without TensorFlow; with TensorFlow installed, rebuild it: "
                "python -m bench.tools.horovod_build --force"
            )
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
