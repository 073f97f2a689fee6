"""Data sources, identical for every backend: each rank gets the same batches under any launcher.

- synthetic: seeded random tensors, generated once and held on the device, so data loading never
  limits throughput.
- digits: scikit-learn's 8x8 handwritten digits (1797 real images, shipped with the package), scaled
  to the workload's input.
- mnist: MNIST's own IDX files read from a directory the user gives; nothing is ever downloaded.
- workload: the user's workload's own data sets (Workload.datasets: train and held-out torch Datasets),
  read through a DataLoader with a DistributedSampler.
- imagefolder: a torchvision ImageFolder tree (one folder per class) the user gives, such as an ImageNet
  copy, read through a DataLoader with a DistributedSampler and the usual training transforms
  (RandomResizedCrop, RandomHorizontalFlip, normalisation), K loader processes per worker (--loader-workers).

Real data sets are held in memory as uint8 and sharded by torch's own DistributedSampler (shuffled by
seed + epoch, cut to a multiple of the world size, rank r takes every world-th sample from r).

Two loaders feed the in-memory sources (--loader): `memory` holds the data on the device and cuts batches
there, so input never limits throughput; `dataloader` feeds the same samples, in the same order and with
the same conversion, through torch.utils.data.DataLoader (K loader processes, --loader-workers) and copies
each batch to the device, as users' training scripts do. Both give the same batches, so a run shows what
the input pipeline costs and nothing else. imagefolder always goes through the DataLoader.
"""

from __future__ import annotations

import gzip
import os
import struct
import zlib
from pathlib import Path

SOURCES = ("synthetic", "digits", "mnist", "imagefolder", "workload")
READ_BY_LOADER = ("imagefolder", "workload")  # sources with no in-memory path: always a DataLoader
LOADERS = ("memory", "dataloader")
SYNTHETIC_BATCHES = 8  # distinct batches cycled per rank: enough that no step reuses the previous one
MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte")
MNIST_TEST_FILES = ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")  # MNIST's own held-out set, when present
IDX_MAGIC = {"images": 2051, "labels": 2049}


class DataError(Exception):
    """The data source cannot be used as asked; the message says what to do."""


def real_classes(source: str, data_dir: str | None = None, workload=None) -> int:
    if source == "imagefolder":
        return len(image_tree(data_dir)[0])
    if source == "workload":
        return workload.classes
    return 10  # the other real sources are handwritten digits


def rank_seed(seed: int, rank: int) -> int:
    # Distinct, reproducible streams per rank that do not depend on the world size.
    return seed * 1_000_003 + rank


# ---------------------------------------------------------------- MNIST's IDX format
def _open_maybe_gz(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def find_mnist(data_dir: str | os.PathLike | None, files=MNIST_FILES) -> tuple[Path, Path]:
    """Return the (images, labels) paths or raise DataError naming what is missing."""
    if not data_dir:
        raise DataError("--data mnist needs --data-dir DIR holding MNIST's IDX files "
                        f"({MNIST_FILES[0]}[.gz], {MNIST_FILES[1]}[.gz]); nothing is downloaded")
    root = Path(data_dir)
    if not root.is_dir():
        raise DataError(f"--data-dir {root} does not exist or is not a directory; "
                        "point it at the folder holding MNIST's IDX files")
    found = []
    for stem in files:
        for candidate in (root / stem, root / f"{stem}.gz", root / stem.replace("-idx", ".idx")):
            if candidate.is_file():  # a regular file (stat, which never blocks): a FIFO or a device is never opened
                found.append(candidate)
                break
            if candidate.exists():
                raise DataError(f"{candidate} is not a regular file; put MNIST's file itself there")
        else:
            raise DataError(f"MNIST file {stem}[.gz] not found in {root}; nothing is downloaded: "
                            "put MNIST's training files there, or use --data synthetic or --data digits")
    return found[0], found[1]


def _header(fh, path: Path, kind: str) -> tuple[int, int]:
    """The next two big-endian 32-bit numbers of an IDX header."""
    raw = fh.read(8)
    if len(raw) < 8:
        raise DataError(f"{path} is too short to be an MNIST {kind} file (its header is cut short)")
    return struct.unpack(">II", raw)


def read_idx(path: Path, kind: str):
    """Read one IDX file (images: N x rows x cols uint8, labels: N uint8) as a numpy array."""
    import numpy as np

    try:
        with _open_maybe_gz(path) as fh:
            magic, count = _header(fh, path, kind)
            if magic != IDX_MAGIC[kind]:
                raise DataError(f"{path} is not an MNIST {kind} file (magic number {magic}, "
                                f"expected {IDX_MAGIC[kind]})")
            shape: tuple[int, ...] = (count,)
            if kind == "images":
                shape += _header(fh, path, kind)
            expected = 1
            for dim in shape:
                expected *= dim
            # what the header promises and one byte more, in pieces: neither a header promising too much nor a
            # file longer than its promise is read whole
            chunks, got = [], 0
            while got <= expected:
                chunk = fh.read(min(1 << 24, expected + 1 - got))
                if not chunk:
                    break
                chunks.append(chunk)
                got += len(chunk)
            data = b"".join(chunks)
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        raise DataError(f"cannot read {path}: {exc}") from None
    if len(data) > expected:
        raise DataError(f"{path} holds more data than its header promises ({expected} bytes)")
    if len(data) < expected:
        raise DataError(f"{path} holds {len(data)} bytes of data, its header promises {expected}")
    return np.frombuffer(data, dtype=np.uint8).reshape(shape)


def samples_per_rank(samples: int, world: int, batch: int) -> int:
    """Samples each rank takes per epoch (DistributedSampler's cut), or DataError when that is less than
    one batch: the rule the parent checks before launch and every rank's ShardedBatches relies on."""
    per_rank = samples // world
    if per_rank < batch:
        raise DataError(f"the data set has {samples} samples: too few for {world} worker(s) x batch {batch} "
                        "(every worker needs a full batch); lower --batch-size or the world size")
    return per_rank


def check_source(source: str, data_dir: str | None, *, world: int, batch: int, workload=None,
                 image: int | None = None) -> None:
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
        try:
            import sklearn.datasets  # noqa: F401
        except ImportError:
            raise DataError("--data digits needs scikit-learn (pip install scikit-learn)") from None
    _, labels = load_real(source, data_dir)
    samples_per_rank(len(labels), world, batch)


def load_real(source: str, data_dir: str | None, files=MNIST_FILES):
    """(images uint8 N x H x W, labels int64 N) as numpy arrays."""
    import numpy as np

    if source == "mnist":
        images_path, labels_path = find_mnist(data_dir, files)
        images, labels = read_idx(images_path, "images"), read_idx(labels_path, "labels")
        if len(images) != len(labels):
            raise DataError(f"MNIST files disagree: {images_path} holds {len(images)} images, {labels_path} "
                            f"{len(labels)} labels")
        classes = real_classes(source)
        out_of_range = np.flatnonzero(labels >= classes)
        if out_of_range.size:  # the loss would fail on it mid-run, in every worker
            i = int(out_of_range[0])
            raise DataError(f"{labels_path} holds label {labels[i]} (sample {i}); MNIST's {classes} classes take "
                            f"labels 0..{classes - 1}")
        return images, labels.astype(np.int64)
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = np.rint(digits.images * (255.0 / 16.0)).astype(np.uint8)  # 0..16 ink levels -> 0..255
    return images, digits.target.astype(np.int64)


# ---------------------------------------------------------------- batch streams
def synthetic_arrays(*, batch, channels, image, classes, seed, rank, count=SYNTHETIC_BATCHES):
    """A rank's synthetic batches as numpy arrays, (count, batch, channels, image, image) float32 inputs from a
    standard normal and (count, batch) int64 labels uniform in [0, classes), from numpy's PCG64 seeded with the
    rank's seed: one generator that no framework owns, so the PyTorch and the TensorFlow backends train on the same
    numbers (the TensorFlow side transposes them to channels-last)."""
    import numpy as np

    rng = np.random.default_rng(rank_seed(seed, rank))
    x = rng.standard_normal((count, batch, channels, image, image), dtype=np.float32)
    y = rng.integers(0, classes, (count, batch), dtype=np.int64)
    return x, y


class SyntheticBatches:
    """A fixed set of seeded batches (synthetic_arrays), already on the device, cycled forever."""

    def __init__(self, *, batch, channels, image, classes, seed, rank, device):
        import torch

        x, y = synthetic_arrays(batch=batch, channels=channels, image=image, classes=classes, seed=seed, rank=rank)
        self.x = torch.from_numpy(x).to(device)
        self.y = torch.from_numpy(y).to(device)
        self.i = 0

    def __iter__(self):
        return self

    def __next__(self):
        i = self.i
        self.i = (i + 1) % SYNTHETIC_BATCHES
        return self.x[i], self.y[i]

    def at(self, step: int):
        """The batch step number `step` (0-based) draws: the same after any restart."""
        i = step % SYNTHETIC_BATCHES
        return self.x[i], self.y[i]


def shard_order(samples: int, *, world: int, rank: int, seed: int, epoch: int):
    """The sample indices rank `rank` takes in epoch `epoch`: DistributedSampler's own order (drop_last),
    so the in-memory path and the DataLoader path see the same samples."""
    from torch.utils.data import DistributedSampler

    sampler = DistributedSampler(range(samples), num_replicas=world, rank=rank, shuffle=True, seed=seed,
                                 drop_last=True)
    sampler.set_epoch(epoch)
    return list(sampler)


class HeldImages:
    """An in-memory uint8 data set and its conversion to the model's input: scaled to [0, 1], normalised by
    the data set's own mean and std, resized to the model's side and repeated over its channels. The same
    arithmetic per batch on the device (memory loader) or per sample in a DataLoader (dataloader loader)."""

    def __init__(self, images, labels, *, channels, image, device="cpu", stats=None):
        import torch

        self.images = torch.from_numpy(images.copy()).to(device)
        self.labels = torch.from_numpy(labels.copy()).to(device)
        if stats is None:  # a held-out set is normalised with its training set's (mean, std)
            scaled = self.images.float() / 255.0
            stats = scaled.mean().item(), scaled.std().item()
        self.mean, self.std = stats
        self.channels, self.image = channels, image

    def __len__(self):
        return len(self.labels)

    def convert(self, raw):
        """uint8 N x H x W -> float N x C x S x S."""
        import torch.nn.functional as F

        x = (raw.float().div_(255.0) - self.mean) / self.std
        x = x.unsqueeze(1)
        if x.shape[-1] != self.image:
            x = F.interpolate(x, size=(self.image, self.image), mode="bilinear", align_corners=False)
        if self.channels != 1:
            x = x.expand(-1, self.channels, -1, -1).contiguous()
        return x

    def __getitem__(self, i):  # one sample, as a Dataset gives it to a DataLoader
        return self.convert(self.images[i : i + 1])[0], self.labels[i]

    def batches(self, batch_size: int):
        """The whole set in order, converted, in batches (held-out evaluation)."""
        for lo in range(0, len(self), batch_size):
            yield self.convert(self.images[lo : lo + batch_size]), self.labels[lo : lo + batch_size]


class ShardedBatches:
    """Epochs over an in-memory data set, sharded by rank, converted per batch on the device (--loader memory)."""

    def __init__(self, images, labels, *, batch, channels, image, seed, rank, world, device):
        self.data = HeldImages(images, labels, channels=channels, image=image, device=device)
        self.per_rank = samples_per_rank(len(self.data), world, batch)
        self.batch, self.seed, self.rank, self.world = batch, seed, rank, world
        self.epoch, self.pos, self.order = -1, 0, None
        self._new_epoch()

    @property
    def mean(self):
        return self.data.mean

    @property
    def std(self):
        return self.data.std

    def _new_epoch(self):
        import torch

        self.epoch += 1
        self.order = torch.tensor(shard_order(len(self.data), world=self.world, rank=self.rank, seed=self.seed,
                                              epoch=self.epoch), device=self.data.labels.device)
        self.pos = 0

    def __iter__(self):
        return self

    def __next__(self):
        if self.pos + self.batch > self.per_rank:
            self._new_epoch()
        idx = self.order[self.pos : self.pos + self.batch]
        self.pos += self.batch
        return self.data.convert(self.data.images[idx]), self.data.labels[idx]


class SyntheticDataset:
    """A rank's synthetic batches (SyntheticBatches' tensors, kept on the CPU) as a data set of samples, read in
    order: a DataLoader over it gives the same batches the on-device path cycles through."""

    def __init__(self, *, batch, channels, image, classes, seed, rank):
        held = SyntheticBatches(batch=batch, channels=channels, image=image, classes=classes, seed=seed, rank=rank,
                                device="cpu")
        self.x = held.x.reshape(-1, *held.x.shape[2:])
        self.y = held.y.reshape(-1)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


class DataLoaderBatches:
    """A data set through torch's DataLoader, as users' training scripts read it: `workers` loader processes,
    a sampler (DistributedSampler, reshuffled by set_epoch each epoch, or in order), each batch copied to the
    device; cycled over epochs forever."""

    def __init__(self, dataset, *, batch, seed, rank, world, device, workers, shuffle=True):
        import torch
        from torch.utils.data import DataLoader, DistributedSampler, SequentialSampler

        self.sampler = (DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=seed,
                                           drop_last=True) if shuffle else SequentialSampler(dataset))
        self.loader = DataLoader(dataset, batch_size=batch, sampler=self.sampler, num_workers=workers,
                                 drop_last=True, persistent_workers=workers > 0,
                                 pin_memory=getattr(device, "type", device) == "cuda",
                                 generator=torch.Generator().manual_seed(rank_seed(seed, rank)))
        self.device, self.epoch, self.it = device, 0, None

    def __iter__(self):
        return self

    def __next__(self):
        while True:
            if self.it is None:
                if hasattr(self.sampler, "set_epoch"):
                    self.sampler.set_epoch(self.epoch)
                self.it = iter(self.loader)
            try:
                x, y = next(self.it)
                return x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
            except StopIteration:
                self.epoch, self.it = self.epoch + 1, None


def image_tree(data_dir: str | None) -> tuple[list[str], list]:
    """(class names, (path, class index) per image) of an ImageFolder tree, as torchvision lists it."""
    if not data_dir:
        raise DataError("--data imagefolder needs --data-dir: a folder with one sub-folder of images per class")
    if not os.path.isdir(data_dir):
        raise DataError(f"--data-dir {data_dir} is not a folder")
    from torchvision.datasets.folder import IMG_EXTENSIONS, find_classes, make_dataset

    try:
        classes, index = find_classes(data_dir)
        samples = make_dataset(data_dir, index, extensions=IMG_EXTENSIONS)
    except (FileNotFoundError, OSError) as exc:
        raise DataError(f"--data-dir {data_dir}: not an image folder tree ({exc}); it needs one sub-folder of "
                        f"images per class") from None
    return classes, samples


def image_folder_dataset(data_dir, *, channels, image, train=True):
    """An ImageFolder tree with the usual transforms: RandomResizedCrop and a flip for training, Resize and a
    centre crop for evaluation; normalised (ImageNet's statistics for colour, 0.5 for grey)."""
    from torchvision import datasets, transforms

    grey = [transforms.Grayscale(num_output_channels=1)] if channels == 1 else []
    mean, std = ((0.5,), (0.5,)) if channels == 1 else ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    shape = ([transforms.RandomResizedCrop(image), transforms.RandomHorizontalFlip()] if train else
             [transforms.Resize(int(image * 8 / 7)), transforms.CenterCrop(image)])
    return datasets.ImageFolder(data_dir, transforms.Compose([*shape, *grey, transforms.ToTensor(),
                                                              transforms.Normalize(mean, std)]))


def own_datasets(workload, image: int | None = None) -> tuple:
    """The workload's own (train, held-out) data sets (Workload.datasets), made once per process and checked
    (check_own_data)."""
    train, held, facts = _made(workload)
    check_own_data(workload, facts, image)
    return train, held


def own_data_facts(workload) -> dict:
    """What check_own_data needs of the workload's own data sets, for a process that never makes them (a run's
    parent, which the workload check's process tells): their sizes, and their first sample's kind, shape and class."""
    return _made(workload)[2]


def own_train_samples(workload, image: int | None = None) -> int:
    """The training samples of the workload's own data sets, checked as every rank will find them, from what the
    workload check found of them (workloads.base.WorkloadInfo.data): the parent never makes them itself."""
    facts = workload.data
    if facts is None:
        raise ValueError(f"workload {workload.name} was described without its data sets (with_data)")
    if "error" in facts:
        raise DataError(facts["error"])
    check_own_data(workload, facts, image)
    return facts["train"]


def check_own_data(workload, facts: dict, image: int | None) -> None:
    """Two non-empty data sets whose first sample is an input of the workload's shape and a class index."""
    name = workload.name
    if min(facts["train"], facts["held_out"]) < 1:
        raise DataError(f"--data workload: {name}.datasets() gave {facts['train']} training and {facts['held_out']} "
                        "held-out samples; both need some")
    shape = tuple(facts["shape"])
    expected = (workload.channels, image, image) if image else None
    if not facts["tensor"] or (expected and shape != expected):
        raise DataError(f"--data workload: {name}'s samples are {facts['kind']} {shape}; the model takes "
                        f"tensors of shape {expected or '(channels, image, image)'}"
                        + (" (set --image-size to match)" if expected else ""))
    label = facts["label"]
    if not 0 <= label < workload.classes:
        raise DataError(f"--data workload: {name}'s first sample has class {label}; it declares "
                        f"{workload.classes} classes (0..{workload.classes - 1})")


def _made(workload) -> tuple:
    """(train, held-out, their facts), made once per process."""
    name = getattr(workload, "name", workload)
    if workload is None or getattr(workload, "datasets", None) is None:
        raise DataError(f"--data workload: workload {name} brings no data sets of its own (its `datasets` is None); "
                        "give it a datasets() factory (README, 'Compare on your own model') or choose another --data")
    key = id(workload)
    if key not in _OWN:
        import torch  # here only: a process that is told the facts (the run's parent) never loads it

        try:
            train, held = workload.datasets()
            sizes = len(train), len(held)
            x, y = train[0]
            facts = {"train": sizes[0], "held_out": sizes[1], "kind": type(x).__name__,
                     "tensor": isinstance(x, torch.Tensor), "shape": [int(d) for d in getattr(x, "shape", ())],
                     "label": int(y)}
        except Exception as exc:
            raise DataError(f"--data workload: {name}.datasets() must return (train, held_out) data sets of "
                            f"(input, class index) pairs ({type(exc).__name__}: {str(exc)[:160]})") from None
        _OWN[key] = (train, held, facts)
    return _OWN[key]


_OWN: dict[int, tuple] = {}


def open_batches(source, *, batch, channels, image, classes, seed, rank, world, device, data_dir=None,
                 loader="memory", loader_workers=0, dataset=None, workload=None):
    """The batch stream of one worker. `dataset` overrides what the source would load (a held-out split's
    training part, bench converge): a HeldImages, or a torch Dataset for the sources a DataLoader reads."""
    if source == "workload":
        data = dataset if dataset is not None else own_datasets(workload, image)[0]
        return DataLoaderBatches(data, batch=batch, seed=seed, rank=rank, world=world, device=device,
                                 workers=loader_workers)
    if source == "imagefolder":
        data = dataset if dataset is not None else image_folder_dataset(data_dir, channels=channels, image=image)
        return DataLoaderBatches(data, batch=batch, seed=seed, rank=rank, world=world, device=device,
                                 workers=loader_workers)
    if source == "synthetic":
        if loader == "dataloader":
            return DataLoaderBatches(SyntheticDataset(batch=batch, channels=channels, image=image, classes=classes,
                                                      seed=seed, rank=rank),
                                     batch=batch, seed=seed, rank=rank, world=world, device=device,
                                     workers=loader_workers, shuffle=False)
        return SyntheticBatches(batch=batch, channels=channels, image=image, classes=classes,
                                seed=seed, rank=rank, device=device)
    if dataset is None:
        images, labels = load_real(source, data_dir)
    else:
        images, labels = dataset
    if loader == "dataloader":
        held = HeldImages(images, labels, channels=channels, image=image)
        samples_per_rank(len(held), world, batch)
        return DataLoaderBatches(held, batch=batch, seed=seed, rank=rank, world=world, device=device,
                                 workers=loader_workers)
    return ShardedBatches(images, labels, batch=batch, channels=channels, image=image, seed=seed,
                          rank=rank, world=world, device=device)


class TimedBatches:
    """A batch stream that adds up how long the training loop waited for its batches (input wait): two clock
    readings per step, only where a DataLoader feeds the run."""

    def __init__(self, inner):
        import time

        self.inner, self.wait_s, self._clock = inner, 0.0, time.perf_counter

    def __iter__(self):
        return self

    def __next__(self):
        t0 = self._clock()
        out = next(self.inner)
        self.wait_s += self._clock() - t0
        return out


# ---------------------------------------------------------------- held-out data (bench converge)
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


def converge_data(source: str, data_dir: str | None, *, holdout: float, seed: int, channels: int, image: int,
                  workload=None):
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
        return train, HeldOut(held, len(held_idx), f"{len(held_idx)} images held out of {len(samples)} "
                                                   f"({holdout:.0%}, seeded)")
    images, labels = load_real(source, data_dir)
    if source == "mnist" and _has_files(data_dir, MNIST_TEST_FILES):
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


def _has_files(data_dir, files) -> bool:
    try:
        find_mnist(data_dir, files)
        return True
    except DataError:
        return False


def training_samples(source: str, data_dir: str | None, *, holdout: float, seed: int, workload=None,
                     image: int | None = None) -> int:
    """How many samples the training part of converge_data holds (the parent plans epochs with it)."""
    if source == "workload":
        return own_train_samples(workload, image)
    if source == "imagefolder":
        return len(split_indices(len(image_tree(data_dir)[1]), holdout, seed)[0])
    _, labels = load_real(source, data_dir)
    if source == "mnist" and _has_files(data_dir, MNIST_TEST_FILES):
        return len(labels)
    return len(split_indices(len(labels), holdout, seed)[0])
