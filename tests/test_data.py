"""Data sources: MNIST's IDX format, sharding of real data, determinism of synthetic data."""

import numpy as np
import pytest
import torch

from factories import write_mnist
from workloads import WORKLOADS
from workloads.data.memory import ShardedBatches, SyntheticBatches
from workloads.data.mnist import read_idx
from workloads.data.names import DataError
from workloads.data.sources import check_source, load_real, open_batches


@pytest.mark.parametrize("gz", [False, True])
def test_mnist_idx_files_are_read(tmp_path, gz):
    images, labels = write_mnist(tmp_path, gz=gz)
    check_source("mnist", str(tmp_path), world=2, batch=8)
    ext = ".gz" if gz else ""
    assert (read_idx(tmp_path / f"train-images-idx3-ubyte{ext}", "images") == images).all()
    assert (read_idx(tmp_path / f"train-labels-idx1-ubyte{ext}", "labels") == labels).all()


def test_mnist_wrong_magic_is_refused(tmp_path):
    write_mnist(tmp_path, images_magic=1234)
    with pytest.raises(DataError, match="not an MNIST images file"):
        check_source("mnist", str(tmp_path), world=2, batch=8)


def test_mnist_truncated_file_is_refused(tmp_path):
    write_mnist(tmp_path)
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(DataError, match="header promises"):
        check_source("mnist", str(tmp_path), world=2, batch=8)


def test_mnist_header_cut_short_is_refused(tmp_path):
    write_mnist(tmp_path)
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(path.read_bytes()[:8])  # magic and count, no rows and columns
    with pytest.raises(DataError, match=f"{path} is too short.*header is cut short"):
        check_source("mnist", str(tmp_path), world=1, batch=1)


def test_mnist_corrupt_compressed_data_is_refused(tmp_path):
    write_mnist(tmp_path, gz=True)
    path = tmp_path / "train-images-idx3-ubyte.gz"
    raw = path.read_bytes()
    path.write_bytes(raw[:20] + bytes(len(raw) - 40) + raw[-20:])  # a valid gzip header, a broken stream
    with pytest.raises(DataError, match=f"cannot read {path}"):
        check_source("mnist", str(tmp_path), world=1, batch=1)


def test_mnist_label_outside_the_classes_is_refused(tmp_path):
    write_mnist(tmp_path, label=255)
    with pytest.raises(DataError, match="train-labels-idx1-ubyte holds label 255 \\(sample 3\\).*0..9"):
        check_source("mnist", str(tmp_path), world=1, batch=1)


@pytest.mark.parametrize("world, batch, ok", [(2, 5, True), (2, 6, False), (3, 4, False), (1, 10, True)])
def test_too_few_samples_for_the_world_are_refused_by_the_workers_rule(tmp_path, world, batch, ok):
    """The parent's check is the rule ShardedBatches applies: each rank's share holds a full batch."""
    images, labels = write_mnist(tmp_path, n=10)
    for check in (
        lambda: check_source("mnist", str(tmp_path), world=world, batch=batch),
        lambda: ShardedBatches(
            images,
            labels.astype(np.int64),
            batch=batch,
            channels=1,
            image=28,
            seed=0,
            rank=0,
            world=world,
            device="cpu",
        ),
    ):
        if ok:
            check()
        else:
            with pytest.raises(DataError, match=f"10 samples: too few for {world} worker"):
                check()


@pytest.mark.parametrize("workload, channels, image", [("mnist_mlp", 1, 28), ("resnet18", 3, 32)])
def test_mnist_batches_take_the_workload_shape(tmp_path, workload, channels, image):
    write_mnist(tmp_path, n=40)
    batches = open_batches(
        "mnist",
        batch=8,
        channels=channels,
        image=image,
        classes=10,
        seed=0,
        rank=0,
        world=2,
        device="cpu",
        data_dir=str(tmp_path),
    )
    x, y = next(batches)
    assert x.shape == (8, channels, image, image) and x.dtype == torch.float32 and y.shape == (8,)


def test_real_data_shards_are_disjoint_and_cover_an_epoch():
    images, labels = load_real("digits", None)
    assert images.shape == (1797, 8, 8) and images.dtype == np.uint8
    world, batch = 3, 32
    seen = []
    for rank in range(world):
        b = ShardedBatches(
            images, labels, batch=batch, channels=1, image=28, seed=5, rank=rank, world=world, device="cpu"
        )
        order = b.order.clone()
        assert len(order) == 1797 // world
        seen.append(set(order.tolist()))
    assert not (seen[0] & seen[1]) and not (seen[1] & seen[2])
    assert len(set().union(*seen)) == 1797 // world * world


def test_data_set_too_small_for_the_batch():
    images, labels = load_real("digits", None)
    with pytest.raises(DataError, match="too few"):
        ShardedBatches(images, labels, batch=1000, channels=1, image=28, seed=0, rank=0, world=2, device="cpu")


def test_synthetic_data_is_seeded_per_rank():
    def first(seed, rank):
        return next(SyntheticBatches(batch=4, channels=1, image=28, classes=10, seed=seed, rank=rank, device="cpu"))[0]

    assert torch.equal(first(1, 0), first(1, 0))
    assert not torch.equal(first(1, 0), first(1, 1))
    assert not torch.equal(first(1, 0), first(2, 0))


def test_the_tensorflow_backends_train_on_the_same_synthetic_numbers():
    """Every backend's synthetic batches come from one generator (workloads.data.synthetic.synthetic_arrays): the
    TensorFlow backends' are the PyTorch backends' numbers, channels-last, for every rank and batch."""
    from bench.backends.shared.keras_batches import channels_last_arrays

    for rank in (0, 1):
        theirs = SyntheticBatches(batch=4, channels=3, image=8, classes=10, seed=5, rank=rank, device="cpu")
        xs, ys = channels_last_arrays(batch=4, channels=3, image=8, classes=10, seed=5, rank=rank)
        assert len(xs) == len(theirs.x) == 8
        for i in range(len(xs)):
            x, y = theirs.at(i)
            assert np.array_equal(xs[i], x.permute(0, 2, 3, 1).numpy()) and np.array_equal(ys[i], y.numpy())
        assert xs.dtype == np.float32 and ys.dtype == np.int64


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_workload_models_take_their_cpu_inputs(name):
    wl = WORKLOADS[name]
    size = wl.cpu
    model = wl.build(size.synthetic_classes, size.image)
    out = model(torch.randn(2, wl.channels, size.image, size.image))
    assert out.shape == (2, size.synthetic_classes)
