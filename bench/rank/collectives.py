"""Communication sweeps in nccl-tests' conventions (docs/method.md, "Communication").

A message of S bytes; t = mean time per op over the timed iterations, the max over ranks;
algbw = S / t; busbw = algbw x the op's bus factor; GB/s = 1e9 bytes/s. S is, as in nccl-tests, the
size of the whole buffer: the reduced buffer for allreduce and broadcast, the gathered output for
allgather, the input for reduce_scatter. Each size is timed on freshly zeroed buffers (warm-up ops, a
barrier, the timed ops), then checked as nccl-tests does: one more op on known data, #wrong counting
the elements that differ from the expected result, summed over ranks.
Each backend runs its own real path; only sizes, timing, checking and printing are shared here.
"""

from __future__ import annotations

import math
import re
import time

from bench.rank.hooks import Buffers

DTYPES = ("float32", "float16", "bfloat16")
# Defaults of a communication sweep (`bench allreduce`; `bench sweep` stops at bench.workflows.plan.SWEEP_DEFAULTS).
COMM_DEFAULTS = dict(min_bytes="4", max_bytes="64M", dtype="float32", ops="allreduce", warmup_iters=5, iters=20)
ELEMENT_SIZE = {"float32": 4, "float16": 2, "bfloat16": 2}
NCCL_TYPE_NAME = {"float32": "float", "float16": "half", "bfloat16": "bfloat16"}
GB = 1e9


class Op:
    """One collective: its bus-bandwidth factor and its buffer counts for a total of `count` elements."""

    def __init__(self, name, redop, factor, in_count, out_count, in_place):
        self.name, self.redop, self.factor = name, redop, factor
        self.in_count, self.out_count, self.in_place = in_count, out_count, in_place


OPS = {
    "allreduce": Op("allreduce", "sum", lambda n: 2 * (n - 1) / n, lambda c, n: c, lambda c, n: c, True),
    "allgather": Op("allgather", "none", lambda n: (n - 1) / n, lambda c, n: c // n, lambda c, n: c, False),
    "reduce_scatter": Op("reduce_scatter", "sum", lambda n: (n - 1) / n, lambda c, n: c, lambda c, n: c // n, False),
    "broadcast": Op("broadcast", "none", lambda n: 1.0, lambda c, n: c, lambda c, n: c, True),
}


def bus_factor(op: str, n: int) -> float:
    """busbw / algbw for `op` over n ranks (nccl-tests' bus factor): 2(n-1)/n for allreduce."""
    return OPS[op].factor(n)


def parse_bytes(text: str) -> int:
    """'4', '8K', '64M', '1G' (powers of 1024, as nccl-tests' -b/-e) -> bytes."""
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)B?\s*", str(text), re.IGNORECASE)
    if not match:
        raise ValueError(f"{text!r} is not a size; use a number with an optional K, M or G suffix")
    return int(match.group(1)) * 1024 ** " KMG".index(match.group(2).upper() or " ")


def format_bytes(size: int) -> str:
    """Bytes in the units parse_bytes reads: 4, 8K, 16M, 1G."""
    for unit, power in (("G", 3), ("M", 2), ("K", 1)):
        if size >= 1024**power and size % 1024**power == 0:
            return f"{size // 1024**power}{unit}"
    return str(size)


def sweep_sizes(min_bytes: int, max_bytes: int) -> list[int]:
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= 2
    return sizes


def element_count(op: Op, size: int, dtype: str, n: int) -> int:
    """Elements of the whole buffer, rounded down to a multiple of n where the op splits it."""
    count = size // ELEMENT_SIZE[dtype]
    if op.name in ("allgather", "reduce_scatter"):
        count -= count % n
    return count


def sweep_plan(comm, n: int) -> list[tuple[str, int, int]]:
    """(op, size in bytes, element count) of every step of a sweep at world size n, in order."""
    plan = []
    for op_name in comm.ops:
        op = OPS[op_name]
        for size in sweep_sizes(comm.min_bytes, comm.max_bytes):
            count = element_count(op, size, comm.dtype, n)
            if count and op.in_count(count, n):
                plan.append((op_name, size, count))
    return plan


def ops_per_size(comm) -> int:
    """Collective calls each rank makes per (op, size): warm-up, timed, and the one checked op. A process
    that serves the workers' collectives (a parameter server) must take part in exactly as many."""
    return comm.warmup_iters + comm.iters + 1


# ---------------------------------------------------------------- worker side
class TorchBuffers(Buffers):
    """A sweep's buffers as torch tensors of the run's dtype on the worker's device (what ProcessGroup.buffers gives
    by default). A framework's buffers offer the same: zeros, pattern, concat, wrong, sync(last result)."""

    def __init__(self, dtype: str, device, sync):
        import torch

        self.torch, self.dtype, self.device, self._sync = torch, getattr(torch, dtype), device, sync

    def zeros(self, count: int):
        return self.torch.zeros(count, dtype=self.dtype, device=self.device)

    def pattern(self, count: int, rank: int):
        """Small integers, exact in every dtype for the sums of a few ranks."""
        torch = self.torch
        return ((torch.arange(count, dtype=torch.int64) % 7 + 1) * (rank + 1)).to(self.dtype).to(self.device)

    def concat(self, parts: list):
        return self.torch.cat(parts)

    def wrong(self, result, want) -> int:
        """Elements of `result` that differ from `want` (all of them when the shapes differ)."""
        if tuple(result.shape) != tuple(want.shape):
            return int(want.numel())
        return int((result != want).sum().item())

    def sync(self, last=None) -> None:
        self._sync()


def expected(op: Op, count: int, rank: int, n: int, buffers):
    """What rank `rank` must hold after `op` on the ranks' patterns (buffers.pattern), as the buffers' tensors."""
    if op.name == "allreduce":
        return buffers.pattern(count, 0) * (n * (n + 1) // 2)
    if op.name == "broadcast":
        return buffers.pattern(count, 0)
    if op.name == "allgather":
        per = count // n
        return buffers.concat([buffers.pattern(per, r) for r in range(n)])
    per = count // n  # reduce_scatter: this rank's slice of the summed input
    return (buffers.pattern(count, 0) * (n * (n + 1) // 2))[rank * per : (rank + 1) * per]


def timed_chunks(iters: int, chunks: int = 5) -> list[int]:
    """The timed iterations split into up to `chunks` near-equal back-to-back chunks."""
    chunks = max(1, min(chunks, iters))
    return [iters // chunks + (1 if i < iters % chunks else 0) for i in range(chunks)]


def time_messages(spec, group, info, buffers) -> list[dict]:
    """Every (op, size) of spec.comm on this rank (group: the backend's ProcessGroup; buffers: its framework's,
    ProcessGroup.buffers): #wrong and the mean time per op. Each size makes ops_per_size(spec.comm) calls. A
    framework whose collectives return a new tensor (TensorFlow's) gets `out` too and may leave it unused."""
    comm = spec.comm
    n, rows = info.world_size, []
    for op_name, _size, count in sweep_plan(comm, n):
        op = OPS[op_name]
        # As nccl-tests: time first, on fresh buffers, then check one op on known data.
        inp = buffers.zeros(op.in_count(count, n))
        out = inp if op.in_place else buffers.zeros(op.out_count(count, n))
        result = None
        for _ in range(comm.warmup_iters):
            result = group.run_op(op.name, inp, out)
        group.barrier()
        buffers.sync(result)
        chunk_times = []  # per-op time of each timed chunk: the windows the regression gate resamples
        t0 = time.perf_counter()
        for chunk in timed_chunks(comm.iters):
            t_chunk = time.perf_counter()
            for _ in range(chunk):
                result = group.run_op(op.name, inp, out)
            buffers.sync(result)
            chunk_times.append((time.perf_counter() - t_chunk) / chunk)
        elapsed = time.perf_counter() - t0
        known = buffers.pattern(op.in_count(count, n), info.worker_index)
        result = group.run_op(op.name, known, known if op.in_place else out)
        wrong = buffers.wrong(result, expected(op, count, info.worker_index, n, buffers))
        rows.append(
            {
                "op": op.name,
                "size": count * ELEMENT_SIZE[comm.dtype],
                "count": count,
                "time_s": elapsed / comm.iters,
                "chunk_times_s": chunk_times,
                "wrong": wrong,
            }
        )
    return rows


# ---------------------------------------------------------------- parent side
def combine(spec, per_rank: dict[int, list[dict]]) -> list[dict]:
    """One row per (op, size): the time is the max over ranks, #wrong the sum."""
    n = spec.world_size
    ranks = sorted(per_rank)
    rows = []
    for i, first in enumerate(per_rank[ranks[0]]):
        t = max(per_rank[r][i]["time_s"] for r in ranks)
        op = OPS[first["op"]]
        algbw = first["size"] / t / GB
        rows.append(
            {
                "op": first["op"],
                "size": first["size"],
                "count": first["count"],
                "type": spec.comm.dtype,
                "redop": op.redop,
                "time_us": t * 1e6,
                "algbw_gbps": algbw,
                "busbw_gbps": algbw * op.factor(n),
                "wrong": sum(per_rank[r][i]["wrong"] for r in ranks),
                "per_rank_time_us": [per_rank[r][i]["time_s"] * 1e6 for r in ranks],
                # chunk by chunk, the max over ranks, as for the whole
                "window_time_us": [max(c) * 1e6 for c in zip(*(per_rank[r][i]["chunk_times_s"] for r in ranks))],
            }
        )
    return rows


def fit_alpha_beta(rows: list[dict], alpha_coef: float, beta_coef: float) -> dict | None:
    """Least-squares fit of T = alpha_coef * a + beta_coef * S * b, weighted by 1/T so that every size
    counts by its relative error; a is the latency per step (s), b the time per byte (s/byte)."""
    points = [(r["size"], r["time_us"] * 1e-6) for r in rows]
    if len(points) < 2 or alpha_coef <= 0 or beta_coef <= 0:
        return None
    import numpy as np

    s = np.array([p[0] for p in points], dtype=float)
    t = np.array([p[1] for p in points], dtype=float)
    w = 1.0 / t
    design = np.stack([np.full_like(s, alpha_coef), beta_coef * s], axis=1)
    (a, b), *_ = np.linalg.lstsq(design * w[:, None], t * w, rcond=None)
    predicted = design @ np.array([a, b])
    ss_res = float(np.sum(((t - predicted) * w) ** 2))
    ss_tot = float(np.sum(((t - np.average(t, weights=w)) * w) ** 2)) or float("nan")
    return {
        "alpha_s": float(a),
        "beta_s_per_byte": float(b),
        "bandwidth_gbps": float(1.0 / b / GB) if b > 0 else float("inf"),
        "alpha_coef": alpha_coef,
        "beta_coef": beta_coef,
        "r2_weighted": 1.0 - ss_res / ss_tot,
        "predicted_time_us": [float(p * 1e6) for p in predicted],
    }


def average_busbw(rows: list[dict], op: str) -> float | None:
    values = [r["busbw_gbps"] for r in rows if r["op"] == op]
    return sum(values) / len(values) if values else None


def format_table(rows: list, ceiling: dict | None = None) -> str:
    """nccl-tests' table of a run's rows (bench.tasks.comm.CommRow): size, count, type, redop, time, algbw,
    busbw, #wrong; then the average busbw."""
    lines = []
    for op in dict.fromkeys(r.op for r in rows):
        mine = [r for r in rows if r.op == op]
        lines += [
            f"# {op}",
            "#       size         count      type   redop     time   algbw   busbw  #wrong",
            "#        (B)    (elements)                       (us)  (GB/s)  (GB/s)",
        ]
        for r in mine:
            lines.append(
                f"{r.size:12d}  {r.count:12d}  {NCCL_TYPE_NAME[r.type]:>8}  {r.redop:>6}"
                f"  {r.time_us:7.1f}  {r.algbw_gbps:6.2f}  {r.busbw_gbps:6.2f}  {r.wrong:6d}"
            )
        lines.append(f"# Avg bus bandwidth    : {sum(r.busbw_gbps for r in mine) / len(mine):.4f}")
        lines.append("#")
    if ceiling:
        lines.append(
            f"# machine ceiling: {ceiling['limit_name']} {ceiling['limit_gbps']:.2f} GB/s "
            f"({', '.join(f'{k} {v:.2f} GB/s' for k, v in ceiling['measured_gbps'].items())})"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------- the machine's limit
def copy_bandwidth(device: str = "cpu", nbytes: int = 256 * 2**20, repeats: int = 5) -> float:
    """Bytes copied per second by one large tensor copy (best of `repeats`), in GB/s."""
    import torch

    src = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    best = math.inf
    for _ in range(repeats):
        if device != "cpu":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        dst.copy_(src)
        if device != "cpu":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return nbytes / best / GB


def loopback_bandwidth(nbytes: int = 256 * 2**20, chunk: int = 4 * 2**20) -> float:
    """One TCP stream over 127.0.0.1 (what gloo uses between processes of one host), in GB/s."""
    import socket
    import threading

    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    payload = bytes(chunk)

    def send():
        with socket.create_connection(server.getsockname()) as conn:
            for _ in range(nbytes // chunk):
                conn.sendall(payload)

    sender = threading.Thread(target=send)
    sender.start()
    conn, _ = server.accept()
    buf = bytearray(chunk)
    view = memoryview(buf)
    received, t0 = 0, time.perf_counter()
    with conn:
        while received < nbytes:
            got = conn.recv_into(view)
            if not got:
                break
            received += got
    elapsed = time.perf_counter() - t0
    sender.join()
    server.close()
    return received / elapsed / GB


def measure_ceiling(device: str) -> dict:
    """The bandwidth a collective on this machine can at best approach, measured now."""
    if device == "cuda":
        d2d = copy_bandwidth("cuda")
        return {"measured_gbps": {"device_copy": d2d}, "limit_name": "device-to-device copy", "limit_gbps": d2d}
    # best of three: a limit is what the machine can do, and one transfer can be slowed by anything
    memcpy, loopback = copy_bandwidth("cpu"), max(loopback_bandwidth(128 * 2**20) for _ in range(3))
    return {
        "measured_gbps": {"memory_copy": memcpy, "loopback_tcp": loopback},
        "limit_name": "loopback TCP",
        "limit_gbps": loopback,
    }
