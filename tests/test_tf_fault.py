"""Fault runs of Horovod's TensorFlow elastic mode (horovod-tf: hvd.elastic.run over a TensorFlowKerasState) for real:
2 horovodrun workers, one killed from outside, and one worker joined by another; the resumed parameters checked
against Keras training computed independently here. Measured cost on a 2-core machine: about 15 s and 20 s.

Skipped where TensorFlow is missing, except under CI (test_tf.needs_tf)."""

import contextlib
import glob
from types import SimpleNamespace

import numpy as np
import pytest
from test_fault import SHORT, fault
from test_tf import needs_tf  # it also imports torch's compiler stack before TensorFlow (see there)

pytestmark = [pytest.mark.slow, needs_tf]


def keras_two_worker_sgd(spec, steps):
    """`steps` steps of 2-worker synchronous SGD on the MLP in Keras, computed here in one process from the run's
    seeded model: each step on both ranks' batches at once (the mean loss of the two equal batches, whose gradient is
    the mean of theirs). Its weights, in the model's order."""
    import tensorflow as tf

    from bench.backends.tf_training import channels_last_arrays, mean_loss, seeded_model
    from workloads import WORKLOADS

    run = SimpleNamespace(**spec)
    model, optimizer = seeded_model(run, WORKLOADS["mnist_mlp"], SimpleNamespace(scope=contextlib.nullcontext))
    loss_of = mean_loss(model)
    data = [channels_last_arrays(batch=run.batch_size, channels=1, image=run.image_size, classes=run.num_classes,
                                 seed=run.seed, rank=r) for r in (0, 1)]
    for step in range(steps):
        x = np.concatenate([xs[step % len(xs)] for xs, _ in data])
        y = np.concatenate([ys[step % len(ys)] for _, ys in data])
        with tf.GradientTape() as tape:
            loss = loss_of(x, y)
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return [w.numpy() for w in model.weights]


def resumed_params(record, step):
    """The weights each process saved when it resumed at `step` (.npz, in the model's order)."""
    out = []
    for path in sorted(glob.glob(f"{record['run_dir']}/resumed-step{step}-pid*.params.pt")):
        with np.load(path) as saved:
            out.append([saved[name] for name in saved.files])
    return out


def test_horovod_tf_survivor_goes_on_alone_from_the_last_commit(store):
    proc, record = fault(store, "--backend", "horovod-tf", "--nproc", 2, "--kill-rank", 1, *SHORT, "--save-params")
    assert proc.returncode == 0, proc.stderr
    assert record["status"] == "ok", record["error"]
    f = record["metrics"]
    assert f["fault"]["signal"] == "KILL" and f["fault"]["step"] == 25 and f["fault"]["delivered"]
    assert (f["world_before"], f["world_after"]) == (2, 1)
    assert f["resets"] == 1 and f["resumed_from_step"] == 20 and f["steps_redone"] == 5
    # the survivor's step failed in Horovod's allreduce (TensorFlow's error, which hvd.elastic.run takes for a lost peer)
    assert "UnknownError" in f["detected_by"] and "Allreduce" in f["detected_by"]
    assert 0 < f["detection_s"] <= f["recovery_s"]
    assert f["steps_completed"] == 60
    before = [r for r in record["rank_map"] if r["phase"] == "before"]
    after = [r for r in record["rank_map"] if r["phase"] == "after"]
    assert len(after) == 1 and after[0]["pid"] == before[0]["pid"] and after[0]["world_size"] == 1
    # the checksum the survivor resumed with is the one committed at step 20
    assert len(f["resume_checks"]) == 1 and all(c["equal"] for c in f["resume_checks"])

    # and those parameters are 20 steps of 2-worker SGD, computed here: within 1e-4 of them, and at least 5 times
    # nearer to them than to one step fewer or more (as tests/test_fault.py checks the PyTorch backends)
    spec = record["spec"]
    expected, fewer, more = (keras_two_worker_sgd(spec, n) for n in (20, 19, 21))
    [got] = resumed_params(record, 20)
    off = {name: max(float(np.abs(a - b).max()) for a, b in zip(got, ref))
           for name, ref in (("steps", expected), ("one fewer", fewer), ("one more", more))}
    assert off["steps"] < 1e-4 and off["steps"] * 5 < min(off["one fewer"], off["one more"]), off


def test_a_joining_horovod_tf_worker_is_taken_in(store):
    proc, record = fault(store, "--backend", "horovod-tf", "--nproc", 1, "--join", *SHORT, "--save-params")
    assert proc.returncode == 0, proc.stderr
    assert record["status"] == "ok", record["error"]
    f = record["metrics"]
    assert (f["world_before"], f["world_after"]) == (1, 2)
    assert "hosts updated" in f["detected_by"] and f["resets"] == 1
    assert f["join_contributes_s"] is not None and f["join_contributes_s"] >= f["recovery_s"] - 0.5
    assert len([r for r in record["rank_map"] if r["phase"] == "after"]) == 2
    # both processes resumed with the committed checksum: the joiner received rank 0's parameters by broadcast
    assert len(f["resume_checks"]) == 2 and all(c["equal"] for c in f["resume_checks"])
    step = f["resumed_from_step"]
    assert step >= 25 and step % 10 == 0
    first, joiner = resumed_params(record, step)
    assert all(np.array_equal(a, b) for a, b in zip(first, joiner))
