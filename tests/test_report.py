"""The decision report, built from a real CPU sweep of the three backends."""

import copy
import re

import pytest

from bench.core.store import Store
from bench.report.page import render_report
from bench.results.frame import load_frame
from bench.tasks.train.results import replicated_cases
from conftest import FAST, assert_the_answer_is_in_the_first_screen, bench
from needs import needs

pytestmark = pytest.mark.slow
_CACHE = {}


def populated_store(folder):
    """A real sweep (elastic, horovod, ps; world 1 and 2; short comm sweeps; two launches of every case) that writes
    its page (--output), one crashed run, and a fault run of each elastic mode.
    Made once per test session, then copied."""
    if "path" not in _CACHE:
        path = folder / "sweep" / "bench.sqlite"
        page = folder / "out" / "latest.html"
        proc = bench(
            "sweep",
            "--backend",
            "elastic,horovod,ps",
            "--workload",
            "mnist_mlp",
            "--nproc",
            2,
            "--max-bytes",
            "64K",
            "--warmup-iters",
            1,
            "--iters",
            3,
            "--repeats",
            2,
            "--no-faults",
            "--store",
            path,
            "--output",
            page,
            *FAST,
            timeout=900,
        )
        assert proc.returncode == 0, proc.stderr
        _CACHE["sweep"] = {"stderr": proc.stderr, "page": page, "page_text": page.read_text()}
        proc = bench("run", "--backend", "horovod", "--nproc", 2, "--inject", "crash:1:3", "--store", path, *FAST)
        assert proc.returncode == 1
        for backend in ("elastic", "horovod"):  # the Elasticity section's material
            proc = bench(
                "fault",
                "--backend",
                backend,
                "--nproc",
                2,
                "--checkpoint-every",
                10,
                "--at-step",
                25,
                "--steps",
                60,
                "--store",
                path,
            )
            assert proc.returncode == 0, proc.stderr
        _CACHE["path"] = path
    return _CACHE["path"]


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    return populated_store(tmp_path_factory.mktemp("report"))


def test_the_sweep_writes_its_page_and_a_dated_copy(store_path):
    """--output: the sweep's own page (its runs, before the fixture added the crash and the fault runs), written with a
    dated copy beside it; its progress counted every launch; its cases' ratios computed."""
    sweep = _CACHE["sweep"]
    frame = load_frame(Store(store_path))
    ran = frame[frame["sweep_id"].notna()]
    assert f"[{len(ran)}/{len(ran)}]" in sweep["stderr"]  # every launch counted, the last one the total
    assert (ran["threads"] == 1).all()  # one thread count for every world size of a sweep
    cases = {(c.backend, c.world_size): c for c in replicated_cases(ran[ran["task"] == "train"])}
    assert cases[("elastic", 1)].efficiency is None and cases[("elastic", 1)].vs_plain.ratio > 0
    assert 0 < cases[("elastic", 2)].efficiency.ratio < 1.5 and cases[("elastic", 2)].vs_plain.ratio > 0
    page = sweep["page_text"]
    assert "data:image/png;base64," in page and ">elastic<" in page
    assert "<script" not in page and "http" not in page.split("</style>")[0]
    (copy_,) = sweep["page"].parent.glob("report-*.html")
    assert copy_.read_text() == page


@needs("chromium")
def test_the_answer_of_a_fresh_sweep_is_in_the_first_screen(store_path, tmp_path):
    page = tmp_path / "report.html"
    page.write_text(render_report(load_frame(Store(store_path)), "s"), encoding="utf-8")
    assert_the_answer_is_in_the_first_screen(page)


def test_sections_in_order_and_verdict_computed(store_path):
    page = render_report(load_frame(Store(store_path)), "s")
    headings = re.findall(r"<h2 id=\"\w+\">([^<]+)</h2>", page)
    assert headings == [
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
    scale = page.split('id="scale"')[1].split('id="startup"')[0]
    # the sweep's plain loop, backends at 1 and 2 workers and communication sweeps: a projection, labelled so
    assert "Model projection, not a measurement." in scale and "on cpu-10g" in scale
    assert "efficiency at 1024" in scale and "the model&#39;s inputs" in scale
    verdict = page.split('id="verdict"')[1].split('id="throughput"')[0]
    # the scorecard: a row per workload and world size, with the figures and the test across launches behind it
    for world in (1, 2):
        assert f"mnist_mlp, {world} worker" in verdict
    assert verdict.count("<td>2 + 2</td>") >= 2 and "(Holm)" in verdict
    assert "The answer" in verdict and "Scope: " in verdict
    assert "ps_staleness=None" not in page and "None" not in verdict  # companion backends, in words, elsewhere
    words = page.split('id="throughput"')[1]
    assert (
        "ps (ps servers 1, ps mode sync) against" in words
        and "means of 2 + 2 launches;" in words
        and "at 95% confidence" in words
    )
    assert "2 fault-injection run(s) in 1 case(s)" in page.split('id="elasticity"')[1]


def test_the_sweep_of_the_three_backends(store_path):
    """The fixture's sweep (elastic, horovod, ps) ran every case and an allreduce sweep per primary backend
    and world size, with no wrong element; the page shows each backend."""
    frame = load_frame(Store(store_path))
    sweep = frame[frame["sweep_id"].notna()]
    assert (sweep["status"] == "ok").all() and sweep["sweep_id"].nunique() == 1
    train = sweep[sweep["task"] == "train"]
    assert sorted(set(zip(train["backend"], train["world_size"]))) == [
        ("elastic", 1),
        ("elastic", 2),
        ("horovod", 1),
        ("horovod", 2),
        ("ps", 2),
        ("single", 1),
    ]
    comm = sweep[sweep["task"] == "comm"]
    assert sorted(set(comm["backend"])) == ["elastic", "horovod"]
    assert all(r.metrics.rows and all(x.wrong == 0 for x in r.metrics.rows) for r in comm["record"])
    page = render_report(frame, "s")
    for backend in ("elastic", "horovod", "ps"):
        assert f">{backend}<" in page


def test_every_number_traces_to_a_stored_run(store_path):
    frame = load_frame(Store(store_path))
    page = render_report(frame, "s")
    table = page.split('id="throughput"')[1].split('id="comm"')[0]
    for run_id in re.findall(r"\d{8}-\d{6}-[0-9a-f]{6}", table):
        assert run_id in set(frame["run_id"])
    train = frame[(frame["status"] == "ok") & (frame["task"] == "train")]
    for _, case in train.groupby(["backend", "world_size"]):
        assert len(case) == 2 and f"{case['throughput'].mean():,.0f}" in table  # the mean of its two launches
        assert all(run_id in table for run_id in case["run_id"])


def test_failed_runs_are_listed_not_dropped(store_path):
    page = render_report(load_frame(Store(store_path)), "s")
    failed = page.split('id="failed"')[1].split('id="method"')[0]
    assert "crashed" in failed and "rank 1 raised RuntimeError: injected crash at step 3" in failed


def test_differing_environments_are_flagged(store_path, tmp_path):
    path = tmp_path / "altered.sqlite"
    store = Store(path)
    for record in Store(store_path).records():
        if record.spec.backend == "horovod" and record.ok:
            record = copy.deepcopy(record)
            record.environment["torch"] = "2.13.0"  # as if run under another torch
        store.save(record)
    page = render_report(load_frame(store), "s")
    assert "differ in torch" in page and "not like for like" in page
    assert 'class="diff"' in page


def test_where_filters_and_rejects_unknown_keys(store_path, tmp_path):
    out = tmp_path / "only.html"
    proc = bench("report", "--store", store_path, "--where", "backend=elastic,single", "-o", out)
    assert proc.returncode == 0, proc.stderr
    page = out.read_text()
    assert ">horovod<" not in page and ">elastic<" in page
    proc = bench("report", "--store", store_path, "--where", "colour=blue", "-o", out)
    assert proc.returncode == 2 and "unknown key 'colour'" in proc.stderr
    proc = bench("report", "--store", store_path, "--where", "backend=none", "-o", out)
    assert proc.returncode == 2 and "matches" in proc.stderr


def test_elasticity_section_shows_both_backends_side_by_side(store_path):
    frame = load_frame(Store(store_path))
    page = render_report(frame, "s")
    section = page.split('id="elasticity"')[1].split('id="ranks"')[0]
    faults = frame[frame["task"] == "fault"]
    assert len(faults) == 2
    for r in faults.itertuples():
        f = r.record.metrics
        assert r.run_id in section
        assert f"<td>{f.recovery_s:.2f}</td>" in section and f"<td>{f.steps_redone}</td>" in section
    # one computed sentence for the case, naming both backends and their world sizes after recovery
    sentence = re.search(r"<p>mnist_mlp: SIGKILL to 1 of 2 workers[^<]*</p>", section).group(0)
    assert "elastic came through 1 of 1 run(s)" in sentence and "at world size 2" in sentence
    assert "horovod came through 1 of 1 run(s)" in sentence and "at world size 1" in sentence
    assert 'alt="throughput over time' in section
    # the rank map shows both phases of a fault run
    assert ">before<" in page and ">after<" in page


def test_page_is_self_contained(store_path):
    page = render_report(load_frame(Store(store_path)), "s")
    assert "<script" not in page and "src=\"http" not in page and "href=\"http" not in page
    assert page.count("data:image/png;base64,") >= 4
