"""MNIST's own IDX files, read from a directory the user gives (plain or gzipped; nothing is ever downloaded): where
they are (find_mnist, has_files), one file parsed as its header promises and no further (read_idx), and the training
or test set as numpy arrays with its labels checked (load_mnist). numpy is imported inside the functions only."""

from __future__ import annotations

import gzip
import os
import struct
import zlib
from pathlib import Path

from workloads.data.names import DIGIT_CLASSES, DataError

MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte")
MNIST_TEST_FILES = ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")  # MNIST's own held-out set, when present
IDX_MAGIC = {"images": 2051, "labels": 2049}


def _open_maybe_gz(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def find_mnist(data_dir: str | os.PathLike | None, files=MNIST_FILES) -> tuple[Path, Path]:
    """Return the (images, labels) paths or raise DataError naming what is missing."""
    if not data_dir:
        raise DataError(
            "--data mnist needs --data-dir DIR holding MNIST's IDX files "
            f"({MNIST_FILES[0]}[.gz], {MNIST_FILES[1]}[.gz]); nothing is downloaded"
        )
    root = Path(data_dir)
    if not root.is_dir():
        raise DataError(
            f"--data-dir {root} does not exist or is not a directory; point it at the folder holding MNIST's IDX files"
        )
    found = []
    for stem in files:
        for candidate in (root / stem, root / f"{stem}.gz", root / stem.replace("-idx", ".idx")):
            if candidate.is_file():  # a regular file (stat, which never blocks): a FIFO or a device is never opened
                found.append(candidate)
                break
            if candidate.exists():
                raise DataError(f"{candidate} is not a regular file; put MNIST's file itself there")
        else:
            raise DataError(
                f"MNIST file {stem}[.gz] not found in {root}; nothing is downloaded: "
                "put MNIST's training files there, or use --data synthetic or --data digits"
            )
    return found[0], found[1]


def has_files(data_dir, files) -> bool:
    """Whether `data_dir` holds the (images, labels) pair `files` names (find_mnist finds them)."""
    try:
        find_mnist(data_dir, files)
        return True
    except DataError:
        return False


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
                raise DataError(
                    f"{path} is not an MNIST {kind} file (magic number {magic}, expected {IDX_MAGIC[kind]})"
                )
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


def load_mnist(data_dir: str | None, files=MNIST_FILES):
    """(images uint8 N x H x W, labels int64 N) of the pair `files` names, as numpy arrays: the two files agree on
    the count and every label is one of the digits' classes."""
    import numpy as np

    images_path, labels_path = find_mnist(data_dir, files)
    images, labels = read_idx(images_path, "images"), read_idx(labels_path, "labels")
    if len(images) != len(labels):
        raise DataError(
            f"MNIST files disagree: {images_path} holds {len(images)} images, {labels_path} {len(labels)} labels"
        )
    classes = DIGIT_CLASSES
    out_of_range = np.flatnonzero(labels >= classes)
    if out_of_range.size:  # the loss would fail on it mid-run, in every worker
        i = int(out_of_range[0])
        raise DataError(
            f"{labels_path} holds label {labels[i]} (sample {i}); MNIST's {classes} classes take "
            f"labels 0..{classes - 1}"
        )
    return images, labels.astype(np.int64)
