"""Data sources, identical for every backend: each rank gets the same batches under any launcher.

- synthetic: seeded random tensors, generated once and held on the device, so data loading never
  limits throughput.
- digits: scikit-learn's 8x8 handwritten digits (1797 real images, shipped with the package), scaled
  to the workload's input.
- mnist: MNIST's own IDX files read from a directory the user gives; nothing is ever downloaded.
- imagefolder: a torchvision ImageFolder tree (one folder per class) the user gives, such as an ImageNet
  copy, read through a DataLoader with a DistributedSampler and the usual training transforms
  (RandomResizedCrop, RandomHorizontalFlip, normalisation), K loader processes per worker (--loader-workers).

Real data sets are held in memory as uint8 and sharded like DistributedSampler: each epoch is a seeded
permutation cut to a multiple of the world size, and rank r takes every world-th sample from r.
"""

from __future__ import annotations

import gzip
import os
import struct
import zlib
from pathlib import Path

SOURCES = ("synthetic", "digits", "mnist", "imagefolder")
SYNTHETIC_BATCHES = 8  # distinct batches cycled per rank: enough that no step reuses the previous one
MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte")
IDX_MAGIC = {"images": 2051, "labels": 2049}


class DataError(Exception):
    """The data source cannot be used as asked; the message says what to do."""


def real_classes(source: str, data_dir: str | None = None) -> int:
    if source == "imagefolder":
        return len(image_tree(data_dir)[0])
    return 10  # the other real sources are handwritten digits


def rank_seed(seed: int, rank: int) -> int:
    # Distinct, reproducible streams per rank that do not depend on the world size.
    return seed * 1_000_003 + rank


# ---------------------------------------------------------------- MNIST's IDX format
def _open_maybe_gz(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def find_mnist(data_dir: str | os.PathLike | None) -> tuple[Path, Path]:
    """Return the (images, labels) paths or raise DataError naming what is missing."""
    if not data_dir:
        raise DataError("--data mnist needs --data-dir DIR holding MNIST's IDX files "
                        f"({MNIST_FILES[0]}[.gz], {MNIST_FILES[1]}[.gz]); nothing is downloaded")
    root = Path(data_dir)
    if not root.is_dir():
        raise DataError(f"--data-dir {root} does not exist or is not a directory; "
                        "point it at the folder holding MNIST's IDX files")
    found = []
    for stem in MNIST_FILES:
        for candidate in (root / stem, root / f"{stem}.gz", root / stem.replace("-idx", ".idx")):
            if candidate.is_file():
                found.append(candidate)
                break
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
            data = fh.read()
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        raise DataError(f"cannot read {path}: {exc}") from None
    expected = 1
    for dim in shape:
        expected *= dim
    if len(data) != expected:
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


def check_source(source: str, data_dir: str | None, *, world: int, batch: int) -> None:
    """Parent-side validation, so bad input fails before any process starts: the files read as the
    workers will read them (MNIST once: well under a second), and every rank gets full batches."""
    if source not in SOURCES:
        raise DataError(f"unknown data source {source!r}; choose one of {', '.join(SOURCES)}")
    if source == "synthetic":
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


def load_real(source: str, data_dir: str | None):
    """(images uint8 N x H x W, labels int64 N) as numpy arrays."""
    import numpy as np

    if source == "mnist":
        images_path, labels_path = find_mnist(data_dir)
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
class SyntheticBatches:
    """A fixed set of seeded batches, already on the device, cycled forever."""

    def __init__(self, *, batch, channels, image, classes, seed, rank, device):
        import torch

        gen = torch.Generator().manual_seed(rank_seed(seed, rank))
        self.x = torch.randn(SYNTHETIC_BATCHES, batch, channels, image, image, generator=gen).to(device)
        self.y = torch.randint(0, classes, (SYNTHETIC_BATCHES, batch), generator=gen).to(device)
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


class ShardedBatches:
    """Epochs over an in-memory uint8 data set, sharded by rank, converted per batch on the device."""

    def __init__(self, images, labels, *, batch, channels, image, seed, rank, world, device):
        import torch

        self.images = torch.from_numpy(images.copy()).to(device)
        self.labels = torch.from_numpy(labels.copy()).to(device)
        self.per_rank = samples_per_rank(len(self.labels), world, batch)
        n = self.per_rank * world
        scaled = self.images.float() / 255.0
        self.mean, self.std = scaled.mean().item(), scaled.std().item()
        self.batch, self.channels, self.image = batch, channels, image
        self.seed, self.rank, self.world, self.n = seed, rank, world, n
        self.epoch, self.pos, self.order = -1, 0, None
        self._new_epoch()

    def _new_epoch(self):
        import torch

        self.epoch += 1
        gen = torch.Generator().manual_seed(self.seed * 7919 + self.epoch)
        perm = torch.randperm(len(self.labels), generator=gen)[: self.n]
        self.order = perm[self.rank :: self.world].to(self.labels.device)
        self.pos = 0

    def __iter__(self):
        return self

    def __next__(self):
        import torch.nn.functional as F

        if self.pos + self.batch > self.per_rank:
            self._new_epoch()
        idx = self.order[self.pos : self.pos + self.batch]
        self.pos += self.batch
        x = (self.images[idx].float().div_(255.0) - self.mean) / self.std
        x = x.unsqueeze(1)
        if x.shape[-1] != self.image:
            x = F.interpolate(x, size=(self.image, self.image), mode="bilinear", align_corners=False)
        if self.channels != 1:
            x = x.expand(-1, self.channels, -1, -1).contiguous()
        return x, self.labels[idx]


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


class LoaderBatches:
    """An ImageFolder tree through torch's DataLoader and DistributedSampler, as users' training scripts read
    it: the usual training transforms, `workers` loader processes, epochs reshuffled by the seed."""

    def __init__(self, data_dir, *, batch, channels, image, seed, rank, world, device, workers):
        import torch
        from torch.utils.data import DataLoader, DistributedSampler
        from torchvision import datasets, transforms

        grey = [transforms.Grayscale(num_output_channels=1)] if channels == 1 else []
        mean, std = ((0.5,), (0.5,)) if channels == 1 else ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
        dataset = datasets.ImageFolder(data_dir, transforms.Compose([
            transforms.RandomResizedCrop(image), transforms.RandomHorizontalFlip(), *grey, transforms.ToTensor(),
            transforms.Normalize(mean, std)]))
        self.sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=seed,
                                          drop_last=True)
        self.loader = DataLoader(dataset, batch_size=batch, sampler=self.sampler, num_workers=workers,
                                 drop_last=True, persistent_workers=workers > 0,
                                 generator=torch.Generator().manual_seed(rank_seed(seed, rank)))
        self.device, self.epoch, self.it = device, 0, None

    def __iter__(self):
        return self

    def __next__(self):
        while True:
            if self.it is None:
                self.sampler.set_epoch(self.epoch)
                self.it = iter(self.loader)
            try:
                x, y = next(self.it)
                return x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
            except StopIteration:
                self.epoch, self.it = self.epoch + 1, None


def open_batches(source, *, batch, channels, image, classes, seed, rank, world, device, data_dir=None,
                 loader_workers=0):
    if source == "imagefolder":
        return LoaderBatches(data_dir, batch=batch, channels=channels, image=image, seed=seed, rank=rank,
                             world=world, device=device, workers=loader_workers)
    if source == "synthetic":
        return SyntheticBatches(batch=batch, channels=channels, image=image, classes=classes,
                                seed=seed, rank=rank, device=device)
    images, labels = load_real(source, data_dir)
    return ShardedBatches(images, labels, batch=batch, channels=channels, image=image, seed=seed,
                          rank=rank, world=world, device=device)
