"""scikit-learn's 8x8 digits (1x8x8, 10 classes), shipped with scikit-learn: no files to
find or download. The split is fixed by ``pflcore.data.sources.DIGITS_SPLIT_SEED`` and
``DIGITS_TEST_FRACTION``."""

from __future__ import annotations

import functools

import numpy as np

from .common import Dataset, DatasetSource, make_dataset, package

CLASSES = tuple("0123456789")


def _load() -> Dataset:
    settings = package()
    return _load_split(settings.DIGITS_SPLIT_SEED, settings.DIGITS_TEST_FRACTION)


@functools.lru_cache(maxsize=2)
def _load_split(seed: int, test_fraction: float) -> Dataset:
    """scikit-learn's 8x8 digits with a fixed stratified split.

    Pixels 0..16 become ``(v * 255 + 8) // 16`` (0..255, 8 -> 128). Within each class
    the samples are ordered by raw 64-bit outputs of ``PCG64(seed)`` (a stream NumPy
    keeps stable across versions) and the first ``round(n_class * test_fraction)`` go
    to test; both splits are then sorted by original index.
    """
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise ImportError("The 'digits' dataset ships with scikit-learn (pip install scikit-learn)") from None
    bunch = load_digits()
    pixels = np.asarray(bunch.images, dtype=np.int64)
    x = ((pixels * 255 + 8) // 16).astype(np.uint8)[:, None]
    y = np.asarray(bunch.target, dtype=np.int64)
    keys = np.random.PCG64(seed).random_raw(len(y))
    test_idx: list[np.ndarray] = []
    for c in range(10):
        idx = np.flatnonzero(y == c)
        idx = idx[np.argsort(keys[idx], kind="stable")]
        test_idx.append(idx[: int(round(len(idx) * test_fraction))])
    is_test = np.zeros(len(y), dtype=bool)
    is_test[np.concatenate(test_idx)] = True
    train = (np.ascontiguousarray(x[~is_test]), y[~is_test])
    test = (np.ascontiguousarray(x[is_test]), y[is_test])
    return make_dataset("digits", train, test, 10, CLASSES)


DIGITS = DatasetSource(
    "digits", shape=(1, 8, 10), aliases=("sklearndigits",), builtin=_load, clear=_load_split.cache_clear,
)
