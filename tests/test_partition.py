"""Tests for pflcore.data.partition and pflcore.analysis.partition_plot."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from typing import Any

import numpy as np
import pytest

from pflcore.data.partition import (
    PARTITIONERS,
    Partition,
    PartitionError,
    RecyclingWarning,
    make_partition,
    pool_labels,
    subsample,
    validate_partition_args,
)


def _labels(num_classes: int, per_class: int, seed: int) -> np.ndarray:
    """Balanced labels in shuffled order (so nothing relies on label-sorted input)."""
    return np.random.default_rng(seed).permutation(np.repeat(np.arange(num_classes), per_class))


# 10 classes x 600 train / 100 test per class.
TRAIN = _labels(10, 600, 1)
TEST = _labels(10, 100, 2)
POOLED = pool_labels(TRAIN, TEST)
N_TRAIN = TRAIN.size
# Fashion-MNIST-sized: 10 classes x 6000 train / 1000 test per class.
FM_TRAIN = _labels(10, 6000, 3)
FM_TEST = _labels(10, 1000, 4)
# EMNIST-byclass-like: 62 classes x 200 train / 60 test per class.
EM_TRAIN = _labels(62, 200, 5)
EM_TEST = _labels(62, 60, 6)


def _ids(n: int, num_ids: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, num_ids, size=n)


# (case id, kind, num_clients, params, mixed) -- none of these needs recycling.  "mixed":
# a client's train and test come from one shared pool (not train split / test split).
CASES: list[tuple[str, str, int | None, dict[str, Any], bool]] = [
    ("dominant", "dominant", 5, {"samples_per_client": 200, "test_fraction": 0.25}, False),
    ("dominant-sizes", "dominant", 10, {"size_choices": [50, 100, 200], "test_fraction": 0.2}, False),
    (
        "patho-random",
        "pathological",
        10,
        {"classes_per_client": [3, 3, 5, 5, 8], "samples_per_client": 100, "test_fraction": 0.2},
        False,
    ),
    (
        "patho-clustered",
        "pathological",
        10,
        {
            "classes_per_client": 2,
            "class_sets": "clustered",
            "num_groups": 5,
            "samples_per_client": 120,
            "test_fraction": 0.2,
        },
        False,
    ),
    ("patho-even-train", "pathological", 20, {"classes_per_client": 2, "samples_per_client": None}, False),
    ("patho-even-union", "pathological", 20, {"classes_per_client": 2, "samples_per_client": None, "on": "union"}, True),
    ("dirichlet-train", "dirichlet", 20, {"alpha": 0.5}, False),
    ("dirichlet-train-tf", "dirichlet", 20, {"alpha": 1.0, "test_fraction": 0.1}, False),
    ("dirichlet-union", "dirichlet", 20, {"alpha": 0.1, "on": "union"}, True),
    ("iid", "iid", 7, {}, False),
    ("iid-spc", "iid", 10, {"samples_per_client": 100, "test_fraction": 0.3}, False),
    ("quantity", "quantity", 10, {"size_choices": [50, 100, 200], "test_fraction": 0.2}, False),
    ("natural-train", "natural", None, {"train_ids": _ids(N_TRAIN, 6, 7)}, True),
    ("domains", "domains", 8, {"train_domains": _ids(N_TRAIN, 4, 13), "test_domains": _ids(TEST.size, 4, 14),
                               "clients_per_domain": 2}, False),
    ("domains-table7", "domains", 8, {"train_domains": _ids(N_TRAIN, 4, 15), "test_domains": _ids(TEST.size, 4, 16),
                                      "clients_per_domain": 2, "alpha": 0.5, "on": "union", "train_fraction": 0.8},
     True),
    ("natural-pooled", "natural", None, {"ids": _ids(POOLED.size, 6, 8)}, True),
    ("natural-both", "natural", 6, {"train_ids": _ids(N_TRAIN, 6, 9), "test_ids": _ids(TEST.size, 6, 10)}, False),
    ("given", "given", 6, {"train_owners": _ids(N_TRAIN, 6, 11), "test_owners": _ids(TEST.size, 6, 12)}, False),
    ("pfllib-dirichlet", "pfllib_dirichlet", 20, {"alpha": 0.5}, True),
    ("pfllib-pathological", "pfllib_pathological", 20, {"classes_per_client": 2}, True),
    ("fedfa-shards", "fedfa_shards", 10, {}, False),
    ("fedfa-shards-tf", "fedfa_shards", 10, {"shard_size": 200, "test_fraction": 0.1}, False),
    ("fedfa-dirichlet", "fedfa_dirichlet", 20, {"alpha": 0.5}, False),
]
CASE_IDS = [c[0] for c in CASES]


def _make(case: tuple, seed: int = 0) -> Partition:
    _, kind, num_clients, params, _ = case
    return make_partition(kind, TRAIN, TEST, num_clients, seed=seed, **params)


def test_every_kind_has_a_case() -> None:
    assert {c[1] for c in CASES} == set(PARTITIONERS)


def test_one_registry_pairs_each_partitioner_with_its_fields_and_rules() -> None:
    """A kind's module holds its partitioner and its rules between parameters (a kind without
    any shares the empty one), and its fields declare exactly the partitioner's keyword-only
    parameters, in order, with the same defaults."""
    import inspect

    from pflcore.data.partition import KINDS

    assert list(KINDS) == list(PARTITIONERS)
    for name, kind in KINDS.items():
        module = f"pflcore.data.partition.{name}"
        assert kind.name == name and PARTITIONERS[name] is kind.partition
        assert kind.partition.__module__ == module
        assert kind.check.__module__ in (module, "pflcore.data.partition.common")
        signature = inspect.signature(kind.partition).parameters.values()
        declared = {p.name: p.default for p in signature if p.kind is p.KEYWORD_ONLY}
        assert list(kind.params) == list(declared), name
        assert {n: (inspect.Parameter.empty if f.required else f.default) for n, f in kind.params.items()} \
            == declared, name


# ------------------------------------------------------------------ invariants


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_invariants(case: tuple) -> None:
    _, kind, num_clients, _, mixed = case
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecyclingWarning)
        p = _make(case)
    assert p.kind == kind
    assert p.num_train_split == N_TRAIN
    if num_clients is not None:
        assert p.num_clients == num_clients
    for arrays in (p.train, p.test):
        for a in arrays:
            assert a.dtype == np.int64 and not a.flags.writeable
            assert np.all(np.diff(a) > 0), "sorted and no index twice within a client"
            assert a.size == 0 or (a.min() >= 0 and a.max() < POOLED.size)
    assert all(a.size > 0 for a in p.train)
    assert p.info.get("recycled_train", 0) == 0 and p.info.get("recycled_test", 0) == 0
    all_train = np.concatenate(p.train)
    assert np.unique(all_train).size == all_train.size, "no train index shared between clients"
    if mixed:
        all_test = np.concatenate(p.test)
        assert not np.isin(all_train, all_test).any(), "no train index in any client's test"
    else:
        assert all_train.max() < N_TRAIN
        assert all(a.size == 0 or a.min() >= N_TRAIN for a in p.test)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_seed_determinism(case: tuple) -> None:
    a, b, c = _make(case, seed=3), _make(case, seed=3), _make(case, seed=4)
    assert a == b
    assert all(np.array_equal(x, y) for x, y in zip(a.train, b.train))
    assert all(np.array_equal(x, y) for x, y in zip(a.test, b.test))
    if case[0] in ("natural-both", "given"):  # fully determined by the ids: nothing random
        return
    assert any(not np.array_equal(x, y) for x, y in zip(a.train + a.test, c.train + c.test))


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_json_round_trip_and_params(case: tuple) -> None:
    p = _make(case, seed=5)
    back = Partition.from_dict(json.loads(json.dumps(p.to_dict())))
    assert back == p
    assert p.params["seed"] == 5 and p.params["num_clients"] == p.num_clients
    if case[1] not in ("natural", "given", "domains"):  # params reproduce the partition exactly (ids are summarised)
        assert make_partition(p.kind, TRAIN, TEST, **p.params) == p


def test_global_rng_untouched() -> None:
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    for case in CASES:
        _make(case)
    assert np.array_equal(np.random.get_state()[1], before)


def test_label_counts_and_sizes() -> None:
    p = make_partition("iid", TRAIN, TEST, 4, seed=0)
    counts = p.label_counts(POOLED, 10)
    assert counts.shape == (4, 10)
    assert np.array_equal(counts.sum(1), p.sizes())
    assert np.array_equal(p.label_counts(POOLED, 10, "all"), counts + p.label_counts(POOLED, 10, "test"))
    assert p.sizes("all").sum() == POOLED.size


# -------------------------------------------------------------------- dominant


def test_dominant_exact_counts_fedpac_default() -> None:
    p = make_partition("dominant", FM_TRAIN, FM_TEST, 20, seed=0)
    pooled = pool_labels(FM_TRAIN, FM_TEST)
    train, test = p.label_counts(pooled, 10), p.label_counts(pooled, 10, "test")
    groups = [[0, 1, 2], [2, 3, 4], [4, 5, 6], [6, 7, 8], [8, 9, 0]]
    assert p.info["group"] == [i % 5 for i in range(20)]
    assert p.info["groups"] == groups
    for i in range(20):
        expected = np.full(10, 12)
        expected[groups[i % 5]] += 160
        assert np.array_equal(train[i], expected)
        assert np.array_equal(test[i], expected // 2)  # test_fraction 0.5 -> same proportions
    assert p.info["recycled_train"] == 0 and p.info["recycled_test"] == 0


def test_dominant_remainders_and_test_proportions() -> None:
    p = make_partition("dominant", FM_TRAIN, FM_TEST, 10, seed=1, samples_per_client=50, s=0.3, test_fraction=0.3)
    pooled = pool_labels(FM_TRAIN, FM_TEST)
    train, test = p.label_counts(pooled, 10), p.label_counts(pooled, 10, "test")
    assert np.all(train.sum(1) == 50) and np.all(test.sum(1) == 15)
    for i in range(10):
        dom = np.zeros(10, bool)
        dom[p.info["groups"][i % 5]] = True
        uniform = train[i] - np.where(dom, (35 // 3), 0)  # 15 uniform (1 or 2 per class) + 35 dominant (11 or 12)
        assert set(np.unique(uniform)) <= {1, 2, 3}
        assert train[i][dom].min() > train[i][~dom].max()
        # test proportions equal train proportions up to rounding
        assert np.all(np.abs(test[i] - train[i] * 15 / 50) < 1)


def test_dominant_emnist_three_groups() -> None:
    p = make_partition("dominant", EM_TRAIN, EM_TEST, 6, seed=0, samples_per_client=1000, test_fraction=0.25)
    counts = p.label_counts(pool_labels(EM_TRAIN, EM_TEST), 62)
    groups = [range(0, 10), range(10, 36), range(36, 62)]
    assert p.info["groups"] == [list(g) for g in groups]
    for i in range(6):
        g = i % 3
        dom = np.zeros(62, bool)
        dom[list(groups[g])] = True
        assert counts[i].sum() == 1000
        assert set(np.unique(counts[i][~dom])) <= {3, 4}  # 200 uniform over 62 classes
        q = 800 // dom.sum()  # 800 dominant samples: q or q + 1 per dominant class, on top of 3 or 4
        assert counts[i][dom].min() >= q + 3 and counts[i][dom].max() <= q + 5
    assert p.sizes("test").tolist() == [250] * 6


def test_dominant_size_choices() -> None:
    p = make_partition("dominant", FM_TRAIN, FM_TEST, 30, seed=0, size_choices=[300, 600, 1200], test_fraction=0.2)
    sizes = p.sizes()
    assert set(sizes.tolist()) == {300, 600, 1200}
    assert np.array_equal(p.sizes("test"), sizes // 5)


def test_dominant_recycling() -> None:
    # 100 clients x 600 on 6000 samples: demand far exceeds supply (as with FMNIST upstream).
    with pytest.warns(RecyclingWarning) as record:
        p = make_partition("dominant", TRAIN, TEST, 100, seed=0)
    assert len([w for w in record if issubclass(w.category, RecyclingWarning)]) == 1
    train = p.label_counts(POOLED, 10)
    test = p.label_counts(POOLED, 10, "test")
    supply = np.bincount(TRAIN, minlength=10)
    test_supply = np.bincount(TEST, minlength=10)
    assert p.info["recycled_train"] == np.maximum(train.sum(0) - supply, 0).sum() > 0
    assert p.info["recycled_test"] == np.maximum(test.sum(0) - test_supply, 0).sum() > 0
    assert all(np.unique(a).size == a.size == 600 for a in p.train)
    assert all(a.max() < N_TRAIN for a in p.train) and all(a.min() >= N_TRAIN for a in p.test)
    # the pool is used in full before anything is reused
    used = np.unique(np.concatenate(p.train))
    assert used.size == N_TRAIN


def test_dominant_recycling_straddling_clients_never_repeat() -> None:
    # demand per client close to the supply forces a cycle boundary inside many clients
    labels = _labels(10, 100, 11)
    with pytest.warns(RecyclingWarning):
        p = make_partition("dominant", labels, labels, 40, seed=2, samples_per_client=300, s=0.5, test_fraction=1.0)
    assert p.info["recycled_train"] > 0
    assert all(np.unique(a).size == a.size == 300 for a in p.train + p.test)


def test_recycle_false_refuses() -> None:
    with pytest.raises(PartitionError, match="recycle"):
        make_partition("dominant", TRAIN, TEST, 100, seed=0, recycle=False)


# ---------------------------------------------------------------- pathological


def test_pathological_classes_per_group_random() -> None:
    p = make_partition(
        "pathological", FM_TRAIN, FM_TEST, 20, seed=0, classes_per_client=[3, 3, 5, 5, 8], class_sets="random"
    )
    counts = p.label_counts(pool_labels(FM_TRAIN, FM_TEST), 10)
    sets = p.info["class_sets"]
    for i in range(20):
        held = np.flatnonzero(counts[i])
        assert held.tolist() == sets[i]
        assert held.size == [3, 3, 5, 5, 8][i % 5]
        assert counts[i].sum() == 600 and counts[i][held].max() - counts[i][held].min() <= 1
        test_counts = p.label_counts(pool_labels(FM_TRAIN, FM_TEST), 10, "test")[i]
        assert np.flatnonzero(test_counts).tolist() == sets[i] and test_counts.sum() == 300
    # random: clients of the same group do not all share one set
    assert any(len({tuple(sets[i]) for i in range(g, 20, 5)}) > 1 for g in range(5))


def test_pathological_clustered_shares_sets_within_group() -> None:
    p = make_partition(
        "pathological",
        FM_TRAIN,
        FM_TEST,
        20,
        seed=0,
        classes_per_client=[3, 3, 5, 5, 8],
        class_sets="clustered",
        test_fraction=0.2,
    )
    sets = [tuple(s) for s in p.info["class_sets"]]
    for g in range(5):
        assert len({sets[i] for i in range(g, 20, 5)}) == 1
    assert len(set(sets)) == 5  # group sets differ
    assert p.info["group"] == [i % 5 for i in range(20)]


@pytest.mark.parametrize("clients, per_client", [(10, 2), (7, 3), (20, [3, 3, 5, 5, 8])])
def test_pathological_balanced_holds_every_class_equally_often(clients, per_client) -> None:
    p = make_partition("pathological", FM_TRAIN, FM_TEST, clients, seed=2021, classes_per_client=per_client,
                       class_sets="balanced", samples_per_client=100)
    sizes = [per_client] * clients if isinstance(per_client, int) else [per_client[i % 5] for i in range(clients)]
    sets = p.info["class_sets"]
    assert [len(c) for c in sets] == sizes and all(len(set(c)) == len(c) for c in sets)
    holders = np.bincount(np.concatenate(sets), minlength=10)
    assert holders.max() - holders.min() <= 1  # 10 x 2 -> every class at exactly 2 clients
    counts = p.label_counts(pool_labels(FM_TRAIN, FM_TEST), 10)
    assert all(np.flatnonzero(counts[i]).tolist() == sets[i] for i in range(clients))
    again = make_partition("pathological", FM_TRAIN, FM_TEST, clients, seed=2021, classes_per_client=per_client,
                           class_sets="balanced", samples_per_client=100)
    assert again.info["class_sets"] == sets


def test_pathological_even_split_uses_whole_pools() -> None:
    p = make_partition("pathological", TRAIN, TEST, 20, seed=0, classes_per_client=2, samples_per_client=None)
    counts = p.label_counts(POOLED, 10)
    assert all(np.count_nonzero(c) == 2 for c in counts)
    held_classes = np.flatnonzero(counts.sum(0))
    assert np.array_equal(counts.sum(0)[held_classes], np.bincount(TRAIN)[held_classes])
    for k in held_classes:
        col = counts[:, k][counts[:, k] > 0]
        assert col.max() - col.min() <= 1


# ------------------------------------------------------------------- dirichlet


def _mean_max_share(p: Partition) -> float:
    counts = p.label_counts(POOLED, 10)
    return float((counts.max(1) / counts.sum(1)).mean())


def test_dirichlet_min_size_and_skew() -> None:
    low = make_partition("dirichlet", TRAIN, TEST, 20, seed=0, alpha=0.1, min_size=50)
    high = make_partition("dirichlet", TRAIN, TEST, 20, seed=0, alpha=10.0, min_size=50)
    assert low.sizes().min() >= 50 and high.sizes().min() >= 50
    assert _mean_max_share(low) > _mean_max_share(high) + 0.3
    assert low.sizes().sum() == N_TRAIN  # on="train" partitions the whole train split
    assert low.sizes("test").sum() == TEST.size  # and the test split with the same proportions


def test_dirichlet_union_train_fraction() -> None:
    p = make_partition("dirichlet", TRAIN, TEST, 20, seed=0, alpha=0.5, on="union", train_fraction=0.8)
    total = p.sizes("all")
    assert total.sum() == POOLED.size
    expected = np.clip(np.floor(0.8 * total + 0.5), 1, total - 1)
    assert np.array_equal(p.sizes("train"), expected)
    # stratified: each class's train share is within one sample of 80%
    tr, te = p.label_counts(POOLED, 10), p.label_counts(POOLED, 10, "test")
    assert np.all(np.abs(tr - 0.8 * (tr + te)) <= 1.0 + 1e-9)


def test_dirichlet_infeasible() -> None:
    with pytest.raises(PartitionError, match="min_size"):
        make_partition("dirichlet", TRAIN, TEST, 10, seed=0, alpha=1e-3, min_size=550, max_retries=20)
    with pytest.raises(PartitionError, match="min_size"):
        make_partition("dirichlet", TRAIN, TEST, 20, seed=0, alpha=1.0, min_size=10_000)


# ------------------------------------------------------- iid, quantity, natural


def test_iid_equal_split() -> None:
    p = make_partition("iid", TRAIN, TEST, 7, seed=0)
    assert p.sizes().max() - p.sizes().min() <= 1 and p.sizes().sum() == N_TRAIN
    assert np.array_equal(np.sort(np.concatenate(p.test)), np.arange(N_TRAIN, POOLED.size))


def test_quantity_sizes_from_set() -> None:
    p = make_partition("quantity", FM_TRAIN, FM_TEST, 20, seed=0, size_choices=[300, 600, 1200])
    assert set(p.sizes().tolist()) == {300, 600, 1200}
    assert np.array_equal(p.sizes("test"), p.sizes() // 2)


def test_natural_ids_map() -> None:
    ids = np.array(["w%02d" % v for v in _ids(N_TRAIN, 4, 12)])
    p = make_partition("natural", TRAIN, TEST, seed=0, train_ids=ids, train_fraction=0.8)
    assert p.info["client_ids"] == ["w00", "w01", "w02", "w03"]
    for i, name in enumerate(p.info["client_ids"]):
        mine = np.flatnonzero(ids == name)
        assert np.array_equal(np.sort(np.concatenate([p.train[i], p.test[i]])), mine)
    both = make_partition(
        "natural", TRAIN, TEST, 6, seed=0, train_ids=_ids(N_TRAIN, 6, 9), test_ids=_ids(TEST.size, 6, 10)
    )
    assert np.array_equal(both.test[2] - N_TRAIN, np.flatnonzero(_ids(TEST.size, 6, 10) == 2))
    with pytest.raises(PartitionError, match="num_clients"):
        make_partition("natural", TRAIN, TEST, 5, seed=0, train_ids=ids)


# ------------------------------------------------------------------- subsample


def test_subsample_fractions_nested() -> None:
    p = make_partition("dirichlet", TRAIN, TEST, 20, seed=0, alpha=0.5, on="union", train_fraction=0.8)
    subs = {f: subsample(p, f, seed=9) for f in (0.75, 0.5, 0.25)}
    for f, q in subs.items():
        assert np.array_equal(q.sizes(), np.maximum(1, np.floor(f * p.sizes() + 0.5)))
        assert all(np.isin(a, b).all() for a, b in zip(q.train, p.train))
        assert all(np.array_equal(a, b) for a, b in zip(q.test, p.test))
        assert q.kind == "dirichlet+subsample" and q.params["subsample"] == [{"fraction": f, "seed": 9}]
        assert q.info["train_sizes_before_subsample"] == p.sizes().tolist()
    assert all(np.isin(a, b).all() for a, b in zip(subs[0.25].train, subs[0.5].train))
    assert Partition.from_dict(json.loads(json.dumps(subs[0.5].to_dict()))) == subs[0.5]
    with pytest.raises(PartitionError, match="fraction"):
        subsample(p, 0.0, seed=0)


# ------------------------------------------------------------------- bad input


BAD: list[tuple[str, int | None, dict[str, Any], str]] = [
    ("dirichlet", 10, {"alpha": 0.0}, "alpha"),
    ("dirichlet", 10, {"alpha": -1.0}, "alpha"),
    ("dirichlet", 10, {}, "alpha"),
    ("dirichlet", 10, {"alpha": 0.5, "train_fraction": 0.8}, "train_fraction"),
    ("dirichlet", 10, {"alpha": 0.5, "on": "both"}, "on"),
    ("dominant", 10, {"s": 1.5}, "'s' = 1.5"),
    ("dominant", 10, {"samples_per_client": 0}, "samples_per_client"),
    ("dominant", 10, {"groups": [[0, 1], [1, 11]]}, "groups"),
    ("dominant", 10, {"samples_per_client": 100_000}, "samples_per_client"),
    ("nonsense", 10, {}, "kind"),
    ("iid", 10**6, {}, "num_clients"),
    ("iid", 0, {}, "num_clients"),
    ("iid", None, {}, "num_clients"),
    ("iid", 10, {"test_fraction": 0.0}, "test_fraction"),
    ("iid", 10, {"test_fraction": 1.5}, "test_fraction"),
    ("iid", 10, {"foo": 1}, "foo"),
    ("quantity", 10, {}, "size_choices"),
    ("quantity", 10, {"size_choices": [0, 10]}, "size_choices"),
    ("pathological", 10, {"classes_per_client": 11}, "classes_per_client"),
    ("pathological", 10, {"classes_per_client": 2, "class_sets": "clustered"}, "num_groups"),
    ("pathological", 10, {"classes_per_client": 2, "class_sets": "sorted"}, "class_sets"),
    ("pathological", 10, {"classes_per_client": 2, "on": "union"}, "on"),
    ("natural", None, {}, "ids"),
]


@pytest.mark.parametrize("kind,num_clients,params,needle", BAD, ids=[f"{b[0]}-{b[3]}" for b in BAD])
def test_bad_input(kind: str, num_clients: int | None, params: dict, needle: str) -> None:
    with pytest.raises(PartitionError, match=needle) as exc:
        make_partition(kind, TRAIN, TEST, num_clients, seed=0, **params)
    message = str(exc.value)
    assert message.endswith(".") and "\n" not in message


def test_bad_seed_labels_and_groups() -> None:
    with pytest.raises(PartitionError, match="seed"):
        make_partition("iid", TRAIN, TEST, 4, seed=-1)
    with pytest.raises(PartitionError, match="groups"):
        make_partition("dominant", _labels(7, 100, 0), _labels(7, 10, 0), 4, seed=0)
    with pytest.raises(PartitionError, match="num_classes"):
        make_partition("iid", TRAIN, TEST, 4, seed=0, num_classes=5)
    with pytest.raises(PartitionError, match="train_labels"):
        make_partition("iid", TRAIN.astype(float), TEST, 4, seed=0)


def test_validate_partition_args_without_labels() -> None:
    bound = validate_partition_args("dirichlet", 20, alpha=0.1, on="union")
    assert bound["min_size"] == 10 and bound["max_retries"] == 100
    with pytest.raises(PartitionError, match="alpha"):
        validate_partition_args("dirichlet", 20, alpha=0)
    with pytest.raises(PartitionError, match="groups"):
        validate_partition_args("dominant", 20, num_classes=100)


# ------------------------------------------------------------------------ plot


def test_core_does_not_import_matplotlib() -> None:
    code = (
        "import sys, pflcore.data.partition, pflcore.analysis.partition_plot; "
        "assert 'matplotlib' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_plot_partition() -> None:
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pflcore.analysis.partition_plot import plot_partition

    p = make_partition("dirichlet", TRAIN, TEST, 20, seed=0, alpha=0.1)
    ax = plot_partition(p, TRAIN, TEST, 10, class_names=[f"c{k}" for k in range(10)])
    try:
        assert len(ax.collections) == 1
        assert "dirichlet" in ax.get_title() and "alpha=0.1" in ax.get_title()
        offsets = ax.collections[0].get_offsets()
        assert len(offsets) == np.count_nonzero(p.label_counts(POOLED, 10))
        sizes = ax.collections[0].get_sizes()
        counts = p.label_counts(POOLED, 10)
        assert np.allclose(sizes / sizes.max(), counts[counts > 0] / counts.max())
        fig, ax2 = plt.subplots()
        assert plot_partition(p, TRAIN, TEST, 10, split="test", ax=ax2) is ax2
    finally:
        plt.close("all")
