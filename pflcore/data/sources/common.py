"""What every dataset source shares (the sources themselves are the sibling modules).

The :class:`Dataset` type, the two errors, :class:`DatasetSource` (one registry entry:
how to find, parse and download one dataset, and its shape), :class:`TextShape` (the
shape of a token dataset), :class:`Found` (a located copy) and the parsing helpers the
formats have in common.
"""

from __future__ import annotations

import gzip
import sys
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

import numpy as np
import torch


class DatasetNotFoundError(FileNotFoundError):
    """No copy of the dataset was found and none could be downloaded."""


class DatasetCorruptError(ValueError):
    """A dataset file exists but is damaged, truncated or not in the expected format."""


# ------------------------------------------------------------------------------ Dataset


class TextShape(NamedTuple):
    """The shape of a token dataset (FedCP section 6.1, AG News), known before loading it:
    the padded sequence length, the vocabulary size (None where only the files say, e.g. a
    vocabulary built from the training split) and the number of classes. An image dataset's
    shape is the plain triple ``(channels, image size, classes)`` instead."""

    seq_len: int
    vocab_size: int | None
    num_classes: int


@dataclass(frozen=True, eq=False)
class Dataset:
    """A whole dataset in memory. The tensors may be shared with a cache: do not modify.

    Either images, ``uint8 (N, C, H, W)`` with per-channel ``mean``/``std`` of the pixels
    in [0, 1], or token sequences (the text of FedCP section 6.1), ``int64 (N, L)`` ids in
    ``[0, vocab_size)`` padded with 0, with empty ``mean``/``std`` (ids are not normalised).
    :attr:`inputs` says which.
    """

    name: str
    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    num_classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    classes: tuple[str, ...] | None = None
    #: (train owner ids, test owner ids): the client each sample came with, for a dataset
    #: shipped already federated (PFLlib's format); None otherwise.
    owners: tuple[np.ndarray, np.ndarray] | None = None
    #: Token datasets only: the number of token ids (0 is padding); None for images.
    vocab_size: int | None = None

    def __post_init__(self) -> None:
        tokens = self.train_x.dtype == torch.int64
        for split, x, y in (("train", self.train_x, self.train_y), ("test", self.test_x, self.test_y)):
            if not ((x.dtype == torch.uint8 and x.dim() == 4 and not tokens)
                    or (x.dtype == torch.int64 and x.dim() == 2 and tokens)):
                raise ValueError(f"{split}_x must be uint8 images (N, C, H, W) or int64 token ids (N, L) like "
                                 f"train_x, got {x.dtype} {tuple(x.shape)}")
            if y.dtype != torch.int64 or y.shape != (x.shape[0],):
                raise ValueError(f"{split}_y must be int64 of shape ({x.shape[0]},), got {y.dtype} {tuple(y.shape)}")
        if self.train_x.shape[1:] != self.test_x.shape[1:]:
            raise ValueError("train_x and test_x must have the same (C, H, W), or the same length L of token ids")
        if tokens:
            v = self.vocab_size
            if not isinstance(v, int) or isinstance(v, bool) or v < 2:
                raise ValueError(f"a token dataset needs vocab_size, a whole number >= 2, got {v!r}")
            for split, x in (("train", self.train_x), ("test", self.test_x)):
                if x.numel() and (int(x.min()) < 0 or int(x.max()) >= v):
                    raise ValueError(f"{split}_x holds token ids outside [0, {v}) (vocab_size)")
            if self.mean or self.std:
                raise ValueError("a token dataset has no mean and std (token ids are not normalised): give ()")
        else:
            if self.vocab_size is not None:
                raise ValueError("vocab_size is for token datasets; an image dataset has None")
            if len(self.mean) != self.in_channels or len(self.std) != self.in_channels:
                raise ValueError("mean and std need one value per channel")
        if self.classes is not None and len(self.classes) != self.num_classes:
            raise ValueError("classes must have num_classes names")
        if self.owners is not None and tuple(len(o) for o in self.owners) != (self.num_train, self.num_test):
            raise ValueError("owners must hold one client id per train sample and one per test sample")

    @property
    def inputs(self) -> str:
        """``"images"`` (uint8 (N, C, H, W)) or ``"tokens"`` (int64 (N, L) token ids)."""
        return "tokens" if self.train_x.dtype == torch.int64 else "images"

    @property
    def in_channels(self) -> int | None:
        """Image channels; None for token ids."""
        return int(self.train_x.shape[1]) if self.inputs == "images" else None

    @property
    def image_size(self) -> int | None:
        """Image height (= width); None for token ids."""
        return int(self.train_x.shape[2]) if self.inputs == "images" else None

    @property
    def seq_len(self) -> int | None:
        """Padded length L of the token sequences; None for images."""
        return int(self.train_x.shape[1]) if self.inputs == "tokens" else None

    @property
    def shape(self) -> tuple[int, int, int] | TextShape:
        """Its shape as the registry declares shapes: (channels, image size, classes) or a
        :class:`TextShape`."""
        if self.inputs == "tokens":
            return TextShape(int(self.train_x.shape[1]), self.vocab_size, self.num_classes)
        return int(self.train_x.shape[1]), int(self.train_x.shape[2]), self.num_classes

    @property
    def num_train(self) -> int:
        return int(self.train_x.shape[0])

    @property
    def num_test(self) -> int:
        return int(self.test_x.shape[0])

    def __repr__(self) -> str:
        if self.inputs == "tokens":
            shape = f"tokens={self.seq_len}, vocab_size={self.vocab_size}"
        else:
            c, h, w = self.train_x.shape[1:]
            shape = f"shape=({c}, {h}, {w})"
        return (f"Dataset(name={self.name!r}, train={self.num_train}, test={self.num_test}, {shape}, "
                f"num_classes={self.num_classes})")


# ------------------------------------------------------------------------------ sources


@dataclass(frozen=True)
class Found:
    """A located copy of a dataset: how to parse it, its files, and a freshness stamp."""

    name: str
    kind: str  # the source's own tag for the layout found, e.g. "idx" or "emnist_zip"
    paths: tuple[str, ...]
    stamp: tuple[tuple[int, int], ...]


def stamp(paths: Sequence[Path]) -> tuple[tuple[int, int], ...]:
    """(mtime in ns, size) of each path: a located copy is re-parsed when this changes."""
    out = []
    for p in paths:
        st = p.stat()
        out.append((st.st_mtime_ns, st.st_size))
    return tuple(out)


@dataclass(frozen=True)
class Download:
    """Official files of a dataset: (file name, md5) pairs and mirror base URLs tried in order."""

    files: tuple[tuple[str, str], ...]
    mirrors: tuple[str, ...]


@dataclass(frozen=True)
class DatasetSource:
    """One dataset, as registered in :data:`pflcore.data.sources.DATASETS`.

    ``shape`` is ``(channels, image size, number of classes)`` for images or a
    :class:`TextShape` for token sequences, known before loading; a dataset whose shape
    depends on its files has ``shape=None`` and ``shape_of(found) -> shape``, a cheap look
    at the located copy.
    ``aliases`` are further accepted names (lower case, without '-', '_' or spaces).
    A dataset read from files has ``probe(name, folder) -> Found | None`` (is a complete
    copy directly in ``folder``?), ``load(found) -> Dataset``, the conventional
    ``subdirs`` of a search folder, ``provide`` (the files a user may put there by hand,
    for error messages) and, where an official copy has pinned checksums,
    ``download``. A dataset shipped with a library has ``builtin() -> Dataset`` instead,
    and ``clear`` forgets what it keeps in memory.
    """

    name: str
    shape: tuple[int, int, int] | TextShape | None
    aliases: tuple[str, ...] = ()
    probe: Callable[[str, Path], Found | None] | None = None
    load: Callable[[Found], Dataset] | None = None
    subdirs: tuple[str, ...] = ()
    provide: str = ""
    download: Download | None = None
    builtin: Callable[[], Dataset] | None = None
    clear: Callable[[], None] | None = None
    shape_of: Callable[[Found], tuple[int, int, int] | TextShape] | None = None


def package() -> ModuleType:
    """The package :mod:`pflcore.data.sources`. Its settings (``CINIC_TRAIN_INCLUDES_VALID``,
    ``DIGITS_SPLIT_SEED``, ...) are read from it at call time, so setting them there works."""
    return sys.modules[__package__]


# ---------------------------------------------------------------------- parsing helpers


def one_line(exc: BaseException) -> str:
    """An exception as a short clause that does not break the enclosing sentence."""
    full = (str(exc).strip().splitlines() or [""])[0]
    text = full[:150]
    unmatched: list[int] = []
    for i, ch in enumerate(text):
        if ch == "(":
            unmatched.append(i)
        elif ch == ")" and unmatched:
            unmatched.pop()
    if unmatched:  # cut before the first parenthesis the truncation left open
        text = text[: unmatched[0]]
    text = text.rstrip(" .:;,").replace(". ", "; ")
    if text and len(text) < len(full.rstrip(" .")):
        text += "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def decompress(data: bytes, source: str) -> bytes:
    """gunzip ``data`` if ``source`` ends in .gz; gzip damage becomes DatasetCorruptError."""
    if not source.endswith(".gz"):
        return data
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as exc:
        raise DatasetCorruptError(f"{source}: damaged gzip data ({one_line(exc)})") from None


def check_labels(
    images: np.ndarray, labels: np.ndarray, num_classes: int, image_source: str, label_source: str
) -> None:
    """Check that labels match the images in count and lie in [0, num_classes)."""
    if images.shape[0] != labels.shape[0]:
        raise DatasetCorruptError(
            f"{label_source}: {labels.shape[0]} labels but {image_source} has {images.shape[0]} images"
        )
    if labels.size and (int(labels.min()) < 0 or int(labels.max()) >= num_classes):
        bad = int(labels.min()) if int(labels.min()) < 0 else int(labels.max())
        raise DatasetCorruptError(f"{label_source}: label {bad} is outside [0, {num_classes})")


def mean_std(x: np.ndarray) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Exact per-channel mean and std of uint8 images (N, C, H, W) in [0, 1] scale."""
    levels = np.arange(256, dtype=np.float64) / 255.0
    means, stds = [], []
    for c in range(x.shape[1]):
        channel = torch.from_numpy(np.ascontiguousarray(x[:, c]).reshape(-1))
        hist = torch.bincount(channel, minlength=256).numpy().astype(np.float64)  # np.bincount is slow on uint8
        n = max(hist.sum(), 1.0)
        mean = float((hist * levels).sum() / n)
        var = float((hist * (levels - mean) ** 2).sum() / n)
        means.append(round(mean, 6))
        stds.append(round(var**0.5, 6))
    return tuple(means), tuple(stds)


def make_dataset(
    name: str,
    train: tuple[np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray],
    num_classes: int,
    classes: tuple[str, ...] | None,
) -> Dataset:
    """A :class:`Dataset` from uint8 (N, C, H, W) images and int64 labels of both splits."""
    mean, std = mean_std(train[0])
    return Dataset(
        name=name,
        train_x=torch.from_numpy(train[0]),
        train_y=torch.from_numpy(train[1]),
        test_x=torch.from_numpy(test[0]),
        test_y=torch.from_numpy(test[1]),
        num_classes=num_classes,
        mean=mean,
        std=std,
        classes=classes,
    )
