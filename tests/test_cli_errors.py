"""Bad input: one line on stderr, exit 2, no traceback, nothing run. The CLI's main() is called in this
process for the many cases; a few go through the real entry point in a child process."""

import os
import sqlite3
import subprocess
import sys

import pytest

from conftest import ROOT, assert_one_line_error, bench, bench_in_process


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["run", "--backend", "tensorflow"], ["unknown backend 'tensorflow'", "elastic"]),
        (["run", "--workload", "gpt5"], ["unknown workload 'gpt5'", "mnist_mlp", "resnet18"]),
        # predict projects stored runs' workloads; a model with no run of it is --model's, and the error says so
        (["predict", "--workload", "vgg16"], ["unknown workload 'vgg16'", "bench predict takes --model"]),
        (["run", "--gpus", "8"], ["no CUDA device", "use --nproc 8 to run 8 CPU processes over gloo"]),
        (["run", "--nproc", "64"], ["needs 64 cores", "--oversubscribe"]),
        (["run", "--nproc", "0"], ["at least 1"]),
        (["run", "--nproc", "2", "--gpus", "1"], ["not both"]),
        (["run", "--backend", "single", "--nproc", "2"], ["at most 1 worker"]),
        (["run", "--data", "mnist"], ["--data-dir"]),
        (["run", "--data", "mnist", "--data-dir", "/nonexistent/mnist"], ["does not exist"]),
        (["run", "--windows", "1"], ["at least 2"]),
        (["run", "--batch-size", "0"], ["at least 1"]),
        (["run", "--workload", "mnist_mlp", "--image-size", "64"], ["28x28"]),
        (["run", "--inject", "explode:1:1"], ["KIND:RANK:STEP"]),
        (["run", "--nproc", "2", "--inject", "hang:5:1"], ["rank 5"]),
        (["run", "--nproc", "two"], ["invalid int value"]),
        (["sweep", "--backend", "elastic,horovd"], ["unknown backend 'horovd'"]),
        (["sweep", "--world-sizes", "1,x"], ["comma-separated"]),
        (["run", "--ps-servers", "2"], ["--ps-servers is an option of backend ps", "(elastic)"]),
        (["sweep", "--backend", "elastic", "--hvd-fusion-mb", "8"], ["backend horovod", "--backend"]),
        (["sweep", "--no-faults", "--faults", "kill"], ["--no-faults makes no fault run"]),
        (
            ["sweep", "--no-faults", "--comm-timeout", "5", "--recovery-timeout", "60"],
            ["--no-faults makes no fault run", "drop --comm-timeout and --recovery-timeout"],
        ),
        (["sweep", "--resolution", "8", "--repeats", "1"], ["--resolution", "--repeats 2"]),
        (["sweep", "--resolution-timeout", "60"], ["--resolution-timeout", "give --resolution"]),
        (["sweep", "--resolution", "8", "--world-sizes", "1"], ["above one worker", "world size above 1"]),
        (["sweep", "--resolution", "8", "--backend", "elastic"], ["--resolution", "--backend elastic,horovod"]),
        (["sweep", "--resume", "--resolution", "8"], ["--resume", "--resolution"]),
        (["sweep", "--weighed-only", "--world-sizes", "1,2"], ["no one-worker run", "drop 1 from --world-sizes"]),
        (["sweep", "--weighed-only", "--max-nproc", "1"], ["2 or more workers", "--world-sizes 2"]),
        (["frobnicate"], ["invalid choice"]),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, fragments, store):
    proc = bench_in_process(*args, "--store", store) if args[0] in ("run", "sweep") else bench_in_process(*args)
    assert_one_line_error(proc, *fragments)
    assert not store.exists(), "bad input must not create a store"


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["run", "--timeout", "nan"], ["--timeout", "'nan'", "finite"]),
        (["run", "--timeout", "inf"], ["--timeout", "'inf'", "finite"]),
        (["run", "--timeout", "-1"], ["--timeout", "positive"]),
        (["run", "--threads", "0"], ["--threads", "at least 1"]),
        (["run", "--gpus", "0"], ["--gpus", "at least 1"]),
        (["sweep", "--repeats", "0"], ["--repeats", "at least 1"]),
        (["sweep", "--windows", "-2"], ["--windows", "at least 1"]),
        (["sweep", "--resolution", "100"], ["--resolution", "below 100"]),
        (["sweep", "--resolution", "0"], ["--resolution", "above 0"]),
        (["sweep", "--resolution", "8", "--resolution-timeout", "0"], ["--resolution-timeout", "positive"]),
        (["allreduce", "--iters", "0"], ["--iters", "at least 1"]),
        (["fault", "--recovery-timeout", "inf"], ["--recovery-timeout", "finite"]),
        (["sweep", "--recovery-timeout", "0"], ["--recovery-timeout", "positive"]),
        (["regress", "--timeout", "nan"], ["--timeout", "finite"]),
    ],
)
def test_out_of_range_numbers_are_refused_before_anything_runs(args, fragments, store):
    proc = bench_in_process(*args, "--store", store)
    assert_one_line_error(proc, *fragments, f"see bench {args[0]} --help")
    assert not store.exists()


def test_mnist_dir_without_files(tmp_path, store):
    proc = bench_in_process("run", "--data", "mnist", "--data-dir", tmp_path, "--store", store)
    assert_one_line_error(proc, "train-images-idx3-ubyte", "nothing is downloaded")


def test_corrupt_store_is_a_clear_error(tmp_path):
    bad = tmp_path / "bench.sqlite"
    bad.write_bytes(b"this is not a database, it is a text file " * 100)
    for verb in (["list"], ["report", "-o", tmp_path / "r.html"]):
        assert_one_line_error(bench_in_process(*verb, "--store", bad), str(bad), "--store")
    assert not (tmp_path / "r.html").exists()


def test_foreign_sqlite_file_is_refused(tmp_path):
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE users (name TEXT)")
    assert_one_line_error(bench_in_process("list", "--store", other), "not a bench store")


def test_missing_store_for_list_and_report(tmp_path):
    missing = tmp_path / "none.sqlite"
    assert_one_line_error(bench_in_process("list", "--store", missing), "no results store")
    assert_one_line_error(bench_in_process("report", "--store", missing, "-o", tmp_path / "r.html"), "no results store")


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["run", "--backend", "tensorflow"], ["unknown backend 'tensorflow'"]),
        (["run", "--timeout", "nan"], ["finite"]),
        (["frobnicate"], ["invalid choice"]),
    ],
)
def test_the_real_entry_point_gives_the_same_one_line(args, fragments, store):
    """`python -m bench` in a child process: the exit code and stderr a shell sees."""
    assert_one_line_error(bench(*args, "--store", store), *fragments)
    assert not store.exists()


# ---------------------------------------------------------------- a set-up without Horovod
@pytest.fixture
def without_horovod(tmp_path):
    """The environment of a set-up whose Horovod is not built: a `horovod` package first on the path whose import
    fails as an unbuilt one does, in the child processes bench starts too (its probe of the build among them)."""
    shadow = tmp_path / "shadow"
    (shadow / "horovod").mkdir(parents=True)
    (shadow / "horovod" / "__init__.py").write_text("raise ImportError('horovod was not built in this environment')\n")
    return {"PYTHONPATH": f"{shadow}{os.pathsep}{ROOT}"}


def test_the_shadow_makes_horovod_unimportable(without_horovod):
    proc = subprocess.run(
        [sys.executable, "-c", "import horovod"],
        capture_output=True,
        text=True,
        env=dict(os.environ, **without_horovod),
    )
    assert proc.returncode != 0 and "was not built" in proc.stderr


@pytest.mark.parametrize("args", [[], ["--backend", "all"]])
def test_a_sweep_of_the_pair_without_horovod_says_how_to_build_it_and_runs_nothing(args, without_horovod, store):
    """By default (and with `all`) a sweep compares elastic and horovod: without Horovod it would measure one side
    and say so in a note among its progress lines; it refuses instead, before anything runs."""
    proc = bench(
        "sweep",
        *args,
        "--workload",
        "mnist_mlp",
        "--world-sizes",
        "1",
        "--repeats",
        "1",
        "--no-comm",
        "--store",
        store,
        env=without_horovod,
    )
    line = assert_one_line_error(
        proc,
        "compares elastic and horovod",
        "horovod cannot run here",
        "python -m bench.tools.horovod_build",
        "--backend elastic",
    )
    assert "was not built" in line
    assert not store.exists() and not (store.parent / "runs").exists()


def test_a_horovod_run_without_horovod_says_how_to_build_it(without_horovod, store):
    assert_one_line_error(
        bench("run", "--backend", "horovod", "--store", store, env=without_horovod),
        "backend horovod cannot run here",
        "python -m bench.tools.horovod_build",
    )
    assert not store.exists()


def test_a_sweep_of_elastic_alone_does_not_need_horovod(without_horovod, store):
    """One side asked for by name is measured without Horovod: refused here only for the world size (64 workers on
    this machine), which shows the sweep went past the Horovod check to its planning."""
    line = assert_one_line_error(
        bench("sweep", "--backend", "elastic", "--world-sizes", "64", "--store", store, env=without_horovod),
        "needs 64 cores",
    )
    assert "horovod" not in line.lower()
