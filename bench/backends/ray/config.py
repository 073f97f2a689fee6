"""Ray Train's torch set-up, timed: imported where Ray runs (the driver, Ray Train's controller), never by the
parent, since it imports Ray."""

from __future__ import annotations

import time
from dataclasses import dataclass

from ray.train.torch import TorchConfig
from ray.train.torch.config import _TorchBackend

from bench.backends.ray.times import write_times
from bench.core.rundir import RunDir


class TimedBackend(_TorchBackend):
    """Ray Train's own torch backend, with its set-up of the process group in the workers timed (its start and end
    go to the run's ray.json): Ray Train does that set-up, once every worker is placed, before the training
    function runs, so it is the ranks' rendezvous."""

    def on_start(self, worker_group, backend_config):
        begun = time.time()
        super().on_start(worker_group, backend_config)
        write_times(RunDir(backend_config.run_dir), process_group_start=begun, process_group_end=time.time())


@dataclass
class TimedTorchConfig(TorchConfig):
    run_dir: str = ""

    @property
    def backend_cls(self):
        return TimedBackend


def timed_torch_config(backend: str, timeout_s: int, run_dir: str) -> TorchConfig:
    return TimedTorchConfig(backend=backend, timeout_s=timeout_s, run_dir=run_dir)
