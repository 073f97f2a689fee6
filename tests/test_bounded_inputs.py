"""Every input costs bench a bounded amount before anything runs, and what it shows of an input never reaches the
terminal raw; a signal at any moment of the CLI's life ends it in one line.

- Host lists (--hostfile, --hosts, a Slurm allocation's node list and tasks per node) hold at most MAX_HOSTS hosts,
  refused past it in one line that names the bound, and their duplicates are found in one pass.
- A sweep's launches of each case (--repeats, --fault-repeats) are bounded (declared in the bad-input table), and a
  baseline nested past the JSON decoder's depth is bad input, not a crash.
- --image is an image's name as the container runtimes parse it (registry host, path, tag, digest).
- Control characters (ESC, "\\r", "\\n", C1) from a file's name or a workload's exception are shown escaped.
- Ctrl-C or SIGTERM while the CLI's modules load, while it reads its arguments, while the verb works or as it
  exits: exit 130 and one line, never a traceback.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.cluster.slurm import expand_nodelist, tasks_per_node
from bench.core.errors import EXIT_INTERRUPTED, UsageError
from bench.core.hostlist import MAX_HOSTS, parse_hosts
from conftest import ROOT, assert_one_line_error, bench, bench_in_process
from factories import TINY_WORKLOAD, write_source

BOUND = f"more than {MAX_HOSTS:,} hosts"
# a hang guard only: each of these calls ends in a second or two; a quadratic duplicate check took minutes
HANG_GUARD_S = 60
DRY = ["run", "--backend", "elastic", "--dry-run"]


def write_hosts(path: Path, names: list[str]) -> Path:
    path.write_text("".join(f"{name} slots=1\n" for name in names))
    return path


# ---------------------------------------------------------------- host lists
def test_a_duplicate_among_the_most_hosts_is_found_and_named(tmp_path):
    """The bound's worth of hosts, the last named twice: one pass finds it (names.count per name took minutes)."""
    names = [f"h{i}" for i in range(MAX_HOSTS - 1)]
    hostfile = write_hosts(tmp_path / "hosts", [*names, names[-1]])
    assert hostfile.stat().st_size < 1 << 20  # under the hostfile's own limit: the count is what is checked
    proc = bench(*DRY, "--hostfile", hostfile, timeout=HANG_GUARD_S)
    assert_one_line_error(proc, f"names host {names[-1]} twice")


def test_a_hostfile_past_the_bound_is_refused_naming_it(tmp_path):
    # its first host twice: the bound is said before any duplicate, as the file is read
    names = [f"h{i}" for i in range(MAX_HOSTS)]
    hostfile = write_hosts(tmp_path / "hosts", [names[0], *names])
    assert_one_line_error(bench(*DRY, "--hostfile", hostfile, timeout=HANG_GUARD_S), "--hostfile", BOUND)


def test_a_hosts_list_past_the_bound_is_refused_naming_it(nothing_runs):
    """In this process: a command line holds at most 128 KiB an argument, fewer hosts than the bound."""
    hosts = ",".join(["a0", *(f"a{i}" for i in range(MAX_HOSTS))])
    assert_one_line_error(bench_in_process(*DRY, "--hosts", hosts), "--hosts", BOUND)
    assert parse_hosts(",".join(f"a{i}" for i in range(MAX_HOSTS)))[-1].name == f"a{MAX_HOSTS - 1}"


def bench_in_bounded_memory(*args: object, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """bench(...) with its memory capped at 2 GiB: what is checked is that nothing is built, and a list of a billion
    names would otherwise take the machine's memory before it failed."""
    cap = 2 << 30

    def capped() -> None:
        resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))

    return subprocess.run(
        [sys.executable, "-m", "bench", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        preexec_fn=capped,
    )


@pytest.mark.parametrize(
    "nodelist, tasks",
    [
        ("n[1-999999999]", None),
        ("n[1-70000]", None),
        ("r[1-300]n[1-300]", None),  # 90,000 names from two groups of 300
        ("n[1-2]", "2(x999999999)"),
    ],
)
def test_a_slurm_allocation_past_the_bound_is_refused_before_its_names_are_made(nodelist, tasks):
    env = {"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": nodelist}
    if tasks:
        env["SLURM_TASKS_PER_NODE"] = tasks
    variable = "SLURM_TASKS_PER_NODE" if tasks else "SLURM_JOB_NODELIST"
    assert_one_line_error(bench_in_bounded_memory(*DRY, env=env), variable, BOUND)


def test_slurm_node_lists_expand_up_to_the_bound_without_recursion():
    assert expand_nodelist(f"n[1-{MAX_HOSTS}]")[-1] == f"n{MAX_HOSTS}"
    assert expand_nodelist("r[1-2]n[01-02]-ib,login1") == ["r1n01-ib", "r1n02-ib", "r2n01-ib", "r2n02-ib", "login1"]
    assert tasks_per_node(f"2(x{MAX_HOSTS})") == [2] * MAX_HOSTS
    # a group per level of recursion overflowed the stack; a number past int()'s digits was an internal error
    assert expand_nodelist("a" + "[1]" * 5000) == ["a" + "1" * 5000]
    for bad in ("n[" + "1" * 5000 + "]", "n[²]"):
        with pytest.raises(UsageError, match="is not a number or a range"):
            expand_nodelist(bad)


# ---------------------------------------------------------------- files
def test_a_baseline_nested_past_the_decoders_depth_is_bad_input(tmp_path, nothing_runs):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000)
    nothing_runs.snapshot()
    assert_one_line_error(bench_in_process("compare", "--baseline", deep), f"baseline file {deep}", "not readable")


# ---------------------------------------------------------------- --image
GOOD_IMAGES = [
    "bench",
    "registry.example.com/bench:1.0",
    "localhost:5000/team/bench_v2__x--y:1.0-rc.1",
    "[::1]:5000/bench:latest",
    "nvcr.io/nvidia/pytorch:25.01-py3",
    "bench@sha256:" + "0123456789abcdef" * 4,
    "Registry.Example.com/bench:V_1@sha256:" + "f" * 64,  # upper case in the host and the tag only
]
BAD_IMAGES = [
    ("bench:1.0 ", "not an image: [HOST[:PORT]/]NAME"),
    ("ghcr.io/Team/bench", "not an image: [HOST[:PORT]/]NAME"),
    ("bench@sha256:" + "0" * 63, "not an image: [HOST[:PORT]/]NAME"),
    ("bench:" + "x" * 200, "not an image: [HOST[:PORT]/]NAME"),
    ("x" * 100_000, "more than an image with its tag and digest can be"),
]


def test_an_image_is_named_as_the_container_runtimes_parse_it():
    """The declared bad values are in the bad-input table (bench.cli.k8s); these are the edges of the grammar."""
    for image in GOOD_IMAGES:
        proc = bench_in_process("k8s", "--image", image, "--nodes", "1")
        assert proc.returncode == 0, proc.stderr
        assert image in proc.stdout  # (YAML quotes some)
    for image, says in BAD_IMAGES:
        line = assert_one_line_error(bench_in_process("k8s", "--image", image, "--nodes", "1"), "--image", says)
        assert len(line) < 600


# ---------------------------------------------------------------- control characters shown escaped
RAW = "\x1b[2J\x1b[31mred\rover\x9b0m\nnext"
ESCAPED = "\\x1b[2J\\x1b[31mred\\rover\\x9b0m\\nnext"


def assert_no_control_character(text: str) -> None:
    assert not any(ord(c) < 32 and c != "\n" or 0x7F <= ord(c) <= 0x9F for c in text), ascii(text)


def test_a_workloads_exception_is_shown_escaped(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_source(tmp_path, "w.py", f"raise RuntimeError({RAW!r})\n")
    store = tmp_path / "results" / "b.sqlite"
    line = assert_one_line_error(
        bench_in_process("run", "--workload", "w.py:TINY", "--store", store), "does not import (RuntimeError"
    )
    assert ESCAPED in line
    assert_no_control_character(line)


def test_a_workload_check_that_ends_without_an_answer_shows_its_last_line_escaped(tmp_path, monkeypatch):
    """The child's last line of stderr is quoted in the refusal: a workload that prints and then kills its process."""
    monkeypatch.chdir(tmp_path)
    said = "\x1b[2J\x1b[31mred\x9b0m\x07"  # on one line: the last is quoted
    source = f"import os, sys\nsys.stderr.write({said!r} + '\\n')\nos._exit(9)\n"
    write_source(tmp_path, "w.py", source)
    line = assert_one_line_error(bench_in_process("run", "--workload", "w.py:TINY"), "ended without an answer")
    assert "\\x1b[2J\\x1b[31mred\\x9b0m\\x07" in line
    assert_no_control_character(line)


def test_a_files_name_is_shown_escaped(tmp_path, nothing_runs):
    hostfile = tmp_path / "hosts\x1b[31m\rfile"
    hostfile.write_text("# no host\n")
    nothing_runs.snapshot()
    line = assert_one_line_error(bench_in_process(*DRY, "--hostfile", hostfile), "names no host")
    assert "hosts\\x1b[31m\\rfile" in line
    assert_no_control_character(line)


def test_a_failed_runs_error_is_shown_escaped(tmp_path):
    """A workload that loads and checks, then raises in the run's worker (RANK is set there, not in the check)."""
    raising = TINY_WORKLOAD.replace(
        "    import torch.nn as nn\n",
        f"    import os\n    import torch.nn as nn\n\n    if 'RANK' in os.environ:\n"
        f"        raise RuntimeError({RAW!r})\n",
    )
    workload = write_source(tmp_path, "w.py", raising)
    proc = bench(
        "run",
        "--backend",
        "elastic",
        "--nproc",
        "1",
        "--workload",
        f"{workload}:TINY",
        "--store",
        tmp_path / "results" / "b.sqlite",
        "--timeout",
        "120",
        timeout=240,
    )
    assert proc.returncode == 1, proc.stderr
    assert f"error: rank 0 raised RuntimeError: {ESCAPED}" in proc.stdout.splitlines()[1]
    assert_no_control_character(proc.stdout)


# ---------------------------------------------------------------- a signal at any moment
def catches(pid: int, sig: signal.Signals) -> bool:
    """Whether the process has a handler of its own for `sig` (its SigCgt mask in /proc)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(mask, 16) >> (sig - 1) & 1)


def signalled(tmp_path: Path, sig: signal.Signals, delay: float | None, args: list[str]) -> tuple[int, str, str]:
    """`python -m bench ARGS`, sent `sig` `delay` seconds after bench's handler for SIGTERM is in place (None: at
    once, before it is): (exit status, stdout, stderr). Its output goes to files, so that a full pipe never holds
    it where the signal finds it."""
    out, err = tmp_path / f"out-{sig.name}-{delay}", tmp_path / f"err-{sig.name}-{delay}"
    with out.open("w") as stdout, err.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench", *args],
            stdout=stdout,
            stderr=stderr,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        try:
            if delay is not None:
                deadline = time.monotonic() + HANG_GUARD_S
                while not catches(proc.pid, signal.SIGTERM) and proc.poll() is None:
                    assert time.monotonic() < deadline, "bench never set its handlers"
                    time.sleep(0.001)
                time.sleep(delay)
            if proc.poll() is None:
                proc.send_signal(sig)
            proc.wait(timeout=HANG_GUARD_S)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return proc.returncode, out.read_text(), err.read_text()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_at_any_moment_ends_bench_in_one_line(tmp_path, sig):
    """As its modules load, while its arguments are read (a hostfile of 20,000 hosts), while the dry run plans, and
    once it is done. Each ends as the run finished, or interrupted: exit 130, the last line of stderr saying so, and
    no traceback. SIGTERM also at once, before the interpreter has run bench's first statement: its default action
    ends the process then, without a word."""
    hostfile = write_hosts(tmp_path / "hosts", [f"node{i}" for i in range(20_000)])
    args = [*DRY, "--hostfile", str(hostfile)]
    outcomes = []
    for delay in ([None] if sig == signal.SIGTERM else []) + [0.0, 0.05, 0.2, 0.5, 1.0, 2.0, 4.0]:
        code, out, err = signalled(tmp_path, sig, delay, args)
        assert "Traceback" not in err, (delay, err[-3000:])
        lines = err.splitlines()
        if code == 0:
            assert out.rstrip().endswith("no store made"), (delay, out[-500:])
            outcomes.append("finished")
        elif code == -signal.SIGTERM and delay is None:
            assert err == ""
            outcomes.append("before bench")
        else:
            assert code == EXIT_INTERRUPTED, (delay, code, err[-3000:])
            assert [line for line in lines if "interrupted" in line] == lines[-1:], (delay, err[-3000:])
            outcomes.append(lines[-1].split(":")[0])
    # the first signal after bench's handlers are set comes while it loads its modules: nothing started, said so
    assert outcomes[-7] == "bench", outcomes
