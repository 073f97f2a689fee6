"""Typed records: the JSON round trip of each task's record, strictness, and reading the stores an earlier
version of the suite wrote (schema 1, upgraded when read)."""

import json
import shutil
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from bench.core.codec import RecordError
from bench.core.errors import StoreError
from bench.core.records import SCHEMA_VERSION, RankRow, RunRecord, upgrade
from bench.core.store import Store
from bench.results.frame import records_to_frame
from bench.tasks.comm import CommMetrics, CommRow
from bench.tasks.fault import FaultMetrics
from bench.tasks.train import TrainMetrics
from factories import comm_record, comm_row, fault_record, train_record

V1_STORE = Path(__file__).resolve().parent / "data" / "store-v1.sqlite"
EXAMPLES = {
    "train": lambda: train_record(per_window=[100.0, 120.0, 110.0]),
    "comm": lambda: comm_record(
        rows=[
            comm_row(size=4, window_time_us=[90.0, 110.0], limit_gbps=4.0),
            comm_row("allgather", 2048, 50.0, limit_gbps=4.0),
        ]
    ),
    "fault": lambda: fault_record(),
    "failed": lambda: train_record(status="crashed"),
}


def through_json(rec: RunRecord) -> RunRecord:
    return RunRecord.from_dict(json.loads(json.dumps(rec.to_dict())))


@pytest.mark.parametrize("kind", list(EXAMPLES))
def test_each_tasks_record_survives_the_json_round_trip(kind):
    rec = EXAMPLES[kind]()
    back = through_json(rec)
    assert back == rec
    assert type(back.metrics) is type(rec.metrics)
    assert back.rank_map and all(isinstance(r, RankRow) for r in back.rank_map)
    assert back.to_dict() == rec.to_dict()


def test_typed_parts_land_in_their_dataclasses():
    train, comm, fault = (through_json(EXAMPLES[k]()) for k in ("train", "comm", "fault"))
    assert isinstance(train.metrics, TrainMetrics) and train.metrics.throughput.per_window == [100.0, 120.0, 110.0]
    assert isinstance(comm.metrics, CommMetrics) and all(isinstance(r, CommRow) for r in comm.metrics.rows)
    assert comm.metrics.rows[0].window_time_us == [90.0, 110.0]
    assert isinstance(fault.metrics, FaultMetrics)
    assert [r.phase for r in fault.rank_map] == ["before", "before", "after", "after"]
    assert fault.metrics.rank_map_after and all(isinstance(r, RankRow) for r in fault.metrics.rank_map_after)
    crashed = through_json(EXAMPLES["failed"]())
    assert crashed.metrics is None and crashed.error.rank == 1 and not crashed.ok


@pytest.mark.parametrize(
    "change, says",
    [
        (lambda d: d.update(colour="red"), "record r1: unknown field(s) colour"),
        (lambda d: d["metrics"].update(colour="red"), "record r1.metrics: unknown field(s) colour"),
        (lambda d: d["spec"].update(colour="red"), "record r1.spec: unknown field(s) colour"),
        (lambda d: d["rank_map"][0].update(colour="red"), "record r1.rank_map[0]: unknown field(s) colour"),
        (lambda d: d.pop("status"), "record r1: missing field status"),
        (lambda d: d["metrics"].pop("throughput"), "record r1.metrics: missing field(s) throughput"),
        (lambda d: d["metrics"]["throughput"].pop("mean"), "record r1.metrics.throughput: missing field(s) mean"),
        (lambda d: d["spec"].pop("backend"), "record r1.spec: missing field(s) backend"),
        (lambda d: d["rank_map"][1].pop("world_size"), "record r1.rank_map[1]: missing field(s) world_size"),
        (lambda d: d["metrics"].update(per_rank={}), "record r1.metrics.per_rank: expected a list"),
    ],
)
def test_unknown_and_missing_fields_are_errors(change, says):
    data = train_record().to_dict()
    change(data)
    with pytest.raises(RecordError) as err:
        RunRecord.from_dict(data)
    assert says in str(err.value)


def test_schema_versions_this_bench_cannot_read_are_refused_with_a_reason():
    data = train_record().to_dict()
    with pytest.raises(RecordError, match=f"schema {SCHEMA_VERSION + 1}, newer than this bench"):
        RunRecord.from_dict({**data, "schema_version": SCHEMA_VERSION + 1})
    with pytest.raises(RecordError, match="schema 0, which this bench cannot upgrade"):
        RunRecord.from_dict({**data, "schema_version": 0})
    with pytest.raises(RecordError, match="no schema_version"):
        RunRecord.from_dict({k: v for k, v in data.items() if k != "schema_version"})
    with pytest.raises(RecordError, match="unknown task"):
        RunRecord.from_dict({**data, "spec": {**data["spec"], "task": "bake"}})
    with pytest.raises(RecordError, match="JSON object"):
        RunRecord.from_dict([data])
    assert upgrade(data) == data  # the current version goes through untouched


# ---------------------------------------------------------------- the schema-1 store
@pytest.fixture
def v1_store(tmp_path) -> Store:
    """A copy of the committed schema-1 store: opening it must never touch the committed file."""
    path = tmp_path / "bench.sqlite"
    shutil.copy(V1_STORE, path)
    return Store(path)


def raw_records(store: Store) -> dict[str, dict]:
    with sqlite3.connect(store.path) as conn:
        return {run_id: json.loads(text) for run_id, text in conn.execute("SELECT run_id, record FROM runs")}


def test_the_schema_1_store_is_what_the_tests_expect(v1_store):
    raw = raw_records(v1_store)
    assert Counter(r["schema_version"] for r in raw.values()) == {1: 25}
    with sqlite3.connect(v1_store.path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 1


def test_every_schema_1_record_upgrades(v1_store):
    raw = raw_records(v1_store)
    records = v1_store.records()
    assert Counter(r.spec.task for r in records) == {"train": 14, "comm": 3, "fault": 8}
    assert all(r.schema_version == SCHEMA_VERSION and r.launch == {} for r in records)
    assert all(r.shared_with == [] for r in records)  # v8: no bench before it looked for runs sharing the cores
    assert [r.created_at for r in records] == sorted(r.created_at for r in records)
    for rec in records:
        old = raw[rec.run_id]
        assert rec.status == old["status"] and rec.spec.backend == old["spec"]["backend"]
        assert rec.spec.repeat == old["spec"].get("repeat", 0) and rec.spec.step_delay is None
        assert [r.world_size for r in rec.rank_map] == [r.get("world_size", r.get("size")) for r in old["rank_map"]]
        assert through_json(rec) == rec  # an upgraded record is a current one


def test_schema_1_fields_land_where_schema_2_puts_them(v1_store):
    raw = raw_records(v1_store)
    records = v1_store.records()
    for rec in (r for r in records if r.spec.task == "train"):
        old = raw[rec.run_id]["metrics"]
        assert rec.metrics.throughput.mean == old["throughput"]["mean"]
        assert rec.metrics.window_times_s == old["window_times_s"]
    for rec in (r for r in records if r.spec.task == "comm"):
        old = raw[rec.run_id]
        rows = rec.metrics.rows
        assert [r.to_dict() for r in rows] == [{**r, "window_time_us": None} for r in old["allreduce"]]
        assert rows and all(r.busbw_gbps > 0 and r.busbw_fraction_of_limit > 0 for r in rows)
        assert rec.metrics.ceiling == old["metrics"]["comm"]["ceiling"] and rec.metrics.ceiling["limit_gbps"] > 0
        assert rec.metrics.avg_busbw_gbps == old["metrics"]["comm"]["avg_busbw_gbps"]
        assert rec.metrics.startup.rendezvous_s == old["metrics"]["startup"]["rendezvous_s"]
        assert rec.metrics.model in ("ring", "parameter server")
    faults = [r for r in records if r.spec.task == "fault"]
    for rec in faults:
        old = raw[rec.run_id]["metrics"]["fault"]
        m = rec.metrics
        assert m.scenario == old["scenario"] and m.recovery_s == old["recovery_s"] and m.fault == old["fault"]
        assert [(r.rank, r.world_size, r.pid) for r in m.rank_map_before] == [
            (r["rank"], r["size"], r["pid"]) for r in old["rank_map_before"]
        ]
        assert m.rank_map_before and all(isinstance(r, RankRow) and r.world_size >= 1 for r in m.rank_map_before)
        assert {r.phase for r in rec.rank_map} <= {"before", "after"}
    assert {m.scenario for m in (r.metrics for r in faults)} == {"kill", "join"}
    assert sorted(r.status for r in faults) == ["ok"] * 7 + ["timeout"]


def test_a_new_record_goes_into_an_old_store_and_both_read_back(v1_store):
    before = v1_store.records()
    new = train_record("new-run", created_at=before[-1].created_at + 60)
    v1_store.save(new)
    after = v1_store.records()
    assert [r.run_id for r in after] == [r.run_id for r in before] + ["new-run"]
    assert after[-1] == new and after[:-1] == before
    with sqlite3.connect(v1_store.path) as conn:  # an older bench would now refuse the store
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_a_store_holding_a_newer_record_names_it(v1_store, capsys):
    """Read, the newer record is skipped in one line naming it and the rest is read; written to, refused."""
    newer = train_record("from-the-future").to_dict() | {"schema_version": SCHEMA_VERSION + 1}
    with sqlite3.connect(v1_store.path) as conn:
        conn.execute("UPDATE runs SET record = ? WHERE run_id = (SELECT MIN(run_id) FROM runs)", (json.dumps(newer),))
    capsys.readouterr()
    assert len(v1_store.records()) == 24
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "skipped run" in line and "newer than this bench" in line and "update bench" in line, line
    with pytest.raises(StoreError) as err:
        v1_store.check_usable()
    assert f"holds records of schema {SCHEMA_VERSION + 1} (run " in str(err.value) and "update bench" in str(err.value)


def test_the_frame_of_upgraded_records_names_each_case(v1_store):
    frame = records_to_frame(v1_store.records())
    assert len(frame) == 25
    by_task = {task: rows for task, rows in frame.groupby("task")}
    assert set(by_task["comm"]["case"]) == {"communication sweep"}
    assert set(by_task["train"]["case"]) == set(by_task["train"]["workload"]) == {"mnist_mlp", "resnet18"}
    fault_cases = set(by_task["fault"]["case"])
    assert {
        "mnist_mlp: SIGKILL to 1 of 2 workers, checkpoint/commit every 100 steps",
        "mnist_mlp: a worker joins 1 running, checkpoint/commit every 100 steps",
    } <= fault_cases
    assert {c.split(": ")[1].split(" ")[0] for c in fault_cases} == {"SIGKILL", "SIGTERM", "SIGSTOP", "a"}
    assert by_task["train"]["throughput"].notna().all() and by_task["fault"]["throughput"].isna().all()
    ok_faults = by_task["fault"][by_task["fault"]["status"] == "ok"]
    assert ok_faults["recovery_s"].notna().all()


def test_a_status_is_one_of_the_statuses_and_is_stored_as_its_word(tmp_path):
    """RunStatus: a record made with a word holds the member; its JSON, the store and the frame hold the word; an
    unknown word is refused wherever it comes from."""
    from bench.core.records import RunStatus

    rec = train_record(run_id="s1", status="crashed")
    assert rec.status is RunStatus.CRASHED and not rec.ok
    data = json.loads(json.dumps(rec.to_dict()))
    assert data["status"] == "crashed" and RunRecord.from_dict(data).status is RunStatus.CRASHED
    assert f"{rec.status}!" == "crashed!" and str(RunStatus.OK) == "ok"
    store = Store(tmp_path / "s.sqlite")
    store.save(rec)
    assert sqlite3.connect(store.path).execute("SELECT status FROM runs").fetchone() == ("crashed",)
    frame = records_to_frame(store.records())
    assert list(frame["status"] == RunStatus.CRASHED) == [True] and list(frame["status"] == "crashed") == [True]
    with pytest.raises(RecordError, match="'exploded' is not one of 'ok', 'failed'"):
        RunRecord.from_dict({**data, "status": "exploded"})
    with pytest.raises(ValueError):
        train_record(run_id="s2", status="exploded")


def test_a_communication_sweep_has_no_training_fields_and_older_ones_are_upgraded(tmp_path):
    """v6: a communication run's spec holds None where v5 wrote placeholders (workload "comm", zeros); a v5 store's
    records (tests/data/store-v5.sqlite: the sample store of 2026-12-01) read so, and its training runs keep theirs.
    `bench list` shows no batch for them."""
    from bench.core.records import TRAINING_FIELDS
    from bench.results.listing import runs_table

    fresh = comm_record("c-new")
    assert all(getattr(fresh.spec, name) is None for name in TRAINING_FIELDS) and not fresh.spec.trains
    assert fresh.spec.global_batch is None and fresh.spec.total_steps is None
    sample = tmp_path / "sample.sqlite"
    shutil.copyfile(Path(__file__).resolve().parent / "data" / "store-v5.sqlite", sample)
    with sqlite3.connect(sample) as conn:
        stored = [json.loads(text) for (text,) in conn.execute("SELECT record FROM runs")]
    assert max(r["schema_version"] for r in stored) == 5  # written before v6 (some earlier still)
    assert any(r["spec"]["task"] == "comm" and r["spec"]["workload"] == "comm" for r in stored)
    records = Store(sample).records()
    comm = [r for r in records if r.spec.task == "comm"]
    train = [r for r in records if r.spec.task == "train"]
    assert comm and all(r.spec.workload is None and r.spec.batch_size is None for r in comm)
    assert train and all(isinstance(r.spec.workload, str) and r.spec.batch_size > 0 for r in train)
    frame = records_to_frame(comm[:1] + train[:1])
    assert str(frame["batch_size"].dtype) == "Int64" and frame["batch_size"].astype(str).tolist()[1] == str(
        train[0].spec.batch_size
    )
    table = runs_table(comm[:1] + train[:1]).splitlines()
    at = table[0].index("batch")  # the column, as the table pads it
    assert table[1][at:].split()[0] == "-" and table[2][at:].split()[0] == str(train[0].spec.batch_size)


def test_a_non_finite_number_in_a_field_of_free_form_reads_back_as_a_number(tmp_path):
    """A fit's dict holds an infinite bandwidth where the fitted time per byte is not positive: strict JSON writes
    "Infinity", and the record read back holds the number again, so its views format it as one."""
    rec = comm_record("inf1")
    rec.metrics.fit["bandwidth_gbps"] = float("inf")
    store = Store(tmp_path / "s.sqlite")
    store.save(rec)
    (text,) = sqlite3.connect(store.path).execute("SELECT record FROM runs").fetchone()
    assert (
        json.loads(text, parse_constant=lambda c: pytest.fail(f"bare {c}"))["metrics"]["fit"]["bandwidth_gbps"]
        == "Infinity"
    )
    back = store.records()[0]
    assert back.metrics.fit["bandwidth_gbps"] == float("inf")
    assert any("1/b = inf GB/s" in line for line in back.task.summary_lines(back))
