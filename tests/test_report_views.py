"""The report page from the committed sample store (written by the previous version: 14 training runs,
3 communication sweeps, 8 fault runs), without launching anything."""

import dataclasses
import html
import re
import shutil
from pathlib import Path

import pytest

from bench.core import stats
from bench.core.errors import StoreError, UsageError
from bench.core.store import Store
from bench.rank.collectives import OPS, bus_factor
from bench.report.page import (
    apply_where,
    environment_section,
    failed_section,
    rank_map_section,
    render_report,
    write_report,
)
from bench.report.sections import ReportPart
from bench.results.frame import load_frame, records_to_frame
from bench.tasks.train import report as train_report

SAMPLE = Path(__file__).parent / "data" / "store-v1.sqlite"
SECTIONS = [
    "Verdict",
    "Throughput and scaling",
    "Communication",
    "Where the time goes",
    "At your scale (model projection)",
    "Startup and rendezvous",
    "Elasticity",
    "Rank map",
    "What it takes to run",
    "Environment",
    "Failed and unstable runs",
    "Methodology",
]
COMM_ONLY = ["task=comm"]  # a small page: one figure


def copy_sample(folder: Path) -> Store:
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(SAMPLE, folder / "bench.sqlite")
    return Store(folder / "bench.sqlite")


def section(page: str, anchor: str) -> str:
    return page.split(f'<h2 id="{anchor}">')[1].split("<h2 ")[0]


@pytest.fixture(scope="module")
def frame(tmp_path_factory):
    return load_frame(copy_sample(tmp_path_factory.mktemp("sample")))


@pytest.fixture(scope="module")
def page(frame):
    return render_report(frame, "sample")


def test_sections_in_order_with_a_matching_nav(page):
    assert re.findall(r'<h2 id="\w+">([^<]+)</h2>', page) == SECTIONS
    assert "Nothing to project" in section(page, "scale")  # its runs have no profile: it says what to run
    anchors = re.findall(r'<h2 id="(\w+)">', page)
    nav = page.split("<nav>")[1].split("</nav>")[0]
    assert re.findall(r'<a href="#(\w+)">', nav) == anchors


def scorecard_rows(page: str) -> list[list[str]]:
    """The scorecard's rows: those weighed, then those under distorting conditions (folded below them)."""
    out = []
    for table_id in ("scorecard", "scorecard-distorted"):
        if f'<table id="{table_id}">' not in page:
            continue
        table = page.split(f'<table id="{table_id}">')[1].split("</table>")[0]
        out += [
            [html.unescape(re.sub(r"<[^>]+>", "", cell)) for cell in re.findall(r"<td[^>]*>(.*?)</td>", tr)]
            for tr in re.findall(r"<tr[^>]*>(.*?)</tr>", table)[1:]
        ]
    return out


def test_verdict_from_one_launch_a_side_says_it_cannot_tell(page, frame):
    verdict = section(page, "verdict")
    rows = scorecard_rows(page)
    throughput = [r for r in rows if r[0] == "training throughput"]
    # the sample has one launch per case: every throughput row names its figures and declines to call it
    assert len(throughput) == 4 and all(r[4] == "1 + 1" for r in throughput)
    assert all(r[5] == "one launch a side: cannot tell" for r in throughput)
    train = frame[(frame["task"] == "train") & (frame["status"] == "ok")]
    shown = {f"{t:,.0f} samples/s" for t in train["throughput"]}
    assert all(r[2] in shown and r[3] in shown for r in throughput)
    for workload in ("mnist_mlp", "resnet18"):
        for world in (1, 2):
            assert any(r[1].startswith(f"{workload}, {world} worker") for r in throughput)
    assert "faster by" not in verdict
    assert "The answer" in verdict
    # the sample's runs are unpinned (before pinning was the default): shown, marked, and not weighed
    assert all("(distorted: unpinned on one host)" in r[1] for r in throughput)
    assert "No training speed was compared under conditions that do not distort it." in verdict
    assert "Neither is ahead on what this page measured" in verdict  # one fault run a side: no winner
    # the communication row names the size it compares at; its section says that it is below the bandwidth-bound
    assert any(
        r[0] == "allreduce bus bandwidth" and r[1].startswith("1MB messages (the largest both ran), 2 ranks")
        for r in rows
    )
    assert "that size is below 16MB" in section(page, "comm")
    # every fault case both backends ran is a row: recovery in seconds, or how it failed
    assert {r[0] for r in rows if r[0].startswith("recovery") or r[0] == "a joining worker"}
    assert "Scope: " in verdict and "Not covered: no GPU (so no NCCL) data, nothing above 2 workers" in verdict
    assert "the ps baseline" not in verdict and "None" not in verdict  # companion backends: in their section
    words = section(page, "throughput")
    assert words.count("ps (ps servers 1, ps mode sync) against") == 4


def test_fault_runs_are_named_by_their_fault(page, frame):
    elasticity, failed, ranks = section(page, "elasticity"), section(page, "failed"), section(page, "ranks")
    faults = frame[frame["task"] == "fault"]
    assert len(faults) == 8 and (faults["status"] != "ok").any()
    for r in faults.itertuples():
        case = html.escape(r.record.task.case(r.record.spec))
        row = elasticity.split(r.run_id)[0].rsplit("<tr>", 1)[1]  # the table row that ends with the run id
        assert case in row and f">{r.backend}<" in row
        assert f"{r.backend} {case}, world {r.world_size}, " in ranks and r.run_id in ranks  # its rank map's runs
        if r.status != "ok":
            listed = failed.split(r.run_id)[1].split("</tr>")[0]
            assert case in listed and "communication" not in listed
    assert failed.count("<tr>") == 1 + int((frame["status"] != "ok").sum())


def test_methodology_states_the_constants_in_force(page):
    method = section(page, "method")
    assert f"a {stats.CONFIDENCE:.0%} confidence interval" in method
    assert f"exceeds {stats.UNSTABLE_REL_STDEV:.0%} of its mean" in method
    assert f"fewer than {stats.MIN_STABLE_WINDOWS} windows" in method
    assert f"adjusted by Holm&#39;s method over them all, is below {train_report.SIGNIFICANCE:g}" in method
    assert "Launches are the unit of replication" in method
    assert "95% CI" in section(page, "throughput")


def test_methodology_follows_the_constants(frame, monkeypatch):
    monkeypatch.setattr(stats, "CONFIDENCE", 0.9)
    monkeypatch.setattr(stats, "UNSTABLE_REL_STDEV", 0.2)
    monkeypatch.setattr(stats, "MIN_STABLE_WINDOWS", 4)
    monkeypatch.setattr(train_report, "SIGNIFICANCE", 0.01)
    method = section(render_report(frame, "sample", COMM_ONLY), "method")
    assert "a 90% confidence interval" in method and "exceeds 20% of its mean" in method
    assert "fewer than 4 windows" in method and "is below 0.01" in method
    unstable = [
        block.summary
        for block in failed_section(frame.iloc[0:0], [ReportPart(unstable=["r: x"])]).blocks
        if block.kind == "folded"
    ]
    assert unstable == ["1 unstable result(s), with a spread (sd / mean) above 20% or fewer than 4 windows"]


def test_store_path_is_escaped_once(tmp_path):
    store = copy_sample(tmp_path / "a&b<c")
    out = write_report(store, tmp_path / "out" / "report.html", COMM_ONLY)
    page = out.read_text()
    assert "a&amp;b&lt;c" in page
    assert "&amp;amp;" not in page and "&amp;lt;" not in page
    assert list(out.parent.iterdir()) == [out]


def test_a_store_in_a_folder_whose_name_is_not_utf_8_is_reported_and_listed(tmp_path):
    """The store's folder has a byte that is not UTF-8 in its name, as the runs' folders beside it (and a failed run's
    error, which names its log there): `bench report` writes a page that is UTF-8, showing the byte escaped, and
    `bench list` lists the runs, each with exit 0, on a terminal that takes UTF-8 only."""
    import codecs
    import os

    from conftest import bench
    from factories import RunError, train_record

    folder = Path(os.fsdecode(bytes(tmp_path) + b"/r\xffuns"))
    store = Store(folder / "bench.sqlite")
    for i, status in enumerate(("ok", "ok", "crashed")):
        run_id = f"run-{i}"
        log = store.run_dir(run_id) / "rank-1.log"
        store.save(
            train_record(
                run_id,
                created_at=1000.0 + i,
                sweep_id=None,
                status=status,
                run_dir=str(log.parent),
                error=RunError(f"rank 1 crashed; its log: {log}", rank=1) if status != "ok" else None,
            )
        )
    strict = {"PYTHONIOENCODING": "utf-8:strict"}  # what a terminal in a UTF-8 locale is to Python
    out = folder / "report.html"
    proc = bench("report", "--store", store.path, "-o", out, env=strict)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    shown = f"{tmp_path}/r\\xffuns"  # the folder as the page and the terminal show it
    assert proc.stdout == f"report written to {shown}/report.html\n"
    page = out.read_bytes().decode("utf-8")  # strict: every byte of the page is UTF-8
    (said,) = re.findall(r"Store (.*?): 3 runs \(2 ok\)", page)
    assert said == f"{shown}/bench.sqlite"
    assert os.path.samefile(codecs.escape_decode(said.encode())[0], store.path)  # the escape names the real file
    assert f"its log: {shown}/runs/run-2/rank-1.log" in section(page, "failed")
    anchors = re.findall(r'href="#([^"]*)"', page)
    assert anchors and all(f'id="{anchor}"' in page for anchor in anchors)  # every link leads somewhere
    listed = bench("list", "--store", store.path, env=strict)
    assert listed.returncode == 0 and listed.stderr == "", listed.stderr
    assert [line.split()[0] for line in listed.stdout.splitlines()[1:]] == ["run-0", "run-1", "run-2"]
    Store(folder / "empty.sqlite").check_writable()  # a store, without runs
    listed = bench("list", "--store", folder / "empty.sqlite", env=strict)
    assert listed.returncode == 0 and listed.stdout == f"no runs stored in {shown}/empty.sqlite\n", listed.stderr


def test_page_is_self_contained(page):
    assert "<script" not in page.lower()
    assert re.findall(r'(?:src|href)="(?!data:image/png;base64,|#)', page) == []
    assert "http://" not in page and "https://" not in page
    assert page.count('src="data:image/png;base64,') == 8  # 2 throughput, 1 busbw, 1 exposed, 4 fault cases


def test_where_filters_the_page(frame):
    only = apply_where(frame, ["backend=elastic,single"])
    assert set(only["backend"]) == {"elastic", "single"} and len(only) == 11  # 6 training, 1 sweep, 4 faults
    page = render_report(frame, "sample", COMM_ONLY)
    assert "3 runs (3 ok), filtered by task=comm" in page
    assert "No successful training run in this selection." in section(page, "throughput")
    assert "No fault-injection run is stored" in section(page, "elasticity")
    comm = section(page, "comm")
    assert all(f">{b}<" in comm for b in ("elastic", "horovod", "ps"))


def test_where_errors_are_one_line(frame):
    with pytest.raises(UsageError, match="unknown key 'colour'"):
        apply_where(frame, ["colour=blue"])
    with pytest.raises(UsageError, match="expected KEY=VALUE"):
        apply_where(frame, ["backend"])
    with pytest.raises(UsageError, match="no run in sample matches --where backend=none"):
        render_report(frame, "sample", ["backend=none"])
    with pytest.raises(StoreError, match="nothing to report"):
        render_report(frame.iloc[0:0], "sample")


def test_unwritable_output_is_a_usage_error_and_leaves_nothing(tmp_path, monkeypatch):
    import bench.report.page

    store = copy_sample(tmp_path / "store")
    monkeypatch.setattr(bench.report.page, "render_report", lambda *args: "<!doctype html>")
    folder = tmp_path / "reports"
    folder.mkdir()
    with pytest.raises(UsageError, match="is a directory; give a file name"):
        write_report(store, folder)
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(UsageError, match="cannot write the report to"):
        write_report(store, blocker / "report.html")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "reports", "store"]
    assert list(folder.iterdir()) == []


def test_bus_factor_is_the_ops_factor():
    assert bus_factor("allreduce", 4) == 1.5 == OPS["allreduce"].factor(4)
    assert bus_factor("broadcast", 8) == 1.0


# ---------------------------------------------------------------- rank maps and the environment, without noise
def tables_of(section) -> list:
    """The section's tables, those folded with others (a Folded block) included."""
    blocks = [inner for b in section.blocks for inner in (b.blocks if b.kind == "folded" else [b])]
    return [b for b in blocks if b.kind == "table"]


def cells_of(table) -> list[str]:
    return [c.text for r in table.rows for c in r.cells]


def test_the_rank_map_shows_runs_across_hosts_fault_runs_and_one_example_per_case():
    """One host, no fault: only each case's latest ok run. Across hosts or with a fault: one table per case and rank
    map (process ids aside), the runs that had it behind a disclosure of their own."""
    from factories import fault_record, rank_row, train_record

    two_hosts = [
        rank_row(0, 2, host="h1", local_rank=0, group_rank=0),
        rank_row(1, 2, host="h2", local_rank=0, group_rank=1),
    ]
    moved = [
        rank_row(0, 2, host="h2", local_rank=0, group_rank=0),
        rank_row(1, 2, host="h1", local_rank=0, group_rank=1),
    ]
    records = [
        train_record("one-1", created_at=1.0),
        train_record("one-2", created_at=2.0),
        train_record("one-3", created_at=3.0, status="crashed"),  # the latest, but not ok
        train_record("single-1", "single", 1, created_at=4.0),
        train_record("across-1", created_at=5.0, rank_map=two_hosts),
        train_record("across-2", created_at=6.0, rank_map=[dataclasses.replace(r, pid=r.pid + 7) for r in two_hosts]),
        train_record("across-3", created_at=7.0, rank_map=moved),
        fault_record("fault-1", created_at=8.0),
        fault_record("fault-2", created_at=9.0, status="timeout"),
    ]
    section = rank_map_section(records_to_frame(records))
    tables = tables_of(section)
    summaries = [t.details for t in tables]
    assert summaries[0] == "elastic mnist_mlp, world 2: one-2 (ok), the latest ok of its 3 runs on one host"
    assert summaries[1].startswith(
        "elastic mnist_mlp, world 2, 2 hosts: 2 runs with this rank map (2 ok); "
        "process ids of the latest, across-2 (ok)"
    )
    assert summaries[2] == "the 2 runs with that rank map"
    assert cells_of(tables[2]) == ["ok", "across-2, across-1"]
    assert summaries[3].startswith("elastic mnist_mlp, world 2, 2 hosts: 1 run with this rank map")
    assert "before and after a fault: 2 runs with this rank map (1 ok, 1 timeout)" in summaries[4]
    assert cells_of(tables[5]) == ["timeout", "fault-2", "ok", "fault-1"]
    assert tables[5].rows[0].cells[0].css == "bad"
    assert summaries[6] == "single mnist_mlp, world 1: single-1 (ok), the latest ok of its 1 run on one host"
    assert len(tables) == 7
    # every table holds a rank map or, behind its own disclosure, the runs that had one: no run id in a cell else
    for table in tables:
        assert table.details
        if table.columns[0].name == "role":
            assert not any(rec.run_id in cells_of(table) for rec in records)
    assert [c.text for c in tables[4].rows[-1].cells][-1] == "after" and cells_of(tables[4])[8] == "before"


def test_the_environment_says_what_differs_grouped_by_value_with_the_runs_behind_a_disclosure():
    from factories import train_record

    records = [
        train_record(f"r{i}", created_at=float(i), environment={"cpu_model": "AMD EPYC", "cpu_count": 2})
        for i in range(4)
    ]
    records += [
        train_record("x1", created_at=9.0, environment={"cpu_model": "Intel Xeon", "cpu_count": 2}),
        train_record("x2", created_at=10.0, environment={"cpu_count": 2}),
    ]
    section = environment_section(records)
    facts, which = tables_of(section)
    rows = {r.cells[0].text: r for r in facts.rows}
    assert rows["cpu_model"].cells[1].text == "AMD EPYC (4 runs); Intel Xeon (1 run); - (1 run)"
    assert rows["cpu_model"].css == "diff"
    assert rows["cpu_count"].cells[1].text == "2" and rows["cpu_count"].css == ""
    assert rows["torch"].cells[1].text == "-"  # recorded by none
    assert facts.details is None and not any(r.run_id in cells_of(facts) for r in records)
    assert which.details and [cells_of(which)[i : i + 3] for i in range(0, len(which.rows) * 3, 3)] == [
        ["cpu_model", "Intel Xeon", "x1"],
        ["cpu_model", "-", "x2"],
        ["cpu_model", "AMD EPYC", "the other 4 runs"],
    ]
    page = render_report(records_to_frame(records), "test")
    env = page.split('<h2 id="env">')[1].split("<h2 ")[0]
    assert env.count("<details>") == 1 and env.index("<details>") < env.index("x1")


def test_the_environment_says_each_runs_cpu_quota_and_tells_no_limit_from_none_recorded():
    """A CPU quota throttles what the CPUs count says: shown in words, "no limit" where the run recorded that it had
    none, "-" where it recorded nothing (runs from before quotas were recorded)."""
    from factories import train_record

    quotas = {"q1": {"cpu_quota": 1.5}, "q2": {"cpu_quota": 1.5}, "free": {"cpu_quota": None}, "old": {}}
    records = [
        train_record(run_id, created_at=float(i), environment={"cpu_count": 2, **env})
        for i, (run_id, env) in enumerate(quotas.items())
    ]
    facts, _ = tables_of(environment_section(records))
    rows = {r.cells[0].text: r for r in facts.rows}
    assert rows["cpu_quota"].cells[1].text == "1.5 CPUs' time (2 runs); no limit (1 run); - (1 run)"
    assert rows["cpu_quota"].css == "diff"
    (facts,) = tables_of(environment_section(records[:1]))
    assert {r.cells[0].text: r.cells[1].text for r in facts.rows}["cpu_quota"] == "1.5 CPUs' time"
