"""The hold-out split of `bench converge`: a source's training part and the held-out set it is evaluated on
(converge_data, HeldOut), the seeded split where the source brings no held-out set of its own (split_indices), and
the training part's size the parent plans epochs with (training_samples). torch is imported inside the functions
only: the parent calls training_samples."""

from __future__ import annotations

from workloads.data.imagefolder import image_folder_dataset, image_tree
from workloads.data.memory import HeldImages
from workloads.data.mnist import MNIST_TEST_FILES, has_files
from workloads.data.names import DataError
from workloads.data.own import own_datasets, own_train_samples
from workloads.data.sources import load_real


class HeldOut:
    """A held-out set to evaluate on: in-memory (HeldImages) or a torch Dataset (an image folder), in batches."""

    def __init__(self, data, samples: int, describe: str):
        self.data, self.samples, self.describe = data, samples, describe

    def batches(self, batch_size: int = 256):
        if isinstance(self.data, HeldImages):
            yield from self.data.batches(batch_size)
            return
        from torch.utils.data import DataLoader

        yield from DataLoader(self.data, batch_size=batch_size, shuffle=False, num_workers=0)


def split_indices(samples: int, holdout: float, seed: int) -> tuple[list[int], list[int]]:
    """(training, held-out) indices: a seeded shuffle, the first `holdout` share held out; the same split for
    every backend and world size."""
    import torch

    if not 0.0 < holdout < 1.0:
        raise DataError(f"--holdout {holdout}: give a share between 0 and 1, such as 0.2")
    perm = torch.randperm(samples, generator=torch.Generator().manual_seed(seed * 7919 + 1)).tolist()
    held = max(1, round(samples * holdout))
    if held >= samples:
        raise DataError(f"--holdout {holdout} leaves no training sample of {samples}")
    return sorted(perm[held:]), sorted(perm[:held])


def converge_data(
    source: str, data_dir: str | None, *, holdout: float, seed: int, channels: int, image: int, workload=None
):
    """(training part, as open_batches takes it with `dataset=`; the HeldOut set). A workload's own data sets and
    MNIST's own t10k files (when they are in --data-dir) bring their held-out set; otherwise a seeded `holdout`
    share of the data is kept out of training. Synthetic data have nothing to learn, so they are refused."""
    if source == "workload":
        train, held = own_datasets(workload, image)
        return train, HeldOut(held, len(held), f"the workload's own held-out set ({len(held)} samples)")
    if source == "synthetic":
        raise DataError("time to accuracy needs a real data set: --data digits (always here), mnist or imagefolder")
    if source == "imagefolder":
        from torch.utils.data import Subset

        classes, samples = image_tree(data_dir)
        train_idx, held_idx = split_indices(len(samples), holdout, seed)
        train = Subset(image_folder_dataset(data_dir, channels=channels, image=image), train_idx)
        held = Subset(image_folder_dataset(data_dir, channels=channels, image=image, train=False), held_idx)
        return train, HeldOut(
            held, len(held_idx), f"{len(held_idx)} images held out of {len(samples)} ({holdout:.0%}, seeded)"
        )
    images, labels = load_real(source, data_dir)
    if source == "mnist" and has_files(data_dir, MNIST_TEST_FILES):
        test_images, test_labels = load_real(source, data_dir, MNIST_TEST_FILES)
        describe = f"MNIST's own test set ({len(test_labels)} images)"
    else:
        train_idx, held_idx = split_indices(len(labels), holdout, seed)
        test_images, test_labels = images[held_idx], labels[held_idx]
        images, labels = images[train_idx], labels[train_idx]
        describe = f"{len(held_idx)} of {len(train_idx) + len(held_idx)} samples held out ({holdout:.0%}, seeded)"
    stats = HeldImages(images, labels, channels=channels, image=image)
    held = HeldImages(test_images, test_labels, channels=channels, image=image, stats=(stats.mean, stats.std))
    return (images, labels), HeldOut(held, len(test_labels), describe)


def training_samples(
    source: str, data_dir: str | None, *, holdout: float, seed: int, workload=None, image: int | None = None
) -> int:
    """How many samples the training part of converge_data holds (the parent plans epochs with it)."""
    if source == "workload":
        return own_train_samples(workload, image)
    if source == "imagefolder":
        return len(split_indices(len(image_tree(data_dir)[1]), holdout, seed)[0])
    _, labels = load_real(source, data_dir)
    if source == "mnist" and has_files(data_dir, MNIST_TEST_FILES):
        return len(labels)
    return len(split_indices(len(labels), holdout, seed)[0])
