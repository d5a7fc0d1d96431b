"""Dataset registry: locate, fetch and parse image datasets into uint8 tensors.

``load_dataset(name)`` returns a :class:`Dataset` holding the whole train and test
splits in memory (images ``uint8 (N, C, H, W)``, labels ``int64 (N,)``).

Where files are looked for, in this order (the first complete copy wins):

1. the ``root`` argument,
2. the folders in the environment variable ``PFL_DATA`` (``os.pathsep``-separated),
3. the per-user cache :func:`cache_dir` (``$XDG_CACHE_HOME/pflcore`` or
   ``~/.cache/pflcore``),
4. known system folders (:data:`SYSTEM_DIRS`, e.g. Debian's Fashion-MNIST package).

In each of these folders a dataset may sit directly or in one of its conventional
subfolders (``fmnist/``, ``FashionMNIST/raw/``, ``cifar-10-batches-py/``, ...).
When nothing is found and ``download=True``, the official files are fetched with
pooch into ``cache_dir()/<name>/``, checked against pinned MD5 checksums.

Parsers are written here for the official formats: IDX (MNIST, Fashion-MNIST,
EMNIST, gzip'd or raw, EMNIST also straight from its ``gzip.zip``), the CIFAR python
pickles (folder or ``.tar.gz``) and the CINIC-10 PNG folders. A damaged or truncated
file raises :class:`DatasetCorruptError` naming it; nothing is ever half-loaded.

Loaded datasets are kept in a small in-process cache keyed on the files' paths,
sizes and modification times, so repeated loads return the *same* tensors: treat
them as read-only (clone before modifying).
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import importlib
import io
import os
import pickle
import tarfile
import warnings
import zipfile
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = [
    "DATASETS",
    "CINIC_TRAIN_INCLUDES_VALID",
    "DIGITS_SPLIT_SEED",
    "DIGITS_TEST_FRACTION",
    "SYSTEM_DIRS",
    "Dataset",
    "DatasetCorruptError",
    "DatasetNotFoundError",
    "cache_dir",
    "canonical_name",
    "clear_cache",
    "load_dataset",
]

DATASETS: tuple[str, ...] = ("fmnist", "mnist", "emnist", "cifar10", "cifar100", "cinic10", "digits")

#: Image shape (channels, height = width) and number of classes of each dataset, known
#: before loading it: the config is checked against them before any work.
SHAPES: dict[str, tuple[int, int, int]] = {
    "fmnist": (1, 28, 10), "mnist": (1, 28, 10), "emnist": (1, 28, 62), "cifar10": (3, 32, 10),
    "cifar100": (3, 32, 100), "cinic10": (3, 32, 10), "digits": (1, 8, 10),
}

#: CINIC-10: when True the training split is ``train`` + ``valid`` (180,000 images);
#: by default it is ``train`` only (90,000). The test split is always ``test``.
CINIC_TRAIN_INCLUDES_VALID: bool = False

#: scikit-learn digits: seed and test fraction of the fixed stratified split.
DIGITS_SPLIT_SEED: int = 0
DIGITS_TEST_FRACTION: float = 0.25

#: Dataset-specific system folders searched last (Debian's ``dataset-fashion-mnist``).
SYSTEM_DIRS: dict[str, tuple[str, ...]] = {
    "fmnist": ("/usr/share/datasets/fashion-mnist",),
}


class DatasetNotFoundError(FileNotFoundError):
    """No copy of the dataset was found and none could be downloaded."""


class DatasetCorruptError(ValueError):
    """A dataset file exists but is damaged, truncated or not in the expected format."""


# --------------------------------------------------------------------------- Dataset


@dataclass(frozen=True, eq=False)
class Dataset:
    """A whole dataset in memory. The tensors may be shared with a cache: do not modify."""

    name: str
    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    num_classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    classes: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        for split, x, y in (("train", self.train_x, self.train_y), ("test", self.test_x, self.test_y)):
            if x.dtype != torch.uint8 or x.dim() != 4:
                raise ValueError(f"{split}_x must be a uint8 (N, C, H, W) tensor, got {x.dtype} {tuple(x.shape)}")
            if y.dtype != torch.int64 or y.shape != (x.shape[0],):
                raise ValueError(f"{split}_y must be int64 of shape ({x.shape[0]},), got {y.dtype} {tuple(y.shape)}")
        if self.train_x.shape[1:] != self.test_x.shape[1:]:
            raise ValueError("train_x and test_x must have the same (C, H, W)")
        if len(self.mean) != self.in_channels or len(self.std) != self.in_channels:
            raise ValueError("mean and std need one value per channel")
        if self.classes is not None and len(self.classes) != self.num_classes:
            raise ValueError("classes must have num_classes names")

    @property
    def in_channels(self) -> int:
        return int(self.train_x.shape[1])

    @property
    def image_size(self) -> int:
        return int(self.train_x.shape[2])

    @property
    def num_train(self) -> int:
        return int(self.train_x.shape[0])

    @property
    def num_test(self) -> int:
        return int(self.test_x.shape[0])

    def __repr__(self) -> str:
        c, h, w = self.train_x.shape[1:]
        return (
            f"Dataset(name={self.name!r}, train={self.num_train}, test={self.num_test}, "
            f"shape=({c}, {h}, {w}), num_classes={self.num_classes})"
        )


# --------------------------------------------------------------------------- names

_ALIASES: dict[str, str] = {
    "fmnist": "fmnist",
    "fashionmnist": "fmnist",
    "mnist": "mnist",
    "emnist": "emnist",
    "emnistbyclass": "emnist",
    "cifar10": "cifar10",
    "cifar100": "cifar100",
    "cinic10": "cinic10",
    "cinic": "cinic10",
    "digits": "digits",
    "sklearndigits": "digits",
}


def canonical_name(name: str) -> str:
    """Map a dataset name or alias (case, '-', '_' and spaces ignored) to its canonical name."""
    key = "".join(ch for ch in str(name).lower() if ch not in "-_ ")
    if key not in _ALIASES:
        raise ValueError(
            f"Unknown dataset {name!r}; choose one of {', '.join(DATASETS)} "
            "(aliases such as 'fashion-mnist' or 'cifar-10' are accepted)."
        )
    return _ALIASES[key]


# --------------------------------------------------------------------------- metadata

_CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
_CIFAR100_CLASSES = tuple(
    "apple aquarium_fish baby bear beaver bed bee beetle bicycle bottle bowl boy bridge bus butterfly "
    "camel can castle caterpillar cattle chair chimpanzee clock cloud cockroach couch crab crocodile cup "
    "dinosaur dolphin elephant flatfish forest fox girl hamster house kangaroo keyboard lamp lawn_mower "
    "leopard lion lizard lobster man maple_tree motorcycle mountain mouse mushroom oak_tree orange orchid "
    "otter palm_tree pear pickup_truck pine_tree plain plate poppy porcupine possum rabbit raccoon ray road "
    "rocket rose sea seal shark shrew skunk skyscraper snail snake spider squirrel streetcar sunflower "
    "sweet_pepper table tank telephone television tiger tractor train trout tulip turtle wardrobe whale "
    "willow_tree wolf woman worm".split()
)
assert len(_CIFAR100_CLASSES) == 100
_FMNIST_CLASSES = (
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
)
_DIGIT_CLASSES = tuple("0123456789")
_EMNIST_CLASSES = tuple("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")

_MNIST_STEMS = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
_EMNIST_STEMS = tuple(
    f"emnist-byclass-{split}-{kind}-ubyte" for split in ("train", "test") for kind in ("images-idx3", "labels-idx1")
)
_EMNIST_ZIPS = ("gzip.zip", "emnist.zip")
_CIFAR10_BATCHES = ("data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5", "test_batch")
_CIFAR10_TAR = "cifar-10-python.tar.gz"
_CIFAR100_FILES = ("train", "test")
_CIFAR100_TAR = "cifar-100-python.tar.gz"

#: Fashion-MNIST uncompressed payloads: (length in bytes, md5). A file of exactly this
#: length must have this md5 (catches bit flips; smaller files get structural checks).
_FMNIST_CANONICAL: dict[str, tuple[int, str]] = {
    "train-images-idx3-ubyte": (47_040_016, "f4a8712d7a061bf5bd6d2ca38dc4d50a"),
    "train-labels-idx1-ubyte": (60_008, "9018921c3c673c538a1fc5bad174d6f9"),
    "t10k-images-idx3-ubyte": (7_840_016, "8181f5470baa50b63fa0f6fddb340f0a"),
    "t10k-labels-idx1-ubyte": (10_008, "15d484375f8d13e6eb1aabb0c3f46965"),
}


@dataclass(frozen=True)
class _Download:
    """Official files of a dataset: (file name, md5) pairs and mirror base URLs tried in order."""

    files: tuple[tuple[str, str], ...]
    mirrors: tuple[str, ...]


#: Pinned official downloads. CINIC-10 is absent on purpose (no checksum we can vouch
#: for): its files must be provided by hand. digits ships with scikit-learn.
_DOWNLOADS: dict[str, _Download] = {
    "fmnist": _Download(
        files=(
            ("train-images-idx3-ubyte.gz", "8d4fb7e6c68d591d4c3dfef9ec88bf0d"),
            ("train-labels-idx1-ubyte.gz", "25c81989df183df01b3e8a0aad5dffbe"),
            ("t10k-images-idx3-ubyte.gz", "bef4ecab320f06d8554ea6380940ec79"),
            ("t10k-labels-idx1-ubyte.gz", "bb300cfdad3c16e7a12a480ee83cd310"),
        ),
        mirrors=("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",),
    ),
    "mnist": _Download(
        files=(
            ("train-images-idx3-ubyte.gz", "f68b3c2dcbeaaa9fbdd348bbdeb94873"),
            ("train-labels-idx1-ubyte.gz", "d53e105ee54ea40749a09fcbcd1e9432"),
            ("t10k-images-idx3-ubyte.gz", "9fb629c4189551a2d022fa330f9573f3"),
            ("t10k-labels-idx1-ubyte.gz", "ec29112dd5afa0611ce80d1b7f02629c"),
        ),
        mirrors=("https://ossci-datasets.s3.amazonaws.com/mnist/", "http://yann.lecun.com/exdb/mnist/"),
    ),
    "emnist": _Download(
        files=(("gzip.zip", "58c8d27c78d21e728a6bc7b3cc06412e"),),
        mirrors=("https://biometrics.nist.gov/cs_links/EMNIST/",),
    ),
    "cifar10": _Download(
        files=((_CIFAR10_TAR, "c58f30108f718f92721af3b95e74349a"),),
        mirrors=("https://www.cs.toronto.edu/~kriz/",),
    ),
    "cifar100": _Download(
        files=((_CIFAR100_TAR, "eb9058c3a382ffc7106e4002c42a8d85"),),
        mirrors=("https://www.cs.toronto.edu/~kriz/",),
    ),
}

#: Conventional subfolders of a search folder, per dataset (the folder itself is tried first).
_SUBDIRS: dict[str, tuple[str, ...]] = {
    "fmnist": ("fmnist", "fashion-mnist", "fashion_mnist", "fashionmnist", "FashionMNIST/raw"),
    "mnist": ("mnist", "MNIST/raw"),
    "emnist": ("emnist", "emnist/gzip", "gzip", "EMNIST/raw"),
    "cifar10": ("cifar-10-batches-py", "cifar10", "cifar10/cifar-10-batches-py"),
    "cifar100": ("cifar-100-python", "cifar100", "cifar100/cifar-100-python"),
    "cinic10": ("cinic10", "cinic-10", "CINIC-10", "CINIC10"),
}

_WHAT_TO_PROVIDE: dict[str, str] = {
    "fmnist": "the four Fashion-MNIST IDX files (" + ", ".join(s + ".gz" for s in _MNIST_STEMS) + ", gzip'd or not)",
    "mnist": "the four MNIST IDX files (" + ", ".join(s + ".gz" for s in _MNIST_STEMS) + ", gzip'd or not)",
    "emnist": "EMNIST's gzip.zip or the byclass IDX files from it (" + ", ".join(s + ".gz" for s in _EMNIST_STEMS) + ")",
    "cifar10": f"{_CIFAR10_TAR} or its extracted cifar-10-batches-py folder",
    "cifar100": f"{_CIFAR100_TAR} or its extracted cifar-100-python folder",
    "cinic10": "the extracted CINIC-10 folders train/ and test/ (and valid/), one subfolder of PNGs per class",
}


# --------------------------------------------------------------------------- search


def cache_dir() -> Path:
    """The per-user cache folder: ``$XDG_CACHE_HOME/pflcore`` or ``~/.cache/pflcore``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pflcore"


def _search_bases(name: str, root: str | os.PathLike[str] | None) -> list[tuple[str, Path]]:
    """(label, folder) pairs to search, in priority order."""
    bases: list[tuple[str, Path]] = []
    if root is not None:
        bases.append(("root=", Path(root).expanduser()))
    for part in os.environ.get("PFL_DATA", "").split(os.pathsep):
        if part.strip():
            bases.append(("PFL_DATA=", Path(part.strip()).expanduser()))
    bases.append(("the cache ", cache_dir()))
    for system in SYSTEM_DIRS.get(name, ()):
        bases.append(("", Path(system)))
    unique: dict[Path, tuple[str, Path]] = {}
    for label, path in bases:  # the same folder given twice is searched (and named) once
        unique.setdefault(path.absolute(), (label, path))
    return list(unique.values())


@dataclass(frozen=True)
class _Found:
    """A located copy of a dataset: how to parse it, its files, and a freshness stamp."""

    name: str
    kind: str  # "idx", "emnist_zip", "cifar_dir", "cifar_tar", "cinic"
    paths: tuple[str, ...]
    stamp: tuple[tuple[int, int], ...]


def _stamp(paths: Sequence[Path]) -> tuple[tuple[int, int], ...]:
    out = []
    for p in paths:
        st = p.stat()
        out.append((st.st_mtime_ns, st.st_size))
    return tuple(out)


def _probe_idx(name: str, d: Path) -> _Found | None:
    stems = _EMNIST_STEMS if name == "emnist" else _MNIST_STEMS
    files: list[Path] = []
    for stem in stems:
        for candidate in (d / stem, d / (stem + ".gz")):
            if candidate.is_file():
                files.append(candidate)
                break
        else:
            break
    if len(files) == len(stems):
        return _Found(name, "idx", tuple(str(f) for f in files), _stamp(files))
    if name == "emnist":
        for zname in _EMNIST_ZIPS:
            z = d / zname
            if z.is_file():
                return _Found(name, "emnist_zip", (str(z),), _stamp([z]))
    return None


def _probe_cifar(name: str, d: Path) -> _Found | None:
    members, tar_name = (_CIFAR10_BATCHES, _CIFAR10_TAR) if name == "cifar10" else (_CIFAR100_FILES, _CIFAR100_TAR)
    files = [d / m for m in members]
    if all(f.is_file() for f in files):
        return _Found(name, "cifar_dir", tuple(str(f) for f in files), _stamp(files))
    tar = d / tar_name
    if tar.is_file():
        return _Found(name, "cifar_tar", (str(tar),), _stamp([tar]))
    return None


def _probe_cinic(name: str, d: Path) -> _Found | None:
    splits = ["train", "valid", "test"] if CINIC_TRAIN_INCLUDES_VALID else ["train", "test"]
    dirs = [d / s for s in splits]
    if not all(x.is_dir() for x in dirs):
        return None
    # Stamp the class folders too: adding or removing a PNG changes their mtime.
    watched = dirs + [x / c for x in dirs for c in _CIFAR10_CLASSES if (x / c).is_dir()]
    return _Found(name, "cinic", tuple(str(x) for x in dirs), _stamp(watched))


_PROBES: dict[str, Callable[[str, Path], _Found | None]] = {
    "fmnist": _probe_idx,
    "mnist": _probe_idx,
    "emnist": _probe_idx,
    "cifar10": _probe_cifar,
    "cifar100": _probe_cifar,
    "cinic10": _probe_cinic,
}


def _is_under(path: Path, folder: Path) -> bool:
    return path.absolute().is_relative_to(folder.absolute())


def _locate(name: str, bases: Sequence[tuple[str, Path]]) -> _Found | None:
    probe = _PROBES[name]
    for _, base in bases:
        for d in (base, *(base / sub for sub in _SUBDIRS[name])):
            if d.is_dir():
                found = probe(name, d)
                if found is not None:
                    return found
    return None


def _one_line(exc: BaseException) -> str:
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


def _not_found(name: str, bases: Sequence[tuple[str, Path]], why: str) -> DatasetNotFoundError:
    places = [f"{label}{path}" for label, path in bases]
    where = places[0] if len(places) == 1 else ", ".join(places[:-1]) + " and " + places[-1]
    subs = ", ".join(s + "/" for s in _SUBDIRS[name])
    return DatasetNotFoundError(
        f"Dataset {name!r} was not found in {where} (each searched directly and in the subfolders {subs})"
        f" and {why}; put {_WHAT_TO_PROVIDE[name]} in one of those folders, set PFL_DATA to a folder "
        "holding them, or pass root= to load_dataset."
    )


# --------------------------------------------------------------------------- download


def _fetch(url: str, known_hash: str, dest: Path) -> Path:
    """Download ``url`` to ``dest`` with pooch, verifying ``known_hash`` (``"md5:..."``)."""
    import pooch  # imported lazily: only needed to download

    return Path(pooch.retrieve(url, known_hash=known_hash, fname=dest.name, path=dest.parent, progressbar=False))


def _download(name: str) -> tuple[Path | None, str, Exception | None]:
    """Fetch the pinned official files into ``cache_dir()/name``.

    Returns (folder, "", None) on success, or (None, reason clause, last error).
    """
    spec = _DOWNLOADS.get(name)
    if spec is None:
        return None, "it has no pinned download, so its files must be provided by hand", None
    target = cache_dir() / name
    for fname, md5 in spec.files:
        errors: list[str] = []
        last: Exception | None = None
        for mirror in spec.mirrors:
            try:
                _fetch(mirror + fname, f"md5:{md5}", target / fname)
                break
            except Exception as exc:  # offline, HTTP error, checksum mismatch, pooch missing
                errors.append(f"{mirror + fname} ({_one_line(exc)})")
                last = exc
        else:
            return None, "downloading it failed: " + ", ".join(errors), last
    return target, "", None


# --------------------------------------------------------------------------- parsing helpers


def _decompress(data: bytes, source: str) -> bytes:
    """gunzip ``data`` if ``source`` ends in .gz; gzip damage becomes DatasetCorruptError."""
    if not source.endswith(".gz"):
        return data
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as exc:
        raise DatasetCorruptError(f"{source}: damaged gzip data ({_one_line(exc)})") from None


def _parse_idx(data: bytes, source: str, ndim: int) -> np.ndarray:
    """Parse an unsigned-byte IDX payload with ``ndim`` dimensions (read-only view)."""
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DatasetCorruptError(f"{source}: only {len(data)} bytes, shorter than an IDX header")
    magic = int.from_bytes(data[:4], "big")
    want = 0x0800 | ndim
    if magic != want:
        raise DatasetCorruptError(f"{source}: IDX magic is 0x{magic:08x}, expected 0x{want:08x}")
    dims = tuple(int(v) for v in np.frombuffer(data, dtype=">u4", count=ndim, offset=4))
    payload = int(np.prod(dims, dtype=np.int64))
    if len(data) - header != payload:
        raise DatasetCorruptError(
            f"{source}: header dims {dims} need {payload} data bytes but the file has {len(data) - header}"
        )
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(dims)


def _check_canonical(name: str, stem: str, data: bytes, source: str) -> None:
    """For (Fashion-)MNIST files of the canonical Fashion-MNIST length, check the md5."""
    if stem not in _FMNIST_CANONICAL or name not in ("fmnist", "mnist"):
        return
    length, md5 = _FMNIST_CANONICAL[stem]
    if len(data) != length:
        return
    digest = hashlib.md5(data).hexdigest()
    if name == "fmnist" and digest != md5:
        raise DatasetCorruptError(
            f"{source}: md5 of the uncompressed data is {digest}, not Fashion-MNIST's {md5} "
            "(the file is damaged or is not Fashion-MNIST)"
        )
    if name == "mnist" and digest == md5:
        raise DatasetCorruptError(f"{source}: this file holds Fashion-MNIST, not MNIST")


def _images_labels(
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


def _mean_std(x: np.ndarray) -> tuple[tuple[float, ...], tuple[float, ...]]:
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


def _make(
    name: str,
    train: tuple[np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray],
    num_classes: int,
    classes: tuple[str, ...] | None,
) -> Dataset:
    mean, std = _mean_std(train[0])
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


# --------------------------------------------------------------------------- IDX datasets

_IDX_META: dict[str, tuple[int, tuple[str, ...]]] = {
    "fmnist": (10, _FMNIST_CLASSES),
    "mnist": (10, _DIGIT_CLASSES),
    "emnist": (62, _EMNIST_CLASSES),
}


def _idx_split(
    name: str, img: tuple[bytes, str, str], lab: tuple[bytes, str, str]
) -> tuple[np.ndarray, np.ndarray]:
    """Parse one (images, labels) pair given as (raw bytes, source label, stem)."""
    num_classes = _IDX_META[name][0]
    img_data = _decompress(img[0], img[1])
    lab_data = _decompress(lab[0], lab[1])
    _check_canonical(name, img[2], img_data, img[1])
    _check_canonical(name, lab[2], lab_data, lab[1])
    images = _parse_idx(img_data, img[1], 3)
    labels = _parse_idx(lab_data, lab[1], 1)
    if images.shape[1:] != (28, 28):
        raise DatasetCorruptError(f"{img[1]}: images are {images.shape[1]}x{images.shape[2]}, expected 28x28")
    _images_labels(images, labels, num_classes, img[1], lab[1])
    if name == "emnist":  # EMNIST stores each image transposed; make it upright
        images = np.ascontiguousarray(images.transpose(0, 2, 1))
    else:
        images = images.copy()  # writable, no longer tied to the decompressed bytes
    return images[:, None], labels.astype(np.int64)


def _load_idx(found: _Found) -> Dataset:
    stems = _EMNIST_STEMS if found.name == "emnist" else _MNIST_STEMS
    raw: list[tuple[bytes, str, str]] = []
    if found.kind == "idx":
        for path, stem in zip(found.paths, stems):
            raw.append((Path(path).read_bytes(), path, stem))
    else:  # EMNIST straight from the official zip (members gzip/<stem>.gz)
        zpath = found.paths[0]
        try:
            with zipfile.ZipFile(zpath) as zf:
                by_base = {m.rsplit("/", 1)[-1]: m for m in zf.namelist()}
                for stem in stems:
                    member = by_base.get(stem + ".gz") or by_base.get(stem)
                    if member is None:
                        raise DatasetCorruptError(f"{zpath}: the archive has no {stem}.gz")
                    raw.append((zf.read(member), f"{zpath}:{member}", stem))
        except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
            raise DatasetCorruptError(f"{zpath}: damaged zip archive ({_one_line(exc)})") from None
    num_classes, classes = _IDX_META[found.name]
    train = _idx_split(found.name, raw[0], raw[1])
    test = _idx_split(found.name, raw[2], raw[3])
    return _make(found.name, train, test, num_classes, classes)


# --------------------------------------------------------------------------- CIFAR


def _numpy_global(module: str, attr: str) -> Any:
    """Resolve numpy's pickle helpers under both the numpy 1 and numpy 2 module names."""
    for mod in (module.replace("numpy.core", "numpy._core"), module.replace("numpy._core", "numpy.core")):
        try:
            return getattr(importlib.import_module(mod), attr)
        except (ImportError, AttributeError):
            continue
    raise pickle.UnpicklingError(f"cannot resolve {module}.{attr}")


class _CifarUnpickler(pickle.Unpickler):
    """Unpickler that only admits what a CIFAR batch needs (dicts, lists, numpy arrays).

    Pickle is still a code-execution format in general; this allow-list narrows what a
    file can reference, but only load CIFAR files from a source you trust.
    """

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.numeric", "_frombuffer"),
        ("numpy._core.numeric", "_frombuffer"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),  # how Python 3 writes bytes at pickle protocol 2
    }

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"refers to {module}.{name}, which a CIFAR batch never needs")
        if module == "numpy":
            return getattr(np, name)
        if module == "_codecs":
            return super().find_class(module, name)
        return _numpy_global(module, name)


def _cifar_batch(data: bytes, source: str, label_key: bytes, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Parse one CIFAR pickle (dict with b"data" (N, 3072) uint8 and a label list)."""
    try:
        obj = _CifarUnpickler(io.BytesIO(data), encoding="bytes").load()
    except Exception as exc:  # any unpickling failure means a damaged or foreign file
        raise DatasetCorruptError(f"{source}: not a readable CIFAR pickle ({_one_line(exc)})") from None
    if not isinstance(obj, dict):
        raise DatasetCorruptError(f"{source}: pickle holds {type(obj).__name__}, expected a dict")
    for key in (b"data", label_key):
        if key not in obj:
            raise DatasetCorruptError(f"{source}: pickle has no {key!r} entry")
    x = obj[b"data"]
    if not isinstance(x, np.ndarray) or x.dtype != np.uint8 or x.ndim != 2 or x.shape[1] != 3072:
        shape = getattr(x, "shape", None)
        raise DatasetCorruptError(f"{source}: b'data' must be uint8 of shape (N, 3072), got {shape}")
    y = np.asarray(obj[label_key])
    if y.ndim != 1 or (y.size and y.dtype.kind not in "iu"):
        raise DatasetCorruptError(f"{source}: {label_key!r} must be a list of integers")
    y = y.astype(np.int64)
    _images_labels(x, y, num_classes, source, source)
    return x.reshape(-1, 3, 32, 32), y


def _read_cifar_tar(path: str, wanted: Sequence[str]) -> list[tuple[bytes, str]]:
    """Read the named members of a CIFAR .tar.gz in memory (nothing is extracted to disk).

    The whole gzip stream is decompressed first so that its CRC and length are checked:
    a truncated archive is rejected even where the cut only hits the tar padding.
    """
    raw = _decompress(Path(path).read_bytes(), path)
    got: dict[str, tuple[bytes, str]] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tar:
            for member in tar.getmembers():
                base = member.name.rsplit("/", 1)[-1]
                if member.isfile() and base in wanted and base not in got:
                    extracted = tar.extractfile(member)
                    assert extracted is not None
                    got[base] = (extracted.read(), f"{path}:{member.name}")
    except (tarfile.TarError, EOFError) as exc:
        raise DatasetCorruptError(f"{path}: damaged tar archive ({_one_line(exc)})") from None
    missing = [w for w in wanted if w not in got]
    if missing:
        raise DatasetCorruptError(f"{path}: the archive has no {', '.join(missing)}")
    return [got[w] for w in wanted]


def _load_cifar(found: _Found) -> Dataset:
    if found.name == "cifar10":
        members, label_key, num_classes, classes = _CIFAR10_BATCHES, b"labels", 10, _CIFAR10_CLASSES
    else:
        members, label_key, num_classes, classes = _CIFAR100_FILES, b"fine_labels", 100, _CIFAR100_CLASSES
    if found.kind == "cifar_dir":
        raw = [(Path(p).read_bytes(), p) for p in found.paths]
    else:
        raw = _read_cifar_tar(found.paths[0], members)
    batches = [_cifar_batch(data, src, label_key, num_classes) for data, src in raw]
    train, test = batches[:-1], batches[-1]
    train_x = np.concatenate([b[0] for b in train])
    train_y = np.concatenate([b[1] for b in train])
    test_x = np.concatenate([test[0]])  # a fresh, writable array
    return _make(found.name, (train_x, train_y), (test_x, test[1]), num_classes, classes)


# --------------------------------------------------------------------------- CINIC-10


def _read_png(path: str) -> np.ndarray:
    """Decode one 32x32 PNG to (32, 32, 3) uint8; greyscale/palette images become RGB."""
    from PIL import Image

    try:
        with Image.open(path) as im:
            size = im.size
            arr = np.asarray(im.convert("RGB")) if size == (32, 32) else None
    except (OSError, SyntaxError, ValueError) as exc:  # includes truncated and unidentified images
        raise DatasetCorruptError(f"{path}: cannot decode image ({_one_line(exc)})") from None
    if arr is None:
        raise DatasetCorruptError(f"{path}: image is {size[0]}x{size[1]}, expected 32x32")
    return arr


def _cinic_split(dirs: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Read every class folder of the given split folders, sorted by class then file name."""
    paths: list[str] = []
    labels: list[int] = []
    for d in dirs:
        for label, cls in enumerate(_CIFAR10_CLASSES):
            cdir = Path(d) / cls
            if not cdir.is_dir():
                raise DatasetCorruptError(f"{d}: missing class folder {cls}/")
            names = sorted(e.name for e in os.scandir(cdir) if e.is_file() and e.name.lower().endswith(".png"))
            paths.extend(str(cdir / n) for n in names)
            labels.extend([label] * len(names))
    out = np.empty((len(paths), 32, 32, 3), dtype=np.uint8)
    if len(paths) > 256:  # PIL releases the GIL while decoding
        with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
            for i, arr in enumerate(pool.map(_read_png, paths)):
                out[i] = arr
    else:
        for i, p in enumerate(paths):
            out[i] = _read_png(p)
    return np.ascontiguousarray(out.transpose(0, 3, 1, 2)), np.asarray(labels, dtype=np.int64)


def _load_cinic(found: _Found) -> Dataset:
    try:
        import PIL  # noqa: F401
    except ImportError:
        raise ImportError("Loading CINIC-10 needs Pillow (pip install pillow)") from None
    train = _cinic_split(found.paths[:-1])
    test = _cinic_split(found.paths[-1:])
    return _make(found.name, train, test, 10, _CIFAR10_CLASSES)


# --------------------------------------------------------------------------- digits


@functools.lru_cache(maxsize=2)
def _load_digits(seed: int, test_fraction: float) -> Dataset:
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
    return _make("digits", train, test, 10, _DIGIT_CLASSES)


# --------------------------------------------------------------------------- entry point

_LOADERS: dict[str, Callable[[_Found], Dataset]] = {
    "idx": _load_idx,
    "emnist_zip": _load_idx,
    "cifar_dir": _load_cifar,
    "cifar_tar": _load_cifar,
    "cinic": _load_cinic,
}


@functools.lru_cache(maxsize=4)
def _load_found(found: _Found) -> Dataset:
    """Parse a located dataset; cached on its paths, sizes and mtimes."""
    return _LOADERS[found.kind](found)


def clear_cache() -> None:
    """Forget every dataset kept in memory by :func:`load_dataset`."""
    _load_found.cache_clear()
    _load_digits.cache_clear()


def load_dataset(name: str, root: str | os.PathLike[str] | None = None, download: bool = True) -> Dataset:
    """Load a dataset by name (see :data:`DATASETS`; aliases accepted) into memory.

    Files are searched in ``root``, ``$PFL_DATA``, :func:`cache_dir` and
    :data:`SYSTEM_DIRS`, in that order; if none holds them and ``download`` is true, the
    official files are fetched (pinned MD5) into the cache. Raises
    :class:`DatasetNotFoundError` when no copy can be had and
    :class:`DatasetCorruptError` when a file is damaged.

    Datasets: ``fmnist``, ``mnist`` (1x28x28, 10 classes), ``emnist`` (byclass split,
    1x28x28 made upright, 62 classes: digits, A-Z, a-z), ``cifar10``, ``cifar100``
    (fine labels), ``cinic10`` (3x32x32; train is ``train/``, plus ``valid/`` when
    :data:`CINIC_TRAIN_INCLUDES_VALID`), ``digits`` (scikit-learn's 1x8x8 digits scaled
    to 0..255, a fixed stratified 75/25 split with seed :data:`DIGITS_SPLIT_SEED`).
    ``mean``/``std`` are exact per-channel statistics of the training pixels in [0, 1].

    CIFAR files are Python pickles: they are read with an allow-list unpickler, but
    loading them still means trusting the folder they come from.

    The returned tensors are cached and shared between calls: do not modify them.
    """
    name = canonical_name(name)
    if name == "digits":
        return _load_digits(DIGITS_SPLIT_SEED, DIGITS_TEST_FRACTION)
    if root is not None and not Path(root).expanduser().is_dir():
        raise DatasetNotFoundError(f"data root {str(root)!r} is not an existing folder; give the folder that holds "
                                   f"the {name} files, or no root to search the usual places.")
    bases = _search_bases(name, root)
    found = _locate(name, bases)
    if root is not None and (found is None or not _is_under(Path(found.paths[0]), Path(root).expanduser())):
        elsewhere = f"the copy in {Path(found.paths[0]).parent}" if found else "the next places in the search"
        warnings.warn(f"data root {str(root)!r} holds no {name} files; the search moved on to {elsewhere}.",
                      stacklevel=2)
    if found is None:
        if not download:
            raise _not_found(name, bases, "download=False")
        target, why, error = _download(name)
        if target is None:
            raise _not_found(name, bases, why) from error
        found = _locate(name, [("", target)])
        if found is None:
            raise _not_found(name, bases, f"the download into {target} did not produce the expected files")
    return _load_found(found)
