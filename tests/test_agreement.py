"""Verdicts across launches, and agreement between sweeps, on records built in memory."""

import json
import re

from bench.core.stats import Family
from bench.report.agreement_table import comparison_words, format_agreement
from bench.report.page import scorecard_recommendation
from bench.report.sections import Bullets, Folded, ReportContext
from bench.results.agreement import agreement, contradictions, frame_comparisons, pair_contradictions, sweep_claims
from bench.results.frame import records_to_frame
from bench.tasks.train import report as train_report
from factories import CLEAR, sweep_records


def page_part(records):
    frame = records_to_frame(records)
    return train_report.report_part(frame, ReportContext("test", [], frame, Family(frame_comparisons(frame))))


def in_words(part) -> list[str]:
    """The comparisons in words that the training view lists under Throughput."""
    section = next(s for s in part.sections if s.id == "throughput")
    blocks = [inner for b in section.blocks for inner in (b.blocks if isinstance(b, Folded) else [b])]
    return [" ".join(x.text for x in item) for b in blocks if isinstance(b, Bullets) for item in b.items]


def row(part, measure: str, workers: int):
    return next(r for r in part.scorecard if r.measure == measure and f", {workers} worker" in r.condition)


def test_the_verdict_is_a_test_across_launches():
    part = page_part(sweep_records("s1", CLEAR))
    two = row(part, "training throughput", 2)
    assert two.outcome.startswith("elastic faster by") and two.winner == "elastic" and two.launches == "3 + 3"
    assert "(Holm)" in two.difference and two.decides
    words = next(s for s in in_words(part) if "2 worker(s)" in s and "against horovod" in s)
    assert "means of 3 + 3 launches" in words and "elastic faster by" in words and "at 95% confidence" in words
    assert "after Holm's correction" in words
    assert "Choose elastic on this hardware: it trains faster" in " ".join(scorecard_recommendation(part.scorecard))
    assert not row(part, "training throughput", 1).decides  # one worker: the wrappers' overhead only
    # horovod at one worker runs the plain loop: indistinguishable from it, and the page says by how much
    table = next(s for s in part.sections if s.id == "throughput")
    rows = {(r.cells[0].text, r.cells[1].text): r for b in table.blocks if hasattr(b, "rows") for r in b.rows}
    vs_plain = rows[("horovod", "1")].cells[7].text
    assert vs_plain.startswith("100.") and "to" in vs_plain


def test_windows_of_one_launch_never_decide():
    # one launch a side with tight windows: a t-test over windows would call this; across launches it cannot
    recs = sweep_records("s1", {("elastic", 2): [150], ("horovod", 2): [120]})
    two = row(page_part(recs), "training throughput", 2)
    assert two.standing == "one launch" and two.outcome.startswith("cannot tell: one launch on a side")
    assert two.winner is None


def test_sweeps_of_the_same_code_are_pooled_and_other_code_is_left_out():
    import dataclasses

    def code(records, commit):
        return [
            dataclasses.replace(r, environment={**r.environment, "git": {"commit": commit, "dirty": False}})
            for r in records
        ]

    old = code(sweep_records("s0", {("elastic", 2): [10, 11, 12], ("horovod", 2): [50, 51, 49]}, t0=0), "aaa")
    first = code(sweep_records("s1", {("elastic", 2): [150, 155, 148], ("horovod", 2): [120, 118, 123]}, t0=100), "bbb")
    again = code(sweep_records("s2", {("elastic", 2): [151, 149, 152], ("horovod", 2): [121, 119, 122]}, t0=200), "bbb")
    two = row(page_part(old + first + again), "training throughput", 2)
    assert two.launches == "6 + 6 (2 sweeps pooled)" and two.winner == "elastic"
    assert row(page_part(old + first), "training throughput", 2).launches == "3 + 3"  # other code: left out
    alone = row(page_part(first), "training throughput", 2)
    pooled = row(page_part(first + again), "training throughput", 2)
    bounds = [re.search(r"\(([-+.\d]+)% to ([-+.\d]+)%\)", r.difference).groups() for r in (alone, pooled)]
    width = [float(high) - float(low) for low, high in bounds]
    assert width[1] < width[0]  # running the sweep again narrows the interval


def test_no_difference_is_quantified_as_an_equivalence():
    tie = {("elastic", 2): [150, 151, 149, 150, 152], ("horovod", 2): [151, 149, 150, 152, 150]}
    two = row(page_part(sweep_records("s1", tie)), "training throughput", 2)
    assert two.standing == "within" and two.outcome.startswith("within ±") and two.winner is None
    assert 0 < two.margin < 0.05
    noisy = {("elastic", 2): [100, 160, 120], ("horovod", 2): [150, 90, 130]}
    two = row(page_part(sweep_records("s1", noisy)), "training throughput", 2)
    assert two.standing == "unresolved" and "the data allow up to ±" in two.outcome


def test_sweeps_that_agree_and_sweeps_that_contradict():
    a = sweep_records("a", CLEAR)
    b = sweep_records("b", CLEAR, t0=100)
    result = agreement({"a": a, "b": b})
    assert not any(result["pairs"].values())
    assert (
        "elastic / horovod, mnist_mlp, 2 workers of batch 64, cpu, pinned to its cores" in result["resolved_everywhere"]
    )
    text = format_agreement(result)
    assert "0 contradiction(s)" in text and " *" in text
    flipped = {**CLEAR, ("elastic", 2): [118, 121, 119], ("horovod", 2): [150, 152, 149]}
    c = sweep_records("c", flipped, t0=200)
    result = agreement({"a": a, "c": c})
    assert (
        "elastic / horovod, mnist_mlp, 2 workers of batch 64, cpu, pinned to its cores" in result["pairs"][("a", "c")]
    )
    assert "NO" in format_agreement(result)


def test_a_significant_claim_is_contradicted_by_an_estimate_leaning_the_other_way():
    a = sweep_claims(sweep_records("a", {("elastic", 2): [150, 152, 149], ("horovod", 2): [120, 121, 119]}))
    b = sweep_claims(sweep_records("b", {("elastic", 2): [100, 140, 110], ("horovod", 2): [130, 100, 125]}))
    key = "elastic / horovod, mnist_mlp, 2 workers of batch 64, cpu, pinned to its cores"
    assert a[key].direction == 1 and b[key].direction == 0 and b[key].leaning == -1
    assert contradictions(a, b) == [key]


def test_the_contradictions_of_all_pairs_are_those_of_each_pair():
    """pair_contradictions (key by key, for stores of many sweeps) finds what contradictions() finds pair by pair:
    sweeps significant either way, leaning either way, and even, on every comparison they make."""
    fast_elastic = {("elastic", 2): [150, 155, 148], ("horovod", 2): [120, 118, 123], ("elastic", 1): [95, 96, 94]}
    fast_horovod = {("elastic", 2): [120, 118, 123], ("horovod", 2): [150, 155, 148], ("elastic", 1): [50, 52, 49]}
    leaning = {("elastic", 2): [100, 140, 110], ("horovod", 2): [130, 100, 125], ("elastic", 1): [95, 60, 90]}
    even = {("elastic", 2): [120, 120, 120], ("horovod", 2): [120, 120, 120], ("elastic", 1): [60, 60, 60]}
    kinds = [fast_elastic, fast_horovod, leaning, even, fast_elastic, leaning]
    claims = {f"s{i}": sweep_claims(sweep_records(f"s{i}", kind, t0=1000.0 * i)) for i, kind in enumerate(kinds)}
    ids = sorted(claims)
    pairs = [(a, b) for i, a in enumerate(ids) for b in ids[i + 1 :]]
    expected = {(a, b): contradictions(claims[a], claims[b]) for a, b in pairs}
    assert sum(map(len, expected.values())) >= 10 and not all(expected.values())  # some pairs contradict, not all
    assert pair_contradictions(claims, pairs) == expected
    assert pair_contradictions(claims, pairs[:3]) == {pair: expected[pair] for pair in pairs[:3]}


def test_the_page_says_whether_its_sweeps_agree():
    from bench.report.page import render_report

    page = render_report(records_to_frame(sweep_records("a", CLEAR) + sweep_records("b", CLEAR, t0=100)), "test")
    assert "Rerun check: this selection holds 2 sweeps" in page and "no contradiction" in page
    flipped = {**CLEAR, ("elastic", 2): [118, 121, 119], ("horovod", 2): [150, 152, 149]}
    page = render_report(records_to_frame(sweep_records("a", CLEAR) + sweep_records("c", flipped, t0=200)), "test")
    said = re.search(r"(\d) comparison\(s\) contradict between sweeps: ([^<]*)", page)
    assert said and said.group(1) == "2"  # the throughput pair, and their efficiencies against each other
    assert said.group(2).split(".; ")[0].split("; ")[:2] == [
        "scaling efficiency, elastic or horovod: mnist_mlp, 2 workers of batch 64, cpu, pinned to its cores",
        "training throughput, elastic or horovod: mnist_mlp, 2 workers of batch 64, cpu, pinned to its cores",
    ]
    # one sweep: nothing to check, nothing said
    assert "Rerun check" not in render_report(records_to_frame(sweep_records("a", CLEAR)), "test")


def test_sooner_startup_is_claimed_only_across_launches():
    import dataclasses

    def with_startup(recs, backend, seconds):
        out = []
        for r in recs:
            if r.spec.backend == backend:
                startup = dataclasses.replace(r.metrics.startup, launch_to_first_step_s=seconds.pop(0))
                r = dataclasses.replace(r, metrics=dataclasses.replace(r.metrics, startup=startup))
            out.append(r)
        return out

    recs = sweep_records("s1", CLEAR)
    recs = with_startup(recs, "elastic", [9.0, 9.2, 8.9, 9.1, 9.0, 9.1])
    recs = with_startup(recs, "horovod", [11.0, 11.3, 10.9, 11.2, 11.1, 11.0])
    start = row(page_part(recs), "startup to the first step", 2)
    assert start.outcome.startswith("elastic starts sooner by") and start.operations
    assert start.figures == {"elastic": "9.1 s (median)", "horovod": "11.2 s (median)"} and start.launches == "3 + 3"
    # one launch a side: a median, never "sooner"
    one = sweep_records("s2", {("elastic", 2): [150], ("horovod", 2): [120]})
    one = with_startup(with_startup(one, "elastic", [5.0]), "horovod", [9.0])
    start = row(page_part(one), "startup to the first step", 2)
    assert "sooner" not in start.outcome and start.standing == "one launch"


def test_ray_is_measured_against_elastic_and_the_ps_against_the_faster_primary():
    """A companion backend that runs a primary's data-parallel path (ray: elastic's DDP) is compared with that
    backend, even where the other primary is faster; the parameter server with the faster primary."""
    launches = {
        ("single", 1): [100, 102, 98],
        ("elastic", 2): [120, 118, 123],
        ("horovod", 2): [150, 155, 148],
        ("ray", 2): [110, 112, 109],
        ("ps", 2): [90, 91, 89],
    }
    lines = in_words(page_part(sweep_records("s1", launches)))
    ray = next(s for s in lines if ": ray (" in s)
    assert "against elastic: elastic faster by" in ray and "3 + 3 launches" in ray
    ps = next(s for s in lines if ": ps (" in s)
    assert "against horovod: horovod faster by" in ps
    assert "None" not in " ".join(lines)  # options in words, never a raw Python value


def test_runs_of_two_machines_are_separate_cases_never_compared():
    import dataclasses

    here = sweep_records("s1", {("elastic", 2): [150, 155, 148], ("horovod", 2): [120, 118, 123]})
    faster = sweep_records("s2", {("elastic", 2): [300, 310, 305]}, t0=2000)  # later, and on another machine
    there = [dataclasses.replace(r, environment={"cpu_model": "Other CPU", "cpu_count": 8}) for r in faster]

    assert set(records_to_frame(here + there)["hardware"]) == {"cpu (2 CPUs)", "Other CPU (8 CPUs)"}
    one_machine = in_words(page_part(here))
    assert not any(" on cpu (2 CPUs)" in line for line in one_machine)  # nothing to tell apart: not named

    lines = in_words(page_part(here + there))
    pair = next(line for line in lines if "elastic faster by" in line)
    # elastic's launches of this machine against horovod's of this machine, not the other machine's later ones
    assert "on cpu (2 CPUs))" in pair and "elastic 151 vs horovod 120" in pair
    assert not any("Other CPU" in line and "horovod" in line for line in lines)


def test_sweeps_of_two_machines_are_not_reruns_of_each_other():
    import dataclasses

    fast_elastic = sweep_records("s1", {("elastic", 2): [150, 155, 148], ("horovod", 2): [120, 118, 123]})
    fast_horovod = sweep_records("s2", {("elastic", 2): [120, 118, 123], ("horovod", 2): [150, 155, 148]}, t0=2000)
    same = agreement({"s1": fast_elastic, "s2": fast_horovod})
    assert len(same["pairs"]) == 1 and any(same["pairs"].values())  # one machine: a contradiction

    there = [dataclasses.replace(r, environment={"cpu_model": "Other CPU", "cpu_count": 8}) for r in fast_horovod]
    apart = agreement({"s1": fast_elastic, "s2": there})
    assert apart["pairs"] == {}  # nothing to compare: each machine ran one sweep
    assert apart["claims"]["s1"] and all(k.endswith(", on cpu (2 CPUs)") for k in apart["claims"]["s1"])
    assert apart["claims"]["s2"] and all(k.endswith(", on Other CPU (8 CPUs)") for k in apart["claims"]["s2"])
    again = sweep_records("s3", {("elastic", 2): [151, 150, 149], ("horovod", 2): [121, 119, 120]}, t0=3000)
    three = agreement({"s1": fast_elastic, "s2": there, "s3": again})
    assert list(three["pairs"]) == [("s1", "s3")] and three["pairs"][("s1", "s3")] == []


def test_estimates_apart_beyond_their_resolution_are_not_called_agreeing(tmp_path):
    """+32% against -71%, neither significant (so no contradiction): they differ by more than the half-width of
    their difference, so they disagree beyond their resolution, and `bench agreement` says so and exits 1."""
    from bench.core.store import Store
    from conftest import bench_in_process

    key = "elastic / horovod, mnist_mlp, 2 workers of batch 64, cpu, pinned to its cores"
    a = sweep_records("a", {("elastic", 2): [132, 110, 158], ("horovod", 2): [100, 90, 110]})
    b = sweep_records("b", {("elastic", 2): [29, 17, 50], ("horovod", 2): [100, 90, 110]}, t0=100)
    claims_a, claims_b = sweep_claims(a), sweep_claims(b)
    assert contradictions(claims_a, claims_b) == []
    result = agreement({"a": a, "b": b})
    assert result["apart"][("a", "b")] == [key]
    text = format_agreement(result)
    # each sweep's cell names the side ahead and by how much, one way: elastic ahead in a, horovod ahead in b
    name = comparison_words(key)[0]
    assert name == "training throughput, elastic or horovod: mnist_mlp, 2 workers of batch 64, cpu, pinned to its cores"
    line = next(x for x in text.splitlines() if x.startswith(name))
    assert re.search(r"elastic 32\.3% \(±45%\) +horovod 3\.4 times \(±3\.6 times\) +APART$", line), line
    assert "0 contradiction(s), 1 disagreement(s) beyond their resolution" in text
    # close estimates of the same comparison stay in agreement
    c = sweep_records("c", {("elastic", 2): [128, 115, 150], ("horovod", 2): [100, 92, 108]}, t0=200)
    assert agreement({"a": a, "c": c})["apart"][("a", "c")] == []

    store = Store(tmp_path / "bench.sqlite")
    for rec in a + b:
        store.save(rec)
    proc = bench_in_process("agreement", "--store", store.path)
    assert proc.returncode == 1 and "APART" in proc.stdout, proc.stderr
    proc = bench_in_process("agreement", "--store", store.path, "--json")
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["beyond_resolution"] == [{"sweeps": ["a", "b"], "comparisons": [key]}]


def test_runs_that_shared_their_cores_are_left_out_of_verdicts_the_page_and_the_gate():
    """A sweep whose elastic launches ran alongside another bench run: they are not compared, the page says so in
    one line, and the gate has no figure of them."""
    import dataclasses

    from bench.report.page import render_report
    from bench.results.figures import figures

    recs = sweep_records("s1", CLEAR)
    other = [{"run_id": "20250101-000000-abcdef", "label": "horovod mnist_mlp, world 2", "store": "/x.sqlite"}]
    marked = [
        dataclasses.replace(r, shared_with=other) if (r.spec.backend, r.spec.world_size) == ("elastic", 2) else r
        for r in recs
    ]
    assert row(page_part(recs), "training throughput", 2).winner == "elastic"
    after = [r for r in page_part(marked).scorecard if ", 2 workers" in r.condition]
    assert after == []  # elastic's launches at 2 workers are left out: nothing to compare horovod's with
    assert not any("elastic" in s and "faster" in s and "2 worker(s)" in s for s in in_words(page_part(marked)))
    assert not any(k.startswith("elastic") and "x2" in k for k in sweep_claims(marked))
    page = render_report(records_to_frame(marked), "test")
    assert (
        "3 ok run(s) left out of every comparison, verdict and the gate: another bench run shared their cores" in page
    )
    assert "20250101-000000-abcdef" in page
    assert "left out of every comparison" not in render_report(records_to_frame(recs), "test")
    figs, not_ok = figures(marked)
    assert "throughput elastic mnist_mlp n=2" not in figs and "efficiency elastic mnist_mlp n=2" not in figs
    assert not_ok["throughput elastic mnist_mlp n=2"]["status"] == "ok, but another bench run shared its cores"
    assert "throughput horovod mnist_mlp n=2" in figs


def test_every_comparison_reads_in_words_and_names_the_side_ahead():
    """`bench agreement` names each comparison by its measure and sides, and each cell by the side ahead: no key of
    the tasks' comparisons is left unread, and no cell is a signed ratio."""
    from bench.core.stats import ratio_of_cases
    from bench.report.agreement_table import claim_cell
    from bench.results.agreement import Claim
    from bench.tasks.fault.results import recovery_key
    from factories import comm_record

    comm = [
        comm_record(f"c{i}-{b}", b, created_at=2000 + i, sweep_id="s1")
        for i, b in enumerate(["elastic", "horovod"] * 3)
    ]
    keys = set(frame_comparisons(records_to_frame(sweep_records("s1", CLEAR) + comm)))
    keys.add(recovery_key("mnist_mlp: SIGKILL to 1 of 2 workers", "elastic", "horovod"))
    measures = {comparison_words(k)[0].split(",")[0].split(" of ")[0] for k in keys}
    assert measures == {
        "training throughput",
        "scaling efficiency",
        "startup to the first step",
        "allreduce bus bandwidth",
        "recovery time",
    }
    # a time: the lower one is ahead; a speed: the higher one
    slower = Claim("k", ratio_of_cases([[2.0, 2.1, 1.9]], [[1.0, 1.05, 0.95]]), significant=True)
    assert claim_cell(slower, *comparison_words("startup elastic / horovod, x")[1:]) == "horovod 2.0 times *"
    assert claim_cell(slower, *comparison_words("elastic / horovod, x")[1:]) == "elastic 2.0 times *"
    assert claim_cell(slower, *comparison_words("elastic efficiency, x")[1:]) == "200% of linear *"
