"""Verdicts across launches, and agreement between sweeps, on records built in memory."""

from factories import train_record

from bench.report.sections import ReportContext
from bench.results.agreement import agreement, contradictions, format_agreement, pair_contradictions, sweep_claims
from bench.results.frame import records_to_frame
from bench.tasks.train import report as train_report


def sweep(sweep_id: str, launches: dict[tuple[str, int], list[float]], t0: float = 1000.0) -> list:
    """One sweep: each (backend, world size) launched once per value (its throughput), in rounds."""
    recs, t = [], t0
    rounds = max(len(v) for v in launches.values())
    for r in range(rounds):
        for (backend, n), values in launches.items():
            if r < len(values):
                t += 1
                v = values[r]
                recs.append(train_record(f"{sweep_id}-{backend}-{n}-{r}", backend, n, per_window=[v * 0.99, v, v * 1.01],
                                         created_at=t, sweep_id=sweep_id, spec_fields={"repeat": r}))
    return recs


CLEAR = {("single", 1): [100, 102, 98], ("elastic", 1): [95, 96, 94], ("horovod", 1): [99, 101, 100],
         ("elastic", 2): [150, 155, 148], ("horovod", 2): [120, 118, 123]}


def page_part(records):
    frame = records_to_frame(records)
    return train_report.report_part(frame, ReportContext("test", [], frame))


def test_the_verdict_is_a_test_across_launches():
    part = page_part(sweep("s1", CLEAR))
    two = next(s for s in part.verdict if "2 worker(s)" in s)
    assert "elastic is faster by" in two and "means of 3 + 3 launches" in two
    assert "95% interval +" in two and "would have been detected" in two
    assert any("For throughput on this hardware, choose elastic." in line for line in part.recommendation)
    # horovod at one worker runs the plain loop: indistinguishable from it, and the page says by how much
    table = next(s for s in part.sections if s.id == "throughput")
    rows = {(r.cells[0].text, r.cells[1].text): r for b in table.blocks if hasattr(b, "rows") for r in b.rows}
    vs_plain = rows[("horovod", "1")].cells[7].text
    assert vs_plain.startswith("100.") and "to" in vs_plain


def test_windows_of_one_launch_never_decide():
    # one launch a side with tight windows: a t-test over windows would call this; across launches it cannot
    recs = sweep("s1", {("elastic", 2): [150], ("horovod", 2): [120]})
    part = page_part(recs)
    assert any("cannot tell with a single launch on a side" in s for s in part.verdict)
    assert not any("is faster by" in s for s in part.verdict)


def test_the_latest_sweep_of_a_case_is_its_launches():
    old = sweep("s0", {("elastic", 2): [10, 11, 12], ("horovod", 2): [50, 51, 49]}, t0=0)
    new = sweep("s1", {("elastic", 2): [150, 155, 148], ("horovod", 2): [120, 118, 123]}, t0=100)
    part = page_part(old + new)
    assert any("elastic is faster by" in s and "means of 3 + 3 launches" in s for s in part.verdict)


def test_sweeps_that_agree_and_sweeps_that_contradict():
    a = sweep("a", CLEAR)
    b = sweep("b", CLEAR, t0=100)
    result = agreement({"a": a, "b": b})
    assert not any(result["pairs"].values())
    assert "elastic / horovod, mnist_mlp cpu b64 x2" in result["resolved_everywhere"]
    text = format_agreement(result)
    assert "0 contradiction(s)" in text and " *" in text
    flipped = {**CLEAR, ("elastic", 2): [118, 121, 119], ("horovod", 2): [150, 152, 149]}
    c = sweep("c", flipped, t0=200)
    result = agreement({"a": a, "c": c})
    assert "elastic / horovod, mnist_mlp cpu b64 x2" in result["pairs"][("a", "c")]
    assert "NO" in format_agreement(result)


def test_a_significant_claim_is_contradicted_by_an_estimate_leaning_the_other_way():
    a = sweep_claims(sweep("a", {("elastic", 2): [150, 152, 149], ("horovod", 2): [120, 121, 119]}))
    b = sweep_claims(sweep("b", {("elastic", 2): [100, 140, 110], ("horovod", 2): [130, 100, 125]}))
    key = "elastic / horovod, mnist_mlp cpu b64 x2"
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
    claims = {f"s{i}": sweep_claims(sweep(f"s{i}", kind, t0=1000.0 * i)) for i, kind in enumerate(kinds)}
    ids = sorted(claims)
    pairs = [(a, b) for i, a in enumerate(ids) for b in ids[i + 1:]]
    expected = {(a, b): contradictions(claims[a], claims[b]) for a, b in pairs}
    assert sum(map(len, expected.values())) >= 10 and not all(expected.values())  # some pairs contradict, not all
    assert pair_contradictions(claims, pairs) == expected
    assert pair_contradictions(claims, pairs[:3]) == {pair: expected[pair] for pair in pairs[:3]}


def test_the_page_says_whether_its_sweeps_agree():
    from bench.report.page import render_report

    page = render_report(records_to_frame(sweep("a", CLEAR) + sweep("b", CLEAR, t0=100)), "test")
    assert "Rerun check: this selection holds 2 sweeps" in page and "no contradiction" in page
    flipped = {**CLEAR, ("elastic", 2): [118, 121, 119], ("horovod", 2): [150, 152, 149]}
    page = render_report(records_to_frame(sweep("a", CLEAR) + sweep("c", flipped, t0=200)), "test")
    assert "1 comparison(s) contradict between sweeps: elastic / horovod, mnist_mlp cpu b64 x2" in page
    # one sweep: nothing to check, nothing said
    assert "Rerun check" not in render_report(records_to_frame(sweep("a", CLEAR)), "test")


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

    recs = sweep("s1", CLEAR)
    recs = with_startup(recs, "elastic", [9.0, 9.2, 8.9, 9.1, 9.0, 9.1])
    recs = with_startup(recs, "horovod", [11.0, 11.3, 10.9, 11.2, 11.1, 11.0])
    assert any(line.startswith("elastic reached its first step sooner (median 9.1 s vs 11.1 s for horovod, 6 + 6 launches)")
               for line in page_part(recs).recommendation)
    # one launch a side: a median, never "sooner"
    one = sweep("s2", {("elastic", 2): [150], ("horovod", 2): [120]})
    one = with_startup(with_startup(one, "elastic", [5.0]), "horovod", [9.0])
    lines = page_part(one).recommendation
    assert not any("sooner" in line for line in lines)
    assert any(line.startswith("Startup to the first step did not differ significantly") for line in lines)


def test_ray_is_measured_against_elastic_and_the_ps_against_the_faster_primary():
    """A reference backend that runs a primary's data-parallel path (ray: elastic's DDP) is compared with that
    backend, even where the other primary is faster; the parameter server with the faster primary."""
    launches = {("single", 1): [100, 102, 98], ("elastic", 2): [120, 118, 123], ("horovod", 2): [150, 155, 148],
                ("ray", 2): [110, 112, 109], ("ps", 2): [90, 91, 89]}
    part = page_part(sweep("s1", launches))
    ray = next(s for s in part.verdict if s.split(": ", 1)[1].startswith("ray ("))
    assert "ray (the same data-parallel path as elastic, under its own runtime) is" in ray
    assert "slower than elastic (3 + 3 launches" in ray
    ps = next(s for s in part.verdict if ": the ps baseline" in s)
    assert "slower than horovod" in ps


def test_runs_of_two_machines_are_separate_cases_never_compared():
    import dataclasses

    here = sweep("s1", {("elastic", 2): [150, 155, 148], ("horovod", 2): [120, 118, 123]})
    faster = sweep("s2", {("elastic", 2): [300, 310, 305]}, t0=2000)  # later, and on another machine
    there = [dataclasses.replace(r, environment={"cpu_model": "Other CPU", "cpu_count": 8}) for r in faster]

    assert set(records_to_frame(here + there)["hardware"]) == {"cpu (2 CPUs)", "Other CPU (8 CPUs)"}
    one_machine = page_part(here).verdict
    assert not any(" on cpu (2 CPUs)" in line for line in one_machine)  # nothing to tell apart: not named

    lines = page_part(here + there).verdict
    pair = next(line for line in lines if "elastic is faster by" in line)
    # elastic's launches of this machine against horovod's of this machine, not the other machine's later ones
    assert "on cpu (2 CPUs))" in pair and "elastic 151 vs horovod 120" in pair
    assert not any("Other CPU" in line and "horovod" in line for line in lines)


def test_sweeps_of_two_machines_are_not_reruns_of_each_other():
    import dataclasses

    fast_elastic = sweep("s1", {("elastic", 2): [150, 155, 148], ("horovod", 2): [120, 118, 123]})
    fast_horovod = sweep("s2", {("elastic", 2): [120, 118, 123], ("horovod", 2): [150, 155, 148]}, t0=2000)
    same = agreement({"s1": fast_elastic, "s2": fast_horovod})
    assert len(same["pairs"]) == 1 and any(same["pairs"].values())  # one machine: a contradiction

    there = [dataclasses.replace(r, environment={"cpu_model": "Other CPU", "cpu_count": 8}) for r in fast_horovod]
    apart = agreement({"s1": fast_elastic, "s2": there})
    assert apart["pairs"] == {}  # nothing to compare: each machine ran one sweep
    assert all(k.endswith(", on cpu (2 CPUs)") for k in apart["claims"]["s1"])
    assert all(k.endswith(", on Other CPU (8 CPUs)") for k in apart["claims"]["s2"])
    again = sweep("s3", {("elastic", 2): [151, 150, 149], ("horovod", 2): [121, 119, 120]}, t0=3000)
    three = agreement({"s1": fast_elastic, "s2": there, "s3": again})
    assert list(three["pairs"]) == [("s1", "s3")] and three["pairs"][("s1", "s3")] == []
