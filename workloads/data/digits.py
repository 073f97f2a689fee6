"""scikit-learn's 8x8 handwritten digits (1797 real images, shipped with the package, so always at hand): whether
scikit-learn is there to give them (check_digits) and the images scaled from its 0..16 ink levels to uint8 with their
labels (digits_arrays). scikit-learn and numpy are imported inside the functions only."""

from __future__ import annotations

from workloads.data.names import DataError


def check_digits() -> None:
    """DataError unless scikit-learn, which ships the digits, is installed."""
    try:
        import sklearn.datasets  # noqa: F401
    except ImportError:
        raise DataError("--data digits needs scikit-learn (pip install scikit-learn)") from None


def digits_arrays():
    """(images uint8 N x 8 x 8, labels int64 N) as numpy arrays."""
    import numpy as np
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = np.rint(digits.images * (255.0 / 16.0)).astype(np.uint8)  # 0..16 ink levels -> 0..255
    return images, digits.target.astype(np.int64)
