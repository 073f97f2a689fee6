"""A run whose loss or parameters become non-finite is `diverged`, not ok: the record names the rank and the step,
the page lists it and no comparison counts it; and every record, run file and the store is strict JSON, a
non-finite float written as "NaN", "Infinity" or "-Infinity" and read back as the float."""

import dataclasses
import json
import math
import sqlite3
import textwrap

import pytest

from bench.core.codec import decode, float_of
from bench.core.records import RunError, RunRecord, RunStatus
from bench.core.rundir import RunDir, write_json_atomic
from bench.core.store import Store
from bench.rank.training import first_non_finite
from bench.report.page import render_report
from bench.results.figures import figures
from bench.results.frame import load_frame
from bench.tasks.fault import FaultMetrics
from bench.tasks.fault.analysis import fault_metrics, fault_status
from bench.tasks.fault.rank import Journal
from bench.tasks.train import TASK as TRAIN
from bench.tasks.train.results import comparisons
from conftest import FAST, bench, bench_json
from factories import (
    OBSERVED,
    RunDirBuilder,
    commit,
    fault_journals,
    fault_spec,
    finished_run,
    outcome,
    rank_result,
    train_output,
    train_record,
    train_spec,
)


def _refuse(constant):
    raise ValueError(f"not strict JSON: {constant}")


def strict(text: str):
    """JSON as a strict parser reads it: a bare NaN, Infinity or -Infinity is an error."""
    return json.loads(text, parse_constant=_refuse)


def diverged_record(run_id="d1", **fields):
    """A training record whose rank 0 ended with a NaN loss and an infinite parameter checksum."""
    rec = train_record(run_id, **fields)
    rank = dataclasses.replace(rec.metrics.per_rank[0], loss_last=math.nan, param_checksum=-math.inf)
    rec.metrics = dataclasses.replace(rec.metrics, per_rank=[rank], loss_last=math.nan)
    return rec


# ---------------------------------------------------------------- strict JSON
def test_non_finite_floats_are_words_in_the_store_and_record_json_and_read_back(tmp_path):
    rec = diverged_record()
    rec.metrics.throughput.ci_half_width = math.inf
    store = Store(tmp_path / "b.sqlite")
    store.save(rec)
    write_json_atomic(tmp_path / "record.json", rec.to_dict())
    (stored,) = sqlite3.connect(tmp_path / "b.sqlite").execute("SELECT record FROM runs").fetchone()
    for text in (stored, (tmp_path / "record.json").read_text()):
        data = strict(text)
        m = data["metrics"]
        assert (m["loss_last"], m["per_rank"][0]["param_checksum"], m["throughput"]["ci_half_width"]) == (
            "NaN",
            "-Infinity",
            "Infinity",
        )
        back = RunRecord.from_dict(data).metrics  # a field typed float reads the word back as the float
        assert math.isnan(back.loss_last) and back.per_rank[0].param_checksum == -math.inf
        assert back.throughput.ci_half_width == math.inf
    (read,) = store.records()
    assert math.isnan(read.metrics.per_rank[0].loss_last)


def test_run_files_and_journals_are_strict_json(tmp_path):
    run_dir = RunDir(tmp_path / "run").create()
    run_dir.write(0, 0, "result", {"output": {"loss": math.nan, "losses": [1.0, math.inf]}})
    text = run_dir.rank_file(0, 0, "result").read_text()
    assert strict(text) == {"output": {"loss": "NaN", "losses": [1.0, "Infinity"]}}
    journal = Journal(run_dir.journal_file(0, 0))
    journal.write("commit", step=4, rank=0, checksum=-math.inf)
    journal.fh.close()
    line = strict(run_dir.journal_file(0, 0).read_text())
    assert line["checksum"] == "-Infinity" and float_of(line["checksum"]) == -math.inf
    assert float_of("NaN") != float_of("NaN") and float_of("nan") == "nan" and float_of(2) == 2


def v6_text(rec: RunRecord) -> str:
    """A record as the bench of schema 6 wrote it: no error step, non-finite floats as bare JSON constants."""
    data = rec.to_dict()
    data["schema_version"] = 6
    if data["error"]:
        del data["error"]["step"]

    def bare(value):
        if isinstance(value, dict):
            return {k: bare(v) for k, v in value.items()}
        if isinstance(value, list):
            return [bare(v) for v in value]
        return float_of(value)

    return json.dumps(bare(data))


def test_an_old_record_with_bare_nan_is_read_diverged_and_rewritten_strict(tmp_path):
    text = v6_text(diverged_record())
    assert "NaN" in text and "-Infinity" in text
    with pytest.raises(ValueError):
        strict(text)
    rec = RunRecord.from_dict(json.loads(text))
    assert rec.status is RunStatus.DIVERGED and not rec.ok
    end = rec.spec.warmup_steps + rec.spec.windows * rec.spec.steps_per_window
    assert (rec.error.rank, rec.error.step) == (0, end)
    assert rec.error.message == (
        f"rank 0: the loss was nan by step {end} (found when this schema-6 record was read: it kept no earlier check)"
    )
    assert math.isnan(rec.metrics.loss_last)  # its figures are kept
    store = Store(tmp_path / "b.sqlite")
    store.save(rec)  # written again: in the strict form
    (stored,) = sqlite3.connect(tmp_path / "b.sqlite").execute("SELECT record FROM runs").fetchone()
    assert strict(stored)["metrics"]["loss_last"] == "NaN" and strict(stored)["status"] == "diverged"
    # a schema-6 ok run whose figures are finite stays ok, and one that failed stays as it was
    assert RunRecord.from_dict(json.loads(v6_text(train_record()))).ok
    crashed = RunRecord.from_dict(json.loads(v6_text(train_record(status="crashed"))))
    assert crashed.status is RunStatus.CRASHED and crashed.error.step is None


# ---------------------------------------------------------------- inside a rank
def test_a_rank_reports_the_first_non_finite_value_it_holds():
    losses = [(1, "loss", 2.0), (2, "loss", 1.5), (5, "loss", 1.0), (8, "loss", math.nan), (11, "loss", math.inf)]
    assert first_non_finite(losses[:3], 4.0, 11) is None
    assert first_non_finite(losses, 4.0, 11) == {"what": "loss", "step": 8, "finite_at": 5, "value": "nan"}
    assert first_non_finite([(1, "loss", -math.inf)], 4.0, 11) == {
        "what": "loss",
        "step": 1,
        "finite_at": None,
        "value": "-inf",
    }
    # finite losses, parameters that are not (the last update): seen by the end, when they are summed
    assert first_non_finite(losses[:3], math.inf, 11) == {
        "what": "parameters",
        "step": 11,
        "finite_at": None,
        "value": "inf",
    }


# ---------------------------------------------------------------- the parent's conclusion
def non_finite(step, finite_at, what="loss", value="nan"):
    return {"what": what, "step": step, "finite_at": finite_at, "value": value}


@pytest.mark.parametrize(
    "seen, message, rank, step",
    [
        ({}, None, None, None),
        (
            {0: non_finite(8, 5), 1: non_finite(8, 5)},
            "ranks 0, 1: the loss became nan by step 8 (finite at step 5, the check before)",
            0,
            8,
        ),
        (
            {1: non_finite(3, 2), 0: non_finite(8, 5)},
            "rank 1: the loss became nan at step 3; 2 of 2 workers by their end",
            1,
            3,
        ),
        (
            {0: non_finite(25, None, "parameters", "inf")},
            "rank 0: the parameters' checksum became inf by step 25",
            0,
            25,
        ),
    ],
)
def test_a_run_whose_worker_saw_a_non_finite_value_is_diverged(tmp_path, seen, message, rank, step):
    spec = train_spec()
    results = {}
    for r in range(2):
        out = train_output([0.1, 0.1], loss_last=math.nan if r in seen else 0.5)
        results[r] = rank_result(r, 2, {**out, "non_finite": seen.get(r)})
    conclusion = TRAIN.conclude(spec, finished_run(tmp_path / "run", spec, results), outcome(), {})
    assert conclusion.metrics is not None  # what was measured is kept, whatever the status
    if message is None:
        assert conclusion.status is RunStatus.OK and conclusion.error is None
        return
    assert conclusion.status is RunStatus.DIVERGED
    assert (conclusion.error.message, conclusion.error.rank, conclusion.error.step) == (message, rank, step)
    assert math.isnan(conclusion.metrics.per_rank[min(seen)].loss_last)  # read back from the word in the file


def test_a_fault_run_whose_parameters_became_non_finite_is_diverged(tmp_path):
    spec = fault_spec(world_size=2)
    builder = fault_journals(RunDirBuilder(tmp_path / "run", spec))
    # a commit after the recovery holds a checksum that is no number (written strict, as Journal writes it)
    builder.journal(0, 1, commit(4.1, 8, 0, "NaN"))
    done = outcome(ended_after=8.0, launched_at=0.0)
    metrics = decode(FaultMetrics, fault_metrics(spec, builder.run_dir, done, OBSERVED), "fault metrics")
    assert metrics.diverged == {"step": 8, "rank": 0, "value": "nan"}
    status, message = fault_status(spec, metrics, done)
    assert status is RunStatus.DIVERGED
    assert message == "rank 0: the parameters' checksum became nan by step 8 (checked at commits and at the end)"


# ---------------------------------------------------------------- the page and the comparisons
def section(page: str, anchor: str) -> str:
    return page.split(f'<h2 id="{anchor}">')[1].split("<h2 ")[0]


def test_a_diverged_run_is_listed_on_the_page_and_in_no_comparison(tmp_path):
    store = Store(tmp_path / "b.sqlite")
    for i in range(2):
        store.save(train_record(f"e{i}", "elastic", per_window=(100.0 + i, 101.0 + i), created_at=1000.0 + i))
        store.save(train_record(f"h{i}", "horovod", per_window=(90.0 + i, 91.0 + i), created_at=1010.0 + i))
    # the latest elastic run, far faster than the others: counted anywhere, it would move every figure
    nan_run = diverged_record("nan-run", backend="elastic", per_window=(5000.0, 5001.0), created_at=1020.0)
    nan_run.status = RunStatus.DIVERGED
    nan_run.error = RunError(
        message="rank 0: the loss became nan by step 8 (finite at step 5, the check before)", rank=0, step=8
    )
    store.save(nan_run)
    frame = load_frame(store)
    page = render_report(frame, "s")
    failed = section(page, "failed")
    assert "nan-run" in failed and "diverged" in failed and "the loss became nan by step 8" in failed
    for anchor in ("verdict", "throughput"):
        assert "nan-run" not in section(page, anchor) and "5,00" not in section(page, anchor)
    records = store.records()
    gated, not_ok = figures(records)
    assert gated and all("nan-run" not in f.run_ids for f in gated.values()) and not not_ok
    assert comparisons(frame) and comparisons(frame) == comparisons(frame[frame["run_id"] != "nan-run"])


# ---------------------------------------------------------------- real runs
BLOWS_UP = """
from workloads import Size, Workload


def build(num_classes, image):
    import torch.nn as nn

    class BlowsUp(nn.Module):
        # a small MLP whose scores are infinite from training step AFTER + 1 on: its loss is NaN from there
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Flatten(), nn.Linear(image * image, num_classes))
            self.steps = 0

        def forward(self, x):
            out = self.net(x)
            if not self.training:
                return out
            self.steps += 1
            return out * float("inf") if self.steps > AFTER else out

    return BlowsUp()


AFTER = {after}
NAN = Workload(name="nan", summary="its loss turns NaN", channels=1, gpu=Size(64, 12, 4, 50), cpu=Size(16, 12, 4, 5),
               fixed_image=False, build=build)
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "backend, nproc, after, rank, step, when",
    [
        # NaN from step 4, inside the first timed window (steps 3-5): seen at its end, the warm-up's last step finite
        ("elastic", 2, 3, "ranks 0, 1", 5, "by step 5 (finite at step 2, the check before)"),
        ("horovod", 2, 3, "ranks 0, 1", 5, "by step 5 (finite at step 2, the check before)"),
        # NaN from step 2, the warm-up's last: every warm-up step is checked, so the step is exact
        ("single", 1, 1, "rank 0", 2, "at step 2"),
    ],
)
def test_a_run_whose_loss_turns_nan_is_diverged_and_stored_strict(tmp_path, backend, nproc, after, rank, step, when):
    store = tmp_path / "b.sqlite"
    proc, record = bench_json(
        "run", "--backend", backend, "--nproc", nproc, "--workload", blows_up(tmp_path, after), "--store", store, *FAST
    )
    assert proc.returncode == 1, proc.stderr
    assert strict(proc.stdout) == record and record["status"] == "diverged"
    assert (record["error"]["rank"], record["error"]["step"]) == (0, step)
    assert record["error"]["message"] == f"{rank}: the loss became nan {when}"
    assert record["metrics"]["loss_last"] == "NaN"  # measured, kept, and written as the word
    assert_strict_and_listed(tmp_path, store, record, f"the loss became nan {when}")


def blows_up(folder, after: int) -> str:
    path = folder / "blows_up.py"
    path.write_text(textwrap.dedent(BLOWS_UP.replace("{after}", str(after))))
    return f"{path}:NAN"


def assert_strict_and_listed(folder, store, record: dict, says: str) -> None:
    """The stored record, record.json and every JSON file and line of the run directory parse strictly; the page
    lists the run under "Failed and unstable runs" with what it says."""
    (stored,) = sqlite3.connect(store).execute("SELECT record FROM runs").fetchone()
    run_dir = Store(store).run_dir(record["run_id"])
    for text in (
        stored,
        (run_dir / "record.json").read_text(),
        *(p.read_text() for p in run_dir.rglob("*.json")),
        *(line for p in run_dir.rglob("*.jsonl") for line in p.read_text().splitlines()),
    ):
        strict(text)
    page = folder / "page.html"
    proc = bench("report", "--store", store, "-o", page)
    assert proc.returncode == 0, proc.stderr
    failed = section(page.read_text(), "failed")
    assert record["run_id"] in failed and "diverged" in failed and says in failed


@pytest.mark.slow
def test_a_converge_run_whose_loss_turns_nan_is_diverged(tmp_path):
    """Checked at its first step and at each evaluation (every 2 steps here): NaN from step 4, seen there. Its record
    as schema 6 wrote it (ok, bare NaN) is read as diverged from its held-out curve."""
    store = tmp_path / "b.sqlite"
    proc, record = bench_json(
        "converge",
        "--backend",
        "single",
        "--nproc",
        1,
        "--workload",
        blows_up(tmp_path, 3),
        "--data",
        "digits",
        "--epochs",
        1,
        "--eval-every",
        2,
        "--store",
        store,
    )
    assert proc.returncode == 1, proc.stderr
    assert strict(proc.stdout) == record
    assert record["status"] == "diverged" and (record["error"]["rank"], record["error"]["step"]) == (0, 4)
    says = "the loss became nan by step 4 (finite at step 2, the check before)"
    assert record["error"]["message"] == f"rank 0: {says}"
    assert_strict_and_listed(tmp_path, store, record, says)
    old = RunRecord.from_dict(
        json.loads(v6_text(dataclasses.replace(RunRecord.from_dict(record), status="ok", error=None)))
    )
    assert old.status is RunStatus.DIVERGED and (old.error.rank, old.error.step) == (0, 4)
    assert old.error.message.startswith("rank 0: the held-out loss was nan by step 4 (found when")
