"""Fashion-MNIST and MNIST: the four official IDX files, gzip'd or not (1x28x28, 10
classes). Also the IDX reader that EMNIST uses."""

from __future__ import annotations

import hashlib
from pathlib import Path

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
    package,
    stamp,
)

STEMS = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")

FMNIST_CLASSES = (
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
)
DIGIT_CLASSES = tuple("0123456789")

#: Fashion-MNIST uncompressed payloads: (length in bytes, md5). A file of exactly this
#: length must have this md5 (catches bit flips; smaller files get structural checks).
#: The parser reads the table as ``pflcore.data.sources._FMNIST_CANONICAL``.
FMNIST_PAYLOADS: dict[str, tuple[int, str]] = {
    "train-images-idx3-ubyte": (47_040_016, "f4a8712d7a061bf5bd6d2ca38dc4d50a"),
    "train-labels-idx1-ubyte": (60_008, "9018921c3c673c538a1fc5bad174d6f9"),
    "t10k-images-idx3-ubyte": (7_840_016, "8181f5470baa50b63fa0f6fddb340f0a"),
    "t10k-labels-idx1-ubyte": (10_008, "15d484375f8d13e6eb1aabb0c3f46965"),
}

#: An IDX file as read: (raw bytes, source label for messages, file stem).
Raw = tuple[bytes, str, str]


def probe_files(name: str, d: Path, stems: tuple[str, ...]) -> Found | None:
    """The IDX files ``stems`` (each plain or ``.gz``) all directly in ``d``."""
    files: list[Path] = []
    for stem in stems:
        for candidate in (d / stem, d / (stem + ".gz")):
            if candidate.is_file():
                files.append(candidate)
                break
        else:
            break
    if len(files) == len(stems):
        return Found(name, "idx", tuple(str(f) for f in files), stamp(files))
    return None


def parse_idx(data: bytes, source: str, ndim: int) -> np.ndarray:
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
    table = package()._FMNIST_CANONICAL
    if stem not in table or name not in ("fmnist", "mnist"):
        return
    length, md5 = table[stem]
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


def _split(name: str, img: Raw, lab: Raw, num_classes: int, transpose: bool) -> tuple[np.ndarray, np.ndarray]:
    """Parse one (images, labels) pair; ``transpose`` turns each image over its diagonal."""
    img_data = decompress(img[0], img[1])
    lab_data = decompress(lab[0], lab[1])
    _check_canonical(name, img[2], img_data, img[1])
    _check_canonical(name, lab[2], lab_data, lab[1])
    images = parse_idx(img_data, img[1], 3)
    labels = parse_idx(lab_data, lab[1], 1)
    if images.shape[1:] != (28, 28):
        raise DatasetCorruptError(f"{img[1]}: images are {images.shape[1]}x{images.shape[2]}, expected 28x28")
    check_labels(images, labels, num_classes, img[1], lab[1])
    if transpose:
        images = np.ascontiguousarray(images.transpose(0, 2, 1))
    else:
        images = images.copy()  # writable, no longer tied to the decompressed bytes
    return images[:, None], labels.astype(np.int64)


def read_files(found: Found, stems: tuple[str, ...]) -> list[Raw]:
    """The raw bytes of the IDX files found by :func:`probe_files`."""
    return [(Path(path).read_bytes(), path, stem) for path, stem in zip(found.paths, stems)]


def to_dataset(
    name: str, raw: list[Raw], num_classes: int, classes: tuple[str, ...], transpose: bool = False
) -> Dataset:
    """A dataset from the four IDX files (train images, train labels, test images, test labels)."""
    train = _split(name, raw[0], raw[1], num_classes, transpose)
    test = _split(name, raw[2], raw[3], num_classes, transpose)
    return make_dataset(name, train, test, num_classes, classes)


def _probe(name: str, d: Path) -> Found | None:
    return probe_files(name, d, STEMS)


def _load_fmnist(found: Found) -> Dataset:
    return to_dataset("fmnist", read_files(found, STEMS), 10, FMNIST_CLASSES)


def _load_mnist(found: Found) -> Dataset:
    return to_dataset("mnist", read_files(found, STEMS), 10, DIGIT_CLASSES)


_FILES = ", ".join(s + ".gz" for s in STEMS)

FMNIST = DatasetSource(
    "fmnist", shape=(1, 28, 10), aliases=("fashionmnist",), probe=_probe, load=_load_fmnist,
    subdirs=("fmnist", "fashion-mnist", "fashion_mnist", "fashionmnist", "FashionMNIST/raw"),
    provide=f"the four Fashion-MNIST IDX files ({_FILES}, gzip'd or not)",
    download=Download(
        files=(
            ("train-images-idx3-ubyte.gz", "8d4fb7e6c68d591d4c3dfef9ec88bf0d"),
            ("train-labels-idx1-ubyte.gz", "25c81989df183df01b3e8a0aad5dffbe"),
            ("t10k-images-idx3-ubyte.gz", "bef4ecab320f06d8554ea6380940ec79"),
            ("t10k-labels-idx1-ubyte.gz", "bb300cfdad3c16e7a12a480ee83cd310"),
        ),
        mirrors=("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",),
    ),
)

MNIST = DatasetSource(
    "mnist", shape=(1, 28, 10), probe=_probe, load=_load_mnist, subdirs=("mnist", "MNIST/raw"),
    provide=f"the four MNIST IDX files ({_FILES}, gzip'd or not)",
    download=Download(
        files=(
            ("train-images-idx3-ubyte.gz", "f68b3c2dcbeaaa9fbdd348bbdeb94873"),
            ("train-labels-idx1-ubyte.gz", "d53e105ee54ea40749a09fcbcd1e9432"),
            ("t10k-images-idx3-ubyte.gz", "9fb629c4189551a2d022fa330f9573f3"),
            ("t10k-labels-idx1-ubyte.gz", "ec29112dd5afa0611ce80d1b7f02629c"),
        ),
        mirrors=("https://ossci-datasets.s3.amazonaws.com/mnist/", "http://yann.lecun.com/exdb/mnist/"),
    ),
)
