"""Tests for pflcore.data.sources: every format is exercised on small files in the real format."""

from __future__ import annotations

import functools
import gzip
import hashlib
import http.server
import io
import os
import pickle
import struct
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from pflcore.data import sources
from pflcore.data.sources import multidomain
from pflcore.data.sources import Dataset, DatasetCorruptError, DatasetNotFoundError, load_dataset

MNIST_STEMS = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
EMNIST_STEMS = (
    "emnist-byclass-train-images-idx3-ubyte",
    "emnist-byclass-train-labels-idx1-ubyte",
    "emnist-byclass-test-images-idx3-ubyte",
    "emnist-byclass-test-labels-idx1-ubyte",
)
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
REAL_FMNIST = Path("/usr/share/datasets/fashion-mnist")
REAL_FETCH = sources._fetch


# --------------------------------------------------------------------------- fixtures


# --------------------------------------------------------------------------- writers (real formats)


def idx_bytes(arr: np.ndarray) -> bytes:
    arr = np.asarray(arr, dtype=np.uint8)
    header = struct.pack(">I", 0x0800 | arr.ndim) + b"".join(struct.pack(">I", d) for d in arr.shape)
    return header + arr.tobytes()


def write_file(path: Path, data: bytes, gz: bool) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if gz:
        path = path.with_name(path.name + ".gz")
        data = gzip.compress(data)
    path.write_bytes(data)
    return path


def make_split(n: int, num_classes: int, seed: int, size: int = 28, channels: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    shape = (n, size, size) if channels == 0 else (n, channels, size, size)
    x = rng.integers(0, 256, shape, dtype=np.uint8)
    y = (np.arange(n) * 7 + seed) % num_classes
    return x, y.astype(np.int64)


def write_idx_set(
    folder: Path, stems: tuple[str, ...], train: tuple[np.ndarray, np.ndarray], test: tuple[np.ndarray, np.ndarray],
    gz: bool = True, transpose: bool = False,
) -> list[Path]:
    """Write an (E)MNIST-style set; with transpose=True images are stored EMNIST-style."""
    out = []
    for (x, y), (si, sl) in zip((train, test), (stems[:2], stems[2:])):
        stored = x.transpose(0, 2, 1) if transpose else x
        out.append(write_file(folder / si, idx_bytes(stored), gz))
        out.append(write_file(folder / sl, idx_bytes(y), gz))
    return out


class Py2StylePickler(pickle._Pickler):  # type: ignore[name-defined]
    """Writes str/bytes as Python 2 byte strings, like the official CIFAR pickles."""

    dispatch = pickle._Pickler.dispatch.copy()  # type: ignore[attr-defined]

    def _save_str8(self, obj: str | bytes) -> None:
        data = obj.encode("latin-1") if isinstance(obj, str) else obj
        n = len(data)
        head = pickle.SHORT_BINSTRING + bytes([n]) if n < 256 else pickle.BINSTRING + struct.pack("<i", n)
        self.write(head + data)

    dispatch[bytes] = _save_str8
    dispatch[str] = _save_str8


def cifar_pickle(batch: dict[bytes, object], fmt: str | int = "py2") -> bytes:
    """A CIFAR batch as the official Python 2 files are written, or at a Python 3 protocol."""
    if fmt != "py2":
        return pickle.dumps(batch, protocol=int(fmt))
    buf = io.BytesIO()
    Py2StylePickler(buf, protocol=2).dump(batch)
    # numpy 1 (which wrote the official files) names its helpers numpy.core.*
    return buf.getvalue().replace(b"numpy._core.multiarray", b"numpy.core.multiarray")


def cifar_split(n: int, num_classes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, 3072), dtype=np.uint8), ((np.arange(n) * 3 + seed) % num_classes).astype(np.int64)


def write_cifar10(folder: Path, fmt: str | int = "py2") -> tuple[list, tuple]:
    """cifar-10-batches-py with 5 training batches (2-3 rows each) and a test batch."""
    folder.mkdir(parents=True, exist_ok=True)
    train = [cifar_split(2 + i % 2, 10, i) for i in range(5)]
    for i, (x, y) in enumerate(train):
        batch = {b"batch_label": b"training batch", b"labels": y.tolist(), b"data": x, b"filenames": [b"a.png"] * len(y)}
        (folder / f"data_batch_{i + 1}").write_bytes(cifar_pickle(batch, fmt))
    test = cifar_split(4, 10, 99)
    (folder / "test_batch").write_bytes(cifar_pickle({b"labels": test[1].tolist(), b"data": test[0]}, fmt))
    (folder / "batches.meta").write_bytes(cifar_pickle({b"label_names": [c.encode() for c in CIFAR10_CLASSES]}, fmt))
    return train, test


def write_cifar100(folder: Path) -> tuple[tuple, tuple]:
    folder.mkdir(parents=True, exist_ok=True)
    train, test = cifar_split(6, 100, 1), cifar_split(3, 100, 2)
    train = (train[0], np.array([0, 99, 50, 3, 4, 5]))
    for name, (x, y) in (("train", train), ("test", test)):
        batch = {b"data": x, b"fine_labels": y.tolist(), b"coarse_labels": (y // 5).tolist()}
        (folder / name).write_bytes(cifar_pickle(batch))
    return train, test


def make_tar(folder: Path, archive: Path) -> Path:
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder, arcname=folder.name)
    return archive


def write_png(path: Path, arr: np.ndarray) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr).save(path)


def write_cinic(root: Path, per_class: dict[str, int]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """CINIC-10 folders; returns the expected (x (N,3,32,32), y) per split in load order."""
    rng = np.random.default_rng(5)
    out = {}
    for split, n in per_class.items():
        xs, ys = [], []
        for label, cls in enumerate(CIFAR10_CLASSES):
            for i in range(n):
                img = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
                write_png(root / split / cls / f"{split}-{cls}-{i}.png", img)
                xs.append(img.transpose(2, 0, 1))
                ys.append(label)
        out[split] = (np.stack(xs), np.array(ys))
    return out


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def assert_one_sentence(msg: str) -> None:
    assert msg.endswith(".") and ". " not in msg and "\n" not in msg, msg


# --------------------------------------------------------------------------- IDX formats


@pytest.mark.parametrize("gz", [True, False])
def test_fmnist_idx_exact_values(iso: Path, gz: bool) -> None:
    train, test = make_split(5, 10, 1), make_split(3, 10, 2)
    write_idx_set(iso / "data" / "fmnist", MNIST_STEMS, train, test, gz=gz)
    ds = load_dataset("fashion-mnist", root=iso / "data", download=False)
    assert ds.name == "fmnist" and ds.num_classes == 10 and ds.classes is not None and len(ds.classes) == 10
    assert ds.train_x.dtype == torch.uint8 and ds.train_y.dtype == torch.int64
    assert ds.train_x.shape == (5, 1, 28, 28) and ds.test_x.shape == (3, 1, 28, 28)
    assert np.array_equal(ds.train_x[:, 0].numpy(), train[0]) and np.array_equal(ds.test_x[:, 0].numpy(), test[0])
    assert ds.train_y.tolist() == train[1].tolist() and ds.test_y.tolist() == test[1].tolist()
    assert (ds.in_channels, ds.image_size, ds.num_train, ds.num_test) == (1, 28, 5, 3)
    assert ds.mean[0] == pytest.approx(train[0].mean() / 255, abs=1e-5)
    assert ds.std[0] == pytest.approx((train[0] / 255).std(), abs=1e-5)


def test_mnist_files_directly_in_root(iso: Path) -> None:
    train, test = make_split(4, 10, 3), make_split(2, 10, 4)
    write_idx_set(iso, MNIST_STEMS, train, test, gz=False)
    ds = load_dataset("MNIST", root=iso, download=False)
    assert ds.name == "mnist" and ds.classes == tuple("0123456789")
    assert np.array_equal(ds.train_x[:, 0].numpy(), train[0])


def test_torchvision_layout_is_found(iso: Path) -> None:
    train, test = make_split(4, 10, 3), make_split(2, 10, 4)
    write_idx_set(iso / "FashionMNIST" / "raw", MNIST_STEMS, train, test)
    assert load_dataset("fmnist", root=iso, download=False).num_train == 4


def test_emnist_folder_is_made_upright(iso: Path) -> None:
    train, test = make_split(6, 62, 5), make_split(3, 62, 6)
    train = (train[0], np.array([0, 9, 10, 35, 36, 61]))
    write_idx_set(iso / "emnist" / "gzip", EMNIST_STEMS, train, test, transpose=True)
    ds = load_dataset("EMNIST", root=iso, download=False)
    assert ds.num_classes == 62 and ds.classes is not None
    assert (ds.classes[9], ds.classes[10], ds.classes[36], ds.classes[61]) == ("9", "A", "a", "z")
    assert np.array_equal(ds.train_x[:, 0].numpy(), train[0])  # upright again
    assert np.array_equal(ds.test_x[:, 0].numpy(), test[0])
    assert ds.train_y.tolist() == [0, 9, 10, 35, 36, 61]


def test_emnist_official_zip(iso: Path) -> None:
    train, test = make_split(4, 62, 7), make_split(2, 62, 8)
    files = write_idx_set(iso / "staging", EMNIST_STEMS, train, test, transpose=True)
    (iso / "emnist").mkdir()
    with zipfile.ZipFile(iso / "emnist" / "gzip.zip", "w") as zf:
        for f in files:
            zf.write(f, arcname=f"gzip/{f.name}")
        zf.writestr("gzip/emnist-letters-train-labels-idx1-ubyte.gz", gzip.compress(idx_bytes(np.zeros(1))))
    ds = load_dataset("emnist", root=iso, download=False)
    assert np.array_equal(ds.train_x[:, 0].numpy(), train[0])
    assert ds.test_y.tolist() == test[1].tolist()


# --------------------------------------------------------------------------- CIFAR


def expected_cifar(rows: np.ndarray) -> np.ndarray:
    """Official layout: 1024 red, then 1024 green, then 1024 blue values, each row-major 32x32."""
    return rows.reshape(-1, 3, 32, 32)


@pytest.mark.parametrize("fmt", ["py2", 2, 4, 5])
def test_cifar10_folder(iso: Path, fmt: str | int) -> None:
    train, test = write_cifar10(iso / "cifar-10-batches-py", fmt)
    ds = load_dataset("CIFAR-10", root=iso, download=False)
    tx = np.concatenate([x for x, _ in train])
    assert ds.train_x.shape == (len(tx), 3, 32, 32) and ds.test_x.shape == (4, 3, 32, 32)
    assert np.array_equal(ds.train_x.numpy(), expected_cifar(tx))
    assert ds.train_x[0, 1, 0, 0].item() == tx[0, 1024]  # green channel, first pixel
    assert ds.train_y.tolist() == np.concatenate([y for _, y in train]).tolist()
    assert np.array_equal(ds.test_x.numpy(), expected_cifar(test[0])) and ds.test_y.tolist() == test[1].tolist()
    assert ds.num_classes == 10 and ds.classes == CIFAR10_CLASSES and len(ds.mean) == 3


def test_cifar10_tar_gz(iso: Path) -> None:
    train, test = write_cifar10(iso / "staging" / "cifar-10-batches-py")
    make_tar(iso / "staging" / "cifar-10-batches-py", iso / "cifar-10-python.tar.gz")
    ds = load_dataset("cifar10", root=iso, download=False)
    assert np.array_equal(ds.train_x.numpy(), expected_cifar(np.concatenate([x for x, _ in train])))
    assert ds.test_y.tolist() == test[1].tolist()


@pytest.mark.parametrize("archived", [False, True])
def test_cifar100(iso: Path, archived: bool) -> None:
    train, test = write_cifar100(iso / "staging" / "cifar-100-python")
    root = iso / "staging"
    if archived:
        root = iso / "archive"
        root.mkdir()
        make_tar(iso / "staging" / "cifar-100-python", root / "cifar-100-python.tar.gz")
    ds = load_dataset("cifar-100", root=root, download=False)
    assert ds.num_classes == 100 and ds.classes is not None and ds.classes[99] == "worm"
    assert np.array_equal(ds.train_x.numpy(), expected_cifar(train[0]))
    assert ds.train_y.tolist() == [0, 99, 50, 3, 4, 5] and ds.test_y.tolist() == test[1].tolist()


# --------------------------------------------------------------------------- CINIC-10 and digits


def test_cinic10_png_folders(iso: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = write_cinic(iso / "CINIC-10", {"train": 2, "valid": 1, "test": 1})
    grey = np.arange(32 * 32, dtype=np.uint8).reshape(32, 32)
    write_png(iso / "CINIC-10" / "test" / "truck" / "zz-grey.png", grey)  # a few real CINIC images are greyscale
    ds = load_dataset("cinic-10", root=iso, download=False)
    assert ds.train_x.shape == (20, 3, 32, 32) and ds.test_x.shape == (11, 3, 32, 32)
    assert np.array_equal(ds.train_x.numpy(), expected["train"][0])
    assert ds.train_y.tolist() == expected["train"][1].tolist()
    assert np.array_equal(ds.test_x[:10].numpy(), expected["test"][0])
    assert all(np.array_equal(ds.test_x[10, c].numpy(), grey) for c in range(3)) and ds.test_y[10].item() == 9
    assert torch.bincount(ds.train_y).tolist() == [2] * 10

    monkeypatch.setattr(sources, "CINIC_TRAIN_INCLUDES_VALID", True)
    with_valid = load_dataset("cinic10", root=iso, download=False)
    assert with_valid.num_train == 30
    assert np.array_equal(with_valid.train_x[20:].numpy(), expected["valid"][0])


def test_digits_fixed_stratified_split(iso: Path) -> None:
    sklearn_datasets = pytest.importorskip("sklearn.datasets")
    ds = load_dataset("digits")
    raw = sklearn_datasets.load_digits()
    assert ds.train_x.shape[1:] == (1, 8, 8) and ds.num_train + ds.num_test == len(raw.target)
    assert ds.train_x.dtype == torch.uint8 and int(ds.train_x.max()) == 255
    counts = np.bincount(raw.target, minlength=10)
    assert torch.bincount(ds.test_y, minlength=10).tolist() == [int(round(c * 0.25)) for c in counts]
    # pixel values: 0..16 scaled to 0..255, and each train image is one of sklearn's images
    scaled = ((raw.images.astype(np.int64) * 255 + 8) // 16).astype(np.uint8)
    assert set(np.unique(ds.train_x.numpy())) <= set(np.unique(scaled))
    first = ds.train_x[0, 0].numpy()
    assert any(np.array_equal(first, img) and t == ds.train_y[0].item() for img, t in zip(scaled, raw.target))
    sources.clear_cache()
    again = load_dataset("digits")
    assert torch.equal(again.train_x, ds.train_x) and torch.equal(again.test_y, ds.test_y)


# --------------------------------------------------------------------------- integrity


def fmnist_files(iso: Path, n: int = 4) -> list[Path]:
    return write_idx_set(iso / "fmnist", MNIST_STEMS, make_split(n, 10, 1), make_split(2, 10, 2))


def corrupt_and_load(iso: Path, path: Path, name: str = "fmnist") -> str:
    with pytest.raises(DatasetCorruptError) as info:
        load_dataset(name, root=iso, download=False)
    assert path.name in str(info.value)
    return str(info.value)


def test_truncated_idx(iso: Path) -> None:
    path = fmnist_files(iso)[0]
    path.write_bytes(gzip.compress(gzip.decompress(path.read_bytes())[:-100]))
    assert "need" in corrupt_and_load(iso, path)


def test_extra_bytes_in_idx(iso: Path) -> None:
    path = fmnist_files(iso)[2]
    path.write_bytes(gzip.compress(gzip.decompress(path.read_bytes()) + b"\0"))
    corrupt_and_load(iso, path)


def test_wrong_magic(iso: Path) -> None:
    path = fmnist_files(iso)[1]
    data = bytearray(gzip.decompress(path.read_bytes()))
    data[3] = 0x03  # a labels file claiming to be images
    path.write_bytes(gzip.compress(bytes(data)))
    assert "magic" in corrupt_and_load(iso, path)


@pytest.mark.parametrize("damage", ["truncate", "flip", "not-gzip"])
def test_corrupted_gzip(iso: Path, damage: str) -> None:
    path = fmnist_files(iso)[0]
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "flip":
        data[-6] ^= 0xFF  # inside the CRC/length trailer
    else:
        data = bytearray(b"this is not gzip data at all")
    path.write_bytes(bytes(data))
    assert "gzip" in corrupt_and_load(iso, path)


def test_label_out_of_range(iso: Path) -> None:
    write_idx_set(iso / "fmnist", MNIST_STEMS, (make_split(3, 10, 1)[0], np.array([0, 10, 1])), make_split(2, 10, 2))
    msg = corrupt_and_load(iso, iso / "fmnist" / "train-labels-idx1-ubyte.gz")
    assert "label 10" in msg


def test_mismatched_counts(iso: Path) -> None:
    write_idx_set(iso / "fmnist", MNIST_STEMS, make_split(3, 10, 1), make_split(2, 10, 2))
    write_file(iso / "fmnist" / "t10k-labels-idx1-ubyte", idx_bytes(np.array([1, 2, 3])), gz=True)
    corrupt_and_load(iso, iso / "fmnist" / "t10k-labels-idx1-ubyte.gz")


def test_wrong_image_size(iso: Path) -> None:
    x = np.zeros((2, 27, 27), dtype=np.uint8)
    write_idx_set(iso / "fmnist", MNIST_STEMS, (x, np.array([0, 1])), make_split(2, 10, 2))
    assert "28x28" in corrupt_and_load(iso, iso / "fmnist" / "train-images-idx3-ubyte.gz")


def test_fmnist_canonical_md5_catches_bit_flips(iso: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = fmnist_files(iso)
    payload = gzip.decompress(files[0].read_bytes())
    table = dict(sources._FMNIST_CANONICAL)
    table["train-images-idx3-ubyte"] = (len(payload), md5(payload))
    monkeypatch.setattr(sources, "_FMNIST_CANONICAL", table)
    assert load_dataset("fmnist", root=iso, download=False).num_train == 4  # canonical length, right md5

    flipped = bytearray(payload)
    flipped[500] ^= 0x01
    files[0].write_bytes(gzip.compress(bytes(flipped)))
    sources.clear_cache()
    assert "md5" in corrupt_and_load(iso, files[0])
    # the same bytes loaded as MNIST are not rejected by the Fashion-MNIST table ...
    write_idx_set(iso / "mnist", MNIST_STEMS, make_split(4, 10, 9), make_split(2, 10, 2))
    assert load_dataset("mnist", root=iso, download=False).num_train == 4
    # ... but genuine Fashion-MNIST bytes under the MNIST name are
    (iso / "mnist" / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(payload))
    assert "Fashion-MNIST" in corrupt_and_load(iso, iso / "mnist" / "train-images-idx3-ubyte.gz", "mnist")


def test_damaged_emnist_zip(iso: Path) -> None:
    (iso / "emnist").mkdir()
    good = io.BytesIO()
    with zipfile.ZipFile(good, "w") as zf:
        zf.writestr("gzip/readme.txt", "x" * 1000)
    (iso / "emnist" / "gzip.zip").write_bytes(good.getvalue()[:-30])
    corrupt_and_load(iso, iso / "emnist" / "gzip.zip", "emnist")
    (iso / "emnist" / "gzip.zip").write_bytes(good.getvalue())
    assert "emnist-byclass-train-images" in corrupt_and_load(iso, iso / "emnist" / "gzip.zip", "emnist")


def test_cifar_pickle_missing_key(iso: Path) -> None:
    write_cifar10(iso / "cifar-10-batches-py")
    bad = iso / "cifar-10-batches-py" / "data_batch_3"
    bad.write_bytes(cifar_pickle({b"data": np.zeros((2, 3072), dtype=np.uint8)}))
    assert "labels" in corrupt_and_load(iso, bad, "cifar10")


def test_cifar_pickle_wrong_shape(iso: Path) -> None:
    write_cifar10(iso / "cifar-10-batches-py")
    bad = iso / "cifar-10-batches-py" / "test_batch"
    bad.write_bytes(cifar_pickle({b"data": np.zeros((2, 3000), dtype=np.uint8), b"labels": [0, 1]}))
    assert "3072" in corrupt_and_load(iso, bad, "cifar10")


def test_cifar_truncated_pickle(iso: Path) -> None:
    write_cifar10(iso / "cifar-10-batches-py")
    bad = iso / "cifar-10-batches-py" / "data_batch_1"
    bad.write_bytes(bad.read_bytes()[:-50])
    corrupt_and_load(iso, bad, "cifar10")


def test_cifar100_fine_label_out_of_range(iso: Path) -> None:
    write_cifar100(iso / "cifar-100-python")
    bad = iso / "cifar-100-python" / "test"
    bad.write_bytes(cifar_pickle({b"data": np.zeros((2, 3072), dtype=np.uint8), b"fine_labels": [0, 100]}))
    assert "label 100" in corrupt_and_load(iso, bad, "cifar100")


def test_cifar_pickle_cannot_run_code(iso: Path) -> None:
    class Evil:
        def __reduce__(self) -> tuple:
            return (os.system, ("touch " + str(iso / "pwned"),))

    write_cifar10(iso / "cifar-10-batches-py")
    bad = iso / "cifar-10-batches-py" / "data_batch_2"
    bad.write_bytes(pickle.dumps({b"data": Evil(), b"labels": []}))
    corrupt_and_load(iso, bad, "cifar10")
    assert not (iso / "pwned").exists()


def test_truncated_cifar_tar(iso: Path) -> None:
    write_cifar10(iso / "staging" / "cifar-10-batches-py")
    tar = make_tar(iso / "staging" / "cifar-10-batches-py", iso / "cifar-10-python.tar.gz")
    tar.write_bytes(tar.read_bytes()[:-40])
    corrupt_and_load(iso, tar, "cifar10")


def test_cinic_bad_png_and_wrong_size(iso: Path) -> None:
    write_cinic(iso / "cinic-10", {"train": 1, "test": 1})
    bad = iso / "cinic-10" / "train" / "dog" / "train-dog-0.png"
    bad.write_bytes(bad.read_bytes()[:40])
    assert "decode" in corrupt_and_load(iso, bad, "cinic10")
    write_png(bad, np.zeros((30, 32, 3), dtype=np.uint8))
    assert "32x32" in corrupt_and_load(iso, bad, "cinic10")


def test_cinic_missing_class_folder(iso: Path) -> None:
    write_cinic(iso / "cinic-10", {"train": 1, "test": 1})
    for f in (iso / "cinic-10" / "test" / "frog").iterdir():
        f.unlink()
    (iso / "cinic-10" / "test" / "frog").rmdir()
    with pytest.raises(DatasetCorruptError, match="frog"):
        load_dataset("cinic10", root=iso, download=False)


# --------------------------------------------------------------------------- search order and caching


def labelled_fmnist(folder: Path, label: int) -> None:
    x = np.zeros((2, 28, 28), dtype=np.uint8)
    write_idx_set(folder, MNIST_STEMS, (x, np.array([label, label])), (x[:1], np.array([label])))


def test_search_order(iso: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    labelled_fmnist(iso / "root", 1)
    labelled_fmnist(iso / "env" / "fmnist", 2)
    labelled_fmnist(iso / "cache" / "fmnist", 3)
    labelled_fmnist(iso / "system", 4)
    monkeypatch.setenv("PFL_DATA", str(iso / "env"))
    monkeypatch.setattr(sources, "SYSTEM_DIRS", {"fmnist": (str(iso / "system"),)})

    def label(**kw: object) -> int:
        return int(load_dataset("fmnist", download=False, **kw).train_y[0])  # type: ignore[arg-type]

    assert label(root=iso / "root") == 1
    assert label() == 2
    with pytest.raises(DatasetNotFoundError, match="is not an existing folder"):
        label(root=iso / "empty")  # a root that does not exist is a mistake
    (iso / "empty").mkdir()
    with pytest.warns(UserWarning, match="holds no fmnist files; the search moved on"):
        assert label(root=iso / "empty") == 2  # an existing root without the files falls through, with a warning
    monkeypatch.delenv("PFL_DATA")
    assert label() == 3
    monkeypatch.setenv("PFL_DATA", os.pathsep.join([str(iso / "nothing"), str(iso / "root")]))
    assert label() == 1
    monkeypatch.delenv("PFL_DATA")
    for f in (iso / "cache" / "fmnist").iterdir():
        f.unlink()
    assert label() == 4


def test_cache_returns_same_tensors_until_files_change(iso: Path) -> None:
    labelled_fmnist(iso / "fmnist", 1)
    first = load_dataset("fmnist", root=iso, download=False)
    assert load_dataset("fmnist", root=iso, download=False).train_x is first.train_x
    labelled_fmnist(iso / "fmnist", 2)
    path = iso / "fmnist" / "train-labels-idx1-ubyte.gz"
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    assert int(load_dataset("fmnist", root=iso, download=False).train_y[0]) == 2


# --------------------------------------------------------------------------- not found and downloads


def test_not_found_without_download(iso: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PFL_DATA", str(iso / "envdata"))
    monkeypatch.setattr(sources, "SYSTEM_DIRS", {"fmnist": (str(iso / "sys"),)})
    (iso / "given").mkdir()
    with pytest.raises(DatasetNotFoundError) as info, pytest.warns(UserWarning, match="search moved on"):
        load_dataset("fashion_mnist", root=iso / "given", download=False)
    msg = str(info.value)
    assert isinstance(info.value, FileNotFoundError)
    assert_one_sentence(msg)
    assert "'fmnist'" in msg and "PFL_DATA" in msg and "root=" in msg and "download=False" in msg
    for place in (iso / "given", iso / "envdata", iso / "cache", iso / "sys"):
        assert str(place) in msg


def test_download_uses_pinned_hashes(iso: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    staged = write_idx_set(iso / "staged", MNIST_STEMS, make_split(3, 10, 1), make_split(2, 10, 2))
    calls: list[tuple[str, str, Path]] = []

    def fake_fetch(url: str, known_hash: str, dest: Path) -> Path:
        calls.append((url, known_hash, dest))
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes((iso / "staged" / dest.name).read_bytes())
        return dest

    monkeypatch.setattr(sources, "_fetch", fake_fetch)
    (iso / "nowhere").mkdir()
    with pytest.warns(UserWarning, match="search moved on"):
        ds = load_dataset("fmnist", root=iso / "nowhere")
    assert ds.num_train == 3
    assert [c[1] for c in calls] == [
        "md5:8d4fb7e6c68d591d4c3dfef9ec88bf0d",
        "md5:25c81989df183df01b3e8a0aad5dffbe",
        "md5:bef4ecab320f06d8554ea6380940ec79",
        "md5:bb300cfdad3c16e7a12a480ee83cd310",
    ]
    assert all(c[0].startswith("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/") for c in calls)
    assert [c[2] for c in calls] == [iso / "cache" / "fmnist" / f.name for f in staged]
    # later loads find the cached copy without downloading
    calls.clear()
    sources.clear_cache()
    assert load_dataset("fmnist", download=False).num_train == 3 and not calls


@pytest.mark.parametrize(
    "name, fname, md5sum",
    [
        ("mnist", "train-images-idx3-ubyte.gz", "f68b3c2dcbeaaa9fbdd348bbdeb94873"),
        ("cifar10", "cifar-10-python.tar.gz", "c58f30108f718f92721af3b95e74349a"),
        ("cifar100", "cifar-100-python.tar.gz", "eb9058c3a382ffc7106e4002c42a8d85"),
        ("emnist", "gzip.zip", "58c8d27c78d21e728a6bc7b3cc06412e"),
    ],
)
def test_offline_download_gives_one_sentence(iso: Path, monkeypatch: pytest.MonkeyPatch, name: str, fname: str,
                                             md5sum: str) -> None:
    calls: list[tuple[str, str]] = []

    def offline(url: str, known_hash: str, dest: Path) -> Path:
        calls.append((url, known_hash))
        raise ConnectionError("Failed to resolve host. Network is unreachable")

    monkeypatch.setattr(sources, "_fetch", offline)
    with pytest.raises(DatasetNotFoundError) as info:
        load_dataset(name)
    msg = str(info.value)
    assert_one_sentence(msg)
    assert repr(name) in msg and "ConnectionError" in msg and str(iso / "cache") in msg
    assert isinstance(info.value.__cause__, ConnectionError)
    assert calls[0][0].endswith(fname) and calls[0][1] == f"md5:{md5sum}"
    if name == "mnist":  # every mirror is tried
        assert len(calls) == 2 and calls[1][0] == "http://yann.lecun.com/exdb/mnist/train-images-idx3-ubyte.gz"


def test_cinic_has_no_download(iso: Path) -> None:
    with pytest.raises(DatasetNotFoundError) as info:
        load_dataset("cinic10")
    assert_one_sentence(str(info.value))
    assert "by hand" in str(info.value)


@pytest.fixture
def http_dir(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A local HTTP server (offline-safe) serving a folder."""
    folder = tmp_path / "served"
    folder.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    handler.log_message = lambda *a, **k: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield folder, f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def test_real_fetch_with_pooch_verifies_hash(iso: Path, http_dir: tuple[Path, str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pooch")
    served, url = http_dir
    files = write_idx_set(served, MNIST_STEMS, make_split(3, 10, 1), make_split(2, 10, 2))
    monkeypatch.setattr(sources, "_fetch", REAL_FETCH)  # pooch, against the local server
    pinned = sources._Download(files=tuple((f.name, md5(f.read_bytes())) for f in files), mirrors=(url,))
    monkeypatch.setitem(sources._DOWNLOADS, "mnist", pinned)
    assert load_dataset("mnist").num_train == 3
    assert (iso / "cache" / "mnist" / files[0].name).read_bytes() == files[0].read_bytes()

    sources.clear_cache()
    wrong = sources._Download(files=((files[0].name, "0" * 32),), mirrors=(url,))
    monkeypatch.setitem(sources._DOWNLOADS, "fmnist", wrong)
    with pytest.raises(DatasetNotFoundError) as info:
        load_dataset("fmnist")
    assert_one_sentence(str(info.value))
    assert not (iso / "cache" / "fmnist" / files[0].name).exists()


# --------------------------------------------------------------------------- names and the Dataset type


def test_names_and_aliases() -> None:
    assert sources.DATASETS == ("fmnist", "mnist", "emnist", "cifar10", "cifar100", "cinic10", "digits",
                                "tinyimagenet", "agnews", "pfllib", "svhn", "usps", "synthdigits", "mnistm", "digit5")
    for alias, name in [("Fashion_MNIST", "fmnist"), ("fashion-mnist", "fmnist"), ("FashionMNIST", "fmnist"),
                        ("CIFAR-10", "cifar10"), ("cifar_100", "cifar100"), ("CINIC-10", "cinic10"),
                        ("EMNIST", "emnist"), ("digits", "digits")]:
        assert sources.canonical_name(alias) == name
    with pytest.raises(ValueError) as info:
        load_dataset("imagenet")
    assert "'imagenet'" in str(info.value)
    assert all(n in str(info.value) for n in sources.DATASETS)


def test_one_registry_declares_every_dataset() -> None:
    assert tuple(sources.SHAPES) == sources.DATASETS
    for name in sources.DATASETS:
        source = sources._SOURCES[name]
        assert source.name == name
        if source.builtin is None and name not in multidomain.MEMBERS:  # read from files: found, parsed, named
            assert source.probe and source.load and source.subdirs and source.provide
        for _, md5sum in source.download.files if source.download else ():
            assert len(md5sum) == 32 and int(md5sum, 16) >= 0
    assert set(sources._DOWNLOADS) == {"fmnist", "mnist", "emnist", "cifar10", "cifar100", "tinyimagenet", "agnews",
                                       "svhn", "usps"}


def test_dataset_validates_its_fields() -> None:
    x, y = torch.zeros(2, 1, 4, 4, dtype=torch.uint8), torch.zeros(2, dtype=torch.int64)
    ds = Dataset("toy", x, y, x, y, 2, (0.0,), (1.0,))
    assert "toy" in repr(ds) and ds.image_size == 4
    with pytest.raises(ValueError):
        Dataset("toy", x.float(), y, x, y, 2, (0.0,), (1.0,))
    with pytest.raises(ValueError):
        Dataset("toy", x, y[:1], x, y, 2, (0.0,), (1.0,))
    with pytest.raises(ValueError):
        Dataset("toy", x, y, x, y, 2, (0.0, 0.0), (1.0,))


# --------------------------------------------------------------------------- the real Fashion-MNIST


def test_real_fashion_mnist(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    if not all((REAL_FMNIST / (s + ".gz")).is_file() for s in MNIST_STEMS):
        pytest.skip("Fashion-MNIST is not installed in /usr/share/datasets/fashion-mnist")
    monkeypatch.delenv("PFL_DATA", raising=False)
    monkeypatch.setattr(sources, "cache_dir", lambda: tmp_path / "empty-cache")
    ds = load_dataset("fmnist", download=False)  # found through SYSTEM_DIRS
    assert ds.train_x.shape == (60000, 1, 28, 28) and ds.test_x.shape == (10000, 1, 28, 28)
    assert ds.num_classes == 10
    assert torch.bincount(ds.train_y).tolist() == [6000] * 10
    assert torch.bincount(ds.test_y).tolist() == [1000] * 10
    assert ds.mean[0] == pytest.approx(0.2860, abs=1e-3) and ds.std[0] == pytest.approx(0.3530, abs=1e-3)
    assert load_dataset("fmnist", root=REAL_FMNIST).train_x is ds.train_x
