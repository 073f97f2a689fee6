"""Names are names, and files are files: run ids, sweep ids and workloads are checked wherever they come from (a
flag, a store, a baseline file, `bench import`), `bench import` takes a record only from its own run directory, and
no user-given file is read unless it is a regular file of a bounded size (a FIFO would block, /dev/zero never
ends). Each refusal: one line, exit 2, nothing created."""

import json
import os
import signal

import pytest

from bench.core.errors import UsageError
from bench.core.inputs import HOSTFILE_LIMIT, RUNS_FILE_LIMIT, name_problem, read_regular_file, workload_problem
from bench.core.store import Store
from conftest import BASELINE, assert_one_line_error, bench_in_process
from factories import train_record, write_mnist


class Blocked(BaseException):
    """A read that waited (on a FIFO without a writer): raised by the alarm, past every `except Exception`."""


@pytest.fixture
def no_blocking():
    """A read that blocks fails the test within seconds instead of hanging it."""

    def expired(signum, frame):
        raise Blocked("a read blocked")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


# ---------------------------------------------------------------- the rule
@pytest.mark.parametrize("value", ["20261201-083320-083840", "s1", "selfcheck-20261201-1-abc", "a.b_c-d", "X" * 128])
def test_a_name_is_letters_digits_dots_dashes_and_underscores(value):
    assert name_problem(value) is None


@pytest.mark.parametrize(
    "value, says",
    [
        ("", "empty"),
        ("../x", "path separator"),
        ("a/b", "path separator"),
        ("a\\b", "path separator"),
        ("..", "'..'"),
        ("a..b", "'..'"),
        (".hidden", "names are"),
        ("-x", "names are"),
        ("a b", "names are"),
        ("a\nb", "names are"),
        ("é", "names are"),
        ("X" * 129, "129 characters long"),
        (5, "not a string"),
        (None, "not a string"),
    ],
)
def test_what_is_not_a_name_says_why(value, says):
    assert says in name_problem(value)


@pytest.mark.parametrize("value", [None, "mnist_mlp", "pkg.module:Workload", "/home/me/my_model.py:MINE"])
def test_a_workload_is_a_name_or_an_address(value):
    assert workload_problem(value) is None


@pytest.mark.parametrize(
    "value", ["../x", "pkg/module:W", "/a/../b.py:W", "x.py:not-an-identifier", "a\nb.py:W", "pkg..mod:W", ""]
)
def test_a_workload_that_is_neither_is_refused(value):
    assert workload_problem(value)


# ---------------------------------------------------------------- names from flags, stores and files
@pytest.mark.parametrize(
    "argv, says",
    [
        (
            ["compare", "--aa", "--sweep", "../../x"],
            "argument --sweep: '../../x' is not a name (it holds a path separator)",
        ),
        (["baseline", "--from-store", "{tmp}/s.sqlite", "--sweep", "a b"], "argument --sweep: 'a b' is not a name"),
        (["agreement", "--sweeps", "s1,../s2"], "argument --sweeps: '../s2' is not a name"),
    ],
)
def test_a_sweep_flag_that_is_not_a_name_is_refused(argv, says, tmp_path, nothing_runs):
    assert_one_line_error(bench_in_process(*[a.format(tmp=tmp_path) for a in argv]), says)


def test_a_stored_record_whose_names_are_paths_is_skipped(tmp_path):
    store = Store(tmp_path / "bench.sqlite")
    store.save(train_record("good", sweep_id=None))
    for i, (run_id, sweep_id) in enumerate((("../../../../tmp/probe/evil", None), ("ok-id", "../sweep"))):
        store.save(train_record(run_id, sweep_id=sweep_id, created_at=2000.0 + i))
    proc = bench_in_process("list", "--store", store.path)
    assert proc.returncode == 0, proc.stderr
    assert "good" in proc.stdout and "evil" not in proc.stdout and "ok-id" not in proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 2, proc.stderr
    assert "skipped run '../../../../tmp/probe/evil'" in lines[0] and ".run_id: not a valid name" in lines[0]
    assert "skipped run ok-id" in lines[1] and ".spec.sweep_id: not a valid name" in lines[1]


def test_a_baseline_holding_a_record_whose_run_id_is_a_path_is_refused(tmp_path, nothing_runs):
    data = json.loads(BASELINE.read_text())
    data["records"][0]["run_id"] = "../../etc/evil"
    bad = tmp_path / "baseline.json"
    bad.write_text(json.dumps(data))
    nothing_runs.snapshot()
    assert_one_line_error(
        bench_in_process("compare", "--baseline", bad, "--current", BASELINE),
        "run record 0 is malformed",
        "'../../etc/evil'.run_id: not a valid name",
    )


# ---------------------------------------------------------------- bench import: the record of its own directory
def run_dir(folder, run_id="20261201-083320-aaaaaa", dir_name=None, spec=True, **record_fields):
    """A run directory as a run leaves it: record.json and spec.json, in a folder named after the run."""
    rec = train_record(run_id, sweep_id=None).to_dict() | record_fields
    path = folder / (dir_name or rec["run_id"])
    path.mkdir(parents=True)
    (path / "record.json").write_text(json.dumps(rec))
    if spec:
        (path / "spec.json").write_text(json.dumps(rec["spec"] if spec is True else spec, indent=1))
    return path


def import_refused(tmp_path, nothing_runs, path, *says):
    nothing_runs.snapshot()
    assert_one_line_error(bench_in_process("import", path, "--store", tmp_path / "results" / "bench.sqlite"), *says)
    assert not (tmp_path / "results").exists()


def test_import_takes_a_whole_run_directory(tmp_path):
    path = run_dir(tmp_path / "runs")
    proc = bench_in_process("import", path, "--store", tmp_path / "bench.sqlite")
    assert proc.returncode == 0, proc.stderr
    assert [r.run_id for r in Store(tmp_path / "bench.sqlite").records()] == [path.name]


def test_import_refuses_a_run_id_that_is_a_path(tmp_path, nothing_runs):
    path = run_dir(tmp_path / "runs", dir_name="evil", run_id="../../../../tmp/probe/evil")
    import_refused(tmp_path, nothing_runs, path, "'../../../../tmp/probe/evil'.run_id: not a valid name")
    assert not os.path.exists("/tmp/probe/evil")


def test_import_refuses_a_record_copied_into_another_run_s_directory(tmp_path, nothing_runs):
    path = run_dir(tmp_path / "runs", dir_name="20261201-083320-bbbbbb")
    import_refused(
        tmp_path,
        nothing_runs,
        path,
        "is the record of run 20261201-083320-aaaaaa, but its directory is named 20261201-083320-bbbbbb",
    )


def test_import_refuses_a_directory_whose_spec_is_another_run_s(tmp_path, nothing_runs):
    other = train_record("x", sweep_id=None, world_size=4).to_dict()["spec"]
    path = run_dir(tmp_path / "runs", spec=other)
    import_refused(tmp_path, nothing_runs, path, f"{path}/spec.json is not the spec of the record beside it")


def test_import_refuses_a_directory_without_its_spec(tmp_path, nothing_runs):
    path = run_dir(tmp_path / "runs", spec=False)
    import_refused(tmp_path, nothing_runs, path, f"{path}/spec.json does not exist")


def test_import_of_a_fifo_says_what_it_is_and_does_not_block(tmp_path, nothing_runs, no_blocking):
    path = run_dir(tmp_path / "runs")
    (path / "record.json").unlink()
    os.mkfifo(path / "record.json")
    import_refused(tmp_path, nothing_runs, path, f"{path}/record.json is not a regular file (it is a FIFO)")
    os.mkfifo(tmp_path / "fifo-run")
    import_refused(tmp_path, nothing_runs, tmp_path / "fifo-run", "is not a run directory")


# ---------------------------------------------------------------- files a user names: regular, and bounded
def fifo(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    return tmp_path / "fifo", "is not a regular file (it is a FIFO)"


def device(tmp_path):
    return "/dev/zero", "is not a regular file (it is a character device)"


def link_to_a_fifo(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "link").symlink_to(tmp_path / "fifo")
    return tmp_path / "link", "is not a regular file (it is a FIFO)"


def huge(limit, says):
    def make(tmp_path):
        with open(tmp_path / "huge", "wb") as fh:
            fh.truncate(limit + 1)  # sparse: no disk is used
        return tmp_path / "huge", says

    return make


@pytest.mark.parametrize(
    "make", [fifo, device, link_to_a_fifo, huge(RUNS_FILE_LIMIT, "is 268,435,457 bytes, more than the 256 MiB a")]
)
def test_a_baseline_that_is_not_a_bounded_regular_file_is_refused(make, tmp_path, nothing_runs, no_blocking):
    path, says = make(tmp_path)
    nothing_runs.snapshot()
    assert_one_line_error(bench_in_process("compare", "--baseline", path), f"baseline file {path} {says}")
    assert_one_line_error(
        bench_in_process("compare", "--baseline", BASELINE, "--current", path), f"current file {path} {says}"
    )


@pytest.mark.parametrize(
    "make", [fifo, device, huge(HOSTFILE_LIMIT, "is 1,048,577 bytes, more than the 1 MiB a --hostfile may be")]
)
def test_a_hostfile_that_is_not_a_bounded_regular_file_is_refused(make, tmp_path, nothing_runs, no_blocking):
    path, says = make(tmp_path)
    nothing_runs.snapshot()
    assert_one_line_error(bench_in_process("run", "--hostfile", path), "argument --hostfile", f"{path} {says}")


def test_an_mnist_file_that_is_a_fifo_is_refused(tmp_path, nothing_runs, no_blocking):
    folder = tmp_path / "mnist"
    write_mnist(folder, n=200)
    (folder / "train-images-idx3-ubyte").unlink()
    os.mkfifo(folder / "train-images-idx3-ubyte")
    nothing_runs.snapshot()
    assert_one_line_error(
        bench_in_process("run", "--data", "mnist", "--data-dir", folder),
        f"{folder}/train-images-idx3-ubyte is not a regular file",
    )


def test_an_mnist_file_longer_than_its_header_promises_is_refused(tmp_path, nothing_runs):
    folder = tmp_path / "mnist"
    write_mnist(folder, n=200)
    with open(folder / "train-labels-idx1-ubyte", "ab") as fh:
        fh.write(b"\0" * 10)
    nothing_runs.snapshot()
    assert_one_line_error(
        bench_in_process("run", "--data", "mnist", "--data-dir", folder),
        "train-labels-idx1-ubyte holds more data than its header promises (200 bytes)",
    )


def test_the_reader_reads_a_regular_file_whole_and_refuses_a_directory(tmp_path):
    (tmp_path / "f").write_bytes(b"x" * 3_000_000)
    assert read_regular_file(tmp_path / "f", "file", 3_000_000) == b"x" * 3_000_000
    with pytest.raises(UsageError, match="is 3,000,000 bytes, more than the 2 MiB a file may be"):
        read_regular_file(tmp_path / "f", "file", 2 * 2**20)
    with pytest.raises(UsageError, match=f"file {tmp_path} is a directory, not a file; make one"):
        read_regular_file(tmp_path, "file", 10, hint="make one")
    with pytest.raises(UsageError, match="does not exist"):
        read_regular_file(tmp_path / "absent", "file", 10)
