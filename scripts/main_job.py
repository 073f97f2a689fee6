"""Time the README's main job as a newcomer meets it, and keep what it made: a fresh clone of this checkout's commit,
`nox -s bench` with pip's cache off and an empty cache of Horovod wheels (so torch is fetched and Horovod built: the
set-up a first run pays), then `nox -R -s bench` again for each further sweep (the environment reused, as the README
says). Writes to FOLDER:

- bench.sqlite: every sweep's runs (the store `nox -s bench` fills);
- timings.json: the machine (bench's own record of it), the commit, the set-up's seconds (from the start of
  `nox -s bench` to the sweep's first line), the seconds from the start of each `nox -s bench` to its first page
  (the first "page written to" line; the first sweep's with the set-up in it), the machine's mean 1-minute load
  average during each sweep (read every 30 s), and each sweep's seconds (from its row in the store: started to last
  update) with its launches, the seconds of the rounds it added (`--resolution`) and what each of its two-worker
  training rows says on its own (the sweep's runs alone, judged as its page would: a difference, or its margin).

With --sweeps 0 only the set-up is timed (`nox -s bench -- --dry-run`: the sweep is planned, nothing runs), and its
figures replace those in FOLDER/timings.json, whose sweeps stay. tests/test_docs.py holds the README's set-up and
sweep times against timings.json.

    .nox/tests/bin/python scripts/main_job.py docs/studies/main-job --sweeps 3   # a Python that has bench's packages
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.core.stats import Family  # noqa: E402 (the checkout's bench, wherever this runs from)
from bench.core.store import Store  # noqa: E402
from bench.results.agreement import frame_comparisons  # noqa: E402
from bench.results.frame import records_to_frame  # noqa: E402
from bench.results.sweeps import looks_of, sequential_of  # noqa: E402
from bench.tasks.train.results import looked_comparisons  # noqa: E402

SWEEP_STARTS = "bench sweep: "  # the sweep's first line (bench.workflows.sweep.run_benchmark_sweep's description)
FIRST_PAGE = "bench sweep: page written to "  # bench.cli.sweep.LookPages, after the sweep's first round


class LoadSampler:
    """The 1-minute load average, read every 30 s in a thread while the main job runs: (monotonic time, load)."""

    def __init__(self):
        self.samples: list[tuple[float, float]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)
        self.thread.start()

    def sample(self) -> None:
        while not self.stop.is_set():
            self.samples.append((time.monotonic(), os.getloadavg()[0]))
            self.stop.wait(30)

    def mean(self, began: float, ended: float) -> float | None:
        during = [load for at, load in self.samples if began <= at <= ended]
        return round(sum(during) / len(during), 2) if during else None


def nox_bench(clone: Path, reuse: bool, env: dict, dry_run: bool = False, seen: dict | None = None) -> float:
    """Run the main job in `clone`, its output passed through; the seconds until the sweep's first line (dry_run: until
    the session ends). `seen` gets the seconds to its first page ("first_page") and its start and end (monotonic)."""
    began = time.monotonic()
    nox = shutil.which("nox")  # the README's command, as pip installs it; this script may run in another Python
    if nox is None:
        raise SystemExit("nox is not on PATH: `pip install nox` first (the README's first command)")
    argv = [nox, *(["-R"] if reuse else []), "-s", "bench", *(["--", "--dry-run"] if dry_run else [])]
    proc = subprocess.Popen(argv, cwd=clone, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    set_up = None
    seen = {} if seen is None else seen
    seen["began"] = began
    for line in proc.stdout:
        sys.stdout.write(line)
        if set_up is None and line.startswith(SWEEP_STARTS):
            set_up = time.monotonic() - began
        if "first_page" not in seen and line.startswith(FIRST_PAGE):
            seen["first_page"] = round(time.monotonic() - began, 1)
    seen["ended"] = time.monotonic()
    if proc.wait() != 0:
        raise SystemExit(f"nox -s bench failed (exit {proc.returncode}) in {clone}")
    if dry_run:  # the set-up, then a plan printed in a second or two: the whole session
        return time.monotonic() - began
    if set_up is None:
        raise SystemExit(f"nox -s bench printed no line starting {SWEEP_STARTS!r}: did the sweep start?")
    return set_up


def set_up_figures(seconds: float, commit: str) -> dict:
    return {
        "set_up_seconds": round(seconds, 1),
        "set_up": "a fresh clone, `nox -s bench` with pip's cache and the Horovod wheel cache empty: torch fetched "
        "(from this machine's package index), Horovod built",
        "set_up_commit": commit,
    }


def save_set_up(folder: Path, seconds: float, commit: str) -> int:
    """The set-up's figures into folder/timings.json, its sweeps kept."""
    path = folder / "timings.json"
    if not path.is_file():
        raise SystemExit(f"{path} does not exist: make it with --sweeps 1 or more first")
    timings = {**json.loads(path.read_text()), **set_up_figures(seconds, commit)}
    path.write_text(json.dumps(timings, indent=1) + "\n")
    print(f"main job: set-up {seconds:.0f} s -> {path}")
    return 0


def rows_alone(runs: list, row: dict) -> dict:
    """Each two-worker training row of one sweep, from its runs alone, judged as a page of them would judge it (at
    the look where a sequential sweep left it): its launches a side, whether it is a difference, its margin."""
    frame = records_to_frame(runs)
    frame.attrs["looks"] = looks_of([row])
    family = Family(frame_comparisons(frame))
    out = {}
    for key, (a, b) in looked_comparisons(frame).items():
        judged = family.judge(key)
        out[key] = {"launches": [a.launches, b.launches], "significant": judged.significant, "margin": judged.margin}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="where bench.sqlite and timings.json go (made if missing)")
    parser.add_argument(
        "--sweeps", type=int, default=3, help="sweeps to make (the first pays the set-up); 0: time the set-up only"
    )
    args = parser.parse_args()
    if args.sweeps < 0:
        parser.error("--sweeps: 0 or more")
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
    machine_of = {k: None for k in ("cpu_model", "cpu_count", "memory_bytes", "platform", "python")}
    with tempfile.TemporaryDirectory(prefix="main-job-") as tmp:
        clone = Path(tmp) / "clone"
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
        env = {**os.environ, "PIP_NO_CACHE_DIR": "1", "BENCH_CACHE_DIR": str(Path(tmp) / "cache")}
        load = LoadSampler()
        runs = [{}]
        set_up = nox_bench(clone, reuse=False, env=env, dry_run=args.sweeps == 0, seen=runs[0])
        if args.sweeps == 0:
            return save_set_up(args.folder, set_up, commit.stdout.strip())
        for _ in range(args.sweeps - 1):
            runs.append({})
            nox_bench(clone, reuse=True, env=env, seen=runs[-1])
        load.stop.set()
        # kept before anything reads it: the runs are the half hour's product, the figures below can be made again
        args.folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(clone / "results" / "bench.sqlite", args.folder / "bench.sqlite")
        store = Store(args.folder / "bench.sqlite")
        records = store.records()
        sweeps = []
        for row, run in zip(store.sweeps(), runs, strict=True):  # one sweep a `nox -s bench`, in order
            mine = [r for r in records if r.spec.sweep_id == row["sweep_id"]]
            sweeps.append(
                {
                    "sweep_id": row["sweep_id"],
                    "state": row["state"],
                    "launches": len(mine),
                    "first_page_seconds": run.get("first_page"),
                    "load": load.mean(run["began"], run["ended"]),
                    "seconds": round(row["updated_at"] - row["created_at"], 1),
                    "fault_seconds": round(sum(r.duration_s for r in mine if r.spec.task == "fault"), 1),
                    "added_seconds": (sequential_of(row) or {}).get("spent_s"),
                    "rows": rows_alone(mine, row),
                }
            )
        machine = next(r.environment for r in records if r.environment)
    timings = {
        "commit": commit.stdout.strip(),
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "machine": {k: machine.get(k) for k in machine_of},
        **set_up_figures(set_up, commit.stdout.strip()),
        "sweeps": sweeps,
    }
    (args.folder / "timings.json").write_text(json.dumps(timings, indent=1) + "\n")
    print(f"main job: set-up {set_up:.0f} s; sweeps {', '.join(str(s['seconds']) for s in sweeps)} s -> {args.folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
