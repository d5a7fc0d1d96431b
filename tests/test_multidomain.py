"""DIGIT-5 as one federated dataset (pFedFDA appendix D.1, Table 7): the ``digit5`` dataset
built from its five members, each written here as small files in its real format, and the
``domains`` partition kind (one domain per client)."""

from __future__ import annotations

import bz2
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import pflcore
from pflcore.config import ConfigError, ExperimentConfig
from pflcore.data import sources
from pflcore.data.partition import Partition, PartitionError, make_partition, validate_partition_args
from pflcore.data.sources import DatasetNotFoundError, dataset_shape, load_dataset
from pflcore.data.sources.common import mean_std
from pflcore.data.sources.digit5 import conform
from pflcore.data.sources.multidomain import MultiDomainDataset

from test_fedfa_data import libsvm_line, write_mat, write_mnistm
from test_sources import MNIST_STEMS, make_split, write_idx_set

MEMBERS = ("mnist", "svhn", "usps", "synthdigits", "mnistm")
N_TRAIN, N_TEST = 6, 4  # per member


def one_sentence(message: str) -> None:
    assert message.endswith(".") and "\n" not in message and ". " not in message, message


def write_digit5(root: Path) -> Path:
    """All five members, N_TRAIN train and N_TEST test samples each, in their published formats."""
    rng = np.random.default_rng(0)
    write_idx_set(root / "mnist", MNIST_STEMS, make_split(N_TRAIN, 10, 1), make_split(N_TEST, 10, 2))
    write_mat(root / "svhn" / "train_32x32.mat", N_TRAIN, rng.integers(1, 11, N_TRAIN), 3)  # 10 is the digit 0
    write_mat(root / "svhn" / "test_32x32.mat", N_TEST, rng.integers(1, 11, N_TEST), 4)
    (root / "usps").mkdir()
    for name, n in (("usps.bz2", N_TRAIN), ("usps.t.bz2", N_TEST)):
        lines = [libsvm_line(int(label), rng.uniform(-1, 1, 256)) for label in rng.integers(1, 11, n)]
        (root / "usps" / name).write_bytes(bz2.compress("".join(lines).encode()))
    write_mat(root / "synthdigits" / "synth_train_32x32.mat", N_TRAIN, rng.integers(0, 10, N_TRAIN), 5)
    write_mat(root / "synthdigits" / "synth_test_32x32.mat", N_TEST, rng.integers(0, 10, N_TEST), 6)
    write_mnistm(root / "mnist_m", {"train": N_TRAIN, "test": N_TEST}, 28)
    return root


@pytest.fixture
def digit5_root(iso: Path) -> Path:
    pytest.importorskip("PIL")
    pytest.importorskip("scipy")
    return write_digit5(iso / "data")


# ------------------------------------------------------------------ the dataset


def test_digit5_is_registered_like_any_dataset() -> None:
    assert "digit5" in sources.DATASETS and sources.SHAPES["digit5"] == (3, 32, 10)
    assert sources.canonical_name("DIGIT-5") == sources.canonical_name("Mixed Digits") == "digit5"
    assert dataset_shape("digit5") == (3, 32, 10)
    config = ExperimentConfig.from_dict({"dataset": "DIGIT-5", "model": "fedpac_cnn", "num_clients": 20,
                                         "partition": {"kind": "domains", "alpha": 0.5, "on": "union",
                                                       "train_fraction": 0.8}})
    config.validate()  # the declared shape fits the model; nothing is loaded


def test_combined_dataset(digit5_root: Path) -> None:
    ds = load_dataset("digit5", root=digit5_root, download=False)
    assert isinstance(ds, MultiDomainDataset) and ds.name == "digit5"
    assert repr(ds) == ("Dataset(name='digit5', train=30, test=20, shape=(3, 32, 32), num_classes=10, "
                        f"domains={MEMBERS})")
    assert ds.train_x.shape == (5 * N_TRAIN, 3, 32, 32) and ds.test_x.shape == (5 * N_TEST, 3, 32, 32)
    assert ds.train_x.dtype == torch.uint8 and ds.shape == (3, 32, 10) and ds.classes == tuple("0123456789")
    assert ds.domains.names == MEMBERS
    assert ds.domains.train.tolist() == np.repeat(np.arange(5), N_TRAIN).tolist()
    assert ds.domains.test.tolist() == np.repeat(np.arange(5), N_TEST).tolist()
    assert not ds.domains.train.flags.writeable
    for split in ("train", "test"):
        y = getattr(ds, f"{split}_y")
        assert y.dtype == torch.int64 and int(y.min()) >= 0 and int(y.max()) <= 9
    for d, member in enumerate(MEMBERS):  # each member's samples, in order, conformed to 3x32x32
        alone = load_dataset(member, root=digit5_root, download=False)
        rows = slice(d * N_TRAIN, (d + 1) * N_TRAIN)
        assert torch.equal(ds.train_y[rows], alone.train_y)
        assert torch.equal(ds.train_x[rows], conform(alone, 3, 32).train_x)
        assert torch.equal(ds.test_y[d * N_TEST:(d + 1) * N_TEST], alone.test_y)
    usps = ds.train_x[2 * N_TRAIN]  # grey made RGB: three equal channels
    assert torch.equal(usps[0], usps[1]) and torch.equal(usps[1], usps[2])
    assert (ds.mean, ds.std) == mean_std(ds.train_x.numpy())  # the combined training split's statistics
    assert load_dataset("digit5", root=digit5_root, download=False) is ds  # kept until the files change
    sources.clear_cache()
    assert load_dataset("digit5", root=digit5_root, download=False) is not ds


@pytest.mark.parametrize("member,folder,needle", [
    ("mnistm", "mnist_m", "by hand"),
    ("mnist", "mnist", "downloading it failed"),
])
def test_missing_member_says_which_and_where(digit5_root: Path, member: str, folder: str, needle: str) -> None:
    shutil.rmtree(digit5_root / folder)
    with pytest.raises(DatasetNotFoundError) as info, pytest.warns(UserWarning, match=f"holds no {member} files"):
        load_dataset("digit5", root=digit5_root)
    message = str(info.value)
    one_sentence(message)
    assert f"its member {member!r} is missing" in message and str(digit5_root) in message and needle in message
    with pytest.raises(DatasetNotFoundError, match="not an existing folder") as info:
        load_dataset("digit5", root=digit5_root / "nowhere")
    one_sentence(str(info.value))


# ------------------------------------------------------------------ the partition


def _labels(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 10, n)


# 5 domains of different sizes, their samples interleaved (nothing relies on domain order)
TRAIN_DOMAINS = np.random.default_rng(1).permutation(np.repeat(np.arange(5), [400, 300, 200, 500, 350]))
TEST_DOMAINS = np.random.default_rng(2).permutation(np.repeat(np.arange(5), [100, 80, 50, 120, 90]))
TRAIN, TEST = _labels(TRAIN_DOMAINS.size, 3), _labels(TEST_DOMAINS.size, 4)
SPLIT_MODES = [{}, {"alpha": 0.5}, {"on": "union"}, {"alpha": 0.5, "on": "union", "train_fraction": 0.8}]


def _domains_partition(seed: int = 0, num_clients: int | None = 20, **params) -> Partition:
    return make_partition("domains", TRAIN, TEST, num_clients, seed=seed, train_domains=TRAIN_DOMAINS,
                          test_domains=TEST_DOMAINS, **params)


def check_invariants(p: Partition, train_domains: np.ndarray, test_domains: np.ndarray, per_domain: int) -> None:
    """Sorted, read-only, disjoint and complete; client c holds only domain c // per_domain."""
    n_train = train_domains.size
    pooled_domains = np.concatenate([train_domains, test_domains])
    assert p.num_clients == per_domain * (int(pooled_domains.max()) + 1)
    for a in (*p.train, *p.test):
        assert a.dtype == np.int64 and not a.flags.writeable and np.all(np.diff(a) > 0)
    used = np.concatenate([*p.train, *p.test])
    assert np.array_equal(np.sort(used), np.arange(pooled_domains.size)), "every sample exactly once"
    assert not np.isin(np.concatenate(p.train), np.concatenate(p.test)).any()
    for c in range(p.num_clients):
        assert p.train[c].size > 0
        assert np.all(pooled_domains[np.concatenate([p.train[c], p.test[c]])] == c // per_domain)
    if p.params["on"] == "train":  # train from the train split, test from the test split
        assert all(a.size == 0 or a.max() < n_train for a in p.train)
        assert all(a.size == 0 or a.min() >= n_train for a in p.test)
    assert p.info["client_domains"] == [c // per_domain for c in range(p.num_clients)]


@pytest.mark.parametrize("params", SPLIT_MODES, ids=["uniform", "dirichlet", "uniform-union", "table7"])
def test_partition_invariants_and_seed(params: dict) -> None:
    p = _domains_partition(**params)
    check_invariants(p, TRAIN_DOMAINS, TEST_DOMAINS, 4)
    assert p == _domains_partition(**params)
    assert p != _domains_partition(seed=1, **params)
    assert Partition.from_dict(p.to_dict()) == p
    assert p.params["train_domains"] == f"<{TRAIN.size} ids>" and p.params["clients_per_domain"] == 4
    if "alpha" not in params and params.get("on") != "union":  # near-equal parts of each domain's splits
        sizes = p.sizes("train").reshape(5, 4)
        assert np.all(sizes.max(axis=1) - sizes.min(axis=1) <= 1)
        assert sizes.sum(axis=1).tolist() == [400, 300, 200, 500, 350]
    if params.get("on") == "union":
        fraction = params.get("train_fraction", 0.75)
        assert abs(p.sizes("train").sum() / p.sizes("all").sum() - fraction) < 0.01


def test_partition_infers_num_clients_and_takes_other_group_sizes() -> None:
    check_invariants(_domains_partition(num_clients=None, clients_per_domain=3), TRAIN_DOMAINS, TEST_DOMAINS, 3)
    check_invariants(_domains_partition(num_clients=5, clients_per_domain=1), TRAIN_DOMAINS, TEST_DOMAINS, 1)


def test_partition_of_the_combined_dataset(digit5_root: Path) -> None:
    ds = load_dataset("digit5", root=digit5_root, download=False)
    p = make_partition("domains", ds.train_y.numpy(), ds.test_y.numpy(), 10, seed=0, clients_per_domain=2,
                       train_domains=ds.domains.train, test_domains=ds.domains.test)
    check_invariants(p, ds.domains.train, ds.domains.test, 2)
    assert p.sizes("train").tolist() == [N_TRAIN // 2] * 10


SMALL_FIRST = np.repeat([0, 1], [5, 100])  # domain 0 has 5 train samples (and 1 test sample)
SMALL_TEST = np.repeat([0, 1], [1, 20])


@pytest.mark.parametrize("num_clients,params,needle", [
    (10, {}, "num_clients must be 20"),
    (20, {"clients_per_domain": 0}, "clients_per_domain"),
    (20, {"alpha": 0}, "alpha"),
    (20, {"on": "both"}, "on"),
    (20, {"train_fraction": 0.8}, "train_fraction"),
    (20, {"min_size": 5}, "min_size"),
    (20, {"train_domains": TRAIN_DOMAINS[:10]}, "train_domains"),
    (4, {"train_domains": SMALL_FIRST, "test_domains": SMALL_TEST, "clients_per_domain": 2, "alpha": 0.5},
     "in domain 0 .*min_size=10 is infeasible"),
    (12, {"train_domains": SMALL_FIRST, "test_domains": SMALL_TEST, "clients_per_domain": 6},
     "in domain 0 .*clients_per_domain=6 is infeasible"),
])
def test_bad_partition_input(num_clients: int, params: dict, needle: str) -> None:
    kwargs = {"train_domains": TRAIN_DOMAINS, "test_domains": TEST_DOMAINS, **params}
    train, test = _labels(kwargs["train_domains"].size, 5), _labels(kwargs["test_domains"].size, 6)
    if kwargs["train_domains"].size == 10:  # too short for the labels
        train = TRAIN
    with pytest.raises(PartitionError, match=needle) as info:
        make_partition("domains", train, test, num_clients, seed=0, **kwargs)
    one_sentence(str(info.value))


def test_dataset_without_domains_is_refused_in_one_sentence() -> None:
    with pytest.raises(PartitionError, match="records none") as info:
        make_partition("domains", TRAIN, TEST, 20, seed=0)
    one_sentence(str(info.value))
    with pytest.raises(PartitionError, match="go together"):
        validate_partition_args("domains", 20, train_domains=TRAIN_DOMAINS)
    with pytest.raises(ConfigError, match="partition.alpha"):
        ExperimentConfig.from_dict({"dataset": "digit5", "model": "fedpac_cnn", "num_clients": 20,
                                    "partition": {"kind": "domains", "alpha": -1}}).validate()


# ------------------------------------------------------------------ end to end


@pytest.mark.slow
def test_one_round_on_digit5(digit5_root: Path, tmp_path: Path) -> None:
    config = {
        "method": "fedavg", "dataset": "digit5", "data_root": str(digit5_root), "model": "fedpac_cnn",
        "num_clients": 10, "partition": {"kind": "domains", "clients_per_domain": 2}, "rounds": 1,
        "local_epochs": 1, "batch_size": 2, "lr": 0.01, "workers": 0, "quiet": True, "seed": 3,
        "output_dir": str(tmp_path / "results"),
    }
    result = pflcore.run(config)
    assert len(result.history) == 1 and result.client_acc.shape[-1] == 10
    assert np.isfinite(result.history[0]["train_loss"])
    with np.load(result.path / "partition.npz") as saved:
        train = [saved[f"train_{c}"] for c in range(10)]
    assert [a.size for a in train] == [N_TRAIN // 2] * 10
    assert all(np.all(a // N_TRAIN == c // 2) for c, a in enumerate(train))  # client c: domain c // 2
    with pytest.raises(PartitionError, match="num_clients must be 10") as info:
        pflcore.run({**config, "num_clients": 8, "name": "eight"})
    one_sentence(str(info.value))
