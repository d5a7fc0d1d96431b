"""PFLlib's federated format (dataset ``pfllib``), the partition kind ``given`` and PFLlib's
own generators (``pfllib_dirichlet``, ``pfllib_pathological``): small folders written here
exactly as PFLlib writes them, and the real FedCP MNIST folder when it is present."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from pflcore.config import ExperimentConfig
from pflcore.data import sources
from pflcore.data.federated import FederatedData
from pflcore.data.partition import PartitionError, make_partition, pool_labels
from pflcore.data.sources import DatasetCorruptError, load_dataset, pfllib
from pflcore.engine.simulation import build_data
from pflcore.errors import ConfigError

from conftest import FEDCP_MNIST, needs_fedcp_mnist

REAL_TOTALS = [6903, 7877, 6990, 7141, 6824, 6313, 6876, 7293, 6825, 6958]


def one_sentence(message: str) -> None:
    assert message.endswith(".") and ". " not in message and "\n" not in message, message


# --------------------------------------------------------------------------- writing PFLlib's format


def normalize(u: np.ndarray) -> np.ndarray:
    """ToTensor then Normalize(0.5, 0.5), in float32 as torchvision computes it."""
    return ((torch.from_numpy(u).float() / 255.0 - 0.5) / 0.5).numpy()


def save_client(path: Path, x: np.ndarray, y: np.ndarray) -> None:
    """As PFLlib saves a client: np.savez_compressed(f, data={"x": x, "y": y})."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        np.savez_compressed(f, data={"x": x, "y": y})


def make_clients(sizes: list[tuple[int, int]], num_classes: int, channels: int = 1, size: int = 8,
                 seed: int = 0) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """(train uint8, train labels, test uint8, test labels) per client."""
    rng = np.random.default_rng(seed)
    out = []
    for n_train, n_test in sizes:
        parts = []
        for n in (n_train, n_test):
            parts.append(rng.integers(0, 256, (n, channels, size, size), dtype=np.uint8))
            parts.append(rng.integers(0, num_classes, n).astype(np.int64))
        out.append(tuple(parts))
    return out


def write_folder(root: Path, clients: list, num_classes: int, stats: list | None = None) -> Path:
    """A PFLlib folder: config.json, train/train{i}_.npz and test/test{i}_.npz."""
    for i, (tx, ty, sx, sy) in enumerate(clients):
        save_client(root / "train" / f"train{i}_.npz", normalize(tx), ty)
        save_client(root / "test" / f"test{i}_.npz", normalize(sx), sy)
    if stats is None:
        stats = []
        for _, ty, _, sy in clients:
            y = np.concatenate([ty, sy])
            stats.append([[int(k), int((y == k).sum())] for k in np.unique(y)])
    config = {"num_clients": len(clients), "num_classes": num_classes, "non_iid": True, "balance": False,
              "partition": "dir", "Size of samples for labels in clients": stats, "alpha": 0.1, "batch_size": 10}
    (root / "config.json").write_text(json.dumps(config))
    return root


@pytest.fixture
def folder(iso: Path) -> tuple[Path, list]:
    clients = make_clients([(30, 10), (12, 5), (25, 9)], num_classes=4)
    return write_folder(iso / "fed", clients, 4), clients


# --------------------------------------------------------------------------- reading


def test_round_trip_owners_and_normalisation(folder: tuple[Path, list]) -> None:
    root, clients = folder
    ds = load_dataset("pfllib", root=root, download=False)
    assert ds.name == "pfllib" and ds.num_classes == 4
    assert ds.mean == (0.5,) and ds.std == (0.5,)
    assert torch.equal(ds.train_x, torch.from_numpy(np.concatenate([c[0] for c in clients])))
    assert torch.equal(ds.train_y, torch.from_numpy(np.concatenate([c[1] for c in clients])))
    assert torch.equal(ds.test_x, torch.from_numpy(np.concatenate([c[2] for c in clients])))
    assert torch.equal(ds.test_y, torch.from_numpy(np.concatenate([c[3] for c in clients])))
    assert ds.owners is not None
    assert ds.owners[0].tolist() == [0] * 30 + [1] * 12 + [2] * 25
    assert ds.owners[1].tolist() == [0] * 10 + [1] * 5 + [2] * 9
    assert load_dataset("pfllib", root=root) is ds  # cached on the files' stamps
    assert sources.dataset_shape("pfllib", root) == (1, 8, 4)


def test_rgb_images_and_pfl_data(iso: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clients = make_clients([(6, 2), (5, 3)], num_classes=3, channels=3, size=6, seed=1)
    root = write_folder(iso / "rgb" / "pfllib", clients, 3)  # found in the conventional subfolder
    monkeypatch.setenv("PFL_DATA", str(iso / "rgb"))
    ds = load_dataset("pfllib", download=False)
    assert ds.train_x.shape == (11, 3, 6, 6) and ds.mean == (0.5,) * 3 and ds.std == (0.5,) * 3
    assert torch.equal(ds.test_x, torch.from_numpy(np.concatenate([c[2] for c in clients])))
    assert sources.dataset_shape("pfllib") == (3, 6, 3)
    assert root.is_dir()


def test_models_see_the_stored_floats(folder: tuple[Path, list]) -> None:
    root, clients = folder
    ds = load_dataset("pfllib", root=root)
    tr, te = ds.train_y.numpy(), ds.test_y.numpy()
    p = make_partition("given", tr, te, 3, seed=0, train_owners=ds.owners[0], test_owners=ds.owners[1])
    data = FederatedData(ds, p)
    for i, (tx, _, sx, sy) in enumerate(clients):
        assert torch.allclose(data.train[i].x, torch.from_numpy(normalize(tx)), atol=1e-6)
        assert torch.allclose(data.test[i].x, torch.from_numpy(normalize(sx)), atol=1e-6)
        assert data.test[i].y.tolist() == sy.tolist()


# --------------------------------------------------------------------------- refusing bad files


class Evil:
    """Runs a shell command when unpickled: it must never be."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("where", ["dict", "array"])
def test_malicious_pickle_is_refused_without_running(folder: tuple[Path, list], where: str) -> None:
    root, clients = folder
    marker = root.parent / "pwned"
    target = root / "train" / "train1_.npz"
    payload = {"x": Evil(marker), "y": clients[1][1]} if where == "dict" else Evil(marker)
    with open(target, "wb") as f:
        np.savez_compressed(f, data=np.array(payload, dtype=object))
    with pytest.raises(DatasetCorruptError) as info:
        load_dataset("pfllib", root=root)
    message = str(info.value)
    assert str(target) in message and "refuses to run code from the pickle" in message
    one_sentence(message)
    assert not marker.exists()


def test_truncated_file(folder: tuple[Path, list]) -> None:
    root, _ = folder
    target = root / "test" / "test2_.npz"
    data = target.read_bytes()
    target.write_bytes(data[: len(data) // 2])
    with pytest.raises(DatasetCorruptError) as info:
        load_dataset("pfllib", root=root)
    assert str(target) in str(info.value)
    one_sentence(str(info.value))


def test_config_json_mismatch(iso: Path) -> None:
    clients = make_clients([(20, 6), (15, 4)], num_classes=3, seed=2)
    y1 = np.concatenate([clients[1][1], clients[1][3]])
    stats = [[[int(k), int((np.concatenate([c[1], c[3]]) == k).sum())] for k in range(3)] for c in clients]
    stats[1][0][1] += 1  # client 1 claims one more sample of class 0 than it holds
    root = write_folder(iso / "fed", clients, 3, stats=stats)
    with pytest.raises(DatasetCorruptError) as info:
        load_dataset("pfllib", root=root)
    message = str(info.value)
    assert "client 1" in message and "class 0" in message and str(int((y1 == 0).sum())) in message
    one_sentence(message)


@pytest.mark.parametrize("damage", ["missing", "extra", "labels", "not-normalised", "nan", "shape", "config"])
def test_damage_gives_one_sentence(folder: tuple[Path, list], damage: str) -> None:
    root, clients = folder
    tx, ty = clients[0][0], clients[0][1]
    target = root / "train" / "train0_.npz"
    if damage == "missing":
        (root / "test" / "test1_.npz").unlink()
        needle = "test1_.npz: missing"
    elif damage == "extra":
        shutil.copy(target, root / "train" / "train3_.npz")
        needle = "train3_.npz"
    elif damage == "labels":
        save_client(target, normalize(tx), np.full_like(ty, 4))
        needle = "label 4"
    elif damage == "not-normalised":
        save_client(target, tx.astype(np.float32) / 255.0, ty)  # ToTensor without Normalize(0.5, 0.5)
        needle = "not PFLlib's Normalize(0.5, 0.5) images"
    elif damage == "nan":
        x = normalize(tx)
        x[0, 0, 0, 0] = np.nan
        save_client(target, x, ty)
        needle = "not finite"
    elif damage == "shape":
        save_client(target, normalize(tx[:, :, :6, :6].copy()), ty)
        needle = "1x6x6"
    else:
        (root / "config.json").write_text("{not json")
        needle = "config.json"
    with pytest.raises(DatasetCorruptError) as info:
        load_dataset("pfllib", root=root)
    assert needle in str(info.value)
    one_sentence(str(info.value))


def test_config_validation_reads_the_folder(folder: tuple[Path, list], iso: Path) -> None:
    root, _ = folder
    base = dict(method="fedavg", dataset="pfllib", model="mlp", partition={"kind": "given"}, num_clients=3,
                output_dir=str(iso / "out"), quiet=True, workers=0)
    assert ExperimentConfig.from_dict({**base, "data_root": str(root)}).dataset == "pfllib"
    for root_value in (None, str(iso / "cache")):
        (iso / "cache").mkdir(exist_ok=True)
        with pytest.raises(ConfigError) as info:
            ExperimentConfig.from_dict({**base, "data_root": root_value})
        assert "'data_root'" in str(info.value) and "PFLlib" in str(info.value)
        one_sentence(str(info.value))
    with pytest.raises(ConfigError) as info:  # the folder's 8x8 images are too small for FedCP's CNN
        ExperimentConfig.from_dict({**base, "data_root": str(root), "model": "fedcp_cnn"})
    assert "'model'" in str(info.value) and "1x8x8" in str(info.value)
    (root / "train" / "train0_.npz").write_bytes(b"garbage")
    (root / "train" / "train1_.npz").write_bytes(b"garbage")
    (root / "train" / "train2_.npz").write_bytes(b"garbage")
    (root / "test" / "test0_.npz").write_bytes(b"garbage")
    (root / "test" / "test1_.npz").write_bytes(b"garbage")
    (root / "test" / "test2_.npz").write_bytes(b"garbage")
    sources.clear_cache()
    with pytest.raises(ConfigError) as info:
        ExperimentConfig.from_dict({**base, "data_root": str(root)})
    assert "'data_root'" in str(info.value) and "cannot be read" in str(info.value)
    one_sentence(str(info.value))


# --------------------------------------------------------------------------- kind ``given``


def test_given_reproduces_the_files_split(folder: tuple[Path, list], iso: Path) -> None:
    root, clients = folder
    config = ExperimentConfig.from_dict(dict(
        method="fedavg", dataset="pfllib", data_root=str(root), model="mlp", partition={"kind": "given"},
        num_clients=3, output_dir=str(iso / "out"), quiet=True, workers=0))
    data = build_data(config)
    p = data.partition
    assert p.kind == "given" and p.sizes("train").tolist() == [30, 12, 25] and p.sizes("test").tolist() == [10, 5, 9]
    start = {"train": 0, "test": 67}
    for split in ("train", "test"):
        offset = start[split]
        for i, c in enumerate(clients):
            n = c[0].shape[0] if split == "train" else c[2].shape[0]
            got = (p.train if split == "train" else p.test)[i]
            assert got.tolist() == list(range(offset, offset + n))
            offset += n
    for i, (_, ty, _, sy) in enumerate(clients):
        assert data.train[i].y.tolist() == ty.tolist() and data.test[i].y.tolist() == sy.tolist()

    with pytest.raises(PartitionError) as info:  # the folder holds 3 clients
        build_data(config.replace(num_clients=5))
    assert info.value.param == "num_clients" and "3 clients" in str(info.value)
    one_sentence(str(info.value))


def test_two_folders_never_share_results_and_one_folder_moved_keeps_them(iso: Path) -> None:
    """The run name covers the folder's data (its config.json): another PFLlib folder gets
    other results; the same folder elsewhere finds its own."""
    a = write_folder(iso / "a", make_clients([(30, 10), (12, 5)], num_classes=4), 4)
    b = write_folder(iso / "b", make_clients([(20, 10), (22, 5)], num_classes=4, seed=1), 4)
    copy = iso / "moved"
    shutil.copytree(a, copy)

    def name(root: Path) -> str:
        return ExperimentConfig.from_dict(dict(method="fedavg", dataset="pfllib", data_root=str(root), model="mlp",
                                               partition={"kind": "given"}, num_clients=2,
                                               output_dir=str(iso / "out"))).run_name()

    assert name(a) != name(b)
    assert name(a) == name(copy)


def test_given_needs_a_dataset_that_has_a_split(iso: Path) -> None:
    config = ExperimentConfig.from_dict(dict(method="fedavg", dataset="digits", model="mlp", num_clients=4,
                                             partition={"kind": "given"}, output_dir=str(iso / "o"),
                                             quiet=True, workers=0))
    with pytest.raises(PartitionError) as info:
        build_data(config)
    assert info.value.param == "kind" and "'pfllib'" in str(info.value)
    one_sentence(str(info.value))


def test_other_kinds_pool_the_folder(folder: tuple[Path, list], iso: Path) -> None:
    root, _ = folder
    config = ExperimentConfig.from_dict(dict(
        method="fedavg", dataset="pfllib", data_root=str(root), model="mlp", num_clients=2, seed=1,
        partition={"kind": "pfllib_pathological", "classes_per_client": 2, "least_samples": 4},
        output_dir=str(iso / "out"), quiet=True, workers=0))
    p = build_data(config).partition
    everything = np.sort(np.concatenate(p.train + p.test))
    assert everything.tolist() == list(range(67 + 24))


# --------------------------------------------------------------------------- PFLlib's generators


def _labels(num_classes: int, per_class: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).permutation(np.repeat(np.arange(num_classes), per_class))


TRAIN = _labels(10, 500, 1)
TEST = _labels(10, 200, 2)
POOLED = pool_labels(TRAIN, TEST)


def _check_union_partition(p, num_clients: int, train_fraction: float = 0.75) -> None:
    """Disjoint, covering every pooled sample once, PFLlib's floor split per client."""
    assert p.num_clients == num_clients
    arrays = list(p.train) + list(p.test)
    for a in arrays:
        assert a.dtype == np.int64 and not a.flags.writeable and np.all(np.diff(a) > 0)
    everything = np.concatenate(arrays)
    assert np.array_equal(np.sort(everything), np.arange(POOLED.size)), "disjoint and covering"
    total = p.sizes("all")
    assert p.sizes("train").tolist() == [math.floor(train_fraction * n) for n in total]


@pytest.mark.parametrize("alpha", [0.1, 0.5, 10.0])
def test_pfllib_dirichlet_invariants(alpha: float) -> None:
    p = make_partition("pfllib_dirichlet", TRAIN, TEST, 20, seed=3, alpha=alpha)
    _check_union_partition(p, 20)
    assert p.sizes("all").min() >= 40
    assert p.params["least_samples"] == 40 and p.params["train_fraction"] == 0.75
    assert make_partition("pfllib_dirichlet", TRAIN, TEST, 20, seed=3, alpha=alpha) == p
    other = make_partition("pfllib_dirichlet", TRAIN, TEST, 20, seed=4, alpha=alpha)
    assert any(not np.array_equal(a, b) for a, b in zip(p.train, other.train))


def test_pfllib_dirichlet_cap_and_split_options() -> None:
    # alpha large: near-equal shares; the cap keeps every client near N/num_clients
    p = make_partition("pfllib_dirichlet", TRAIN, TEST, 10, seed=0, alpha=1000.0, least_samples=100,
                       train_fraction=0.8)
    _check_union_partition(p, 10, 0.8)
    assert p.sizes("all").max() < 2 * POOLED.size / 10
    # the per-client split ignores classes: some client's test proportions differ from stratified
    q = make_partition("pfllib_dirichlet", TRAIN, TEST, 20, seed=0, alpha=0.5)
    train_counts = q.label_counts(POOLED, 10, "train")
    all_counts = q.label_counts(POOLED, 10, "all")
    stratified = np.floor(all_counts * 0.75 + 0.5)
    assert np.abs(train_counts - stratified).max() >= 2


def test_pfllib_dirichlet_refuses_what_cannot_succeed() -> None:
    with pytest.raises(PartitionError) as info:
        make_partition("pfllib_dirichlet", TRAIN, TEST, 20, seed=0, least_samples=400)
    assert info.value.param == "least_samples"
    one_sentence(str(info.value))
    with pytest.raises(PartitionError) as info:
        make_partition("pfllib_dirichlet", TRAIN, TEST, 20, seed=0, alpha=0.01, least_samples=300,
                       max_retries=5)
    assert info.value.param == "alpha" and "max_retries=5" in str(info.value)
    one_sentence(str(info.value))


def test_pfllib_pathological_contiguous_groups() -> None:
    p = make_partition("pfllib_pathological", TRAIN, TEST, 20, seed=0, classes_per_client=2)
    _check_union_partition(p, 20)
    counts = p.label_counts(POOLED, 10, "all")
    for i in range(20):  # clients 4g..4g+3 hold classes 2g and 2g+1, and only those
        g = i // 4
        assert np.flatnonzero(counts[i]).tolist() == [2 * g, 2 * g + 1]
        assert p.info["class_sets"][i] == [2 * g, 2 * g + 1]
    supply = np.bincount(POOLED, minlength=10)
    for k in range(10):  # the first 3 holders draw in [max(n/10, 4), n), the last takes the rest
        holders = counts[:, k][counts[:, k] > 0]
        share = supply[k] / 4
        assert holders.size == 4 and holders.sum() == supply[k]
        assert all(int(max(share / 10, 4)) <= c < int(share) for c in holders[:3])
    assert len(set(p.sizes("all").tolist())) > 1, "unbalanced sizes"
    assert make_partition("pfllib_pathological", TRAIN, TEST, 20, seed=0, classes_per_client=2) == p
    other = make_partition("pfllib_pathological", TRAIN, TEST, 20, seed=1, classes_per_client=2)
    assert not np.array_equal(p.sizes("all"), other.sizes("all"))


def test_pfllib_pathological_uneven_slots() -> None:
    # 13 clients x 3 slots, at most ceil(3.9) = 4 holders per class: clients 0-3 fill up on
    # classes 0-2, 4-7 on 3-5, 8-11 on 6-8, and class 9 goes whole to client 12
    p = make_partition("pfllib_pathological", TRAIN, TEST, 13, seed=2, classes_per_client=3)
    _check_union_partition(p, 13)
    counts = p.label_counts(POOLED, 10, "all")
    assert (counts > 0).sum(axis=1).tolist() == [3] * 12 + [1]
    assert (counts > 0).sum(axis=0).tolist() == [4] * 9 + [1]
    assert p.info["class_sets"][12] == [9] and counts[12, 9] == 700


@pytest.mark.parametrize("kind,num_clients,params,param", [
    ("pfllib_pathological", 7, {"classes_per_client": 2}, "classes_per_client"),
    ("pfllib_pathological", 15, {"classes_per_client": 3}, "classes_per_client"),
    ("pfllib_pathological", 10, {"classes_per_client": 11}, "classes_per_client"),
    ("pfllib_pathological", 10, {}, "classes_per_client"),
    ("pfllib_pathological", 10, {"classes_per_client": 2, "train_fraction": 1.0}, "train_fraction"),
    ("pfllib_pathological", 10, {"classes_per_client": 2, "least_samples": 4000}, "least_samples"),
    ("pfllib_dirichlet", 10, {"alpha": 0.0}, "alpha"),
    ("pfllib_dirichlet", 10, {"max_retries": 0}, "max_retries"),
    ("pfllib_dirichlet", 10, {"train_fraction": 0.0}, "train_fraction"),
    ("given", 3, {}, "kind"),
    ("given", 3, {"train_owners": np.zeros(TRAIN.size, dtype=np.int64)}, "train_owners"),
    ("given", 3, {"train_owners": np.zeros(5, dtype=np.int64), "test_owners": np.zeros(TEST.size, dtype=np.int64)},
     "train_owners"),
])
def test_bad_parameters(kind: str, num_clients: int, params: dict, param: str) -> None:
    with pytest.raises(PartitionError) as info:
        make_partition(kind, TRAIN, TEST, num_clients, seed=0, **params)
    assert info.value.param == param
    one_sentence(str(info.value))


# --------------------------------------------------------------------------- the real FedCP MNIST folder


@needs_fedcp_mnist
def test_real_fedcp_mnist(iso: Path) -> None:
    ds = load_dataset("pfllib", root=FEDCP_MNIST, download=False)
    assert ds.num_train == 52_492 and ds.num_test == 17_508
    assert ds.train_x.shape[1:] == (1, 28, 28) and ds.num_classes == 10
    totals = np.bincount(np.concatenate([ds.train_y.numpy(), ds.test_y.numpy()]), minlength=10)
    assert totals.tolist() == REAL_TOTALS
    config = json.loads((FEDCP_MNIST / "config.json").read_text())
    sizes = [sum(c for _, c in pairs) for pairs in config["Size of samples for labels in clients"]]
    train_sizes = np.bincount(ds.owners[0], minlength=20)
    assert (train_sizes + np.bincount(ds.owners[1], minlength=20)).tolist() == sizes
    assert train_sizes.tolist() == [math.floor(0.75 * n) for n in sizes]  # PFLlib's 75/25 split
    assert sources.dataset_shape("pfllib", FEDCP_MNIST) == (1, 28, 10)
    # the same images re-partitioned: 2 classes per client, PFLlib's pathological generator
    p = make_partition("pfllib_pathological", ds.train_y.numpy(), ds.test_y.numpy(), 20, seed=0, classes_per_client=2)
    counts = p.label_counts(pool_labels(ds.train_y.numpy(), ds.test_y.numpy()), 10, "all")
    assert ((counts > 0).sum(axis=1) == 2).all() and counts.sum() == 70_000


@needs_fedcp_mnist
def test_real_folder_md5_is_checked(iso: Path) -> None:
    copy = iso / "copy"
    shutil.copytree(FEDCP_MNIST, copy)
    for p in copy.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    copy.chmod(0o755)
    target = copy / "test" / "test1_.npz"
    # re-save with one pixel changed: still a well-formed PFLlib file, but not the pinned one
    x, y = pfllib._read_client(target.read_bytes(), str(target))  # the restricted reader
    x = x.copy()
    x[0, 0, 0, 0] = -x[0, 0, 0, 0]
    save_client(target, x, y)
    with pytest.raises(DatasetCorruptError) as info:
        load_dataset("pfllib", root=copy)
    assert str(target) in str(info.value) and "md5" in str(info.value) and "FedCP" in str(info.value)
    one_sentence(str(info.value))


@needs_fedcp_mnist
def test_real_fedcp_mnist_tiny_run(iso: Path) -> None:
    import pflcore

    config = ExperimentConfig.from_dict(dict(
        method="fedavg", dataset="pfllib", data_root=str(FEDCP_MNIST), model="fedcp_cnn",
        partition={"kind": "given", "subsample": 0.02}, num_clients=20, rounds=1, local_epochs=1,
        batch_size=10, lr=0.005, momentum=0.0, weight_decay=0.0, output_dir=str(iso / "out"),
        quiet=True, workers=0, seed=0))
    result = pflcore.run(config)
    assert result.summary["num_clients"] == 20 and result.summary["status"] == "finished"
    assert 0.0 <= result.summary["acc_mean"] <= 100.0
    assert result.client_acc.shape == (20,) and np.isfinite(result.client_acc).all()
