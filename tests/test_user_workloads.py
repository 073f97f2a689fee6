"""A user's own workload (`--workload path/to/file.py:NAME` or `PKG.MODULE:NAME`): loaded and checked before any
process starts, every broken kind refused in one line, and run under every backend through the CLI; the examples
run as the README shows them."""

import hashlib
import json
import textwrap

import pytest

from conftest import FAST, bench, bench_in_process, bench_json, processes_of_run
from test_cli_errors import assert_one_line_error

GOOD = '''
from workloads import Size, Workload


def build(num_classes, image):
    import torch.nn as nn

    return nn.Sequential(nn.Flatten(), nn.Linear(image * image, 32), nn.ReLU(), nn.Linear(32, num_classes))


TINY = Workload(name="tiny", summary="a tiny MLP", channels=1, gpu=Size(64, 12, 4, 50), cpu=Size(16, 12, 4, 5),
                fixed_image=False, build=build)
'''


def write(folder, name, text):
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


@pytest.mark.parametrize("text, ref, fragment", [
    (None, "missing.py:TINY", "no file"),
    ("def broken(:\n", "w.py:TINY", "does not import (SyntaxError"),
    ("raise RuntimeError('no GPU here')\n", "w.py:TINY", "does not import (RuntimeError: no GPU here)"),
    (GOOD, "w.py:HUGE", "has no 'HUGE'; its workloads: TINY"),
    (GOOD + "\nNOT_ONE = 3\n", "w.py:NOT_ONE", "is a int, not a workloads.Workload"),
    (GOOD.replace("cpu=Size(16, 12, 4, 5)", "cpu=Size(0, 12, 4, 5)"), "w.py:TINY", "TINY.cpu.batch must be a positive"),
    (GOOD.replace("return nn.Sequential", "raise ValueError('bad width')\n    return nn.Sequential"), "w.py:TINY",
     "build(4, 12) failed (ValueError: bad width)"),
    (GOOD.replace("nn.Linear(32, num_classes)", "nn.Linear(32, 7)"), "w.py:TINY", "(2, 4) scores, not (2, 7)"),
    (GOOD.replace("image * image, 32", "99, 32"), "w.py:TINY", "does not take a batch of shape (2, 1, 12, 12)"),
    (None, "no_such_pkg.mod:TINY", "no module 'no_such_pkg.mod'"),
    (None, "w.py:", "give a built-in name, PKG.MODULE:NAME or path/to/file.py:NAME"),
    (None, "not a module:TINY", "neither a .py file nor a dotted module name"),
])
def test_a_broken_workload_is_one_line_before_anything_runs(tmp_path, monkeypatch, text, ref, fragment):
    monkeypatch.chdir(tmp_path)
    if text is not None:
        write(tmp_path, "w.py", text)
    store = tmp_path / "results" / "b.sqlite"
    assert_one_line_error(bench_in_process("run", "--workload", ref, "--store", store), fragment)
    assert not store.exists()


@pytest.mark.slow
@pytest.mark.parametrize("backend, form", [("elastic", "package"), ("horovod", "file"), ("ps", "file")])
def test_a_users_workload_runs_under_every_backend(tmp_path, store, backend, form):
    """From a file anywhere, or as `PKG.MODULE:NAME` from the folder bench runs in (the processes import it from
    there too); its source is recorded."""
    folder = tmp_path / "mine"
    folder.mkdir()
    path = write(folder, "models.py", GOOD)
    (folder / "__init__.py").write_text("")
    reference = f"{path}:TINY" if form == "file" else "mine.models:TINY"
    proc = bench("run", "--backend", backend, "--workload", reference, "--nproc", 2, "--store", store, "--json",
                 "--save-model", "trained.pt", *FAST, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    assert record["status"] == "ok", record["error"]
    spec = record["spec"]
    assert spec["workload"] == (f"{path}:TINY" if form == "file" else reference)
    assert (spec["batch_size"], spec["image_size"]) == (16, 12)
    source = spec["workload_source"]
    assert source["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest() and source["file"] == str(path)
    assert (source["module"], source["import_path"]) == ((None, None) if form == "file" else
                                                         ("mine.models", str(tmp_path)))
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

    proc, record = bench_json("run", "--backend", "single", "--nproc", 1, "--workload",
                              f"examples/{example}.py:WORKLOAD", "--store", store, *FAST)
    assert proc.returncode == 0, proc.stderr
    assert record["status"] == "ok", record["error"]
    assert record["spec"]["workload"] == f"{ROOT}/examples/{example}.py:WORKLOAD"
