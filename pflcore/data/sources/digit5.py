"""The Mixed Digits (DIGIT-5) members besides MNIST: SVHN, USPS, SynthDigits and MNIST-M
(FedFA, Zhou et al., ICLR 2023, section 5 and appendix E: feature skew "Mixed Digits",
the five digit datasets as FedBN (Li et al., ICLR 2021) prepared them). 10 classes, the
digits 0-9; images ``uint8 (N, C, H, W)`` at their native sizes.

Each dataset is read from its common published format, or from FedBN's DIGIT-5 folder:

* ``svhn`` (3x32x32): the official cropped-digits files ``train_32x32.mat`` and
  ``test_32x32.mat`` (MATLAB v5: ``X`` uint8 (32, 32, 3, N), ``y`` (N, 1) with 1..10,
  where 10 is the digit 0); pinned download. The ``extra`` split is not used.
* ``usps`` (1x16x16): the LIBSVM files ``usps.bz2`` (7,291) and ``usps.t.bz2`` (2,007),
  labels 1..10 meaning the digits 0..9, 256 pixel values in [-1, 1] made
  ``uint8(floor((v + 1) / 2 * 255))`` as torchvision and FedBN do; pinned download. The
  ``usps.h5`` variant is not read (it needs h5py, which pflcore does not depend on).
* ``synthdigits`` (3x32x32): Ganin & Lempitsky's Synthetic Digits, ``synth_train_32x32.mat``
  and ``synth_test_32x32.mat`` (SVHN's layout, labels 0..9); no pinned download.
* ``mnistm`` (3xSxS, S = 28 or 32, the files' own): the extracted ``mnist_m`` folder of
  Ganin & Lempitsky's release, ``mnist_m_train/`` and ``mnist_m_test/`` PNGs listed with
  their labels in ``mnist_m_train_labels.txt`` / ``mnist_m_test_labels.txt``
  (``<file> <label>`` per line); no pinned download.
* FedBN's DIGIT-5 folders (``digit_dataset.zip``: ``SVHN/``, ``USPS/``, ``SynthDigits/``,
  ``MNIST_M/``), each ``test.pkl`` and ``partitions/train_part{0..9}.pkl``, pickled
  ``(images, labels)`` pairs (images (N, H, W) or (N, H, W, 3) uint8): the training split
  is all the parts in order (FedFA's "7430 samples for one digit dataset", FedBN's
  ``percent=1``), or ``train.pkl`` where there are no parts. FedBN made these from the
  union of each dataset's splits (a stratified 80/20 split), so they are not the official
  splits. Pickle is a code-execution format: they are read with an allow-list unpickler
  that admits numpy arrays only, but still load them only from a source you trust. Only a
  folder with FedBN's name for the dataset is taken for it (the formats cannot tell SVHN
  from SynthDigits).

Mixing them into one federation needs a common shape: :func:`conform` resizes and
converts the channels of a loaded dataset (FedBN resizes to 28x28 and makes grey images
RGB).
"""

from __future__ import annotations

import bz2
import importlib.util
import io
import os
import pickle
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .cifar import _CifarUnpickler
from .common import (
    Dataset,
    DatasetCorruptError,
    DatasetSource,
    Download,
    Found,
    check_labels,
    make_dataset,
    mean_std,
    one_line,
    stamp,
)
from .idx import DIGIT_CLASSES

NUM_CLASSES = 10

#: FedBN's folder name of each dataset (compared ignoring case, '-' and '_').
FEDBN_FOLDERS = {"svhn": "SVHN", "usps": "USPS", "synthdigits": "SynthDigits", "mnistm": "MNIST_M"}
#: The image shape (H, W) or (H, W, 3) of each dataset in FedBN's pickles.
FEDBN_SHAPES = {"svhn": (32, 32, 3), "usps": (16, 16), "synthdigits": (32, 32, 3), "mnistm": (28, 28, 3)}
FEDBN_WHERE = "FedBN's digit_dataset.zip (huggingface.co/datasets/Jemary/FedBN_Dataset)"

SVHN_FILES = ("train_32x32.mat", "test_32x32.mat")
SYNTH_FILES = ("synth_train_32x32.mat", "synth_test_32x32.mat")
USPS_FILES = ("usps.bz2", "usps.t.bz2")
MNISTM_PARTS = ("mnist_m_train", "mnist_m_train_labels.txt", "mnist_m_test", "mnist_m_test_labels.txt")


def _key(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch not in "-_ ")


# ------------------------------------------------------------------------------- probes


def _probe_fedbn(name: str, d: Path) -> Found | None:
    """FedBN's folder for ``name``: ``test.pkl`` plus ``partitions/train_part{k}.pkl`` (k = 0,
    1, ... while present) or ``train.pkl``."""
    if _key(d.name) != _key(FEDBN_FOLDERS[name]) or not (d / "test.pkl").is_file():
        return None
    parts: list[Path] = []
    while (d / "partitions" / f"train_part{len(parts)}.pkl").is_file():
        parts.append(d / "partitions" / f"train_part{len(parts)}.pkl")
    if not parts and (d / "train.pkl").is_file():
        parts = [d / "train.pkl"]
    if not parts:
        return None
    files = [*parts, d / "test.pkl"]
    return Found(name, "fedbn", tuple(str(f) for f in files), stamp(files))


def _probe_files(kind: str, names: Sequence[str]) -> Callable[[str, Path], Found | None]:
    def probe(name: str, d: Path) -> Found | None:
        files = [d / n for n in names]
        if all(f.is_file() for f in files):
            return Found(name, kind, tuple(str(f) for f in files), stamp(files))
        return _probe_fedbn(name, d)

    return probe


def _probe_mnistm(name: str, d: Path) -> Found | None:
    parts = [d / p for p in MNISTM_PARTS]
    if all(p.is_dir() if i % 2 == 0 else p.is_file() for i, p in enumerate(parts)):
        return Found(name, "mnistm_dir", tuple(str(p) for p in parts), stamp(parts))  # a folder's mtime moves
    return _probe_fedbn(name, d)


# ------------------------------------------------------------------------------ parsers


def _int_labels(y: Any, source: str, what: str) -> np.ndarray:
    """Labels as int64 (N,) from an integer or integral float array of shape (N,) or (N, 1)."""
    if not isinstance(y, np.ndarray) or y.ndim not in (1, 2) or (y.ndim == 2 and y.shape[1] != 1):
        raise DatasetCorruptError(f"{source}: {what} must be an array of shape (N,) or (N, 1), got "
                                  f"{getattr(y, 'shape', type(y).__name__)}")
    y = y.reshape(-1)
    if y.size and y.dtype.kind == "f" and np.all(np.isfinite(y)) and np.all(y == np.round(y)):
        y = y.astype(np.int64)
    if y.size and y.dtype.kind not in "iu":
        raise DatasetCorruptError(f"{source}: {what} must hold whole numbers, got dtype {y.dtype}")
    return y.astype(np.int64)


def _read_mat(path: str, ten_is_zero: bool) -> tuple[np.ndarray, np.ndarray]:
    """One SVHN-layout MATLAB v5 file: ``X`` uint8 (32, 32, 3, N), ``y`` (N, 1)."""
    import scipy.io

    try:
        mat = scipy.io.loadmat(path, variable_names=("X", "y"))
    except NotImplementedError:  # scipy's answer to a v7.3 (HDF5) file
        raise DatasetCorruptError(f"{path}: a MATLAB v7.3 (HDF5) file, but the published files are MATLAB v5 "
                                  "(scipy reads those only)") from None
    except Exception as exc:  # any failure to parse means a damaged or foreign file
        raise DatasetCorruptError(f"{path}: not a readable MATLAB file ({one_line(exc)})") from None
    for key in ("X", "y"):
        if key not in mat:
            raise DatasetCorruptError(f"{path}: the file has no variable {key!r}")
    x = mat["X"]
    if not isinstance(x, np.ndarray) or x.dtype != np.uint8 or x.ndim != 4 or x.shape[:3] != (32, 32, 3):
        raise DatasetCorruptError(f"{path}: X must be uint8 of shape (32, 32, 3, N), got "
                                  f"{getattr(x, 'dtype', None)} {getattr(x, 'shape', None)}")
    y = _int_labels(mat["y"], path, "y")
    if ten_is_zero:  # SVHN: 1..10, 10 meaning the digit 0
        if y.size and (int(y.min()) < 1 or int(y.max()) > 10):
            bad = int(y.min()) if int(y.min()) < 1 else int(y.max())
            raise DatasetCorruptError(f"{path}: label {bad} is outside SVHN's 1..10 (10 is the digit 0)")
        y = np.where(y == 10, 0, y)
    images = np.ascontiguousarray(x.transpose(3, 2, 0, 1))
    check_labels(images, y, NUM_CLASSES, path, path)
    return images, y


def _dense_libsvm(text: str, n: int) -> np.ndarray | None:
    """The fast path: all numbers of a dense LIBSVM text as an (n, 513) array, or None
    where the text is not n lines of ``<label> 1:<v> ... 256:<v>``."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy warns (or raises) where the text stops parsing
        try:
            flat = np.fromstring(text.replace(":", " "), dtype=np.float64, sep=" ")
        except (ValueError, DeprecationWarning):
            return None
    if flat.size != n * 513:
        return None
    dense = flat.reshape(n, 513)
    return dense if np.array_equal(dense[:, 1::2], np.broadcast_to(np.arange(1, 257), (n, 256))) else None


def _read_libsvm(path: str) -> tuple[np.ndarray, np.ndarray]:
    """One USPS LIBSVM file (bz2): ``<label 1..10> <j>:<v> ...``, j in 1..256, v in [-1, 1]
    (a missing j is 0, as LIBSVM's sparse format means)."""
    try:
        text = bz2.decompress(Path(path).read_bytes()).decode("ascii")
    except (OSError, EOFError, ValueError) as exc:  # includes UnicodeDecodeError
        raise DatasetCorruptError(f"{path}: damaged bz2 data ({one_line(exc)})") from None
    lines = [ln for ln in text.splitlines() if ln.strip()]
    dense = _dense_libsvm(text, len(lines))
    if dense is not None:  # every line lists pixels 1..256 in order, as the published files do
        labels, values = dense[:, 0], dense[:, 2::2]
        if np.all(labels == np.round(labels)) and np.all((labels >= 1) & (labels <= 10)) \
                and np.all(np.abs(values) <= 1.001):
            images = np.clip((values.astype(np.float32) + 1) / 2 * 255, 0, 255).astype(np.uint8)
            return images.reshape(-1, 1, 16, 16), labels.astype(np.int64) - 1
    pixels = np.zeros((len(lines), 256), dtype=np.float32)
    labels = np.empty(len(lines), dtype=np.int64)
    for i, line in enumerate(lines):
        label, *pairs = line.split()
        try:
            value = float(label)
            flat = np.array(" ".join(pairs).replace(":", " ").split(), dtype=np.float64).reshape(-1, 2)
        except ValueError:
            raise DatasetCorruptError(f"{path}: line {i + 1} is not a LIBSVM line '<label> <index>:<value> ...'") \
                from None
        index = flat[:, 0]
        if (value != round(value) or not 1 <= value <= 10 or np.any(index != np.round(index))
                or np.any((index < 1) | (index > 256)) or np.unique(index).size != index.size
                or np.any(np.abs(flat[:, 1]) > 1.001)):
            raise DatasetCorruptError(f"{path}: line {i + 1} is not a USPS sample (label 1..10, pixel indices "
                                      "1..256 once each, values in [-1, 1])")
        labels[i] = int(value) - 1
        pixels[i, index.astype(np.int64) - 1] = flat[:, 1]
    images = np.clip((pixels + 1) / 2 * 255, 0, 255).astype(np.uint8)
    return images.reshape(-1, 1, 16, 16), labels


def _read_png(path: str) -> np.ndarray:
    """Decode one square PNG to (S, S, 3) uint8."""
    from PIL import Image

    try:
        with Image.open(path) as im:
            arr = np.asarray(im.convert("RGB"))
    except (OSError, SyntaxError, ValueError) as exc:  # includes truncated and unidentified images
        raise DatasetCorruptError(f"{path}: cannot decode image ({one_line(exc)})") from None
    return arr


def _mnistm_list(folder: str, labels_file: str) -> tuple[list[str], np.ndarray]:
    try:
        text = Path(labels_file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetCorruptError(f"{labels_file}: cannot read the file ({one_line(exc)})") from None
    names, labels = [], []
    for i, line in enumerate(ln for ln in text.splitlines() if ln.strip()):
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit() or int(parts[1]) >= NUM_CLASSES:
            raise DatasetCorruptError(f"{labels_file}: line {i + 1} is not '<file> <label 0..9>'")
        names.append(str(Path(folder) / parts[0]))
        labels.append(int(parts[1]))
    missing = [n for n in names if not Path(n).is_file()]
    if missing:
        raise DatasetCorruptError(f"{labels_file}: lists {Path(missing[0]).name}, which {folder} does not hold "
                                  f"({len(missing)} listed files are missing)")
    return names, np.asarray(labels, dtype=np.int64)


def _read_mnistm_split(folder: str, labels_file: str, size: int | None) -> tuple[np.ndarray, np.ndarray]:
    paths, labels = _mnistm_list(folder, labels_file)
    if len(paths) > 256:  # PIL releases the GIL while decoding
        with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
            arrays = list(pool.map(_read_png, paths))
    else:
        arrays = [_read_png(p) for p in paths]
    size = size if size is not None else (arrays[0].shape[0] if arrays else 28)
    for p, a in zip(paths, arrays):
        if a.shape != (size, size, 3):
            raise DatasetCorruptError(f"{p}: image is {a.shape[1]}x{a.shape[0]}, but MNIST-M's images here are "
                                      f"{size}x{size}")
    out = np.stack(arrays) if arrays else np.zeros((0, size, size, 3), dtype=np.uint8)
    return np.ascontiguousarray(out.transpose(0, 3, 1, 2)), labels


class _ArrayUnpickler(_CifarUnpickler):
    """The CIFAR allow-list (numpy arrays and dtypes, nothing that runs code)."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"refers to {module}.{name}, which a pair of numpy arrays never needs")
        return super().find_class(module, name)


def _read_fedbn_pickle(path: str, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """One FedBN pickle: ``(images, labels)``, images uint8 (N, *shape)."""
    try:
        obj = _ArrayUnpickler(io.BytesIO(Path(path).read_bytes())).load()
    except Exception as exc:  # any unpickling failure means a damaged or foreign file
        raise DatasetCorruptError(f"{path}: not a readable pickle of (images, labels) ({one_line(exc)})") from None
    if not isinstance(obj, (tuple, list)) or len(obj) != 2:
        raise DatasetCorruptError(f"{path}: the pickle holds {type(obj).__name__}, expected a pair (images, labels)")
    x, y = obj
    if not isinstance(x, np.ndarray) or x.dtype != np.uint8 or x.shape[1:] != shape:
        raise DatasetCorruptError(f"{path}: images must be uint8 of shape (N, {', '.join(map(str, shape))}), got "
                                  f"{getattr(x, 'dtype', type(x).__name__)} {getattr(x, 'shape', '')}")
    y = _int_labels(y, path, "labels")
    images = x[:, None] if x.ndim == 3 else x.transpose(0, 3, 1, 2)
    images = np.ascontiguousarray(images)
    check_labels(images, y, NUM_CLASSES, path, path)
    return images, y


# ---------------------------------------------------------------------------------- load


def _load(found: Found) -> Dataset:
    name, paths = found.name, found.paths
    if found.kind == "fedbn":
        parts = [_read_fedbn_pickle(p, FEDBN_SHAPES[name]) for p in paths]
        train = (np.concatenate([p[0] for p in parts[:-1]]), np.concatenate([p[1] for p in parts[:-1]]))
        test = parts[-1]
    elif found.kind in ("svhn_mat", "synth_mat"):
        train, test = (_read_mat(p, ten_is_zero=found.kind == "svhn_mat") for p in paths)
    elif found.kind == "usps_bz2":
        train, test = (_read_libsvm(p) for p in paths)
    else:  # mnistm_dir
        if importlib.util.find_spec("PIL") is None:
            raise ImportError("Loading MNIST-M's PNG folders needs Pillow (pip install pillow)")
        train = _read_mnistm_split(paths[0], paths[1], None)
        test = _read_mnistm_split(paths[2], paths[3], int(train[0].shape[2]) if train[0].size else None)
    return make_dataset(name, train, test, NUM_CLASSES, DIGIT_CLASSES)


def mnistm_shape(found: Found) -> tuple[int, int, int]:
    """MNIST-M's (3, S, classes): S read from the first listed training PNG (FedBN's: 28)."""
    if found.kind == "fedbn":
        return 3, FEDBN_SHAPES["mnistm"][0], NUM_CLASSES
    from PIL import Image

    names, _ = _mnistm_list(found.paths[0], found.paths[1])
    if not names:
        raise DatasetCorruptError(f"{found.paths[1]}: lists no images")
    try:
        with Image.open(names[0]) as im:
            width, height = im.size
    except (OSError, SyntaxError, ValueError) as exc:
        raise DatasetCorruptError(f"{names[0]}: cannot decode image ({one_line(exc)})") from None
    if width != height:
        raise DatasetCorruptError(f"{names[0]}: image is {width}x{height}, but MNIST-M's images are square")
    return 3, int(width), NUM_CLASSES


# ------------------------------------------------------------------------- common shape


def convert_channels(x: torch.Tensor, channels: int) -> torch.Tensor:
    """uint8 (N, C, H, W) images with ``channels`` channels: grey to RGB repeats the
    channel (torchvision's ``Grayscale(3)``, as FedBN does for MNIST and USPS); RGB to grey
    is PIL's ``convert("L")``, ``(19595 R + 38470 G + 7471 B + 32768) >> 16``."""
    c = int(x.shape[1])
    if c == channels:
        return x
    if (c, channels) == (1, 3):
        return x.expand(-1, 3, -1, -1).contiguous()
    if (c, channels) == (3, 1):
        w = torch.tensor([19595, 38470, 7471], dtype=torch.int64).view(1, 3, 1, 1)
        return ((x.to(torch.int64) * w).sum(dim=1, keepdim=True) + 32768).div(65536, rounding_mode="floor") \
            .to(torch.uint8)
    raise ValueError(f"cannot convert {c}-channel images to {channels} channels; only 1 <-> 3 is supported.")


def resize_images(x: torch.Tensor, size: int, chunk: int = 4096) -> torch.Tensor:
    """uint8 (N, C, H, W) images resized to ``size`` x ``size``: bilinear with antialiasing
    (as PIL's resize, which FedBN's ``Resize([28, 28])`` uses), rounded back to uint8."""
    if x.shape[-2:] == (size, size):
        return x
    out = torch.empty((x.shape[0], x.shape[1], size, size), dtype=torch.uint8)
    for i in range(0, x.shape[0], chunk):  # bounded float memory
        part = torch.nn.functional.interpolate(x[i:i + chunk].float(), size=(size, size), mode="bilinear",
                                               align_corners=False, antialias=True)
        out[i:i + chunk] = part.round_().clamp_(0, 255).to(torch.uint8)
    return out


def conform(ds: Dataset, channels: int, size: int) -> Dataset:
    """``ds`` with its images made ``channels`` x ``size`` x ``size`` (:func:`convert_channels`,
    then :func:`resize_images`) and its mean/std recomputed; ``ds`` itself if nothing changes.
    The step DIGIT-5 federations need (FedBN: 28x28 RGB) before the datasets are mixed."""
    if ds.inputs != "images":
        raise ValueError(f"dataset {ds.name!r} holds token ids, not images; only image datasets can be conformed.")
    if channels not in (1, 3) or not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise ValueError(f"channels={channels!r}, size={size!r} is not a shape: channels must be 1 or 3 and size "
                         "an integer >= 1.")
    if ds.shape[:2] == (channels, size):
        return ds
    train_x, test_x = (resize_images(convert_channels(x, channels), size) for x in (ds.train_x, ds.test_x))
    mean, std = mean_std(train_x.numpy())
    return Dataset(name=ds.name, train_x=train_x, train_y=ds.train_y, test_x=test_x, test_y=ds.test_y,
                   num_classes=ds.num_classes, mean=mean, std=std, classes=ds.classes, owners=ds.owners)


# ------------------------------------------------------------------------------ sources


def _fedbn_provide(name: str) -> str:
    return (f"or FedBN's {FEDBN_FOLDERS[name]}/ folder (test.pkl and partitions/train_part*.pkl, "
            f"from {FEDBN_WHERE})")


SVHN = DatasetSource(
    "svhn", shape=(3, 32, NUM_CLASSES), probe=_probe_files("svhn_mat", SVHN_FILES), load=_load,
    subdirs=("svhn", "SVHN", "housenumbers"),
    provide=f"train_32x32.mat and test_32x32.mat (ufldl.stanford.edu/housenumbers) {_fedbn_provide('svhn')}",
    download=Download(files=((SVHN_FILES[0], "e26dedcc434d2e4c54c9b2d4a06d8373"),
                             (SVHN_FILES[1], "eb5a983be6a315427106f1b164d9cef3")),
                      mirrors=("http://ufldl.stanford.edu/housenumbers/",)),
)

USPS = DatasetSource(
    "usps", shape=(1, 16, NUM_CLASSES), probe=_probe_files("usps_bz2", USPS_FILES), load=_load,
    subdirs=("usps", "USPS"),
    provide=f"usps.bz2 and usps.t.bz2 (LIBSVM's multiclass datasets page) {_fedbn_provide('usps')}",
    download=Download(files=((USPS_FILES[0], "ec16c51db3855ca6c91edd34d0e9b197"),
                             (USPS_FILES[1], "8ea070ee2aca1ac39742fdd1ef5ed118")),
                      mirrors=("https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/multiclass/",)),
)

SYNTHDIGITS = DatasetSource(
    "synthdigits", shape=(3, 32, NUM_CLASSES), aliases=("synth", "syndigits", "synthnumbers", "synnumbers"),
    probe=_probe_files("synth_mat", SYNTH_FILES), load=_load,
    subdirs=("synthdigits", "SynthDigits", "synth_digits", "SynDigits"),
    provide=("synth_train_32x32.mat and synth_test_32x32.mat (Ganin & Lempitsky's Synthetic Digits, linked "
             f"from Yaroslav Ganin's page) {_fedbn_provide('synthdigits')}"),
)

MNISTM = DatasetSource(
    "mnistm", shape=None, probe=_probe_mnistm, load=_load,
    subdirs=("mnist_m", "mnistm", "MNIST_M", "MNIST-M", "mnist-m"),
    provide=("the extracted mnist_m folder (mnist_m_train/, mnist_m_test/, mnist_m_train_labels.txt and "
             "mnist_m_test_labels.txt, from mnist_m.tar.gz linked on Yaroslav Ganin's page) "
             f"{_fedbn_provide('mnistm')}"),
    shape_of=mnistm_shape,
)
