"""A worker joining a run of Horovod's TensorFlow elastic mode (horovod-tf: hvd.elastic.run over a
TensorFlowKerasState) for real: 1 horovodrun worker joined by another, which receives rank 0's parameters. Measured
cost on a 2-core machine: about 20 s (a killed worker, with the resumed parameters checked against Keras training
computed independently: tests/test_backend_contract.py).

Skipped where TensorFlow is missing, except under CI (needs.py)."""

import glob

import numpy as np
import pytest

from conftest import SHORT, fault
from needs import needs

pytestmark = [pytest.mark.slow, needs("tf")]


def resumed_params(record, step):
    """The weights each process saved when it resumed at `step` (.npz, in the model's order)."""
    out = []
    for path in sorted(glob.glob(f"{record['run_dir']}/resumed-step{step}-pid*.params.pt")):
        with np.load(path) as saved:
            out.append([saved[name] for name in saved.files])
    return out


def test_a_joining_horovod_tf_worker_is_taken_in(store):
    proc, record = fault(store, "--backend", "horovod-tf", "--nproc", 1, "--fault", "join", *SHORT, "--save-params")
    assert proc.returncode == 0, record["error"]
    assert record["status"] == "ok", record["error"]
    f = record["metrics"]
    assert (f["world_before"], f["world_after"]) == (1, 2)
    # Gloo's timeout covers the joiner's start, TensorFlow's import included (docs/method.md, "horovod")
    assert record["launch"]["collective_timeout_s"] == record["spec"]["fault"]["recovery_timeout"]
    assert "hosts updated" in f["detected_by"] and f["resets"] == 1
    assert f["join_contributes_s"] is not None and f["join_contributes_s"] >= f["recovery_s"] - 0.5
    assert len([r for r in record["rank_map"] if r["phase"] == "after"]) == 2
    # both processes resumed with the committed checksum: the joiner received rank 0's parameters by broadcast
    assert len(f["resume_checks"]) == 2 and all(c["equal"] for c in f["resume_checks"])
    step = f["resumed_from_step"]
    assert step >= 25 and step % 10 == 0
    first, joiner = resumed_params(record, step)
    assert first and len(first) == len(joiner)
    assert all(np.array_equal(a, b) for a, b in zip(first, joiner))
