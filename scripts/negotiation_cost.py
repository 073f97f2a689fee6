"""What Horovod's negotiation costs per cycle as ranks are added: the source of the scaling model's coordination
constants (bench.projection.model.NEGOTIATION_S_PER_RANK, docs/method.md, "Projection").

Each rank times a loop of synchronous allreduces of one float, so the data moved is nothing and compute is none:
- under Horovod (horovodrun --gloo, the same tensor name every call, so its response cache answers as in training):
  each call waits for the background loop's next cycle, negotiates (every rank's ready bits combined), then reduces;
- under torch.distributed's gloo, the same allreduce without a negotiation.
Horovod's per-call time beyond gloo's, less that difference at 1 rank (no peer to negotiate with), is what the
negotiation costs at N ranks. On a machine of fewer cores than ranks, the ranks take turns on the cores: read the
figure past the core count as an upper bound.

Usage:
    python scripts/negotiation_cost.py                 # 1, 2 and 4 ranks, about a minute
    python scripts/negotiation_cost.py --ranks 1,2 --calls 2000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

CYCLE_MS = 0.2  # a short cycle, so that the wait for it (half a cycle on average) is small beside the negotiation


def horovod_rank(calls: int) -> None:
    import horovod.torch as hvd
    import torch

    hvd.init()
    x = torch.zeros(1)
    for _ in range(calls // 10):
        hvd.allreduce(x, name="one")
    start = time.perf_counter()
    for _ in range(calls):
        hvd.allreduce(x, name="one")
    took = (time.perf_counter() - start) / calls
    if hvd.rank() == 0:
        print(json.dumps({"per_call_s": took}))


def gloo_rank(rank: int, world: int, port: int, calls: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    x = torch.zeros(1)
    for _ in range(calls // 10):
        dist.all_reduce(x)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(calls):
        dist.all_reduce(x)
    took = (time.perf_counter() - start) / calls
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"per_call_s": took}, f)
    dist.destroy_process_group()


def horovod_call(ranks: int, calls: int) -> float:
    horovodrun = os.path.join(os.path.dirname(sys.executable), "horovodrun")
    env = dict(os.environ, HOROVOD_CYCLE_TIME=str(CYCLE_MS), OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [horovodrun, "--gloo", "-np", str(ranks), "-H", f"localhost:{ranks}", sys.executable, __file__, "--rank-of",
         "horovod", "--calls", str(calls)],
        capture_output=True, text=True, env=env, timeout=600, check=True,
    )  # fmt: skip
    line = next(x for x in proc.stdout.splitlines() if '"per_call_s"' in x)
    return json.loads(line[line.index("{") :])["per_call_s"]


def gloo_call(ranks: int, calls: int) -> float:
    import multiprocessing as mp
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "gloo.json")
        procs = [
            mp.get_context("spawn").Process(target=gloo_rank, args=(r, ranks, port, calls, out)) for r in range(ranks)
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join(600)
        with open(out) as f:
            return json.load(f)["per_call_s"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="1,2,4")
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--rank-of", choices=["horovod"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_of:
        horovod_rank(args.calls)
        return 0
    rows = []
    for ranks in (int(r) for r in args.ranks.split(",")):
        hvd, gloo = horovod_call(ranks, args.calls), gloo_call(ranks, args.calls)
        rows.append({"ranks": ranks, "horovod_s": hvd, "gloo_s": gloo, "beyond_gloo_s": hvd - gloo})
    base = rows[0]["beyond_gloo_s"] if rows[0]["ranks"] == 1 else 0.0
    for row in rows:
        row["negotiation_s"] = row["beyond_gloo_s"] - base
        print(
            f"{row['ranks']} rank(s): horovod {row['horovod_s'] * 1e6:8.1f} us a call, gloo {row['gloo_s'] * 1e6:8.1f}"
            f" us, negotiation beyond 1 rank {row['negotiation_s'] * 1e6:8.1f} us"
        )
    print(json.dumps({"cores": os.cpu_count(), "cycle_ms": CYCLE_MS, "calls": args.calls, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
