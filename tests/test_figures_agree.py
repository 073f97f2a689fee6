"""The page and the regression gate state the same vs-plain-loop and efficiency figures for the same launches:
both take them from bench.core.stats.ratio_of_cases (the gate through bench.results.figures.Figure.estimate)."""

from pathlib import Path

import numpy as np
import pytest

from bench.core.registry import PLAIN_LOOP
from bench.core.store import Store
from bench.results.baselines import latest_sweep
from bench.results.figures import figures
from bench.results.frame import records_to_frame
from bench.tasks.train.results import replicated_cases
from factories import train_record

SAMPLE_STORE = Path(__file__).resolve().parent.parent / "reports" / "sample" / "bench.sqlite"


def page_and_gate(records: list) -> list[tuple[str, object, object]]:
    """(gate key, the page's estimate, the gate's figure) of every vs_plain and efficiency figure both make
    from one sweep's training runs, where every case behind it has two launches or more (with one, the gate
    stands that launch's windows in for launches, and says so)."""
    frame = records_to_frame(records)
    ok = frame[(frame["status"] == "ok") & (frame["task"] == "train")]
    gate, _ = figures(records)
    pairs = []
    for case in replicated_cases(ok):
        where = f"{case.backend} {case.cond['workload']} n={case.world_size}"
        for kind, estimate in (("vs_plain", case.vs_plain), ("efficiency", case.efficiency)):
            fig = gate.get(f"{kind} {where}")
            if estimate is not None and fig is not None and all(c.per == "run" for c in fig.cases):
                pairs.append((f"{kind} {where}", estimate, fig))
    return pairs


def launches(backend, world, means, sweep="s1", start=0):
    """One training launch per mean, in one sweep, each with windows spread around its mean."""
    rng = np.random.default_rng(len(backend) * 10 + world)
    return [
        train_record(
            f"{backend}-{world}-{sweep}-{i}",
            backend,
            world,
            [m * (1 + 0.03 * x) for x in rng.standard_normal(3)],
            start + i,
            sweep_id=sweep,
        )
        for i, m in enumerate(means)
    ]


def test_a_sweeps_vs_plain_and_efficiency_are_the_gates_figures():
    records = (
        launches(PLAIN_LOOP, 1, [100.0, 104.0, 97.0])
        + launches("elastic", 1, [90.0, 93.0, 88.0, 91.0])
        + launches("elastic", 2, [150.0, 160.0, 149.0])
        + launches("horovod", 1, [95.0, 96.0])
        + launches("horovod", 2, [170.0, 165.0, 171.0])
    )
    pairs = page_and_gate(records)
    assert sorted(key for key, _, _ in pairs) == [
        "efficiency elastic mnist_mlp n=2",
        "efficiency horovod mnist_mlp n=2",
        "vs_plain elastic mnist_mlp n=1",
        "vs_plain elastic mnist_mlp n=2",
        "vs_plain horovod mnist_mlp n=1",
        "vs_plain horovod mnist_mlp n=2",
    ]
    for key, estimate, fig in pairs:
        assert fig.value() == estimate.ratio, key  # the same figure to the last bit, not approximately
        assert fig.estimate == estimate, key  # and the same interval across launches
    elastic_2 = next(fig for key, _, fig in pairs if key == "vs_plain elastic mnist_mlp n=2")
    means = [r.metrics.throughput.mean for r in records]
    assert elastic_2.value() == pytest.approx(np.exp(np.mean(np.log(means[7:10])) - np.mean(np.log(means[0:3]))) / 2)


def test_the_sample_stores_sweeps_give_the_page_and_the_gate_the_same_figures():
    records = Store(SAMPLE_STORE).records()
    checked = 0
    for sweep in sorted({r.spec.sweep_id for r in records if r.spec.sweep_id}):
        _, runs = latest_sweep(records, sweep)
        for key, estimate, fig in page_and_gate(runs):
            assert fig.value() == estimate.ratio and fig.estimate == estimate, (sweep, key)
            checked += 1
    assert checked  # its default sweeps make both kinds of figure, on replicated cases
