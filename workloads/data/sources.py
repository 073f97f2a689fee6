"""What each `--data` source name leads to, the one place that chooses by it: a real in-memory source's arrays
(load_real: mnist or digits), a source's class count (real_classes), the parent's check before any process starts
(check_source) and one worker's batch stream under either loader (open_batches). No framework is imported at module
level: the parent loads it to check a run's data."""

from __future__ import annotations

from workloads.data.dataloader import DataLoaderBatches, SyntheticDataset
from workloads.data.digits import check_digits, digits_arrays
from workloads.data.imagefolder import image_folder_dataset, image_tree
from workloads.data.memory import HeldImages, ShardedBatches, SyntheticBatches
from workloads.data.mnist import MNIST_FILES, load_mnist
from workloads.data.names import DIGIT_CLASSES, SOURCES, DataError, samples_per_rank
from workloads.data.own import own_datasets, own_train_samples


def real_classes(source: str, data_dir: str | None = None, workload=None) -> int:
    if source == "imagefolder":
        return len(image_tree(data_dir)[0])
    if source == "workload":
        return workload.classes
    return DIGIT_CLASSES  # the other real sources are handwritten digits


def load_real(source: str, data_dir: str | None, files=MNIST_FILES):
    """(images uint8 N x H x W, labels int64 N) as numpy arrays."""
    if source == "mnist":
        return load_mnist(data_dir, files)
    return digits_arrays()


def check_source(
    source: str, data_dir: str | None, *, world: int, batch: int, workload=None, image: int | None = None
) -> None:
    """Parent-side validation, so bad input fails before any process starts: the files read as the
    workers will read them (MNIST once: well under a second), and every rank gets full batches."""
    if source not in SOURCES:
        raise DataError(f"unknown data source {source!r}; choose one of {', '.join(SOURCES)}")
    if source == "synthetic":
        return
    if source == "workload":
        samples_per_rank(own_train_samples(workload, image), world, batch)
        return
    if source == "imagefolder":
        samples_per_rank(len(image_tree(data_dir)[1]), world, batch)
        return
    if source == "digits":
        check_digits()
    _, labels = load_real(source, data_dir)
    samples_per_rank(len(labels), world, batch)


def open_batches(
    source,
    *,
    batch,
    channels,
    image,
    classes,
    seed,
    rank,
    world,
    device,
    data_dir=None,
    loader="memory",
    loader_workers=0,
    dataset=None,
    workload=None,
):
    """The batch stream of one worker. `dataset` overrides what the source would load (a held-out split's
    training part, bench converge): a HeldImages, or a torch Dataset for the sources a DataLoader reads."""
    if source == "workload":
        data = dataset if dataset is not None else own_datasets(workload, image)[0]
        return DataLoaderBatches(
            data, batch=batch, seed=seed, rank=rank, world=world, device=device, workers=loader_workers
        )
    if source == "imagefolder":
        data = dataset if dataset is not None else image_folder_dataset(data_dir, channels=channels, image=image)
        return DataLoaderBatches(
            data, batch=batch, seed=seed, rank=rank, world=world, device=device, workers=loader_workers
        )
    if source == "synthetic":
        if loader == "dataloader":
            return DataLoaderBatches(
                SyntheticDataset(batch=batch, channels=channels, image=image, classes=classes, seed=seed, rank=rank),
                batch=batch,
                seed=seed,
                rank=rank,
                world=world,
                device=device,
                workers=loader_workers,
                shuffle=False,
            )
        return SyntheticBatches(
            batch=batch, channels=channels, image=image, classes=classes, seed=seed, rank=rank, device=device
        )
    if dataset is None:
        images, labels = load_real(source, data_dir)
    else:
        images, labels = dataset
    if loader == "dataloader":
        held = HeldImages(images, labels, channels=channels, image=image)
        samples_per_rank(len(held), world, batch)
        return DataLoaderBatches(
            held, batch=batch, seed=seed, rank=rank, world=world, device=device, workers=loader_workers
        )
    return ShardedBatches(
        images, labels, batch=batch, channels=channels, image=image, seed=seed, rank=rank, world=world, device=device
    )
