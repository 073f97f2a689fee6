"""--data imagefolder: a torchvision ImageFolder tree (here, one the test makes) read through DataLoader and
DistributedSampler, as users' scripts read their own copy of ImageNet; nothing is downloaded."""

import pytest

from conftest import FAST, assert_one_line_error, bench_in_process, bench_json, processes_of_run


def image_tree(folder, classes=("cat", "dog"), per_class=12, side=40):
    """A small tree of random RGB PNGs, one sub-folder per class."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for name in classes:
        (folder / name).mkdir(parents=True)
        for i in range(per_class):
            pixels = rng.integers(0, 256, (side, side, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(folder / name / f"{i}.png")
    return folder


@pytest.mark.parametrize(
    "make, args, fragment",
    [
        (None, [], "--data imagefolder needs --data-dir"),
        (lambda d: d.mkdir(), ["--data-dir", "{d}"], "not an image folder tree"),
        (
            lambda d: image_tree(d, per_class=2),
            ["--data-dir", "{d}"],
            "the data set has 4 samples: too few for 2 worker(s)",
        ),
        (lambda d: image_tree(d), ["--data-dir", "{d}", "--loader-workers", "-1"], "--loader-workers"),
    ],
)
def test_a_tree_that_cannot_feed_the_run_is_refused(tmp_path, make, args, fragment):
    tree = tmp_path / "tree"
    if make:
        make(tree)
    argv = [
        "run",
        "--workload",
        "resnet18",
        "--data",
        "imagefolder",
        "--nproc",
        "2",
        "--batch-size",
        "4",
        *[a.format(d=tree) for a in args],
        "--store",
        tmp_path / "b.sqlite",
    ]
    assert_one_line_error(bench_in_process(*argv), fragment)


def test_loader_workers_need_the_image_folder(tmp_path):
    assert_one_line_error(
        bench_in_process("run", "--loader-workers", "2", "--store", tmp_path / "b.sqlite"),
        "--loader-workers needs a DataLoader",
    )


@pytest.mark.slow
def test_resnet18_trains_on_an_image_folder_through_a_dataloader(tmp_path, store):
    tree = image_tree(tmp_path / "tree", classes=("a", "b", "c"))
    proc, record = bench_json(
        "run",
        "--backend",
        "elastic",
        "--workload",
        "resnet18",
        "--data",
        "imagefolder",
        "--data-dir",
        tree,
        "--loader-workers",
        1,
        "--image-size",
        32,
        "--batch-size",
        4,
        "--nproc",
        2,
        "--store",
        store,
        *FAST,
    )
    assert proc.returncode == 0, proc.stderr
    assert record["status"] == "ok", record["error"]
    spec = record["spec"]
    assert (spec["data"], spec["data_dir"], spec["loader_workers"], spec["num_classes"]) == (
        "imagefolder",
        str(tree),
        1,
        3,
    )
    assert processes_of_run(record["run_id"]) == []  # the loader processes too
