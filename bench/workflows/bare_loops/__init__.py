"""Bare loops: the textbook way to train (and to time an allreduce) with each compared backend, with no
harness around it, and how its own launcher starts it. `bench selfcheck` (bench.workflows.selfcheck) runs each one
next to the suite's run of the same backend.

A bare loop is started the way its launcher's documentation shows (`torchrun --standalone`,
`horovodrun --gloo -np N -H localhost:N`, a Ray Train script run by python as its own driver, N TensorFlow workers each
with its TF_CONFIG), never through the backend plug-in's launcher: the check would otherwise hold the suite against a
part of itself. The scripts import nothing of the harness but the workload's model builder (PyTorch's or Keras's)
and sizes, so the model and the data shape are the suite's.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.backends.horovod.launcher import horovodrun_program

HERE = Path(__file__).resolve().parent


def _torchrun(nproc: int) -> list[str]:
    # torchrun's own entry point, under this interpreter, so the ranks see the same environment
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc)]


def _horovodrun(nproc: int) -> list[str]:
    return [horovodrun_program(), "--gloo", "-np", str(nproc), "-H", f"localhost:{nproc}", sys.executable]


def _python(nproc: int) -> list[str]:
    return [sys.executable]  # the script is its own driver (Ray Train): the worker count is its own option


@dataclass(frozen=True)
class BareLoop:
    backend: str  # the suite's backend this loop is the yardstick of
    script: Path
    launcher: object  # nproc -> the launcher's command line up to the script
    nproc_flag: str | None = None  # the script's own option for the process count, where no launcher takes it

    def command(self, nproc: int, args: list[str]) -> list[str]:
        own = [self.nproc_flag, str(nproc)] if self.nproc_flag else []
        return [*self.launcher(nproc), str(self.script), *own, *map(str, args)]


BARE_LOOPS = {
    "elastic": BareLoop("elastic", HERE / "bare_ddp.py", _torchrun),
    "horovod": BareLoop("horovod", HERE / "bare_horovod.py", _horovodrun),
    "ray": BareLoop("ray", HERE / "bare_ray.py", _python, "--num-workers"),
    # TensorFlow's: a custom training loop of each guide (bare_keras_common.py); MultiWorkerMirroredStrategy has no
    # launcher, so its script starts its workers itself, each with its TF_CONFIG, as the guide does by hand
    "tf-mwms": BareLoop("tf-mwms", HERE / "bare_mwms.py", _python, "--num-workers"),
    "horovod-tf": BareLoop("horovod-tf", HERE / "bare_horovod_tf.py", _horovodrun),
}


def read_figure(output: str, key: str) -> float | None:
    """The figure `key` of the last JSON line a bare loop printed, found anywhere in a line of the launcher's
    output (launchers may prefix their ranks' lines); None when there is none."""
    for line in reversed(output.splitlines()):
        start = line.find("{")
        if start < 0:
            continue
        try:
            value = json.loads(line[start:])
        except ValueError:
            continue
        if isinstance(value, dict) and isinstance(value.get(key), (int, float)):
            return float(value[key])
    return None
