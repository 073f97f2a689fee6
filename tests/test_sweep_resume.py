"""An interrupted sweep is marked, said so on its page, and resumed (bench.workflows.sweep, bench.results.sweeps): a
real sweep whose bench process is killed in a launch, then resumed and SIGTERMed while its launch waits for cores a
holder process took, then resumed to its end, which runs exactly the planned launch that did not run, under the same
sweep id. Then, in this process, the bad input of --resume (one line, exit 2, nothing run), the page of a store holding
such a sweep, the store's schema beside its sweeps, and the state a sweep is left in by each way its runs can end."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from bench.core.environment import git_state
from bench.core.errors import CoresInUse, Interrupted
from bench.core.store import Store
from bench.results.sweeps import GONE, plan_text, sweep_statuses, this_process
from conftest import FAST, ROOT, assert_one_line_error, bench, bench_in_process
from factories import CLEAR, sweep_records, train_spec

SWEEP = [
    "sweep",
    "--backend",
    "single",
    "--workload",
    "mnist_mlp",
    "--world-sizes",
    "1",
    "--no-comm",
    "--no-faults",
    "--repeats",
    "2",
    *FAST,
]
HOLDER = """
import sys, time
from bench.harness.cores import CoreClaim
with CoreClaim("holder-run", "a test holder", None, ["cpu0", "cpu1"]):
    print("holding", flush=True)
    time.sleep(600)
"""


def start(args, env) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, *args], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def read_until(proc, text: str, seen: list) -> None:
    """Lines of proc's stderr into `seen` until one holds `text` (fails if it ends first)."""
    for line in proc.stderr:
        seen.append(line)
        if text in line:
            return
    pytest.fail(f"ended (rc {proc.wait()}) before saying {text!r}:\n{''.join(seen)}")


def status_of(store_path):
    store = Store(store_path)
    rows = store.sweeps()
    assert len(rows) == 1
    return sweep_statuses(rows, store.records())[rows[0]["sweep_id"]]


def page_of(store_path, tmp_path) -> str:
    out = tmp_path / "page.html"
    proc = bench_in_process("report", "--store", store_path, "-o", out)
    assert proc.returncode == 0, proc.stderr
    return out.read_text()


def resumed(store_path, env, *more):
    proc = bench("sweep", "--resume", *more, "--store", store_path, "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), proc.stderr


@pytest.mark.slow
def test_an_interrupted_sweep_is_marked_said_on_its_page_and_resumed_without_redoing_a_launch(tmp_path, store):
    locks = tmp_path / "locks"
    env = dict(os.environ, PYTHONPATH=str(ROOT), BENCH_LOCK_DIR=str(locks))
    env.pop("BENCH_STORE", None)
    # 1. the sweep's bench process killed in its second launch: no teardown, so its row still says running; its page
    # (-o) was written once its first round (one launch) ended
    live = tmp_path / "live.html"
    sweeping, seen = start(["-m", "bench", *SWEEP, "--store", str(store), "-o", str(live)], env), []
    try:
        read_until(sweeping, "[2/2] single mnist_mlp world 1 ...", seen)
        deadline = time.monotonic() + 60
        while len(list((store.parent / "runs").glob("*/launch.json"))) < 2:  # under way, its lifeline watching
            assert time.monotonic() < deadline and sweeping.poll() is None, "".join(seen)
            time.sleep(0.05)
        sweeping.send_signal(signal.SIGKILL)
    finally:
        if sweeping.poll() is None:
            sweeping.kill()
        sweeping.wait()
    deadline = time.monotonic() + 60
    while len(Store(store).records()) < 2:  # the launch's lifeline records it
        assert time.monotonic() < deadline, "the killed launch was not recorded"
        time.sleep(0.2)
    assert Store(store).sweeps()[0]["state"] == "running"
    status = status_of(store)
    assert (status.state, status.why, status.ran, status.planned) == ("interrupted", GONE, 1, 2)
    first, cut = Store(store).records()
    assert (first.status, cut.status) == ("ok", "interrupted")
    assert f"bench sweep: page written to {live} (after round 1 of 2 (1 of 2 launches); rewritten as" in "".join(seen)
    assert first.run_id in live.read_text() and cut.run_id not in live.read_text()
    assert not list(tmp_path.glob("report-*.html"))  # the dated copy is the finished sweep's
    assert f"was interrupted ({GONE}): only 1 of its 2 planned launches ran" in page_of(store, tmp_path)

    # 2. resumed while another bench run holds the cores, and SIGTERMed while its launch waits for them
    holder, resuming = start(["-c", HOLDER], env), None
    try:
        assert holder.stdout.readline().strip() == "holding"
        resuming = start(["-m", "bench", "sweep", "--resume", "--store", str(store), "-o", str(live)], env)
        seen = []
        read_until(resuming, "run holder-run (a test holder", seen)
        resuming.send_signal(signal.SIGTERM)
        said = "".join(seen) + resuming.communicate(timeout=60)[1]
    finally:
        for proc in (holder, resuming):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    assert resuming.returncode == 130, said
    assert (
        f"sweep {status.sweep_id} interrupted (Ctrl-C or SIGTERM) after 1 of its 2 planned launches; `bench "
        f"sweep --resume {status.sweep_id} --store {store}` runs the other 1" in said
    )
    status = status_of(store)
    assert (status.state, status.why, status.ran, status.planned) == ("interrupted", "Ctrl-C or SIGTERM", 1, 2)
    assert len(Store(store).records()) == 2  # the launch that waited made nothing
    # its page, rewritten as it stopped, is the page `bench report` makes of the store now
    assert f"page written to {live} (the sweep was interrupted: `bench sweep --resume` finishes it)" in said
    page = page_of(store, tmp_path)
    assert live.read_text().split("<h2")[1:] == page.split("<h2")[1:]
    assert f"Sweep {status.sweep_id} (bench sweep, started " in page
    assert "was interrupted (Ctrl-C or SIGTERM): only 1 of its 2 planned launches ran" in page
    assert f"Not a complete sweep: sweep {status.sweep_id} interrupted: 1 of its 2 planned launches ran" in page

    # 3. resumed to its end: exactly the launch that was cut, run again as planned, under the sweep's id
    records, said = resumed(store, env, status.sweep_id)
    assert f"resuming sweep {status.sweep_id} (" in said
    assert "1 of its 2 planned launches ran; running the 1 left" in said
    assert "[1/1] single mnist_mlp world 1" in said and "[2/" not in said
    assert [(r["run_id"], r["status"]) for r in records[:1]] == [(first.run_id, "ok")]  # --json: the sweep's launches
    assert records[1]["status"] == "ok" and records[1]["spec"] == cut.spec.to_dict()
    assert [r.run_id for r in Store(store).records()] == [first.run_id, cut.run_id, records[1]["run_id"]]
    assert status_of(store).state == "complete"
    page = page_of(store, tmp_path)
    assert "Not a complete sweep" not in page and "was interrupted (" not in page
    from bench.results.baselines import latest_sweep
    from bench.results.frame import load_frame
    from bench.tasks.train.results import replicated_cases

    (case,) = replicated_cases(load_frame(Store(store)))
    assert (case.launches, case.sweeps) == (2, 1)  # the resumed launch pools with the first: one sweep
    # the sweep the gate takes (`bench compare`, `bench baseline --from-store`): its launches, not the one cut
    assert [r.run_id for r in latest_sweep(Store(store).records())[1]] == [first.run_id, records[1]["run_id"]]
    assert_one_line_error(
        bench_in_process("sweep", "--resume", "--store", store),
        f"no interrupted sweep to resume in {store}: its latest, {status.sweep_id}, is complete",
    )


# ---------------------------------------------------------------- stores made here, without a run
def stored_sweep(path, sweep_id="s1", state="interrupted", owner=None, planned=2, code="here", version=None):
    """A sweep's row as a sweep writes it (its owner: a process on another host, unless given)."""
    store = Store(path)
    specs = [train_spec("single", world_size=1, sweep_id=sweep_id, repeat=r) for r in range(planned)]
    plan = plan_text(specs, git_state() if code == "here" else code)
    if version is not None:
        plan = json.dumps({**json.loads(plan), "schema_version": version})
    store.begin_sweep(
        {
            "sweep_id": sweep_id,
            "created_at": time.time(),
            "updated_at": time.time(),
            "state": state,
            "title": "bench sweep",
            "description": "a test",
            "planned": len(specs),
            "owner": json.dumps(owner or {"host": "elsewhere", "pid": 1, "started": 0.0}),
            "why": None,
            "plan": plan,
        }
    )
    return store


@pytest.mark.parametrize(
    "make, args, says",
    [
        (None, [], ["no sweep to resume in", "it holds no sweep's plan"]),
        ("complete", [], ["no interrupted sweep to resume", "its latest, s1, is complete"]),
        ("complete", ["s1"], ["sweep s1 is complete: nothing to resume"]),
        ("interrupted", ["s2"], ["no sweep s2 in", "--resume without an id takes its latest interrupted sweep"]),
        ("running", [], ["its latest, s1, is running"]),
        ("running", ["s1"], ["sweep s1 is running: bench process", "still runs it"]),
        ("older bench", ["s1"], ["sweep s1 was made by a bench that kept no plan of it"]),
        ("other schema", [], ["sweep s1 was planned by a bench of record schema 1,"]),
        ("other code", [], ["sweep s1 was planned with the code at commit 0000", "would not be pooled"]),
        ("interrupted", ["--backend", "elastic"], ["fixes what --backend would set; drop it"]),
        (
            "interrupted",
            ["--repeats", "5", "--max-nproc", "2", "--no-comm"],
            ["fixes what --", "--repeats", "--max-nproc", "--no-comm", "would set; drop them"],
        ),
    ],
)
def test_what_cannot_be_resumed_is_one_line_and_runs_nothing(make, args, says, store):
    if make == "older bench":
        from factories import train_record

        Store(store).save(train_record("r1", "single", 1, sweep_id="s1"))
    elif make is not None:
        state = {"other schema": "interrupted", "other code": "interrupted"}.get(make, make)
        stored_sweep(
            store,
            state=state,
            owner=this_process() if make == "running" else None,
            version=1 if make == "other schema" else None,
            code={"commit": "0000", "dirty": False} if make == "other code" else "here",
        )
    rows = Store(store).sweeps()
    assert_one_line_error(bench_in_process("sweep", "--resume", *args, "--store", store), *says)
    assert Store(store).sweeps() == rows  # as it was: nothing taken over
    assert not (store.parent / "runs").exists(), "nothing launched"
    if make is None:
        assert not store.parent.exists(), "bad input must create nothing"


def test_the_page_says_which_sweep_is_not_complete_and_marks_its_rows(tmp_path):
    from bench.report.page import render_report
    from bench.results.frame import load_frame

    path = tmp_path / "bench.sqlite"
    store = stored_sweep(path, "a", state="running", planned=18)  # its owner on another host: not known to be gone
    stored_sweep(path, "b", state="complete", planned=15)
    for rec in sweep_records("a", CLEAR) + sweep_records("b", CLEAR, t0=100):  # 15 launches each
        store.save(rec)
    page = render_report(load_frame(store), "test", None, store.sweeps())
    assert "Sweep a (bench sweep, started " in page
    assert "is still running (bench process 1 on elsewhere): 15 of its 18 planned launches have run so far" in page
    assert "Not a complete sweep: sweep a still running: 15 of its 18 planned launches ran (Verdict" in page
    assert "Sweep b" not in page and "sweep b" not in page
    scorecard = page.split('id="scorecard"')[1].split("</table>")[0]
    # every row of a measure but the header and "what it takes to run" (the set-up's facts, not the sweep's runs)
    measured = scorecard.count("<tr") - 2
    assert "what it takes to run" in scorecard and scorecard.count("(sweep still running)") == measured > 0
    store.update_sweep("a", state="interrupted", why="Ctrl-C or SIGTERM")
    page = render_report(load_frame(store), "test", None, store.sweeps())
    assert "was interrupted (Ctrl-C or SIGTERM): only 15 of its 18 planned launches ran" in page
    assert "Not a complete sweep: sweep a interrupted: 15 of its 18 planned launches ran" in page
    marked = page.split('id="scorecard"')[1].split("</table>")[0].count("(sweep interrupted)")
    assert marked == measured
    # a selection without the interrupted sweep's runs says nothing of it
    only_b = render_report(load_frame(store), "test", ["sweep_id=b"], store.sweeps())
    assert "Sweep a" not in only_b and "Not a complete sweep" not in only_b and "(sweep interrupted)" not in only_b


def test_a_store_with_a_sweep_keeps_its_schema_and_a_store_without_one_is_read_as_it_is(tmp_path, store):
    import sqlite3

    from bench.core.records import SCHEMA_VERSION
    from factories import train_record

    plain = Store(store)
    plain.save(train_record("r1", "single", 1, sweep_id="s1"))
    made = sorted(p.name for p in store.parent.iterdir())
    assert plain.sweeps() == [] and sorted(p.name for p in store.parent.iterdir()) == made  # read, nothing made
    stored_sweep(store)
    # the table beside the runs, the store's schema as it was: a bench that predates the table reads and writes it
    with sqlite3.connect(store) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")} == {"runs", "sweeps"}
    assert [r.run_id for r in plain.records()] == ["r1"] and plain.sweeps()[0]["planned"] == 2


@pytest.mark.parametrize(
    "ended, state, why",
    [
        (["ok", "ok"], "complete", None),
        (["ok", "interrupted"], "interrupted", "interrupted by the user, during a launch"),
        (
            ["ok"],
            "interrupted",
            "stopped after a launch (the job's time limit)",
        ),  # run_specs stopped after a Slurm limit
        (
            ["ok", CoresInUse("CPUs 0-1 still in use by run x after waiting 1s; wait for it")],
            "interrupted",
            "CPUs 0-1 still in use by run x after waiting 1s",
        ),
        (["ok", Interrupted()], "interrupted", "Ctrl-C or SIGTERM"),
    ],
)
def test_a_sweep_is_marked_by_how_its_runs_ended(ended, state, why, monkeypatch, tmp_path, capsys):
    """Every way run_specs can end, each launch's ending given (a status, or what it raised), in a real store."""
    import bench.workflows.sweep as workflow
    from factories import train_record

    store = stored_sweep(tmp_path / "bench.sqlite", state="running", owner=this_process())
    specs = [train_spec("single", world_size=1, sweep_id="s1", repeat=r) for r in range(2)]

    def run_specs(plan, _store, _title, on_record):
        records = []
        for i, (spec, end) in enumerate(zip(plan, ended)):
            if isinstance(end, BaseException):
                raise end
            rec = train_record(f"r{i}", "single", 1, status=end, spec_fields={"repeat": spec.repeat})
            if end == "interrupted":
                rec.error.message = "interrupted by the user"
            on_record(rec)
            records.append(rec)
        return records

    monkeypatch.setattr(workflow, "run_specs", run_specs)
    try:
        workflow.run_marked(store, "s1", specs, "bench sweep s1", 2, 0)
    except (CoresInUse, Interrupted):
        pass
    row = store.sweeps()[0]
    assert (row["state"], row["why"]) == (state, why)
    if state == "interrupted":
        assert (
            f"sweep s1 interrupted ({why}) after 1 of its 2 planned launches; `bench sweep --resume s1"
            in capsys.readouterr().err
        )


def test_a_page_that_cannot_be_written_is_said_and_leaves_the_sweep_and_its_interruption_as_they_were(
    tmp_path, monkeypatch, capsys
):
    """bench.cli.sweep.LookPages: a failure to render the page as the sweep goes is said in one line, never raised
    (it would end the sweep, or replace Ctrl-C's exit with a traceback); within a minute of the last, no page."""
    from bench.cli import sweep as sweep_cli
    from bench.report import page

    def broken(store, output):
        raise RuntimeError("a defect")

    monkeypatch.setattr(page, "write_report", broken)
    with pytest.raises(KeyboardInterrupt), sweep_cli.LookPages(None, tmp_path / "page.html") as pages:
        pages("round 1 of 3 (1 of 3 launches)")
        pages("round 2 of 3 (2 of 3 launches)")  # seconds after the first: not written
        raise KeyboardInterrupt
    said = capsys.readouterr().err
    assert said.count("bench sweep: the page could not be written (RuntimeError: a defect); the sweep goes on") == 2
    assert not (tmp_path / "page.html").exists()
