"""The TensorFlow backends (tf-mwms, horovod-tf): the same models as the PyTorch backends, the same update from the
same weights, and real runs through the CLI (their hang, crash, kill, fault and equivalence:
tests/test_backend_contract.py).

They need TensorFlow and tf_keras (the `tf` extra, which the nox sessions install) and, for horovod-tf, a Horovod
built with TensorFlow (`python -m bench.tools.horovod_build`). Where TensorFlow is missing they are skipped saying so,
except under CI (CI=true), where a missing TensorFlow fails them: CI can never pass by skipping them.
"""

import os

import numpy as np
import pytest

from conftest import FAST, ROOT, assert_nothing_left, assert_one_line_error, bench, torch_compiler_before_tensorflow
from needs import needs

torch_compiler_before_tensorflow()  # the models are built and stepped here, in this process

# SGD steps with momentum from the same weights on the same batch: PyTorch's and Keras's parameters afterwards agree
# within this, relative to the largest change the steps made (float32 arithmetic in another order: convolution and
# matrix-multiply kernels, reductions). Measured here: the MLP within 1e-6 after each of three steps; ResNet18 9e-4
# after its first. A layer converted wrongly moves by the size of the change itself. ResNet18's second step is not
# compared: at this lr its loss falls from 2.2 to 1.4 in one step, and the first step's differences grow to 3% of the
# change by the second (found here; the MLP's second step shows the momentum terms agree).
UPDATE_RTOL = 2e-3
LR, MOMENTUM = 0.05, 0.9
STEPS = {"mnist_mlp": 2, "resnet18": 1}


def _same_model(name):
    import torch

    from workloads import WORKLOADS
    from workloads.keras import load_torch_weights

    workload = WORKLOADS[name]
    size = workload.cpu
    torch.manual_seed(3)
    theirs = workload.build(size.synthetic_classes, size.image)
    ours = workload.build_keras(size.synthetic_classes, size.image)
    copied = load_torch_weights(ours, theirs)
    return workload, size, theirs, ours, copied


@needs("tf")
@pytest.mark.slow  # TensorFlow loaded in this process (seconds)
@pytest.mark.parametrize("name", ["mnist_mlp", "resnet18"])
def test_keras_models_have_the_same_layers_and_parameter_counts(name):
    workload, size, theirs, ours, copied = _same_model(name)
    trainable = sum(p.numel() for p in theirs.parameters())
    assert sum(int(np.prod(w.shape)) for w in ours.trainable_weights) == trainable
    buffers = sum(b.numel() for n, b in theirs.named_buffers() if not n.endswith("num_batches_tracked"))
    assert copied == trainable + buffers  # every weight and batch-norm statistic has its place
    assert trainable == {"mnist_mlp": 669_706, "resnet18": 11_181_642}[name]


@needs("tf")
@pytest.mark.slow  # TensorFlow loaded in this process (seconds)
@pytest.mark.parametrize("name", ["mnist_mlp", "resnet18"])
def test_one_step_of_each_framework_computes_the_same_update(name):
    import tensorflow as tf
    import torch

    from workloads.keras import keras, torch_view

    workload, size, theirs, ours, _ = _same_model(name)
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(size.batch, workload.channels, size.image, size.image, generator=gen)
    y = torch.randint(0, size.synthetic_classes, (size.batch,), generator=gen)
    before = [p.detach().numpy().copy() for p in theirs.parameters()]
    view = torch_view(ours, theirs)
    assert before and len(view) == len(before) and all(np.array_equal(a, b) for a, b in zip(before, view))

    # the same logits before any step: the forward passes agree
    theirs.train()
    with torch.no_grad():
        logits_t = theirs(x).numpy()
    x_k = tf.constant(x.permute(0, 2, 3, 1).numpy())
    logits_k = ours(x_k, training=True).numpy()
    np.testing.assert_allclose(logits_k, logits_t, rtol=1e-4, atol=1e-4 * np.abs(logits_t).max())

    opt_t = torch.optim.SGD(theirs.parameters(), lr=LR, momentum=MOMENTUM)
    opt_k = keras().optimizers.SGD(learning_rate=LR, momentum=MOMENTUM)
    loss_k = keras().losses.SparseCategoricalCrossentropy(from_logits=True)
    losses = []
    for _ in range(STEPS[name]):  # a second step adds the momentum term
        opt_t.zero_grad()
        loss = torch.nn.functional.cross_entropy(theirs(x), y)
        loss.backward()
        opt_t.step()
        with tf.GradientTape() as tape:
            lk = loss_k(tf.constant(y.numpy()), ours(x_k, training=True))
        opt_k.apply_gradients(zip(tape.gradient(lk, ours.trainable_variables), ours.trainable_variables))
        losses.append((loss.item(), float(lk.numpy())))
    for lt, lk in losses:
        assert lk == pytest.approx(lt, rel=1e-4)

    after_t = [p.detach().numpy() for p in theirs.parameters()]
    after_k = torch_view(ours, theirs)
    moved = max(float(np.abs(a - b).max()) for a, b in zip(after_t, before))
    assert moved > 1e-3, "the steps changed nothing: the comparison would prove nothing"
    worst = max(float(np.abs(a - b).max()) for a, b in zip(after_t, after_k))
    assert worst <= UPDATE_RTOL * moved, f"largest difference {worst:.3g}, largest change {moved:.3g}"


@needs("tf")
@pytest.mark.slow
@pytest.mark.parametrize("backend", ["tf-mwms", "horovod-tf"])
@pytest.mark.parametrize("workload", ["mnist_mlp", "resnet18"])
def test_two_process_tensorflow_run(backend, workload, two_worker_run):
    run = two_worker_run(backend, workload)  # the MLP's shared with the contract's equivalence test
    proc, record = run.proc, run.record
    assert proc.returncode == 0, proc.stderr
    assert record["status"] == "ok", record.get("error")
    spec, m = record["spec"], record["metrics"]
    assert (spec["threads"], spec["image_size"]) == (1, 28 if workload == "mnist_mlp" else 32)
    assert sorted(r["rank"] for r in record["rank_map"]) == [0, 1]
    assert m["throughput"]["ci_low"] <= m["throughput"]["mean"] <= m["throughput"]["ci_high"]
    ranks = m["per_rank"]
    # synchronous data parallelism: both workers hold the same parameters at the end
    assert ranks[0]["param_checksum"] == pytest.approx(ranks[1]["param_checksum"], rel=1e-6)
    assert m["param_count"] == {"mnist_mlp": 669_706, "resnet18": 11_181_642}[workload]  # the PyTorch model's count
    assert all(r["threads"]["tensorflow"] == 1 and "torch" not in r["threads"] for r in ranks)
    assert spec["cpu_bind"] == "cores"
    assert sorted(r["threads"]["affinity"] for r in ranks) == [[0], [1]]
    assert all(r["threads"]["threads_off_affinity"] == 0 for r in ranks), ranks
    # TensorFlow's variables as the ranks saw them, in the record's environment (the backends' own among them)
    variables = record["environment"]["variables"]
    assert (variables["TF_CPP_MIN_LOG_LEVEL"], variables["TF_USE_LEGACY_KERAS"]) == ("2", "1"), variables
    assert_nothing_left(record)


# ------------------------------------------------------------------------------------------ without TensorFlow
def test_the_page_labels_comparisons_within_and_across_frameworks():
    from bench.core.registry import framework_words

    assert framework_words("elastic", "horovod") == ""  # the question's pair, as the page always said it
    assert framework_words("horovod-tf", "tf-mwms") == "within TensorFlow"
    assert framework_words("horovod-tf", "horovod") == "across frameworks (TensorFlow against PyTorch)"


def test_all_means_the_backends_that_take_the_task():
    """`--backend all` of bench converge leaves out the TensorFlow backends, whose converge runs are not written; a
    sweep's and bench allreduce's `all` have them, and bench fault's has horovod-tf (Horovod's TensorFlow elastic
    mode), not tf-mwms (no elastic mode)."""
    from bench.core.registry import COMPARED, compared_for, elastic_backends

    assert {"tf-mwms", "horovod-tf"} <= set(compared_for("train")) and compared_for("train") == COMPARED
    assert {"tf-mwms", "horovod-tf"} <= set(compared_for("comm"))
    assert not {"tf-mwms", "horovod-tf"} & set(compared_for("converge"))
    assert "horovod-tf" in compared_for("fault") and "tf-mwms" not in compared_for("fault")
    assert "horovod-tf" in elastic_backends() and "tf-mwms" not in elastic_backends()


@pytest.mark.parametrize(
    "argv, says",
    [
        (["allreduce", "--backend", "tf-mwms", "--ops", "broadcast"], "backend tf-mwms has no broadcast"),
        (["allreduce", "--backend", "tf-mwms", "--dtype", "bfloat16"], "backend tf-mwms cannot reduce bfloat16"),
        (["converge", "--backend", "horovod-tf"], "backend horovod-tf takes no converge runs"),
        (["fault", "--backend", "tf-mwms"], "tf-mwms"),
    ],
)
def test_the_tasks_they_do_not_take_are_refused_in_one_line(argv, says, tmp_path):
    assert_one_line_error(bench(*argv, "--store", tmp_path / "s.sqlite"), says)
    assert not (tmp_path / "s.sqlite").exists()


@needs("tf")
@pytest.mark.slow  # TensorFlow loaded in this process (seconds)
def test_a_tensorflow_sweep_counts_wrong_elements():
    """The sweep's check on TensorFlow tensors (TFBuffers): a collective that returns the right values is clean, one
    that gets an element wrong is counted at every size, in every dtype the backends take."""
    from bench.backends.shared.keras import TFBuffers
    from bench.rank.collectives import time_messages
    from factories import comm_spec, rank_row

    class OneRankGroup:  # a world of one: every collective returns its input
        def __init__(self, off_by=0.0):
            self.off_by = off_by

        def run_op(self, op, inp, out):
            import tensorflow as tf

            return inp + tf.one_hot(0, inp.shape[0], dtype=inp.dtype) * self.off_by

        def barrier(self):
            pass

    for dtype in ("float32", "float16"):
        comm = {
            "ops": ["allreduce", "allgather", "broadcast"],
            "dtype": dtype,
            "min_bytes": 8,
            "max_bytes": 64,
            "warmup_iters": 1,
            "iters": 2,
        }
        spec = comm_spec(world_size=1, **{k: v for k, v in comm.items()})
        clean = time_messages(spec, OneRankGroup(), rank_row(0, 1), TFBuffers(dtype, "cpu"))
        broken = time_messages(spec, OneRankGroup(1.0), rank_row(0, 1), TFBuffers(dtype, "cpu"))
        assert len(clean) == 12 and all(r["wrong"] == 0 for r in clean)
        assert [r["wrong"] for r in broken] == [1] * 12


def test_a_tensorflow_run_without_tensorflow_says_how_to_install_it(tmp_path):
    """TensorFlow hidden (a sitecustomize that makes find_spec miss it, as on a machine without the extra): each
    backend is unavailable, in one line naming the extra, before anything is created."""
    monkey = tmp_path / "shadow"
    monkey.mkdir()
    (monkey / "sitecustomize.py").write_text(
        "import importlib.util, sys\n"
        "real = importlib.util.find_spec\n"
        "def find_spec(name, *a, **k):\n"
        "    return None if name.split('.')[0] in ('tensorflow', 'tf_keras') else real(name, *a, **k)\n"
        "importlib.util.find_spec = find_spec\n"
    )
    env = {"PYTHONPATH": f"{monkey}{os.pathsep}{ROOT}"}
    store = tmp_path / "s.sqlite"
    for backend in ("tf-mwms", "horovod-tf"):
        assert_one_line_error(
            bench("run", "--backend", backend, "--store", store, env=env),
            f"backend {backend} cannot run here",
            "not installed",
            "pip install -e .[tf]",
        )
    assert not store.exists()


def test_they_are_measured_against_their_own_one_worker_run_not_pytorchs_plain_loop():
    """The plain loop is PyTorch's: a TensorFlow backend's step computes with another framework, so its figure against
    the plain loop would mix the framework's compute into "the communication not hidden". It is trained at one worker
    too, and its efficiency is over that run."""
    from bench.tasks.train.results import gate_figures
    from bench.workflows.plan import backend_world_sizes
    from factories import train_record

    assert backend_world_sizes("tf-mwms", [1, 2]) == backend_world_sizes("horovod-tf", [1, 2]) == [1, 2]
    assert backend_world_sizes("ps", [1, 2]) == [2]  # a companion backend of the plain loop's framework
    runs = [
        train_record(f"r{i}", backend, n)
        for i, (backend, n) in enumerate(
            [("single", 1), ("elastic", 1), ("elastic", 2), ("tf-mwms", 1), ("tf-mwms", 2)]
        )
    ]
    figures, _ = gate_figures(runs, runs)
    assert "vs_plain elastic mnist_mlp n=2" in figures and "efficiency elastic mnist_mlp n=2" in figures
    assert "efficiency tf-mwms mnist_mlp n=2" in figures
    assert not [name for name in figures if name.startswith("vs_plain tf-mwms")]


def test_the_scaling_model_says_why_it_does_not_project_them():
    from bench.core.errors import UsageError
    from bench.projection.fit import Case, fit

    case = Case(workload="mnist_mlp", batch=64, threads=1, device="cpu")
    for backend in ("tf-mwms", "horovod-tf"):
        with pytest.raises(UsageError, match=f"does not project {backend}: its runs have no step profile"):
            fit([], backend, case)


def test_the_bare_keras_loops_are_started_as_their_guides_start_them():
    import sys

    from bench.workflows.bare_loops import BARE_LOOPS

    mwms = BARE_LOOPS["tf-mwms"].command(3, ["--steps", 12])  # the script starts its workers, each with a TF_CONFIG
    assert mwms == [sys.executable, str(BARE_LOOPS["tf-mwms"].script), "--num-workers", "3", "--steps", "12"]
    hvd = BARE_LOOPS["horovod-tf"].command(2, [])
    assert hvd[1:6] == ["--gloo", "-np", "2", "-H", "localhost:2"] and hvd[-1].endswith("bare_horovod_tf.py")
    for loop in ("tf-mwms", "horovod-tf"):  # no harness and no torch in a bare Keras loop
        source = (
            BARE_LOOPS[loop].script.read_text() + (BARE_LOOPS[loop].script.parent / "bare_keras_common.py").read_text()
        )
        assert "import torch" not in source and "from bench" not in source and "import bench" not in source


def test_the_tensorflow_ranks_load_tf_keras_whatever_the_callers_environment(monkeypatch):
    """TensorFlow's import loads Keras 3 unless TF_USE_LEGACY_KERAS is set: the TensorFlow backends set it for their
    ranks and their horovodrun (tf_keras, the models' Keras), and the bare Keras loops set it for themselves; the
    PyTorch backends add nothing, so that a PyTorch Horovod launch's build check imports what it does for its users."""
    from bench.core.registry import get_backend
    from bench.harness.runner import launch_environment
    from factories import train_spec

    def environment(backend):
        options = get_backend(backend).resolve_options({}, world_size=2)
        return launch_environment(train_spec(backend, backend_options=options), "tag")

    monkeypatch.delenv("TF_USE_LEGACY_KERAS", raising=False)
    for backend in ("tf-mwms", "horovod-tf"):
        assert environment(backend)["TF_USE_LEGACY_KERAS"] == "1"
    for backend in ("elastic", "horovod", "ps", "single"):
        assert "TF_USE_LEGACY_KERAS" not in environment(backend)
    common = (ROOT / "bench" / "workflows" / "bare_loops" / "bare_keras_common.py").read_text()
    assert common.index('os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")') < common.index("import tensorflow")


@needs("tf")
@pytest.mark.slow
@pytest.mark.serial
def test_the_tensorflow_backends_against_their_bare_keras_loops(tmp_path):
    """Two pairs of real launches per figure: the suite's run and the bare Keras loop (bare_mwms.py starting its own
    workers; bare_horovod_tf.py under horovodrun), training and a 16 MiB allreduce (5 timed ops a launch: the
    test is of the loops and the check's wiring, not of the ratio's precision)."""
    import json

    proc = bench(
        "selfcheck",
        "--backend",
        "tf-mwms,horovod-tf",
        "--workload",
        "mnist_mlp",
        "--pairs",
        "2",
        "--pairs-timeout",
        "0",
        *FAST,
        "--iters",
        "5",
        "--warmup-iters",
        "2",
        "--json",
        "--store",
        tmp_path / "s.sqlite",
        timeout=400,
    )
    assert proc.returncode in (0, 1), proc.stderr  # the verdict depends on the machine; the shape does not
    out = json.loads(proc.stdout)
    assert [(c["backend"], c["figure"]) for c in out["checks"]] == [
        ("tf-mwms", "throughput"),
        ("tf-mwms", "busbw"),
        ("horovod-tf", "throughput"),
        ("horovod-tf", "busbw"),
    ]
    for check in out["checks"]:
        assert check["launches"] == [2, 2] and not check["why"].startswith("a launch failed"), check["why"]
        assert check["suite"] and check["bare"] and all(v > 0 for v in check["suite"] + check["bare"])
        assert check["low"] < check["ratio"] < check["high"]
        # the same work on both sides: far from equal would be another model, batch or message, not noise
        assert 0.5 < check["ratio"] < 2.0, check
    assert "Traceback" not in proc.stderr
