"""A user's own workload (`--workload path/to/file.py:NAME` or `PKG.MODULE:NAME`): loaded and checked before any
process starts, every broken kind refused in one line, and run under every backend through the CLI; the examples
run as the README shows them."""

import hashlib
import json

import pytest

from conftest import FAST, assert_one_line_error, bench, bench_in_process, bench_json, processes_of_run
from factories import TINY_WORKLOAD, write_source


@pytest.mark.parametrize(
    "text, ref, fragment",
    [
        (None, "missing.py:TINY", "no file"),
        ("def broken(:\n", "w.py:TINY", "does not import (SyntaxError"),
        ("raise RuntimeError('no GPU here')\n", "w.py:TINY", "does not import (RuntimeError: no GPU here)"),
        (TINY_WORKLOAD, "w.py:HUGE", "has no 'HUGE'; its workloads: TINY"),
        (TINY_WORKLOAD + "\nNOT_ONE = 3\n", "w.py:NOT_ONE", "is a int, not a workloads.Workload"),
        (
            TINY_WORKLOAD.replace("cpu=Size(16, 12, 4, 5)", "cpu=Size(0, 12, 4, 5)"),
            "w.py:TINY",
            "TINY.cpu.batch must be a positive",
        ),
        (
            TINY_WORKLOAD.replace("return nn.Sequential", "raise ValueError('bad width')\n    return nn.Sequential"),
            "w.py:TINY",
            "build(4, 12) failed (ValueError: bad width)",
        ),
        (
            TINY_WORKLOAD.replace("nn.Linear(32, num_classes)", "nn.Linear(32, 7)"),
            "w.py:TINY",
            "(2, 4) scores, not (2, 7)",
        ),
        (
            TINY_WORKLOAD.replace("image * image, 32", "99, 32"),
            "w.py:TINY",
            "does not take a batch of shape (2, 1, 12, 12)",
        ),
        (None, "no_such_pkg.mod:TINY", "no module 'no_such_pkg.mod'"),
        (None, "w.py:", "give a built-in name, PKG.MODULE:NAME or path/to/file.py:NAME"),
        (None, "not a module:TINY", "neither a .py file nor a dotted module name"),
    ],
)
def test_a_broken_workload_is_one_line_before_anything_runs(tmp_path, monkeypatch, text, ref, fragment):
    monkeypatch.chdir(tmp_path)
    if text is not None:
        write_source(tmp_path, "w.py", text)
    store = tmp_path / "results" / "b.sqlite"
    assert_one_line_error(bench_in_process("run", "--workload", ref, "--store", store), fragment)
    assert not store.exists()


OWN_DATA = (
    TINY_WORKLOAD
    + """

def datasets():
    import torch
    from torch.utils.data import TensorDataset

    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 1, 12, 12, generator=gen), torch.randint(0, 4, (64,), generator=gen)
    return TensorDataset(x[:48], y[:48]), TensorDataset(x[48:], y[48:])


OWN = Workload(name="own", summary="with its data", channels=1, gpu=Size(64, 12, 4, 50), cpu=Size(8, 12, 4, 5),
               fixed_image=True, build=build, datasets=datasets, classes=4)
"""
)


@pytest.mark.slow  # each a check in a process of its own that builds the data sets with torch (seconds)
@pytest.mark.parametrize(
    "change, args, fragment",
    [
        (("classes=4", "classes=None"), [], "OWN.classes must say how many classes"),
        (("datasets=datasets, classes", "datasets=3, classes"), [], "OWN.datasets must be None or callable"),
        (
            ("    return TensorDataset(x[:48]", "    raise OSError('no disk')\n    return TensorDataset(x[:48]"),
            [],
            "must return (train, held_out) data sets of (input, class index) pairs (OSError: no disk)",
        ),
        (
            ("torch.randn(64, 1, 12, 12", "torch.randn(64, 1, 10, 10"),
            [],
            "samples are Tensor (1, 10, 10); the model takes",
        ),
        (("randint(0, 4,", "randint(4, 5,"), [], "has class 4; it declares 4 classes"),
        (
            ("fixed_image=True, build=build, datasets", "fixed_image=True, build=build, loss=7, datasets"),
            [],
            "OWN.loss must be None or callable",
        ),
        (
            ("fixed_image=True, build=build, datasets", "fixed_image=True, build=build, loss=lambda: len, datasets"),
            [],
            "its loss does not take (scores, class indices)",
        ),
        (("", ""), ["--batch-size", "30"], "too few for 2 worker(s) x batch 30"),
    ],
)
def test_a_broken_dataset_factory_or_loss_is_one_line(tmp_path, monkeypatch, change, args, fragment):
    monkeypatch.chdir(tmp_path)
    write_source(tmp_path, "w.py", OWN_DATA.replace(*change) if change[0] else OWN_DATA)
    store = tmp_path / "results" / "b.sqlite"
    proc = bench_in_process(
        "run", "--workload", "w.py:OWN", "--data", "workload", "--nproc", 2, *args, "--store", store
    )
    assert_one_line_error(proc, fragment)
    assert not store.exists()


def test_data_workload_needs_a_factory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_source(tmp_path, "w.py", TINY_WORKLOAD)
    assert_one_line_error(
        bench_in_process("run", "--workload", "w.py:TINY", "--data", "workload", "--store", tmp_path / "b.sqlite"),
        "brings no data sets of its own",
    )


@pytest.mark.slow
def test_the_example_trains_on_its_own_data_with_its_own_loss(store):
    """examples/custom_model.py brings its data sets and loss: a converge run on them learns (far above the 10%
    of chance) and records where its held-out set came from."""
    proc, record = bench_json(
        "converge",
        "--workload",
        "examples/custom_model.py:WORKLOAD",
        "--data",
        "workload",
        "--backend",
        "elastic",
        "--nproc",
        2,
        "--epochs",
        3,
        "--target",
        0.6,
        "--store",
        store,
    )
    assert proc.returncode == 0, proc.stderr
    m = record["metrics"]
    assert record["spec"]["loader"] == "dataloader" and record["spec"]["num_classes"] == 10
    assert m["reached"] and m["final_accuracy"] > 0.6 and m["held_out"].startswith("the workload's own held-out set")
    assert processes_of_run(record["run_id"]) == []


@pytest.mark.slow
@pytest.mark.parametrize("backend, form", [("elastic", "package"), ("horovod", "file"), ("ps", "file")])
def test_a_users_workload_runs_under_every_backend(tmp_path, store, backend, form):
    """From a file anywhere, or as `PKG.MODULE:NAME` from the folder bench runs in (the processes import it from
    there too); its source is recorded."""
    folder = tmp_path / "mine"
    folder.mkdir()
    path = write_source(folder, "models.py", TINY_WORKLOAD)
    (folder / "__init__.py").write_text("")
    address = f"{path}:TINY" if form == "file" else "mine.models:TINY"
    proc = bench(
        "run",
        "--backend",
        backend,
        "--workload",
        address,
        "--nproc",
        2,
        "--store",
        store,
        "--json",
        "--save-model",
        "trained.pt",
        *FAST,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    assert record["status"] == "ok", record["error"]
    spec = record["spec"]
    assert spec["workload"] == (f"{path}:TINY" if form == "file" else address)
    assert (spec["batch_size"], spec["image_size"]) == (16, 12)
    source = spec["workload_source"]
    assert source["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest() and source["file"] == str(path)
    assert (source["module"], source["import_path"]) == (
        (None, None) if form == "file" else ("mine.models", str(tmp_path))
    )
    assert processes_of_run(record["run_id"]) == []
    # --save-model: the first worker's trained state_dict, loaded back into the plain model, is its parameters
    import torch

    from workloads.external import load

    assert spec["save_model"] == str(tmp_path / "trained.pt")
    model = load(f"{path}:TINY").build(4, 12)
    model.load_state_dict(torch.load(spec["save_model"], weights_only=True))
    first = next(r for r in record["metrics"]["per_rank"] if r["rank"] == record_first_worker(record))
    checksum = float(sum(p.detach().double().sum() for p in model.parameters()))
    assert abs(checksum - first["param_checksum"]) <= 1e-9 * max(1.0, abs(checksum))


def record_first_worker(record) -> int:
    """The global rank of the worker with index 0 (a parameter server's workers need not hold rank 0)."""
    return next(row["rank"] for row in record["rank_map"] if row["role"] == "worker" and row["role_rank"] == 0)


@pytest.mark.slow
@pytest.mark.parametrize("example", ["conv_mnist", "custom_model"])
def test_the_examples_run_as_the_readme_shows(store, example):
    from conftest import ROOT

    proc, record = bench_json(
        "run",
        "--backend",
        "single",
        "--nproc",
        1,
        "--workload",
        f"examples/{example}.py:WORKLOAD",
        "--store",
        store,
        *FAST,
    )
    assert proc.returncode == 0, proc.stderr
    assert record["status"] == "ok", record["error"]
    assert record["spec"]["workload"] == f"{ROOT}/examples/{example}.py:WORKLOAD"
