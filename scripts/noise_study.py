"""What explains the spread between launches on a small machine, and whether a covariate measured beside each launch
narrows the comparisons honestly (docs/studies/noise.md).

    .nox/tests/bin/python scripts/noise_study.py collect docs/studies/noise --rounds 12   # minutes of launches
    .nox/tests/bin/python scripts/noise_study.py analyse docs/studies/noise              # figures.json, printed

collect: rounds of the main job's two-worker training rows (elastic and horovod, MLP and ResNet18, each round's four
launches in a shuffled order), each a `bench run` as the sweep launches it, into FOLDER/bench.sqlite. Beside each
launch, into FOLDER/covariates.json:

- the machine's speed just before and just after it: a fixed single-threaded matrix product timed on each core by a
  process pinned there (YARDSTICK), as the workers are pinned, with nothing else of the study running;
- sampled every SAMPLE_S while it runs: the machine's busy time per core (/proc/stat), and for every process of the
  launch's tree its CPU time and its time waiting for a core (/proc/PID/schedstat), so that the windows the launch
  timed can be read afterwards: the workers' time waiting for a core, the launch's other processes' (bench, the
  launcher, its agents) CPU share, and the rest of the machine's;
- its order in the study, the seconds since the previous launch ended, and the core each rank was pinned to.

analyse: the figures of docs/studies/noise.md, from those two files alone (tests/test_noise_study.py recomputes them).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.core import stats  # noqa: E402
from bench.core.store import Store  # noqa: E402
from bench.workflows.sequential import fix_looks, simulated_launches, simulated_sweeps  # noqa: E402

CASES = [(backend, workload) for backend in ("elastic", "horovod") for workload in ("mnist_mlp", "resnet18")]
SAMPLE_S = 0.1
YARDSTICK = (128, 3000)  # a 128 x 128 float32 matrix product, 3000 times: about 0.2 s a core on a quiet 2-core EPYC
# the main job's rounds (noxfile.py's MAIN_JOB_SEQUENTIAL): at most this long, toward this resolution, after 3 planned
# launches a side
MAIN_JOB = {"timeout_s": 135.0, "resolution": 0.08, "first": 3}
# the adjustment's A/A check: random halves of one case's launches compared, as often as this
AA_SPLITS = 4000
SEED = 20261206


# ---------------------------------------------------------------- collect
def yardstick_worker(core: int, orders, answers) -> None:
    """A process pinned to `core` that times the yardstick whenever asked (torch imported once, before any launch)."""
    os.sched_setaffinity(0, {core})
    import torch

    torch.set_num_threads(1)
    size, repeats = YARDSTICK
    a = torch.rand(size, size)
    b = torch.rand(size, size)
    while orders.get() is not None:
        began = time.perf_counter()
        for _ in range(repeats):
            a.mm(b)
        answers.put((core, time.perf_counter() - began))


class Yardstick:
    """One pinned timing process per core; `speed()`: each core's yardstick runs a second, all cores at once."""

    def __init__(self):
        ctx = multiprocessing.get_context("spawn")
        self.cores = sorted(os.sched_getaffinity(0))
        self.orders = [ctx.Queue() for _ in self.cores]
        self.answers = ctx.Queue()
        self.procs = [
            ctx.Process(target=yardstick_worker, args=(core, q, self.answers), daemon=True)
            for core, q in zip(self.cores, self.orders)
        ]
        for proc in self.procs:
            proc.start()
        self.speed()  # the first timing warms the processes up

    def speed(self) -> dict[int, float]:
        for q in self.orders:
            q.put(True)
        timed = dict(self.answers.get(timeout=60) for _ in self.cores)
        return {core: 1.0 / seconds for core, seconds in timed.items()}

    def close(self) -> None:
        for q in self.orders:
            q.put(None)
        for proc in self.procs:
            proc.join(timeout=10)


def cpu_busy() -> list[list[float]]:
    """Each core's busy seconds so far: [in tasks (user, nice, system, steal), in interrupts (irq, softirq: the
    kernel's network stack, which gloo's loopback traffic keeps busy, is charged to no process)], from /proc/stat."""
    hz = os.sysconf("SC_CLK_TCK")
    out = []
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("cpu") and line[3].isdigit():
                user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in line.split()[1:9])
                out.append([(user + nice + system + steal) / hz, (irq + softirq) / hz])
    return out


def process_times(pid: int) -> tuple[float, ...] | None:
    """(parent pid, its main thread's seconds on a core and waiting for one, every thread's seconds on a core) of a
    process, or None when it has gone. /proc/PID/schedstat is the main thread's alone (nanoseconds); /proc/PID/stat's
    user and system time count every thread, the ended ones too (clock ticks): a worker's helper threads (the
    backend's background loop, gloo's I/O) are their difference."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        with open(f"/proc/{pid}/schedstat") as f:
            running_ns, waiting_ns, _ = (int(x) for x in f.read().split())
    except (OSError, ValueError):
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    every = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return int(fields[1]), running_ns / 1e9, waiting_ns / 1e9, every


class TreeSampler:
    """Every SAMPLE_S while a launch runs: the wall time, each core's busy seconds, and each process of the tree
    under `root`'s CPU and wait seconds (a process is found when its parent is already in the tree)."""

    def __init__(self, root: int):
        self.root = root
        self.samples: list[dict] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        # a new process is read once for its parent; only the tree's are read at every sample, so that the sampler
        # itself takes little of the cores it watches
        tree, outside = {self.root}, set()
        while not self.stop.is_set():
            at = time.time()
            busy = cpu_busy()
            for name in os.listdir("/proc"):
                if name.isdigit() and int(name) not in tree and int(name) not in outside:
                    seen = process_times(int(name))
                    if seen is not None:
                        (tree if seen[0] in tree else outside).add(int(name))
            procs = {}
            for pid in tree:
                seen = process_times(pid)
                if seen is not None:
                    procs[str(pid)] = [round(x, 5) for x in seen[1:]]
            busy = [[round(x, 2) for x in core] for core in busy]  # clock ticks: hundredths
            self.samples.append({"t": round(at, 4), "busy": busy, "procs": procs})
            self.stop.wait(SAMPLE_S)

    def finish(self) -> list[dict]:
        self.stop.set()
        self.thread.join()
        return self.samples


def launch(folder: Path, backend: str, workload: str) -> tuple[dict, list[dict]]:
    """One `bench run` of the case as the main job's sweep launches it; its record and the tree's samples."""
    argv = [sys.executable, "-m", "bench", "run", "--backend", backend, "--workload", workload, "--nproc", "2"]
    argv += ["--store", str(folder / "bench.sqlite"), "--json"]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sampler = TreeSampler(proc.pid)
    try:
        out, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        proc.terminate()  # bench ends its run's processes on SIGTERM and records the run as interrupted
        proc.communicate(timeout=60)
        raise SystemExit(f"{backend} {workload}: no end after 300 s; ended") from None
    finally:
        samples = sampler.finish()
    if proc.returncode != 0:
        raise SystemExit(f"{backend} {workload} failed ({proc.returncode}): {err.strip().splitlines()[-1:]}")
    record = json.loads(out)
    return (record[0] if isinstance(record, list) else record), samples


def collect(folder: Path, rounds: int) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "covariates.json"
    kept = json.loads(path.read_text()) if path.exists() else {"launches": []}
    order = random.Random(SEED + len(kept["launches"]))
    yardstick = Yardstick()
    previous_end = None
    try:
        for round_ in range(rounds):
            cases = list(CASES)
            order.shuffle(cases)
            for backend, workload in cases:
                before = yardstick.speed()
                began = time.time()
                record, samples = launch(folder, backend, workload)
                ended = time.time()
                after = yardstick.speed()
                kept["launches"].append(
                    {
                        "run_id": record["run_id"],
                        "backend": backend,
                        "workload": workload,
                        "round": round_,
                        "order": len(kept["launches"]),
                        "gap_s": None if previous_end is None else round(began - previous_end, 3),
                        "yardstick_before": {str(k): round(v, 5) for k, v in before.items()},
                        "yardstick_after": {str(k): round(v, 5) for k, v in after.items()},
                        "samples": samples,
                    }
                )
                previous_end = ended
                path.write_text(json.dumps(kept, separators=(",", ":")))
                print(
                    f"[{len(kept['launches'])}] {backend} {workload}: {record['metrics']['throughput']['mean']:,.0f} "
                    f"samples/s; yardstick {sum(before.values()):.2f} -> {sum(after.values()):.2f} /s",
                    flush=True,
                )
    finally:
        yardstick.close()
    return 0


# ---------------------------------------------------------------- analyse
def at(samples: list[dict], when: float, pick) -> float:
    """A sampled quantity at time `when`, linearly between the samples around it (the nearest end outside them)."""
    times = [s["t"] for s in samples]
    values = [pick(s) for s in samples]
    return float(np.interp(when, times, values))


def proc_value(sample: dict, pid: int, index: int) -> float:
    return sample["procs"].get(str(pid), [math.nan] * 3)[index]


def timed_span(record) -> tuple[float, float]:
    """The windows the launch timed: ending when its first rank exited, as long as their sum."""
    ended = min(e["time"] for e in record.events if e["kind"] == "rank_exit")
    return ended - sum(record.metrics.window_times_s), ended


def covariates_of(entry: dict, record) -> dict:
    """The figures measured beside one launch, over the windows it timed where they are sampled."""
    samples = entry["samples"]
    began, ended = timed_span(record)
    span = ended - began
    workers = [row.pid for row in record.rank_map if row.role == "worker"]
    others = {int(p) for s in samples for p in s["procs"]} - set(workers)

    def delta(pid: int, index: int) -> float:
        # a process's last sample carries its total; one that has gone before `ended` counts to its last sample
        alive = [s for s in samples if str(pid) in s["procs"]]
        if not alive:
            return 0.0
        return at(alive, ended, lambda s: proc_value(s, pid, index)) - at(
            alive, began, lambda s: proc_value(s, pid, index)
        )

    cores = len(samples[0]["busy"])

    def busy(kind: int) -> float:
        return sum(
            at(samples, ended, lambda s, c=c: s["busy"][c][kind])
            - at(samples, began, lambda s, c=c: s["busy"][c][kind])
            for c in range(cores)
        )

    workers_main = sum(delta(pid, MAIN_RUN) for pid in workers)
    workers_all = sum(delta(pid, ALL_RUN) for pid in workers)
    launch_others = sum(delta(pid, ALL_RUN) for pid in others)
    before, after = (sum(entry[k].values()) / len(entry[k]) for k in ("yardstick_before", "yardstick_after"))
    return {
        "yardstick": math.sqrt(before * after),
        "yardstick_before": before,
        "yardstick_after": after,
        "wait_share": sum(delta(pid, MAIN_WAIT) for pid in workers) / (span * len(workers)),
        "helpers_share": (workers_all - workers_main) / (span * cores),
        "launch_others_share": launch_others / (span * cores),
        "interrupts_share": busy(1) / (span * cores),
        "machine_others_share": max(busy(0) - workers_all - launch_others, 0.0) / (span * cores),
        "span_s": span,
        "sampled": sum(1 for s in samples if began <= s["t"] <= ended),
        "rank0_core": next((row.cpus[0] for row in record.rank_map if row.rank == 0 and row.cpus), None),
        "order": entry["order"],
        "gap_s": entry["gap_s"],
    }


MAIN_RUN, MAIN_WAIT, ALL_RUN = 0, 1, 2  # a process's sampled seconds, in process_times' order less the parent
COVARIATES = {
    "yardstick": "machine speed (before, after)",
    "wait_share": "main threads' wait",
    "helpers_share": "helper threads' CPU",
    "launch_others_share": "bench and launcher",
    "interrupts_share": "interrupts",
    "machine_others_share": "rest of the machine",
    "order": "order",
    "rank0_core": "rank 0's core",
}
# measured while the launch ran: the backend moves them (its helper threads, its launcher), so they may explain the
# spread of one case but never adjust a comparison of two backends
DURING = ["wait_share", "helpers_share", "launch_others_share", "interrupts_share", "machine_others_share"]


def launches(folder: Path) -> list[dict]:
    records = {r.run_id: r for r in Store(folder / "bench.sqlite").records()}
    out = []
    for entry in json.loads((folder / "covariates.json").read_text())["launches"]:
        record = records[entry["run_id"]]
        if record.status != "ok":
            continue
        row = covariates_of(entry, record)
        row.update(
            case=(entry["backend"], entry["workload"]),
            y=math.log(record.metrics.throughput.mean),
            duration_s=record.duration_s,
        )
        out.append(row)
    return out


def centred(rows: list[dict], key: str, log: bool = False) -> np.ndarray:
    """`key` less its case's mean (the case's own level is not noise)."""
    values = np.array([math.log(r[key]) if log else float(r[key]) for r in rows])
    cases = [r["case"] for r in rows]
    out = values.copy()
    for case in set(cases):
        mask = np.array([c == case for c in cases])
        out[mask] -= values[mask].mean()
    return out


def correlation(x: np.ndarray, y: np.ndarray, cases: int) -> dict:
    """Pearson's r of case-centred values with its 95% interval (Fisher's z; a degree of freedom lost per case)."""
    n = len(x)
    r = float(np.corrcoef(x, y)[0, 1]) if x.std() > 0 else 0.0
    half = 1.96 / math.sqrt(max(n - cases - 2, 1))
    z = math.atanh(max(min(r, 0.999999), -0.999999))
    return {"r": r, "low": math.tanh(z - half), "high": math.tanh(z + half), "r2": r * r, "n": n}


def adjusted(rows: list[dict], key: str) -> tuple[list[float], float]:
    """Each launch's log throughput less theta x its case-centred log covariate (theta: the pooled within-case slope):
    the adjustment by a covariate that the backend cannot move (measured before and after, not during, the launch)."""
    x = centred(rows, key, log=True)
    y = centred(rows, "y")
    theta = float((x * y).sum() / (x * x).sum())
    return [r["y"] - theta * xi for r, xi in zip(rows, x)], theta


def aa_coverage(rows: list[dict], logs: list[float], splits: int = AA_SPLITS) -> dict:
    """Random halves of each case's launches compared with ratio_of_cases, as a sweep compares two backends: how often
    the 95% interval holds 1 (it should, 95% of the time) and its mean half-width; `splits` in all, shared by cases."""
    rng = random.Random(SEED)
    held = widths = total = 0
    cases = sorted({r["case"] for r in rows})
    for case in cases:
        values = [math.exp(v) for r, v in zip(rows, logs) if r["case"] == case]
        for _ in range(splits // len(cases)):
            shuffled = rng.sample(values, len(values))
            half = len(values) // 2
            est = stats.ratio_of_cases([shuffled[:half]], [shuffled[half : 2 * half]])
            held += est.low <= 1 <= est.high
            widths += est.resolution
            total += 1
    return {"coverage": held / total, "resolution": widths / total, "splits": total}


def backend_comparisons(rows: list[dict], logs: list[float]) -> dict:
    """elastic / horovod on each workload, all launches, raw or adjusted."""
    out = {}
    for workload in sorted({r["case"][1] for r in rows}):
        side = {
            b: [math.exp(v) for r, v in zip(rows, logs) if r["case"] == (b, workload)] for b in ("elastic", "horovod")
        }
        est = stats.ratio_of_cases([side["elastic"]], [side["horovod"]])
        out[workload] = {
            "ratio": est.ratio,
            "low": est.low,
            "high": est.high,
            "resolution": est.resolution,
            "launches": list(est.launches),
        }
    return out


def joint_r2(rows: list[dict], keys: list[str]) -> float:
    """The share of the case-centred log throughput's variance that the case-centred covariates explain together
    (least squares)."""
    y = centred(rows, "y")
    x = np.column_stack([centred(rows, k) for k in keys])
    beta, *_ = np.linalg.lstsq(x, y, rcond=None)
    return float(1 - ((y - x @ beta) ** 2).sum() / (y**2).sum())


def pooled_sd(rows: list[dict], logs: list[float]) -> float:
    """The sd of one launch's log figure within its case, pooled over the cases (a degree of freedom lost to each)."""
    centred_logs = centred([dict(r, y=v) for r, v in zip(rows, logs)], "y")
    return float(math.sqrt((centred_logs**2).sum() / (len(rows) - len({r["case"] for r in rows}))))


def launches_for(sd: float, resolution: float) -> int:
    """The fewest launches a side at which two cases of this spread are resolved to +-resolution (Welch's t with
    2n - 2 degrees of freedom), before any correction for many comparisons or looks."""
    n = 2
    while stats.resolution_at(sd, n) > resolution:
        n += 1
    return n


def main_job_reach(rows: list[dict], sweeps: int = 4000) -> dict:
    """What the main job's rounds would settle at this study's spread: its design fixed as the sweep fixes it
    (fix_looks, from a round of each comparison: one launch a side, at this study's median launch times), each
    two-worker row's launches drawn at its cases' pooled spread around the gap this study measured, 4000 sweeps judged
    by the sweep's own rule (simulated_sweeps). Settled: a difference, or within the resolution."""
    workloads = sorted({r["case"][1] for r in rows})

    def side(backend: str, workload: str) -> list[dict]:
        return [r for r in rows if r["case"] == (backend, workload)]

    round_s = [
        sum(float(np.median([r["duration_s"] for r in side(b, w)])) for b in ("elastic", "horovod")) for w in workloads
    ]
    looks = fix_looks(MAIN_JOB["first"], round_s, MAIN_JOB["timeout_s"])
    gaps, spreads = [], []
    for w in workloads:
        logs = [[r["y"] for r in side(b, w)] for b in ("elastic", "horovod")]
        gaps.append(float(np.mean(logs[0]) - np.mean(logs[1])))
        spreads.append(float(math.sqrt(np.mean([np.var(x, ddof=1) for x in logs]))))
    drawn = simulated_launches(gaps, spreads, sweeps, looks, SEED)
    significant, margin = simulated_sweeps(drawn, looks, MAIN_JOB["resolution"])
    settled = significant | (margin <= MAIN_JOB["resolution"])
    return {
        "most": looks.most,
        "round_s": round_s,
        "both_settled": float(settled.all(axis=1).mean()),
        "median_margin": dict(zip(workloads, (float(m) for m in np.median(margin, axis=0)))),
    }


def analyse(folder: Path) -> dict:
    rows = launches(folder)
    cases = len({r["case"] for r in rows})
    explained = {}
    for key in COVARIATES:
        xs = centred(rows, key, log=key == "yardstick")
        if not xs.any():
            explained[key] = {"varies": False}
            continue
        explained[key] = {"varies": True, **correlation(xs, centred(rows, "y"), cases)}
    per_case = {}
    for case in sorted({r["case"] for r in rows}):
        mine = [r for r in rows if r["case"] == case]
        per_case[" ".join(case)] = {
            "launches": len(mine),
            "sd": float(np.std([r["y"] for r in mine], ddof=1)),
            **{key: float(np.mean([r[key] for r in mine])) for key in DURING},
        }
    raw = [r["y"] for r in rows]
    adjusted_logs, theta = adjusted(rows, "yardstick")
    return {
        "launches": len(rows),
        "sd_launch": pooled_sd(rows, raw),
        "cases": per_case,
        "explained": explained,
        "explained_together": joint_r2(rows, DURING),
        "adjustment": {
            "covariate": "yardstick",
            "theta": theta,
            "sd_launch_adjusted": pooled_sd(rows, adjusted_logs),
            "aa_raw": aa_coverage(rows, raw),
            "aa_adjusted": aa_coverage(rows, adjusted_logs),
            "comparisons_raw": backend_comparisons(rows, raw),
            "comparisons_adjusted": backend_comparisons(rows, adjusted_logs),
        },
        "launches_for_8pct": launches_for(pooled_sd(rows, raw), 0.08),
        "main_job": main_job_reach(rows),
        "yardstick_sd": float(np.std([math.log(r["yardstick"]) for r in rows], ddof=1)),
        "sampled": {
            "span_s": float(np.mean([r["span_s"] for r in rows])),
            "samples": float(np.mean([r["sampled"] for r in rows])),
        },
    }


def pct(x: float, digits: int = 1) -> str:
    return f"{x:.{digits}%}"


def tables(figures: dict) -> str:
    """The tables of docs/studies/noise.md, as the page prints them (tests/test_noise_study.py holds them to it)."""
    lines = [
        "| case | launches | sd | main wait | helpers | bench, launcher | interrupts | rest |",
        "|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for name, c in figures["cases"].items():
        shares = " | ".join(pct(c[k]) for k in DURING)
        lines.append(f"| {name} | {c['launches']} | {pct(c['sd'])} | {shares} |")
    lines += ["", "| covariate | r (95%) | r² |", "|---|--:|--:|"]
    for key, words in COVARIATES.items():
        e = figures["explained"][key]
        if not e["varies"]:
            lines.append(f"| {words} | never varies | - |")
            continue
        lines.append(f"| {words} | {e['r']:+.2f} ({e['low']:+.2f} to {e['high']:+.2f}) | {pct(e['r2'], 0)} |")
    a = figures["adjustment"]
    lines += [
        "",
        "| intervals | A/A holds 1 | A/A resolution | elastic / horovod, MLP | ResNet18 |",
        "|---|--:|--:|--:|--:|",
    ]
    for label, aa, comparisons in (
        ("as launched", a["aa_raw"], a["comparisons_raw"]),
        ("adjusted", a["aa_adjusted"], a["comparisons_adjusted"]),
    ):
        shown = " | ".join(
            f"{c['ratio']:.3f} [{c['low']:.3f}, {c['high']:.3f}] ±{pct(c['resolution'])}"
            for c in (comparisons["mnist_mlp"], comparisons["resnet18"])
        )
        lines.append(f"| {label} | {pct(aa['coverage'])} | ±{pct(aa['resolution'])} | {shown} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    c = sub.add_parser("collect")
    c.add_argument("folder", type=Path)
    c.add_argument("--rounds", type=int, default=12)
    a = sub.add_parser("analyse")
    a.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    if args.verb == "collect":
        return collect(args.folder, args.rounds)
    figures = analyse(args.folder)
    (args.folder / "figures.json").write_text(json.dumps(figures, indent=1, sort_keys=True) + "\n")
    print(tables(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
