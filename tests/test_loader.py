"""--loader dataloader: the same batches as the in-memory path, through torch's DataLoader; its input wait."""

from pathlib import Path

import pytest
import torch

from bench.tasks.train import INPUT_BOUND_SHARE, input_limited
from conftest import FAST, assert_nothing_left, assert_one_line_error, bench, bench_in_process, bench_json
from workloads.data.sources import open_batches
from workloads.data.timing import TimedBatches


def _take(source, loader, workers, *, rank, world, steps=12, channels=1, image=28, batch=16):
    batches = open_batches(
        source,
        batch=batch,
        channels=channels,
        image=image,
        classes=10,
        seed=4,
        rank=rank,
        world=world,
        device="cpu",
        loader=loader,
        loader_workers=workers,
    )
    return [next(batches) for _ in range(steps)]


@pytest.mark.parametrize("source, channels, image", [("synthetic", 1, 28), ("digits", 1, 28), ("digits", 3, 32)])
@pytest.mark.parametrize("workers", [0, 1])
def test_dataloader_gives_the_in_memory_batches(source, channels, image, workers):
    """Same samples, same order, same conversion, over more than one epoch (digits: 1797 samples, 2 ranks,
    batch 16 -> 56 steps an epoch; 12 steps here, so the epoch boundary is checked below with a larger batch)."""
    for rank in (0, 1):
        memory = _take(source, "memory", 0, rank=rank, world=2, channels=channels, image=image)
        loader = _take(source, "dataloader", workers, rank=rank, world=2, channels=channels, image=image)
        for (xm, ym), (xl, yl) in zip(memory, loader):
            assert torch.equal(ym, yl)
            torch.testing.assert_close(xl, xm, rtol=0, atol=1e-6)


def test_dataloader_follows_the_epochs():
    """Batch 400 of 1797 digits over 2 ranks: 2 steps an epoch, so 6 steps cross two epoch boundaries."""
    memory = _take("digits", "memory", 0, rank=1, world=2, steps=6, batch=400)
    loader = _take("digits", "dataloader", 0, rank=1, world=2, steps=6, batch=400)
    assert [torch.equal(a[1], b[1]) for a, b in zip(memory, loader)] == [True] * 6
    assert not torch.equal(memory[0][1], memory[2][1])  # a new epoch is reshuffled


def test_input_wait_is_added_up():
    timed = TimedBatches(iter([1, 2, 3]))
    assert list(timed) == [1, 2, 3] and timed.wait_s >= 0.0
    assert input_limited(None) is None
    assert input_limited(INPUT_BOUND_SHARE) and not input_limited(INPUT_BOUND_SHARE / 2)


@pytest.mark.parametrize(
    "args, message",
    [(["--loader-workers", "2"], "--loader-workers needs a DataLoader"), (["--loader", "disk"], "invalid choice")],
)
def test_bad_loader_options(args, message, tmp_path):
    assert_one_line_error(bench_in_process("run", *args, "--store", tmp_path / "b.sqlite"), message)


@pytest.mark.slow
def test_dataloader_run_trains_as_the_in_memory_run(store):
    """Two workers on digits: the parameters after the run's steps match whichever loader fed them, and the
    DataLoader run records its input wait and its loader processes end with it."""
    common = ["--nproc", 2, "--data", "digits", "--save-params", "--seed", 5, "--store", store, *FAST]
    params, records = {}, {}
    for loader, extra in (("memory", []), ("dataloader", ["--loader-workers", 1])):
        proc, record = bench_json("run", "--loader", loader, *extra, *common)
        assert proc.returncode == 0, proc.stderr
        params[loader] = torch.load(Path(record["run_dir"]) / "ranks" / "rank0.a0.params.pt")
        records[loader] = record
    for name, value in params["memory"].items():
        if value.is_floating_point():
            torch.testing.assert_close(params["dataloader"][name], value, rtol=1e-5, atol=1e-6, msg=name)
    m = records["dataloader"]["metrics"]
    assert records["dataloader"]["spec"]["loader"] == "dataloader"
    assert 0.0 <= m["input_wait_share"] < 1.0 and all(r["input_wait_share"] is not None for r in m["per_rank"])
    assert records["memory"]["metrics"]["input_wait_share"] is None  # nothing to wait for on the device
    assert_nothing_left(records["dataloader"])
    # the page keeps the two apart (the input is a condition) and says what limits the DataLoader run
    page = store.parent / "page.html"
    proc = bench("report", "--store", store, "-o", page)
    assert proc.returncode == 0, proc.stderr
    html = page.read_text()
    assert "Input pipeline" in html and "digits data through a DataLoader x1" in html
    assert ("input limits throughput" in html) or ("compute and communication" in html)
