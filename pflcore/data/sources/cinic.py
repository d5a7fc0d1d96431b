"""CINIC-10 (3x32x32, CIFAR-10's classes): the extracted PNG folders ``train/``, ``valid/``
and ``test/``, one subfolder per class. The training split is ``train/``, plus ``valid/``
when ``pflcore.data.sources.CINIC_TRAIN_INCLUDES_VALID`` is true. It has no pinned
download: its files must be provided by hand."""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from .cifar import CIFAR10_CLASSES
from .common import Dataset, DatasetCorruptError, DatasetSource, Found, make_dataset, one_line, package, stamp


def _probe(name: str, d: Path) -> Found | None:
    splits = ["train", "valid", "test"] if package().CINIC_TRAIN_INCLUDES_VALID else ["train", "test"]
    dirs = [d / s for s in splits]
    if not all(x.is_dir() for x in dirs):
        return None
    # Stamp the class folders too: adding or removing a PNG changes their mtime.
    watched = dirs + [x / c for x in dirs for c in CIFAR10_CLASSES if (x / c).is_dir()]
    return Found(name, "cinic", tuple(str(x) for x in dirs), stamp(watched))


def _read_png(path: str) -> np.ndarray:
    """Decode one 32x32 PNG to (32, 32, 3) uint8; greyscale/palette images become RGB."""
    from PIL import Image

    try:
        with Image.open(path) as im:
            size = im.size
            arr = np.asarray(im.convert("RGB")) if size == (32, 32) else None
    except (OSError, SyntaxError, ValueError) as exc:  # includes truncated and unidentified images
        raise DatasetCorruptError(f"{path}: cannot decode image ({one_line(exc)})") from None
    if arr is None:
        raise DatasetCorruptError(f"{path}: image is {size[0]}x{size[1]}, expected 32x32")
    return arr


def _cinic_split(dirs: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Read every class folder of the given split folders, sorted by class then file name."""
    paths: list[str] = []
    labels: list[int] = []
    for d in dirs:
        for label, cls in enumerate(CIFAR10_CLASSES):
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


def _load(found: Found) -> Dataset:
    try:
        import PIL  # noqa: F401
    except ImportError:
        raise ImportError("Loading CINIC-10 needs Pillow (pip install pillow)") from None
    train = _cinic_split(found.paths[:-1])
    test = _cinic_split(found.paths[-1:])
    return make_dataset(found.name, train, test, 10, CIFAR10_CLASSES)


CINIC10 = DatasetSource(
    "cinic10", shape=(3, 32, 10), aliases=("cinic",), probe=_probe, load=_load,
    subdirs=("cinic10", "cinic-10", "CINIC-10", "CINIC10"),
    provide="the extracted CINIC-10 folders train/ and test/ (and valid/), one subfolder of PNGs per class",
)
