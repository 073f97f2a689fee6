"""Every pre-launch step is bounded: a user's workload is loaded and checked in a process of its own within a time
limit (--check-timeout, at most --timeout). One that hangs at import or in build() is refused in one line with exit
2 once the limit passes, after lines saying what bench waits for; the check's process and whatever it started are
ended, and nothing is created. The parent never runs the user's code, nor imports torch."""

import json
import os
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from conftest import ROOT, bench
from factories import TINY_WORKLOAD, write_source

LINGER = '''
import subprocess, sys
# a process of its own that outlives nothing: it must be ended with the check
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", __file__])
'''
HANG_AT_IMPORT = LINGER + "import time\ntime.sleep(600)\n" + TINY_WORKLOAD
HANG_IN_BUILD = TINY_WORKLOAD.replace("    import torch.nn as nn\n", "    while True:\n        pass\n")


def processes_naming(folder) -> list:
    """Live processes whose command line names something in `folder` (the check's process, what it started)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if any(str(folder) in part for part in proc.cmdline()) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


@pytest.mark.slow
@pytest.mark.parametrize(
    "text, limit_args, limit",
    [
        (HANG_AT_IMPORT, ["--timeout", "12"], 12),  # the run's deadline bounds the check too
        (HANG_IN_BUILD, ["--check-timeout", "12"], 12),
    ],
)
def test_a_workload_that_hangs_is_refused_at_the_limit(tmp_path, text, limit_args, limit):
    path = write_source(tmp_path, "w.py", text)
    store = tmp_path / "results" / "b.sqlite"
    began = time.monotonic()
    proc = bench("run", "--workload", f"{path}:TINY", *limit_args, "--store", store, timeout=120)
    took = time.monotonic() - began
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    *waiting, last = proc.stderr.strip().splitlines()
    assert last == (
        f"bench run: error: --workload {path}:TINY: loading and checking it took longer than {limit} s "
        "(--check-timeout, at most --timeout) and was stopped; its import, build() or datasets() may "
        "never return"
    )
    assert waiting == [f"bench: loading and checking workload {path}:TINY (10 s so far, limit {limit} s)"]
    assert limit <= took < limit + 10
    assert processes_naming(tmp_path) == []
    assert not (tmp_path / "results").exists()


def test_the_limit_and_its_default_are_in_the_help():
    text = " ".join(bench("run", "--help").stdout.split())
    assert (
        "--check-timeout SECONDS seconds a workload of your own may take to load, build and take a batch" in text
        and "(default 60; it never exceeds --timeout, and is at most 604800 s" in text
    )


def test_a_check_that_dies_without_an_answer_is_one_line(tmp_path):
    path = write_source(tmp_path, "w.py", "import os, sys\nprint('going', file=sys.stderr)\nos._exit(3)\n")
    proc = bench("run", "--workload", f"{path}:TINY", "--store", tmp_path / "b.sqlite", timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"bench run: error: --workload {path}:TINY: loading and checking it ended without an answer (exit code 3): "
        "going"
    ]
    assert not (tmp_path / "b.sqlite").exists()


def test_the_parent_is_told_what_it_needs_and_imports_no_torch(tmp_path):
    """What the user's code prints (at import, in build()) goes to stderr, never into the answer; the parent gets
    the workload's sizes and its source, and holds no torch (nor the user's module) afterwards."""
    path = write_source(tmp_path, "w.py", "print('hello from the import')\n" + TINY_WORKLOAD)
    script = textwrap.dedent(f"""
        import json, sys
        from bench.harness.workload_check import workload_of
        address, info, source = workload_of({f'{path}:TINY'!r})
        print(json.dumps({{"address": address, "cpu": info.size("cpu").batch, "image": info.cpu.image,
                           "sha256": source["sha256"],
                           "loaded": sorted(m for m in sys.modules
                                            if m == "torch" or m.startswith("bench_workload_"))}}))
    """)
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout)
    assert answer["address"] == f"{path}:TINY" and (answer["cpu"], answer["image"]) == (16, 12)
    assert len(answer["sha256"]) == 64
    assert answer["loaded"] == []


@pytest.mark.slow
def test_a_check_outlived_by_its_bench_process_is_ended(tmp_path):
    """bench SIGKILLed while a user's workload is being checked: the lifeline ends the check's process and what it
    started, as it ends a run's."""
    path = write_source(tmp_path, "w.py", HANG_AT_IMPORT)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("BENCH_STORE", None)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench",
            "run",
            "--workload",
            f"{path}:TINY",
            "--check-timeout",
            "60",
            "--store",
            str(tmp_path / "results" / "b.sqlite"),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while len(processes_naming(tmp_path)) < 2 and time.monotonic() < deadline:  # the check and what it started
            time.sleep(0.2)
        assert len(processes_naming(tmp_path)) >= 2, "the check never started"
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 10
    while processes_naming(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = processes_naming(tmp_path)
    for p in left:  # never leave them running, whatever the test found
        p.kill()
    assert left == []
