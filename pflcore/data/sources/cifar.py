"""CIFAR-10 and CIFAR-100 (3x32x32; 10 classes, and 100 fine labels): the official python
pickles, as the extracted folder or the ``.tar.gz`` read in memory.

Pickle is a code-execution format: the batches are read with an allow-list unpickler,
but loading them still means trusting the folder they come from.
"""

from __future__ import annotations

import importlib
import io
import pickle
import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .common import (
    Dataset,
    DatasetCorruptError,
    DatasetSource,
    Download,
    Found,
    check_labels,
    decompress,
    make_dataset,
    one_line,
    stamp,
)

CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
CIFAR100_CLASSES = tuple(
    "apple aquarium_fish baby bear beaver bed bee beetle bicycle bottle bowl boy bridge bus butterfly "
    "camel can castle caterpillar cattle chair chimpanzee clock cloud cockroach couch crab crocodile cup "
    "dinosaur dolphin elephant flatfish forest fox girl hamster house kangaroo keyboard lamp lawn_mower "
    "leopard lion lizard lobster man maple_tree motorcycle mountain mouse mushroom oak_tree orange orchid "
    "otter palm_tree pear pickup_truck pine_tree plain plate poppy porcupine possum rabbit raccoon ray road "
    "rocket rose sea seal shark shrew skunk skyscraper snail snake spider squirrel streetcar sunflower "
    "sweet_pepper table tank telephone television tiger tractor train trout tulip turtle wardrobe whale "
    "willow_tree wolf woman worm".split()
)
assert len(CIFAR100_CLASSES) == 100

CIFAR10_BATCHES = ("data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5", "test_batch")
CIFAR10_TAR = "cifar-10-python.tar.gz"
CIFAR100_FILES = ("train", "test")
CIFAR100_TAR = "cifar-100-python.tar.gz"


def _probe(name: str, d: Path) -> Found | None:
    members, tar_name = (CIFAR10_BATCHES, CIFAR10_TAR) if name == "cifar10" else (CIFAR100_FILES, CIFAR100_TAR)
    files = [d / m for m in members]
    if all(f.is_file() for f in files):
        return Found(name, "cifar_dir", tuple(str(f) for f in files), stamp(files))
    tar = d / tar_name
    if tar.is_file():
        return Found(name, "cifar_tar", (str(tar),), stamp([tar]))
    return None


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
        raise DatasetCorruptError(f"{source}: not a readable CIFAR pickle ({one_line(exc)})") from None
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
    check_labels(x, y, num_classes, source, source)
    return x.reshape(-1, 3, 32, 32), y


def _read_cifar_tar(path: str, wanted: Sequence[str]) -> list[tuple[bytes, str]]:
    """Read the named members of a CIFAR .tar.gz in memory (nothing is extracted to disk).

    The whole gzip stream is decompressed first so that its CRC and length are checked:
    a truncated archive is rejected even where the cut only hits the tar padding.
    """
    raw = decompress(Path(path).read_bytes(), path)
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
        raise DatasetCorruptError(f"{path}: damaged tar archive ({one_line(exc)})") from None
    missing = [w for w in wanted if w not in got]
    if missing:
        raise DatasetCorruptError(f"{path}: the archive has no {', '.join(missing)}")
    return [got[w] for w in wanted]


def _load(found: Found) -> Dataset:
    if found.name == "cifar10":
        members, label_key, num_classes, classes = CIFAR10_BATCHES, b"labels", 10, CIFAR10_CLASSES
    else:
        members, label_key, num_classes, classes = CIFAR100_FILES, b"fine_labels", 100, CIFAR100_CLASSES
    if found.kind == "cifar_dir":
        raw = [(Path(p).read_bytes(), p) for p in found.paths]
    else:
        raw = _read_cifar_tar(found.paths[0], members)
    batches = [_cifar_batch(data, src, label_key, num_classes) for data, src in raw]
    train, test = batches[:-1], batches[-1]
    train_x = np.concatenate([b[0] for b in train])
    train_y = np.concatenate([b[1] for b in train])
    test_x = np.concatenate([test[0]])  # a fresh, writable array
    return make_dataset(found.name, (train_x, train_y), (test_x, test[1]), num_classes, classes)


CIFAR10 = DatasetSource(
    "cifar10", shape=(3, 32, 10), probe=_probe, load=_load,
    subdirs=("cifar-10-batches-py", "cifar10", "cifar10/cifar-10-batches-py"),
    provide=f"{CIFAR10_TAR} or its extracted cifar-10-batches-py folder",
    download=Download(files=((CIFAR10_TAR, "c58f30108f718f92721af3b95e74349a"),),
                      mirrors=("https://www.cs.toronto.edu/~kriz/",)),
)

CIFAR100 = DatasetSource(
    "cifar100", shape=(3, 32, 100), probe=_probe, load=_load,
    subdirs=("cifar-100-python", "cifar100", "cifar100/cifar-100-python"),
    provide=f"{CIFAR100_TAR} or its extracted cifar-100-python folder",
    download=Download(files=((CIFAR100_TAR, "eb9058c3a382ffc7106e4002c42a8d85"),),
                      mirrors=("https://www.cs.toronto.edu/~kriz/",)),
)
