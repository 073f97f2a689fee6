"""tf-mwms's launcher: one guard per worker, each with its TF_CONFIG, as TensorFlow's documentation starts them."""

from __future__ import annotations

import json

from bench.backends.base import Launcher
from bench.backends.shared.tensorflow import TF_ENV
from bench.backends.shared.torchrun import free_port
from bench.cluster.fanout import local_processes_command


def tf_config(addresses: list[str], index: int) -> str:
    return json.dumps({"cluster": {"worker": addresses}, "task": {"type": "worker", "index": index}})


class TFConfigLauncher(Launcher):
    """One guard per worker, started by bench.cluster.fanout as processes of this machine, each with its TF_CONFIG."""

    def env(self, spec):
        return dict(TF_ENV)

    def command(self, spec, rank_command, run_id):
        addresses = [f"127.0.0.1:{free_port()}" for _ in range(spec.world_size)]
        return local_processes_command(
            [({"TF_CONFIG": tf_config(addresses, i)}, list(rank_command)) for i in range(spec.world_size)]
        )

    def rank_identity(self, env):
        if "TF_CONFIG" not in env:
            return 0, 0
        return int(json.loads(env["TF_CONFIG"])["task"]["index"]), 0
