"""The options every bare loop takes (bench selfcheck passes the suite run's values) and the pinning they share, for
the PyTorch loops (bare_common.py) and the Keras ones (bare_keras_common.py) alike: the standard library and the
workloads' names only, no framework."""

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # run from the checkout: find `workloads` in it
from workloads import WORKLOADS  # noqa: E402


def parser() -> argparse.ArgumentParser:
    """Every bare loop's options (bench selfcheck passes the suite's run's values)."""
    p = argparse.ArgumentParser()
    p.add_argument("--workload", default="mnist_mlp", choices=list(WORKLOADS))
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--batch-size", type=int)  # per worker; batch, image and classes default to the workload's
    p.add_argument("--image-size", type=int)
    p.add_argument("--classes", type=int)
    p.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "1")))
    p.add_argument("--warmup-steps", type=int, default=5)
    p.add_argument("--steps", type=int)  # timed steps; default 5 of the workload's windows
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--allreduce", type=int, metavar="BYTES", help="time a float32 allreduce instead of training")
    p.add_argument("--warmup-iters", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    # cores: local rank r on cores [r*T, (r+1)*T)
    p.add_argument("--cpu-bind", default="none", choices=("none", "cores"))
    return p


def pin(local_rank: int, threads: int) -> None:
    """--cpu-bind cores: every thread of this process on the local rank's own cores."""
    cores = sorted(os.sched_getaffinity(0))
    chosen = [cores[(local_rank * threads + i) % len(cores)] for i in range(threads)]
    for thread in os.listdir("/proc/self/task"):
        os.sched_setaffinity(int(thread), chosen)
