"""The parent's side of the two TensorFlow backends (tf-mwms, horovod-tf): what their ranks' environment needs,
the kinds of run they take, why the scaling model does not project them, and whether TensorFlow is installed (read
without importing it). Their workers' side is bench.backends.shared.keras."""

from __future__ import annotations

import importlib.util

# TF's start-up chatter (oneDNN, CPU features, "no CUDA drivers") is kept out of the rank logs; errors still show.
# TF_USE_LEGACY_KERAS: the models are tf_keras's (workloads.keras), and `import tensorflow` loads a Keras eagerly:
# Keras 3 unless this is set, and scikit-learn with it, where installed (its wrappers); tf_keras with it, as tf_keras's
# own instructions say. That is about 1 s less at every rank's start and at horovodrun's build check, which imports
# TensorFlow on every Horovod launch (4.3 s against 3.3 s on a 2-core machine), for the Keras the ranks use anyway.
TF_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_USE_LEGACY_KERAS": "1"}
# the kinds of run both take: the converge task's rank program is PyTorch's; a fault run needs an elastic mode,
# which only horovod-tf has (it adds "fault")
TF_TASKS = ("train", "comm")
# why the scaling model does not project them (Backend.projection_problem)
NOT_PROJECTED = (
    "its runs have no step profile: the scaling model replays each gradient's ready time, which PyTorch's "
    "hooks give, and a TensorFlow tape computes every gradient in one call"
)
INSTALL_HINT = "pip install -e .[tf] (TensorFlow and tf_keras), then python -m bench.tools.horovod_build"


def tensorflow_problem(device: str) -> str | None:
    """None when TensorFlow and tf_keras are installed, else what is missing and how to get it (read without
    importing them)."""
    missing = [name for name in ("tensorflow", "tf_keras") if importlib.util.find_spec(name) is None]
    if missing:
        return f"{' and '.join(missing)} not installed: {INSTALL_HINT}"
    return None
