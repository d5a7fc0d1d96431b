"""Dataset registry: locate, fetch and parse datasets into tensors.

``load_dataset(name)`` returns a :class:`Dataset` holding the whole train and test
splits in memory: images ``uint8 (N, C, H, W)``, or for a text dataset (``agnews``, FedCP
section 6.1) token ids ``int64 (N, L)``; labels ``int64 (N,)``.

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

Each dataset family is one module of this package, declaring a :class:`DatasetSource`
(probe, parser, pinned download, shape): ``idx`` (Fashion-MNIST, MNIST), ``emnist``
(IDX files or the official ``gzip.zip``), ``cifar`` (the python pickles, folder or
``.tar.gz``), ``cinic`` (the CINIC-10 PNG folders), ``digits`` (scikit-learn's),
``tinyimagenet``, ``agnews`` (AG News's CSVs, tokenised), ``pfllib`` (a dataset already
split into clients, in PFLlib's format, images or token ids) and ``digit5`` (SVHN, USPS,
SynthDigits and MNIST-M, the Mixed Digits members besides MNIST: their published files or
FedBN's DIGIT-5 folders), and ``multidomain`` (``digit5``: those four and MNIST as one
dataset with each sample's domain, pFedFDA appendix D.1).
:data:`_SOURCES` below lists them. A damaged or truncated file raises
:class:`DatasetCorruptError` naming it; nothing is ever half-loaded.

Loaded datasets are kept in a small in-process cache keyed on the files' paths,
sizes and modification times, so repeated loads return the *same* tensors: treat
them as read-only (clone before modifying).
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Sequence
from pathlib import Path

from . import agnews, cifar, cinic, digit5, digits, emnist, idx, multidomain, pfllib, tinyimagenet
from .common import (
    Dataset,
    DatasetCorruptError,
    DatasetNotFoundError,
    DatasetSource,
    Download,
    Found,
    TextShape,
    one_line,
)

__all__ = [
    "DATASETS",
    "CINIC_TRAIN_INCLUDES_VALID",
    "DIGITS_SPLIT_SEED",
    "DIGITS_TEST_FRACTION",
    "SHAPES",
    "SYSTEM_DIRS",
    "Dataset",
    "DatasetCorruptError",
    "DatasetNotFoundError",
    "TextShape",
    "cache_dir",
    "canonical_name",
    "clear_cache",
    "dataset_shape",
    "load_dataset",
]

#: Every dataset, in this order: the one place that lists them.
_SOURCES: dict[str, DatasetSource] = {
    s.name: s
    for s in (idx.FMNIST, idx.MNIST, emnist.EMNIST, cifar.CIFAR10, cifar.CIFAR100, cinic.CINIC10, digits.DIGITS,
              tinyimagenet.TINYIMAGENET, agnews.AGNEWS,
              pfllib.PFLLIB, digit5.SVHN, digit5.USPS, digit5.SYNTHDIGITS, digit5.MNISTM, multidomain.DIGIT5)
}

DATASETS: tuple[str, ...] = tuple(_SOURCES)

#: Image shape (channels, height = width, number of classes) of each image dataset, a
#: :class:`TextShape` (sequence length, vocabulary size, classes) of a text one, known
#: before loading it: the config is checked against them before any work. None where the
#: shape is the files' own (``pfllib``): :func:`dataset_shape` reads it from the folder.
SHAPES: dict[str, tuple[int, int, int] | TextShape | None] = {name: s.shape for name, s in _SOURCES.items()}

# ----------------------------------------------------------------------------- settings
# Read at call time (the dataset modules read theirs through this package), so
# assigning one here, e.g. ``sources.CINIC_TRAIN_INCLUDES_VALID = True``, takes effect.

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

#: Pinned official downloads. CINIC-10 has none on purpose (no checksum we can vouch
#: for): its files must be provided by hand. digits ships with scikit-learn.
_DOWNLOADS: dict[str, Download] = {name: s.download for name, s in _SOURCES.items() if s.download is not None}
_Download = Download  # its name before the dataset modules existed

#: Uncompressed Fashion-MNIST payloads (length, md5) that the IDX parser checks (it reads
#: the table here at call time).
_FMNIST_CANONICAL: dict[str, tuple[int, str]] = idx.FMNIST_PAYLOADS


# -------------------------------------------------------------------------------- names

_ALIASES: dict[str, str] = {alias: name for name, s in _SOURCES.items() for alias in (name, *s.aliases)}


def canonical_name(name: str) -> str:
    """Map a dataset name or alias (case, '-', '_' and spaces ignored) to its canonical name."""
    key = "".join(ch for ch in str(name).lower() if ch not in "-_ ")
    if key not in _ALIASES:
        raise ValueError(
            f"Unknown dataset {name!r}; choose one of {', '.join(DATASETS)} "
            "(aliases such as 'fashion-mnist' or 'cifar-10' are accepted)."
        )
    return _ALIASES[key]


# ------------------------------------------------------------------------------- search


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


def _is_under(path: Path, folder: Path) -> bool:
    return path.absolute().is_relative_to(folder.absolute())


def _locate(name: str, bases: Sequence[tuple[str, Path]]) -> Found | None:
    source = _SOURCES[name]
    assert source.probe is not None
    for _, base in bases:
        for d in (base, *(base / sub for sub in source.subdirs)):
            if d.is_dir():
                found = source.probe(name, d)
                if found is not None:
                    return found
    return None


def _not_found(name: str, bases: Sequence[tuple[str, Path]], why: str) -> DatasetNotFoundError:
    places = [f"{label}{path}" for label, path in bases]
    where = places[0] if len(places) == 1 else ", ".join(places[:-1]) + " and " + places[-1]
    source = _SOURCES[name]
    subs = ", ".join(s + "/" for s in source.subdirs)
    return DatasetNotFoundError(
        f"Dataset {name!r} was not found in {where} (each searched directly and in the subfolders {subs})"
        f" and {why}; put {source.provide} in one of those folders, set PFL_DATA to a folder "
        "holding them, or pass root= to load_dataset."
    )


# ----------------------------------------------------------------------------- download


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
                errors.append(f"{mirror + fname} ({one_line(exc)})")
                last = exc
        else:
            return None, "downloading it failed: " + ", ".join(errors), last
    return target, "", None


# -------------------------------------------------------------------------- entry point


@functools.lru_cache(maxsize=4)
def _load_found(found: Found) -> Dataset:
    """Parse a located dataset; cached on its paths, sizes and mtimes."""
    load = _SOURCES[found.name].load
    assert load is not None
    return load(found)


def clear_cache() -> None:
    """Forget every dataset kept in memory by :func:`load_dataset`."""
    _load_found.cache_clear()
    for source in _SOURCES.values():
        if source.clear is not None:
            source.clear()


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
    to 0..255, a fixed stratified 75/25 split with seed :data:`DIGITS_SPLIT_SEED`),
    ``agnews`` (AG News's ``train.csv``/``test.csv`` as ``int64 (N, 200)`` token ids, the
    vocabulary from the training split, 4 classes; FedCP section 6.1), ``svhn`` (3x32x32),
    ``usps`` (1x16x16), ``synthdigits`` (3x32x32) and ``mnistm`` (3x28x28 or 3x32x32, the
    files' own), the Mixed Digits members of FedFA section 5 (see
    :mod:`pflcore.data.sources.digit5`), and ``digit5`` (those four and MNIST, each member
    loaded as above and conformed to 3x32x32, with each sample's domain in ``domains``:
    pFedFDA appendix D.1, see :mod:`pflcore.data.sources.multidomain`).
    ``mean``/``std`` are exact per-channel statistics of the training pixels in [0, 1]
    (empty for token ids, which are not normalised).

    CIFAR files are Python pickles: they are read with an allow-list unpickler, but
    loading them still means trusting the folder they come from.

    The returned tensors are cached and shared between calls: do not modify them.
    """
    name = canonical_name(name)
    if name in multidomain.MEMBERS:  # several datasets as one: each member is loaded as above
        return multidomain.load(name, root, download)
    builtin = _SOURCES[name].builtin
    if builtin is not None:  # shipped with a library: nothing to locate
        return builtin()
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


def dataset_shape(name: str, root: str | os.PathLike[str] | None = None) -> tuple[int, int, int] | TextShape:
    """(channels, image size, number of classes) of an image dataset, or the
    :class:`TextShape` of a text one, before loading it.

    Most datasets declare it (:data:`SHAPES`); one whose shape is its files' own
    (``pfllib``) is located as :func:`load_dataset` would (only in ``root`` when one is
    given) and its shape read cheaply. Raises :class:`DatasetNotFoundError` when no copy is
    found and :class:`DatasetCorruptError` when the files cannot be read.
    """
    name = canonical_name(name)
    source = _SOURCES[name]
    if source.shape is not None:
        return source.shape
    assert source.shape_of is not None
    bases = [("root=", Path(root).expanduser())] if root is not None else _search_bases(name, None)
    found = _locate(name, bases)
    if found is None:
        where = f"data root {str(root)!r}" if root is not None else "PFL_DATA or the cache"
        raise DatasetNotFoundError(f"nothing in {where} is {source.provide}; set data_root (or PFL_DATA) "
                                   "to that folder.")
    return source.shape_of(found)
