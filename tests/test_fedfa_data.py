"""FedFA's data: its label-skew partitions (``fedfa_shards``, ``fedfa_dirichlet``) and the
Mixed Digits members besides MNIST (SVHN, USPS, SynthDigits, MNIST-M), each read from small
files written here in the real format."""

from __future__ import annotations

import bz2
import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from pflcore.data import sources
from pflcore.data.partition import PartitionError, make_partition, pool_labels, validate_partition_args
from pflcore.data.sources import DatasetCorruptError, DatasetNotFoundError, dataset_shape, load_dataset
from pflcore.data.sources.digit5 import conform, convert_channels, resize_images


def one_sentence(message: str) -> None:
    assert "\n" not in message and ". " not in message, message


def _labels(num_classes: int, per_class: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).permutation(np.repeat(np.arange(num_classes), per_class))


# FMNIST-sized: 10 classes x 6000 train / 1000 test.
FM_TRAIN, FM_TEST = _labels(10, 6000, 1), _labels(10, 1000, 2)
FM_POOLED = pool_labels(FM_TRAIN, FM_TEST)


# ------------------------------------------------------------------- fedfa_shards


def test_shards_fmnist_c2() -> None:
    """FedFA's #C=2: 200 label-sorted shards of 300, 2 per client, 100 clients x 600."""
    p = make_partition("fedfa_shards", FM_TRAIN, FM_TEST, 100, seed=2021)
    assert p.info["shard_size"] == 300 and p.info["num_shards"] == 200 and p.info["unused_train"] == 0
    assert np.all(p.sizes() == 600)
    train = np.concatenate(p.train)
    assert np.array_equal(np.sort(train), np.arange(FM_TRAIN.size))  # every train sample, once
    counts = p.label_counts(FM_POOLED, 10)
    assert (counts > 0).sum(axis=1).max() <= 2 and set(counts[counts > 0].tolist()) <= {300, 600}
    # shards are slices of the stably label-sorted train split, dealt by a permutation
    by_label = np.argsort(FM_TRAIN, kind="stable")
    shards = np.array(p.info["shards"])
    assert sorted(shards.ravel().tolist()) == list(range(200))
    for i in (0, 57, 99):
        expect = np.sort(np.concatenate([by_label[s * 300:(s + 1) * 300] for s in shards[i]]))
        assert np.array_equal(p.train[i], expect)
    assert p.info["class_sets"][0] == np.flatnonzero(counts[0]).tolist()
    # test: the whole test split, shared out in each client's train proportions (50 per shard)
    test_counts = p.label_counts(FM_POOLED, 10, "test")
    assert np.array_equal(test_counts * 6, counts) and np.all(p.sizes("test") == 100)
    assert np.array_equal(np.sort(np.concatenate(p.test)), np.arange(FM_TRAIN.size, FM_POOLED.size))
    again = make_partition("fedfa_shards", FM_TRAIN, FM_TEST, 100, seed=2021)
    other = make_partition("fedfa_shards", FM_TRAIN, FM_TEST, 100, seed=2022)
    assert again == p and all(np.array_equal(a, b) for a, b in zip(again.train + again.test, p.train + p.test))
    assert other.info["shards"] != p.info["shards"]


def test_shards_size_leftovers_and_test_fraction() -> None:
    train, test = _labels(4, 250, 3), _labels(4, 50, 4)  # 1000 train: shards of 70 -> 14, 60 left over
    p = make_partition("fedfa_shards", train, test, 4, seed=0, shards_per_client=3, shard_size=70,
                       test_fraction=0.2)
    assert p.info["num_shards"] == 14 and p.info["unused_train"] == 1000 - 12 * 70
    assert np.all(p.sizes() == 210) and np.unique(np.concatenate(p.train)).size == 840
    assert np.all(p.sizes("test") == 42)  # round(0.2 * 210)
    pooled = pool_labels(train, test)
    tr, te = p.label_counts(pooled, 4), p.label_counts(pooled, 4, "test")
    assert np.all((te > 0) <= (tr > 0)) and np.all(np.abs(te - 0.2 * tr) <= 1.0)
    # shard 3 (label-sorted samples 210..279) straddles classes 0 and 1: its client gets both
    by_label = np.argsort(train, kind="stable")
    shard_classes = [set(train[by_label[s * 70:(s + 1) * 70]].tolist()) for s in range(14)]
    assert shard_classes[3] == {0, 1}
    for shards, classes in zip(p.info["shards"], p.info["class_sets"]):
        assert set(classes) == set().union(*(shard_classes[s] for s in shards))


def test_shards_infeasible() -> None:
    with pytest.raises(PartitionError, match="shard_size") as info:
        make_partition("fedfa_shards", FM_TRAIN, FM_TEST, 100, seed=0, shard_size=301)
    one_sentence(str(info.value))
    assert info.value.param == "shard_size" and str(info.value).endswith(".")
    with pytest.raises(PartitionError, match="infeasible"):
        make_partition("fedfa_shards", _labels(2, 5, 0), _labels(2, 5, 0), 6, seed=0)


# ---------------------------------------------------------------- fedfa_dirichlet


@pytest.mark.parametrize("alpha", [0.1, 0.5])
def test_dirichlet_fmnist(alpha: float) -> None:
    p = make_partition("fedfa_dirichlet", FM_TRAIN, FM_TEST, 100, seed=2021, alpha=alpha)
    sizes = p.sizes()
    assert sizes.min() >= 10 and sizes.sum() == FM_TRAIN.size  # min size 10, the whole train split
    assert np.array_equal(np.sort(np.concatenate(p.train)), np.arange(FM_TRAIN.size))
    # the cap: a client stops receiving once it holds n_train / N, so it overshoots by < one class
    assert sizes.max() < FM_TRAIN.size / 100 + 6000
    tr, te = p.label_counts(FM_POOLED, 10), p.label_counts(FM_POOLED, 10, "test")
    assert np.array_equal(te.sum(axis=0), np.bincount(FM_TEST)) and np.all((te > 0) <= (tr > 0))
    assert np.all(np.abs(te - tr / 6) <= 1.0)  # in train proportions (largest remainder)
    assert p.info["attempts"] >= 1 and p.params["min_size"] == 10


def test_dirichlet_is_pfllib_allocation_on_the_train_split() -> None:
    """Same capped allocation (and draws) as kind pfllib_dirichlet, applied to the train split."""
    train = _labels(10, 300, 7)
    ours = make_partition("fedfa_dirichlet", train, _labels(10, 30, 8), 15, seed=4, alpha=0.3)
    theirs = make_partition("pfllib_dirichlet", train, np.zeros(0, dtype=np.int64), 15, seed=4, alpha=0.3,
                            least_samples=10)
    for mine, a, b in zip(ours.train, theirs.train, theirs.test):
        assert np.array_equal(mine, np.sort(np.concatenate([a, b])))
    assert ours.info["attempts"] == theirs.info["attempts"]


def test_dirichlet_infeasible() -> None:
    with pytest.raises(PartitionError, match="min_size") as info:
        make_partition("fedfa_dirichlet", FM_TRAIN, FM_TEST, 100, seed=0, alpha=0.5, min_size=601)
    one_sentence(str(info.value))
    with pytest.raises(PartitionError, match="max_retries=3") as info:
        make_partition("fedfa_dirichlet", _labels(10, 100, 0), _labels(10, 10, 0), 10, seed=0, alpha=1e-3,
                       min_size=90, max_retries=3)
    one_sentence(str(info.value))


BAD: list[tuple[str, dict[str, Any], str]] = [
    ("fedfa_shards", {"shards_per_client": 0}, "shards_per_client"),
    ("fedfa_shards", {"shard_size": 0}, "shard_size"),
    ("fedfa_shards", {"shard_size": 2.5}, "shard_size"),
    ("fedfa_shards", {"test_fraction": 1.5}, "test_fraction"),
    ("fedfa_shards", {"recycle": "yes"}, "recycle"),
    ("fedfa_shards", {"num_shards": 200}, "num_shards"),
    ("fedfa_dirichlet", {}, "alpha"),
    ("fedfa_dirichlet", {"alpha": 0.0}, "alpha"),
    ("fedfa_dirichlet", {"alpha": float("nan")}, "alpha"),
    ("fedfa_dirichlet", {"alpha": 0.1, "min_size": -1}, "min_size"),
    ("fedfa_dirichlet", {"alpha": 0.1, "max_retries": 0}, "max_retries"),
    ("fedfa_dirichlet", {"alpha": 0.1, "test_fraction": 0.0}, "test_fraction"),
]


@pytest.mark.parametrize("kind,params,needle", BAD, ids=[f"{b[0]}-{b[2]}" for b in BAD])
def test_bad_parameters_before_any_work(kind: str, params: dict, needle: str) -> None:
    with pytest.raises(PartitionError, match=needle) as info:
        validate_partition_args(kind, 10, **params)  # no labels needed
    message = str(info.value)
    one_sentence(message)
    assert message.endswith(".") and info.value.param == needle
    assert validate_partition_args("fedfa_shards", 100) == {
        "shards_per_client": 2, "shard_size": None, "test_fraction": None, "recycle": True}
    assert validate_partition_args("fedfa_dirichlet", 100, alpha=0.1)["min_size"] == 10


# ------------------------------------------------------------------ dataset files


def corrupt(root: Path, name: str) -> str:
    sources.clear_cache()
    with pytest.raises(DatasetCorruptError) as info:
        load_dataset(name, root=root, download=False)
    one_sentence(str(info.value))
    return str(info.value)


def write_mat(path: Path, n: int, labels: np.ndarray, seed: int) -> np.ndarray:
    """An SVHN-layout MATLAB v5 file (X uint8 (32, 32, 3, N), y uint8 (N, 1)); returns X."""
    import scipy.io

    path.parent.mkdir(parents=True, exist_ok=True)
    x = np.random.default_rng(seed).integers(0, 256, size=(32, 32, 3, n), dtype=np.uint8)
    scipy.io.savemat(str(path), {"X": x, "y": labels.astype(np.uint8).reshape(-1, 1)})
    return x


def test_svhn_mat_files(iso: Path) -> None:
    train_y, test_y = np.array([10, 1, 2, 9, 10, 5]), np.array([3, 10, 7])
    x = write_mat(iso / "svhn" / "train_32x32.mat", 6, train_y, 1)
    write_mat(iso / "svhn" / "test_32x32.mat", 3, test_y, 2)
    ds = load_dataset("SVHN", root=iso, download=False)
    assert ds.train_x.shape == (6, 3, 32, 32) and ds.test_x.shape == (3, 3, 32, 32) and ds.train_x.dtype == torch.uint8
    assert ds.train_y.tolist() == [0, 1, 2, 9, 0, 5] and ds.test_y.tolist() == [3, 0, 7]  # 10 is the digit 0
    assert torch.equal(ds.train_x[4, 1], torch.from_numpy(x[:, :, 1, 4]))  # X[row, col, channel, n]
    assert ds.shape == sources.SHAPES["svhn"] == (3, 32, 10) and ds.classes == tuple("0123456789")
    (iso / "svhn" / "test_32x32.mat").write_bytes((iso / "svhn" / "test_32x32.mat").read_bytes()[:2000])
    assert "test_32x32.mat" in corrupt(iso, "svhn")
    write_mat(iso / "svhn" / "test_32x32.mat", 3, np.array([3, 0, 7]), 2)  # 0 never occurs in SVHN
    assert "label 0" in corrupt(iso, "svhn")
    import scipy.io

    scipy.io.savemat(str(iso / "svhn" / "test_32x32.mat"), {"X": np.zeros((32, 32, 3, 2), np.uint8)})
    assert "'y'" in corrupt(iso, "svhn")


def test_synthdigits_mat_files(iso: Path) -> None:
    write_mat(iso / "SynthDigits" / "synth_train_32x32.mat", 5, np.array([0, 1, 9, 3, 0]), 3)
    write_mat(iso / "SynthDigits" / "synth_test_32x32.mat", 2, np.array([4, 0]), 4)
    ds = load_dataset("synth-digits", root=iso, download=False)
    assert ds.name == "synthdigits" and ds.train_y.tolist() == [0, 1, 9, 3, 0] and ds.test_y.tolist() == [4, 0]
    assert sources.canonical_name("SynDigits") == "synthdigits"
    write_mat(iso / "SynthDigits" / "synth_test_32x32.mat", 2, np.array([4, 10]), 4)  # labels are 0..9 here
    assert "label 10" in corrupt(iso, "synthdigits")


def libsvm_line(label: int, values: np.ndarray, skip: int | None = None) -> str:
    pairs = " ".join(f"{j + 1}:{v:.6f}" for j, v in enumerate(values) if j != skip)
    return f"{label} {pairs}\n"


def test_usps_libsvm_bz2(iso: Path) -> None:
    rng = np.random.default_rng(5)
    values = rng.uniform(-1, 1, size=(4, 256))
    values[0, :3] = [-1.0, 1.0, 0.0]
    lines = [libsvm_line(lab, v, skip=7 if i == 1 else None) for i, (lab, v) in enumerate(zip([1, 10, 4, 7], values))]
    (iso / "USPS").mkdir()
    (iso / "USPS" / "usps.bz2").write_bytes(bz2.compress("".join(lines).encode()))
    (iso / "USPS" / "usps.t.bz2").write_bytes(bz2.compress(lines[2].encode()))
    ds = load_dataset("usps", root=iso, download=False)
    assert ds.train_x.shape == (4, 1, 16, 16) and ds.test_x.shape == (1, 1, 16, 16)
    assert ds.train_y.tolist() == [0, 9, 3, 6] and ds.test_y.tolist() == [3]  # label 1 is the digit 0
    rounded = np.array([[float(f"{v:.6f}") for v in row] for row in values], dtype=np.float32)
    expect = ((rounded + 1) / 2 * 255).astype(np.uint8)  # torchvision's and FedBN's conversion
    expect[1, 7] = 127  # a missing index is the value 0
    assert np.array_equal(ds.train_x.reshape(4, 256).numpy(), expect)
    assert ds.train_x[0, 0, 0, :3].tolist() == [0, 255, 127] and ds.shape == (1, 16, 10)
    assert np.array_equal(ds.test_x.reshape(256).numpy(), expect[2])  # the dense fast path agrees
    (iso / "USPS" / "usps.t.bz2").write_bytes(bz2.compress(lines[2].encode())[:-20])
    assert "damaged bz2" in corrupt(iso, "usps")
    (iso / "USPS" / "usps.t.bz2").write_bytes(bz2.compress(b"11 1:0.5\n"))
    assert "line 1" in corrupt(iso, "usps")
    (iso / "USPS" / "usps.t.bz2").write_bytes(bz2.compress(b"3 1:0.5 300:0.1\n"))
    assert "1..256" in corrupt(iso, "usps")


def write_mnistm(root: Path, per_split: dict[str, int], size: int) -> dict[str, tuple[np.ndarray, list[int]]]:
    from PIL import Image

    out = {}
    rng = np.random.default_rng(6)
    for split, n in per_split.items():
        folder = root / f"mnist_m_{split}"
        folder.mkdir(parents=True)
        images = rng.integers(0, 256, size=(n, size, size, 3), dtype=np.uint8)
        labels = [int(v) for v in rng.integers(0, 10, size=n)]
        for i in range(n):
            Image.fromarray(images[i], mode="RGB").save(folder / f"{i:08d}.png")
        (root / f"mnist_m_{split}_labels.txt").write_text("".join(f"{i:08d}.png {y}\n" for i, y in enumerate(labels)))
        out[split] = (images, labels)
    return out


@pytest.mark.parametrize("size", [32, 28])
def test_mnistm_png_folder(iso: Path, size: int) -> None:
    pytest.importorskip("PIL")
    written = write_mnistm(iso / "mnist_m", {"train": 3, "test": 2}, size)
    assert dataset_shape("mnist-m", root=iso) == (3, size, 10)  # the files' own size
    ds = load_dataset("MNIST-M", root=iso, download=False)
    assert ds.name == "mnistm" and ds.train_x.shape == (3, 3, size, size) and ds.shape == (3, size, 10)
    assert torch.equal(ds.train_x, torch.from_numpy(written["train"][0]).permute(0, 3, 1, 2))
    assert ds.train_y.tolist() == written["train"][1] and ds.test_y.tolist() == written["test"][1]


def test_mnistm_damage(iso: Path) -> None:
    pytest.importorskip("PIL")
    from PIL import Image

    root = iso / "mnist_m"
    write_mnistm(root, {"train": 2, "test": 2}, 32)
    png = root / "mnist_m_test" / "00000001.png"
    png.write_bytes(png.read_bytes()[:40])
    assert "decode" in corrupt(iso, "mnistm")
    Image.fromarray(np.zeros((28, 28, 3), np.uint8)).save(png)
    assert "28x28" in corrupt(iso, "mnistm")
    png.unlink()
    assert "00000001.png" in corrupt(iso, "mnistm")
    (root / "mnist_m_test_labels.txt").write_text("00000000.png seven\n")
    assert "line 1" in corrupt(iso, "mnistm")


def write_fedbn(folder: Path, shape: tuple[int, ...], parts: int, per_part: int, seed: int) -> list[tuple]:
    """FedBN's layout: partitions/train_part{k}.pkl and test.pkl, pickled (images, labels)."""
    rng = np.random.default_rng(seed)
    (folder / "partitions").mkdir(parents=True)
    written = []
    for k in range(parts + 1):
        pair = (rng.integers(0, 256, size=(per_part, *shape), dtype=np.uint8),
                rng.integers(0, 10, size=per_part).astype(np.int64))
        path = folder / "partitions" / f"train_part{k}.pkl" if k < parts else folder / "test.pkl"
        with open(path, "wb") as f:
            pickle.dump(pair, f, pickle.HIGHEST_PROTOCOL)
        written.append(pair)
    return written


def test_fedbn_digit5_folders(iso: Path) -> None:
    usps = write_fedbn(iso / "USPS", (16, 16), 3, 4, 7)
    mnistm = write_fedbn(iso / "MNIST_M", (28, 28, 3), 2, 3, 8)
    ds = load_dataset("usps", root=iso, download=False)
    assert ds.train_x.shape == (12, 1, 16, 16) and ds.test_x.shape == (4, 1, 16, 16)
    assert torch.equal(ds.train_x[4:8, 0], torch.from_numpy(usps[1][0]))  # the parts in order
    assert ds.train_y.tolist() == np.concatenate([p[1] for p in usps[:3]]).tolist()
    assert dataset_shape("mnistm", root=iso) == (3, 28, 10)
    dm = load_dataset("mnistm", root=iso, download=False)
    assert torch.equal(dm.test_x, torch.from_numpy(mnistm[2][0]).permute(0, 3, 1, 2))
    # a FedBN folder counts only for its own dataset (SVHN and SynthDigits look alike)
    write_fedbn(iso / "SVHN", (32, 32, 3), 1, 2, 9)
    assert load_dataset("svhn", root=iso, download=False).num_train == 2
    with pytest.raises(DatasetNotFoundError), pytest.warns(UserWarning):
        load_dataset("synthdigits", root=iso, download=False)


def test_fedbn_pickle_damage_and_code(iso: Path) -> None:
    write_fedbn(iso / "SVHN", (32, 32, 3), 1, 2, 9)
    test = iso / "SVHN" / "test.pkl"
    with open(test, "wb") as f:  # wrong image shape (USPS-like)
        pickle.dump((np.zeros((2, 16, 16), np.uint8), np.zeros(2, np.int64)), f, pickle.HIGHEST_PROTOCOL)
    assert "(N, 32, 32, 3)" in corrupt(iso, "svhn")
    test.write_bytes(test.read_bytes()[:50])
    assert "not a readable pickle" in corrupt(iso, "svhn")

    class Boom:
        def __reduce__(self) -> tuple:
            return (os.system, ("echo pwned > " + str(iso / "pwned"),))

    test.write_bytes(pickle.dumps((Boom(), np.zeros(1, np.int64))))
    assert "system" in corrupt(iso, "svhn")
    assert not (iso / "pwned").exists()


def test_registry_downloads_and_messages(iso: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, str]] = []

    def offline(url: str, known_hash: str, dest: Path) -> Path:
        calls.append((url, known_hash))
        raise ConnectionError("Network is unreachable")

    monkeypatch.setattr(sources, "_fetch", offline)
    for name, url, md5 in [
        ("svhn", "http://ufldl.stanford.edu/housenumbers/train_32x32.mat", "e26dedcc434d2e4c54c9b2d4a06d8373"),
        ("usps", "https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/multiclass/usps.bz2",
         "ec16c51db3855ca6c91edd34d0e9b197"),
    ]:
        calls.clear()
        with pytest.raises(DatasetNotFoundError) as info:
            load_dataset(name)
        one_sentence(str(info.value))
        assert calls[0] == (url, f"md5:{md5}") and "ConnectionError" in str(info.value)
    assert [f for f, _ in sources._DOWNLOADS["svhn"].files] == ["train_32x32.mat", "test_32x32.mat"]
    assert sources._DOWNLOADS["usps"].files[1] == ("usps.t.bz2", "8ea070ee2aca1ac39742fdd1ef5ed118")
    for name in ("synthdigits", "mnistm"):
        with pytest.raises(DatasetNotFoundError) as info:
            load_dataset(name)
        message = str(info.value)
        one_sentence(message)
        assert "by hand" in message and "FedBN" in message and "Ganin" in message


# ------------------------------------------------------------------ common shape


def test_convert_channels_and_resize() -> None:
    from PIL import Image

    rgb = torch.from_numpy(np.random.default_rng(0).integers(0, 256, size=(3, 3, 8, 8), dtype=np.uint8))
    grey = convert_channels(rgb, 1)
    pil = np.stack([np.asarray(Image.fromarray(img.permute(1, 2, 0).numpy(), "RGB").convert("L")) for img in rgb])
    assert grey.shape == (3, 1, 8, 8) and np.array_equal(grey[:, 0].numpy(), pil)
    back = convert_channels(grey, 3)
    assert back.shape == (3, 3, 8, 8) and all(torch.equal(back[:, c], grey[:, 0]) for c in range(3))
    assert convert_channels(rgb, 3) is rgb
    flat = torch.full((2, 1, 16, 16), 77, dtype=torch.uint8)
    assert torch.equal(resize_images(flat, 28), torch.full((2, 1, 28, 28), 77, dtype=torch.uint8))
    big = resize_images(rgb, 28, chunk=2)
    assert big.shape == (3, 3, 28, 28) and big.dtype == torch.uint8
    assert abs(big.float().mean().item() - rgb.float().mean().item()) < 3
    assert resize_images(rgb, 8) is rgb
    with pytest.raises(ValueError, match="channels"):
        convert_channels(rgb, 2)


def test_conform_makes_a_common_shape(iso: Path) -> None:
    (iso / "USPS").mkdir()
    line = libsvm_line(3, np.linspace(-1, 1, 256))
    (iso / "USPS" / "usps.bz2").write_bytes(bz2.compress((line * 3).encode()))
    (iso / "USPS" / "usps.t.bz2").write_bytes(bz2.compress(line.encode()))
    ds = load_dataset("usps", root=iso, download=False)
    rgb28 = conform(ds, 3, 28)  # FedBN's USPS transform: Resize([28, 28]), Grayscale(3)
    assert rgb28.shape == (3, 28, 10) and rgb28.test_x.shape == (1, 3, 28, 28)
    assert torch.equal(rgb28.train_y, ds.train_y) and len(rgb28.mean) == 3 and rgb28.mean[0] == rgb28.mean[2]
    assert conform(ds, 1, 16) is ds
    with pytest.raises(ValueError, match="channels"):
        conform(ds, 2, 28)
