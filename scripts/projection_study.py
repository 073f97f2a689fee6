"""The scaling model's validation study (docs/studies/projection.md): the runs it is fitted on (one host: the plain
loop, each backend at 1 and 2 workers, and their communication sweeps; and each backend's allreduce across 2 test
hosts at each link rate) and the training runs it must predict without seeing them (2, 3 and 4 test hosts, one
worker each, links shaped to three rates per workload), all into one store.

Usage (as root, test hosts up: `bench testhosts up 4`):
    python scripts/projection_study.py --store docs/studies/projection/bench.sqlite [--part fit|test|all] [--repeats 3]
    python scripts/projection_study.py --store docs/studies/projection/bench.sqlite --part markdown  # its tables

Each held-out case gets a window of about WINDOW_S seconds: its steps per window come from a rough estimate of the
step (the bytes a ring moves over the link), which only sizes the measurement; the measured times are what the
model is judged against. Warm-up is 2 steps (the first is never timed; the second is profiled)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

WORKLOADS = {  # workload -> (gradient bytes, compute seconds per step on one core, rates)
    "mnist_mlp": (2.68e6, 0.012, ("20mbit", "100mbit", "1gbit")),
    "resnet18": (46.8e6, 0.25, ("250mbit", "500mbit", "1gbit")),
}
BACKENDS = "elastic,horovod,ps"
HOSTS = ",".join(f"10.213.7.1{i}:1" for i in range(1, 5))
WINDOW_S = 1.0
UNITS = {"mbit": 1e6, "gbit": 1e9}


def rate_bytes(rate: str) -> float:
    for unit, bits in UNITS.items():
        if rate.endswith(unit):
            return float(rate[: -len(unit)]) * bits / 8
    raise ValueError(rate)


def steps_per_window(workload: str, rate: str, world: int = 4) -> int:
    grad_bytes, compute, _ = WORKLOADS[workload]
    estimate = compute * world / 2 + 2 * (world - 1) / world * grad_bytes / rate_bytes(rate)
    return max(1, min(30, round(WINDOW_S / estimate)))


def bench(*args: str, verb: str = "sweep") -> None:
    cmd = [sys.executable, "-m", "bench", verb, *args]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def print_tables(store: str) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from bench.core.store import Store
    from bench.projection.study import tables
    from bench.projection.validate import validate

    records = Store(store).records()
    for table in tables(records, validate(records)):
        print("\n".join(table) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--part", choices=("fit", "links", "test", "all", "markdown"), default="all")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workload", default=",".join(WORKLOADS))
    parser.add_argument("--skip-link", default="", help="links part: rates already measured")
    args = parser.parse_args()
    if args.part == "markdown":  # the study page's tables, from the store (bench.projection.study)
        print_tables(args.store)
        return
    common = [
        "--store",
        args.store,
        "--repeats",
        str(args.repeats),
        "--no-faults",
        "--threads",
        "1",
        "--output",
        args.store.rsplit(".", 1)[0] + ".html",
    ]
    workloads = args.workload.split(",")
    if args.part in ("fit", "all"):
        bench("--backend", BACKENDS, "--workload", ",".join(workloads), "--world-sizes", "1,2", *common)
        for _ in range(args.repeats):  # a sweep runs the communication sweeps of elastic and Horovod only
            bench("--backend", "ps", "--nproc", "2", "--store", args.store, verb="allreduce")
    if args.part in ("links", "all"):  # each backend's allreduce at each link, across 2 hosts: a fit input
        rates = sorted({rate for w in workloads for rate in WORKLOADS[w][2]}, key=rate_bytes)
        two = ",".join(HOSTS.split(",")[:2])
        for rate in rates:
            if args.skip_link and rate in args.skip_link.split(","):
                continue
            top = int(min(64 * 2**20, max(2**20, rate_bytes(rate) * 2)))  # the largest message: about 2 s
            for backend in BACKENDS.split(","):
                bench(
                    "--backend",
                    backend,
                    "--hosts",
                    two,
                    "--nproc",
                    "2",
                    "--link",
                    rate,
                    "--max-bytes",
                    str(top),
                    "--iters",
                    "5",
                    "--warmup-iters",
                    "2",
                    "--store",
                    args.store,
                    "--oversubscribe",
                    verb="allreduce",
                )  # the parameter server's 2 servers beside the 2 workers: 4 processes
    if args.part in ("test", "all"):
        for workload in workloads:
            for rate in WORKLOADS[workload][2]:
                bench(
                    "--backend",
                    BACKENDS,
                    "--workload",
                    workload,
                    "--hosts",
                    HOSTS,
                    "--world-sizes",
                    "2,3,4",
                    "--links",
                    rate,
                    "--no-plain-loop",
                    "--no-comm",
                    "--oversubscribe",
                    "--warmup-steps",
                    "2",
                    "--windows",
                    "2",
                    "--steps-per-window",
                    str(steps_per_window(workload, rate)),
                    *common,
                )


if __name__ == "__main__":
    main()
