"""What the test modules share: running the CLI, the processes of a run, the parts a test needs (system packages,
Ray, TensorFlow), fault runs and their independent check, and the fixtures. Hand-made records, run directories and
input files are in factories.py. No test module imports another."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import glob
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from needs import WITHOUT_OPTIONAL, hide_optional, mark_optional
from needs import check as check_needs

if WITHOUT_OPTIONAL:  # before anything asks for a program: the pass as on a fresh machine (needs.py)
    hide_optional()

from bench.core.rundir import run_temp_prefix  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# Short runs: the tests check behaviour, not figures.
FAST = ["--warmup-steps", "2", "--steps-per-window", "3", "--windows", "2"]
# Short fault runs: the MLP, a checkpoint or commit every 10 steps, the fault after step 25.
SHORT = ["--workload", "mnist_mlp", "--checkpoint-every", "10", "--at-step", "25", "--steps", "60"]
BASELINE = ROOT / "results" / "baselines" / "cpu-gloo.json"  # the committed baseline of the regression gate
# Every process the tests start loads tf_keras, the project's Keras, where it imports TensorFlow, as bench's
# TensorFlow ranks do (bench.backends.shared.tensorflow.TF_ENV), not Keras 3 with scikit-learn: horovodrun's build
# check imports TensorFlow on each of the tests' Horovod launches, PyTorch's too, and Keras 3 adds about 1 s to it.
# Nothing a test checks depends on which Keras that check loads.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "needs(*names): what the test needs beyond the project's packages (needs.py)")


def pytest_runtest_setup(item: pytest.Item) -> None:
    check_needs(item)


@pytest.hookimpl(tryfirst=True)  # before `-m` selects by marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        mark_optional(item)


def torch_compiler_before_tensorflow() -> None:
    """Load torch's compiler stack (torch._dynamo, which loads triton) and torchvision in this process. A test module
    that loads TensorFlow here calls it when it is imported: triton and TensorFlow each carry an LLVM, and triton's
    loaded after TensorFlow crashes the process (a segmentation fault importing triton/knobs.py)."""
    import torch._dynamo  # noqa: F401
    import torchvision  # noqa: F401


# ---------------------------------------------------------------- the command line
def bench(
    *args: object, timeout: float = 300, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a child process, as a user would (`env`: variables to set or replace)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    env.pop("BENCH_STORE", None)
    return subprocess.run(
        [sys.executable, "-m", "bench", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd or ROOT,
        env=env,
    )


def bench_in_process(*args: object) -> subprocess.CompletedProcess[str]:
    """Run the CLI's main() in this process (what `bench ARGS` runs, without an interpreter start per call),
    with its output captured; for input that must be refused before anything runs."""
    import contextlib
    import io
    import signal

    from bench.cli import main

    out, err = io.StringIO(), io.StringIO()
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([str(a) for a in args])
            except SystemExit as exc:  # argparse's own errors
                code = exc.code
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    return subprocess.CompletedProcess(["bench", *map(str, args)], code, out.getvalue(), err.getvalue())


def bench_json(
    *args: object, timeout: float = 300, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], dict]:
    proc = bench(*args, "--json", timeout=timeout, env=env)
    try:
        return proc, json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(f"stdout is not JSON (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}") from None


def assert_fails_in_one_line(proc: subprocess.CompletedProcess[str], code: int, *fragments: str) -> str:
    """The command ended with exit status `code` and one line on stderr, without a traceback, holding `fragments`."""
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *fragments: str) -> str:
    """Input refused: exit 2, one line on stderr holding `fragments`, no traceback, nothing on stdout."""
    line = assert_fails_in_one_line(proc, 2, *fragments)
    assert proc.stdout == ""
    return line


def run_tag_of(pid: int) -> str | None:
    """The BENCH_RUN_TAG a process was started with, from /proc's raw environment block: a process that renamed
    itself (Ray's agents) may have overwritten the start of the block, which hides the rest from psutil."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            entries = f.read().split(b"\0")
    except OSError:
        return None
    tags = [e.split(b"=", 1)[1].decode(errors="replace") for e in entries if e.startswith(b"BENCH_RUN_TAG=")]
    return tags[0] if tags else None


# ---------------------------------------------------------------- the processes of a run
def processes_of_run(run_id: str) -> list[psutil.Process]:
    """Live processes that carry the run's tag (what the supervisor uses to reap)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if run_tag_of(proc.pid) == run_id and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def processes_naming_run(record: dict) -> list[str]:
    """Live processes that belong to the run: its tag in their environment, or its run directory (or the short
    temporary folder of the run's own Ray runtime) in their command line: guards, ranks, launchers, and Ray's raylet,
    gcs_server, workers and agents, some of which rename themselves and hide the tag from a plain read."""
    marks = (record["run_dir"], run_temp_prefix(record["run_id"]))
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            cmdline = " ".join(proc.cmdline())
            if run_tag_of(proc.pid) == record["run_id"] or any(m in cmdline for m in marks):
                found.append(f"{proc.pid} {cmdline[:120]}")
        except psutil.Error:
            continue
    return found


def assert_nothing_left(record: dict) -> None:
    """No process of the run outlived it (by its tag, its run directory, the pids of its rank map), nor a temporary
    folder of its own outside its run directory (run_temp_prefix: a rank's, which teardown removes where it killed
    the guard, and its Ray runtime's under /tmp, which teardown removes once the runtime has ended)."""
    assert processes_of_run(record["run_id"]) == []
    assert processes_naming_run(record) == []
    for row in record["rank_map"]:
        assert not psutil.pid_exists(row["pid"]) or psutil.Process(row["pid"]).status() == psutil.STATUS_ZOMBIE, (
            f"rank {row['rank']} survived"
        )
    from bench.harness.supervisor import run_temp_folders

    left = run_temp_folders(record["run_id"])
    assert left == [], f"the run's temporary folders were left: {left}"


# ---------------------------------------------------------------- 2-worker training runs, shared
TWO_WORKER_SEED = 7


@dataclass
class TrainedRun:
    """A finished `bench run --json` (its process, its record, the store it went to, the TMPDIR it was given)."""

    proc: subprocess.CompletedProcess[str]
    record: dict
    store: Path
    tmpdir: Path

    def left_in_tmpdir(self) -> list[str]:
        """What the run left in its TMPDIR but torch's compile cache (torchinductor_USER, shared by runs on purpose)."""
        return sorted(p.name for p in self.tmpdir.iterdir() if not p.name.startswith("torchinductor_"))

    def params(self, framework: str) -> list:
        """Rank 0's final parameters (saved_params), from a run made with --save-params."""
        return saved_params(Path(self.record["run_dir"]) / "ranks" / "rank0.a0.params.pt", framework)


@pytest.fixture(scope="session")
def two_worker_run(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., TrainedRun]:
    """two_worker_run(backend, workload, *options): a 2-worker training run of FAST steps, its parameters saved and
    its seed TWO_WORKER_SEED, made once per session and shared by every test that checks one (a backend's own run
    test, and the equivalence of its parameters with another backend's): each asserts what it checks of it."""
    runs: dict[tuple[str, ...], TrainedRun] = {}

    def run(backend: str, workload: str, *options: object) -> TrainedRun:
        key = (backend, workload, *map(str, options))
        if key not in runs:
            folder = tmp_path_factory.mktemp("two-worker")
            store, tmpdir = folder / "results" / "bench.sqlite", folder / "tmp"
            tmpdir.mkdir()
            proc, record = bench_json(
                "run",
                "--backend",
                backend,
                *options,
                "--workload",
                workload,
                "--nproc",
                2,
                "--save-params",
                "--seed",
                TWO_WORKER_SEED,
                "--store",
                store,
                *FAST,
                timeout=400,
                env={"TMPDIR": str(tmpdir)},
            )
            runs[key] = TrainedRun(proc, record, store, tmpdir)
        return runs[key]

    return run


# ---------------------------------------------------------------- fault runs, checked independently
def fault(store: Path, *args: object, timeout: float = 400) -> tuple[subprocess.CompletedProcess[str], dict]:
    """`bench fault ARGS --json` into `store`; no process of the run may outlive it."""
    proc, record = bench_json("fault", "--store", store, *args, timeout=timeout)
    assert processes_of_run(record["run_id"]) == [], "a process of the fault run outlived it"
    return proc, record


def two_worker_sgd(spec: dict, steps: int) -> list:
    """`steps` steps of 2-worker synchronous SGD on the MLP in PyTorch, computed here in one process: each step on
    both ranks' batches at once (the two gradients of equal batches are averaged). Its parameters as numpy arrays,
    in the model's order."""
    import torch

    from workloads import WORKLOADS
    from workloads.data.memory import SyntheticBatches

    torch.manual_seed(spec["seed"])
    model = WORKLOADS["mnist_mlp"].build(spec["num_classes"], spec["image_size"])
    opt = torch.optim.SGD(model.parameters(), lr=spec["lr"], momentum=spec["momentum"])
    data = [
        SyntheticBatches(
            batch=spec["batch_size"],
            channels=1,
            image=spec["image_size"],
            classes=spec["num_classes"],
            seed=spec["seed"],
            rank=r,
            device="cpu",
        )
        for r in (0, 1)
    ]
    loss_fn = torch.nn.CrossEntropyLoss()
    for step in range(steps):
        x = torch.cat([d.at(step)[0] for d in data])
        y = torch.cat([d.at(step)[1] for d in data])
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
    return [value.numpy() for value in model.state_dict().values()]


def keras_model(spec: dict) -> tuple:
    """The run's seeded Keras MLP and its SGD, built as the TensorFlow backends build them: Python's, numpy's and
    TensorFlow's seeds set to the run's, then the model, then the optimizer."""
    from workloads import WORKLOADS
    from workloads.keras import keras

    keras().utils.set_random_seed(spec["seed"])
    model = WORKLOADS["mnist_mlp"].build_keras(spec["num_classes"], spec["image_size"])
    optimizer = keras().optimizers.SGD(learning_rate=spec["lr"], momentum=spec["momentum"])
    optimizer.build(model.trainable_variables)
    return model, optimizer


def keras_two_worker_sgd(spec: dict, steps: int) -> list:
    """two_worker_sgd in Keras, from the run's seeded model: each step on both ranks' batches at once (the mean loss
    of the two equal batches, whose gradient is the mean of theirs). Its weights, in the model's order."""
    import numpy as np
    import tensorflow as tf

    from workloads.data.synthetic import synthetic_arrays
    from workloads.keras import keras

    model, optimizer = keras_model(spec)
    loss_of = keras().losses.SparseCategoricalCrossentropy(from_logits=True)  # the mean over the batch
    data = [
        synthetic_arrays(
            batch=spec["batch_size"],
            channels=1,
            image=spec["image_size"],
            classes=spec["num_classes"],
            seed=spec["seed"],
            rank=r,
        )
        for r in (0, 1)
    ]
    data = [(np.ascontiguousarray(xs.transpose(0, 1, 3, 4, 2)), ys) for xs, ys in data]  # NCHW to Keras's NHWC
    for step in range(steps):
        x = np.concatenate([xs[step % len(xs)] for xs, _ in data])
        y = np.concatenate([ys[step % len(ys)] for _, ys in data])
        with tf.GradientTape() as tape:
            loss = loss_of(y, model(x, training=True))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return [w.numpy() for w in model.weights]


def saved_params(path: str | Path, framework: str) -> list:
    """The parameters a run saved (--save-params), as (name, numpy array) pairs in the model's order: a PyTorch state
    dict, or under a TensorFlow backend (`framework` "tensorflow") an .npz of the Keras weights, under the same name."""
    if framework == "tensorflow":
        import numpy as np

        with np.load(path) as saved:
            return [(name, saved[name]) for name in saved.files]
    import torch

    return [(name, value.numpy()) for name, value in torch.load(path).items()]


def assert_resumed_params_are_two_worker_sgd(record: dict, steps: int, processes: int) -> None:
    """Independent check of the parameters every process resumed from. The mean of two 64-sample gradients
    summed by an allreduce rounds differently from one 128-sample mean: after 20 steps the two differ by up to
    about 1e-5 (measured: 1.2e-5 on one CPU), while SGD one step off differs by about 1e-3. So the resumed
    parameters must be within 1e-4 of `steps` steps and at least 5 times nearer to them than to one step
    more or fewer (PyTorch's training or Keras's, by the run's backend)."""
    import numpy as np

    from bench.core.registry import get_backend

    spec = record["spec"]
    framework = get_backend(spec["backend"]).framework
    sgd = keras_two_worker_sgd if framework == "tensorflow" else two_worker_sgd
    expected, fewer, more = (sgd(spec, n) for n in (steps, steps - 1, steps + 1))
    resumed = sorted(glob.glob(f"{record['run_dir']}/resumed-step{steps}-pid*.params.pt"))
    assert len(resumed) == processes, resumed
    for path in resumed:
        got = [value for _, value in saved_params(path, framework)]
        off = {
            name: max(float(np.abs(a - b).max()) for a, b in zip(got, ref, strict=True))
            for name, ref in (("steps", expected), ("one fewer", fewer), ("one more", more))
        }
        assert off["steps"] < 1e-4 and off["steps"] * 5 < min(off["one fewer"], off["one more"]), off


# ---------------------------------------------------------------- fixtures
# ---------------------------------------------------------------- tests side by side (pytest-xdist)
# `nox -s tests` hands the workers whole files, and these groups of files as one unit each, in order: the modules of
# the test hosts (namespaces, sshd, the Slurm and Ray test clusters; their fixtures flock them too, but a worker waiting
# on that lock would sit idle), and those that check the session's two-worker runs (two_worker_run), which a worker
# makes once for all its tests. (xdist's own `--dist loadgroup` marks tests by rewriting their node ids, which this
# pytest no longer reads.)
SHARED_BY_GROUP = {
    "test hosts": (
        "test_across_hosts",
        "test_gpu_sampling",
        "test_k8s",
        "test_testhosts",
        "test_testray",
        "test_testslurm",
    ),
    "two-worker runs": ("test_backend_contract", "test_horovod", "test_ps", "test_runs", "test_tf"),
}


def unit_of_work(nodeid: str) -> str:
    """What one worker runs together: a test's file, or the group (SHARED_BY_GROUP) its file belongs to."""
    path = nodeid.split("::", 1)[0]
    module = path.rsplit("/", 1)[-1].removesuffix(".py")
    return next((group for group, modules in SHARED_BY_GROUP.items() if module in modules), path)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ByUnitOfWork(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of_work(nodeid)

    return ByUnitOfWork(config, log)


@pytest.fixture(scope="session", autouse=True)
def lock_dir_of_this_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The runs of this test session claim their cores in a folder of their own (bench.harness.cores): they still
    wait for each other, but not for another session's runs on this shared machine. Where the session's tests run
    side by side (pytest-xdist), its workers share that folder, so that no two of their runs measure each other: what
    overlaps is the rest (the CLI's start, the checks, the pages), as bench's one-benchmark-at-a-time rule
    allows."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # each worker's base folder (.../pytest-N/popen-gwK) sits in the session's own
        folder = tmp_path_factory.getbasetemp().parent / "bench-locks"
        folder.mkdir(exist_ok=True)
    else:
        folder = tmp_path_factory.mktemp("bench-locks")
    before = os.environ.get("BENCH_LOCK_DIR")
    os.environ["BENCH_LOCK_DIR"] = str(folder)
    yield folder
    if before is None:
        os.environ.pop("BENCH_LOCK_DIR", None)
    else:
        os.environ["BENCH_LOCK_DIR"] = before


# Runs that hold their cores mostly idle: one whose process hangs until the deadline ends it (a hung Horovod run's
# survivors still keep one core busy polling), and Ray's, which wait most of their time for Ray's runtime to start and
# stop (a 2-worker run took 8 CPU-seconds in 25 s on 2 cores). Such a run claims its cores in a second folder the
# workers share (claims_apart; a whole test: @pytest.mark.claims_apart): the other worker's runs go on meanwhile instead
# of waiting for it, and two such runs still wait for each other (two Ray runtimes at once would each see the other's
# processes as left behind). Neither these runs nor those they may overlap are measured by what the tests check: the
# tests that assert a measured figure run alone, later (`serial`).
APART = "bench-locks-apart"


@contextlib.contextmanager
def claims_apart() -> Iterator[None]:
    """The runs started meanwhile claim their cores in the session's second folder (APART), not its first."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:  # one worker: nothing else to let go on
        yield
        return
    before = os.environ["BENCH_LOCK_DIR"]
    folder = Path(before).with_name(APART)
    folder.mkdir(exist_ok=True)
    os.environ["BENCH_LOCK_DIR"] = str(folder)
    try:
        yield
    finally:
        os.environ["BENCH_LOCK_DIR"] = before


@pytest.fixture(autouse=True)
def claims_apart_where_marked(request: pytest.FixtureRequest) -> Iterator[None]:
    if request.node.get_closest_marker("claims_apart") is None:
        yield
        return
    with claims_apart():
        yield


@contextlib.contextmanager
def held_test_hosts(count: int) -> Iterator[list]:
    """`count` test hosts (bench.testbed.hosts), taken down afterwards, also when a test fails; one user of the test
    hosts at a time: every module that builds them holds a lock on tests/test_testhosts.py meanwhile."""
    from bench.testbed import hosts as testhosts

    with open(Path(__file__).with_name("test_testhosts.py")) as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield testhosts.up(count)
        finally:
            testhosts.down()


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "results" / "bench.sqlite"


def remove_cgroup(folder: Path, wait_s: float = 30) -> None:
    """Remove a cgroup a test made, once its last processes have left it (they may still be leaving)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            folder.rmdir()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


# ---------------------------------------------------------------- a folder shared with a second local user
@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A /tmp of its own: sticky and writable by everyone, as /tmp is."""
    base = Path(tempfile.mkdtemp(prefix="bench-lock-probe-", dir="/tmp"))
    os.chmod(base, 0o1777)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def secret(shared_tmp: Path) -> Path:
    """A root-owned file only root may read or write: what a planted link points at."""
    path = shared_tmp / "secret"
    path.write_text("root's\n")
    os.chmod(path, 0o600)
    return path


def assert_untouched(secret: Path) -> None:
    info = secret.lstat()
    assert stat.S_IMODE(info.st_mode) == 0o600 and info.st_uid == 0 and secret.read_text() == "root's\n"


class Unchanged:
    """A folder as a case left it (snapshot()), checked again at the end: bad input creates nothing."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.snapshot()

    def snapshot(self) -> None:
        self.files = sorted(self.folder.rglob("*"))


@functools.cache
def cli_parser():
    """The real parser of the command line, built once per session: parsing is what the cases test, not building."""
    import bench.cli

    return bench.cli.build_parser()


@pytest.fixture
def nothing_runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Unchanged]:
    """A default store in tmp_path (which must stay as it was) and no way to launch anything."""
    import bench.cli
    import bench.harness.runner
    import bench.harness.supervisor
    import bench.results.hot_paths
    from bench.core.registry import get_backend

    def launched(*args, **kwargs):
        raise AssertionError("bad input launched something")

    # every name the launching functions are bound to, in every module that imported them
    originals = (
        bench.harness.runner.execute,
        bench.harness.supervisor.supervise,
        bench.harness.supervisor.launch,
        bench.results.hot_paths.run_hot_paths,
    )
    bound = [
        (module, name)
        for module in list(sys.modules.values())
        if getattr(module, "__name__", "").startswith("bench")
        for name, value in vars(module).items()
        if any(value is original for original in originals)
    ]
    assert len(bound) >= len(originals)
    for module, name in bound:
        monkeypatch.setattr(module, name, launched)
    monkeypatch.setenv("BENCH_STORE", str(tmp_path / "results" / "bench.sqlite"))
    monkeypatch.chdir(ROOT)  # the committed baseline at its default path
    parser = cli_parser()
    monkeypatch.setattr(bench.cli, "build_parser", lambda: parser)
    # Horovod's build probe (seconds, in child processes) is this machine's, not the input's: replaced in the module
    # of the horovod backend, where its availability looks it up
    horovod_module = sys.modules[type(get_backend("horovod")).__module__]
    monkeypatch.setattr(horovod_module, "check_build", lambda: (None, {}))
    unchanged = Unchanged(tmp_path)
    yield unchanged
    assert sorted(tmp_path.rglob("*")) == unchanged.files, "bad input must create nothing"


DISK_SIZE = "2m"


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs of this test's own, unmounted on the way out."""
    if os.geteuid() != 0:
        pytest.skip("a disk of its own to fill is a tmpfs mount, which needs root")
    if shutil.which("mount") is None:
        pytest.skip("mount not found: apt-get install mount")
    folder = tmp_path / "disk"
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_SIZE}", "tmpfs", str(folder)], capture_output=True, text=True
    )
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        if subprocess.run(["umount", str(folder)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(folder)], check=True)  # something still holds a file open


def fill(disk: Path, leave: int = 0) -> Path:
    """Fill `disk` until `leave` bytes are free (its page size rounds it); returns the filler, to free the space."""
    filler = disk / "filler"
    st = os.statvfs(disk)
    size = max(0, st.f_bavail * st.f_frsize - leave)
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        while size > 0:  # to the last byte: a write that meets the end of the space is cut short
            try:
                size -= os.write(fd, b"\0" * min(size, 1 << 20))
            except OSError:
                break
    finally:
        os.close(fd)
    return filler


# ---------------------------------------------------------------- the page in a browser
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def launch_chromium(p):
    """Debian's Chromium through Playwright (`p`: sync_playwright's handle)."""
    assert CHROMIUM, "Chromium is needed for this test: apt-get install chromium (.ci/run does)"
    return p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)


def assert_the_answer_is_in_the_first_screen(page_path: Path) -> None:
    """At 1280x800 a reader sees the answer (its overall sentence and a line per scenario) without scrolling, and
    the scorecard follows it."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = launch_chromium(p)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto(page_path.as_uri())
        box = "e => { const r = e.getBoundingClientRect(); return [r.top, r.bottom]; }"
        answer = page.eval_on_selector("#verdict ~ p.rec", box)
        assert answer[1] <= 800, answer
        assert page.inner_text("#verdict ~ p.rec").startswith("The answer")
        if page.query_selector("ul.answer"):  # a page with scenarios to weigh lists them, every one in view
            lines = page.eval_on_selector("ul.answer", box)
            assert answer[1] <= lines[0] and lines[1] <= 800, (answer, lines)
        if page.query_selector("#scorecard"):
            assert page.eval_on_selector("#scorecard", box)[0] > answer[1]
        browser.close()
