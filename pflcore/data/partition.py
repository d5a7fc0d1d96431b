"""Partitioners: split a labelled dataset into per-client train/test index arrays.

Every partitioner takes the labels of the dataset's train split and test split and
returns indices into the POOLED sample space ``concat(train split, test split)``:
index ``i < n_train`` is train-split sample ``i``; index ``n_train + j`` is test-split
sample ``j``.  "Split-based" partitions (FedPAC) draw client train sets from the train
split and client test sets from the test split; "union" partitions (FedCP, pFedFDA)
partition both splits together and then split each client's samples into train/test.
Both produce the same :class:`Partition`.

Conventions (all partitioners):

* one ``numpy.random.default_rng(seed)`` drives everything; same arguments and seed
  give identical arrays;
* every client index array is int64, sorted ascending and read-only;
* "round" means round half up: ``floor(x + 0.5)``;
* a size that is split over several classes (an even split, or a split proportional
  to other counts) is an integer split whose remainders are distributed
  deterministically (largest remainder, ties to the lower class / rotated by client id),
  so totals are exact;
* where the per-client demand for a class exceeds that class's supply in a split, the
  overflow is served from a fresh permutation of that class's pool ("recycling", as the
  FedPAC upstream code does); an index never repeats inside one client's array, the
  number of recycled draws is recorded in ``info["recycled_train"]`` /
  ``info["recycled_test"]`` and one :class:`RecyclingWarning` is emitted.

Kinds (``PARTITIONERS``): ``dominant``, ``pathological``, ``dirichlet``, ``iid``,
``quantity``, ``natural``; plus the transform :func:`subsample`.
"""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "PARTITIONERS",
    "Partition",
    "PartitionError",
    "RecyclingWarning",
    "make_partition",
    "pool_labels",
    "subsample",
    "validate_partition_args",
]

_FORMAT_VERSION = 1
_SPLITS = ("train", "test", "all")


class PartitionError(ValueError):
    """A partition argument is invalid or the requested partition is infeasible;
    ``param`` names the partition parameter at fault, when there is one."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


class RecyclingWarning(UserWarning):
    """Some samples were handed to more than one client because a class ran out."""


# --------------------------------------------------------------------------- result


@dataclass(frozen=True, eq=False)
class Partition:
    """Per-client train/test index arrays into the pooled (train split + test split) space.

    ``train[i]`` / ``test[i]`` are client ``i``'s sorted, read-only int64 indices;
    indices ``< num_train_split`` are train-split samples, the others test-split samples
    (offset by ``num_train_split``).  ``params`` are the arguments that produced the
    partition (feeding them back to :func:`make_partition` with the same labels gives an
    identical partition, except for ``natural`` whose id arrays are only summarised);
    ``info`` holds derived facts (groups, class sets, recycled draws, ...).
    ``params`` and ``info`` are normalised to JSON types on construction.
    """

    train: tuple[np.ndarray, ...]
    test: tuple[np.ndarray, ...]
    num_train_split: int
    kind: str
    params: dict
    info: dict

    def __post_init__(self) -> None:
        if len(self.train) != len(self.test):
            raise PartitionError(
                f"train has {len(self.train)} clients but test has {len(self.test)}; "
                "both must list the same clients."
            )
        object.__setattr__(self, "train", tuple(_frozen_index_array(a) for a in self.train))
        object.__setattr__(self, "test", tuple(_frozen_index_array(a) for a in self.test))
        object.__setattr__(self, "num_train_split", int(self.num_train_split))
        object.__setattr__(self, "params", _jsonable(dict(self.params)))
        object.__setattr__(self, "info", _jsonable(dict(self.info)))

    @property
    def num_clients(self) -> int:
        """Number of clients."""
        return len(self.train)

    def _arrays(self, split: str) -> list[np.ndarray]:
        if split not in _SPLITS:
            raise PartitionError(f"split={split!r} is invalid; allowed: {', '.join(_SPLITS)}.")
        if split == "train":
            return list(self.train)
        if split == "test":
            return list(self.test)
        return [np.concatenate([a, b]) for a, b in zip(self.train, self.test)]

    def sizes(self, split: str = "train") -> np.ndarray:
        """Number of samples of each client in ``split`` ("train", "test" or "all")."""
        return np.array([a.size for a in self._arrays(split)], dtype=np.int64)

    def label_counts(
        self, pooled_labels: np.ndarray, num_classes: int, split: str = "train"
    ) -> np.ndarray:
        """Per-client class counts, shape ``(num_clients, num_classes)``.

        ``pooled_labels`` are the labels of the pooled space (see :func:`pool_labels`).
        """
        labels = np.asarray(pooled_labels)
        arrays = self._arrays(split)
        lengths = np.array([a.size for a in arrays], dtype=np.int64)
        flat = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)
        if flat.size and flat.max() >= labels.size:
            raise PartitionError(
                f"pooled_labels has {labels.size} entries but the partition uses index "
                f"{int(flat.max())}; pass concat(train labels, test labels)."
            )
        picked = labels[flat].astype(np.int64)
        if picked.size and (picked.min() < 0 or picked.max() >= num_classes):
            raise PartitionError(
                f"num_classes={num_classes} is invalid: the labels contain class "
                f"{int(picked.max())} (labels must lie in [0, num_classes))."
            )
        owner = np.repeat(np.arange(len(arrays), dtype=np.int64), lengths)
        cells = owner * num_classes + picked
        counts = np.bincount(cells, minlength=len(arrays) * num_classes)
        return counts.reshape(len(arrays), num_classes)

    def to_dict(self) -> dict:
        """JSON-serialisable form (lists of ints), inverse of :meth:`from_dict`."""
        return {
            "format": "pflcore.partition",
            "version": _FORMAT_VERSION,
            "kind": self.kind,
            "num_train_split": self.num_train_split,
            "params": self.params,
            "info": self.info,
            "train": [a.tolist() for a in self.train],
            "test": [a.tolist() for a in self.test],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Partition:
        """Rebuild a partition written by :meth:`to_dict`."""
        if data.get("format") != "pflcore.partition" or data.get("version") != _FORMAT_VERSION:
            raise PartitionError(
                f"format={data.get('format')!r} version={data.get('version')!r} is not a "
                f"partition written by this library (expected 'pflcore.partition' "
                f"version {_FORMAT_VERSION})."
            )
        return cls(
            train=tuple(np.asarray(a, dtype=np.int64) for a in data["train"]),
            test=tuple(np.asarray(a, dtype=np.int64) for a in data["test"]),
            num_train_split=int(data["num_train_split"]),
            kind=str(data["kind"]),
            params=dict(data["params"]),
            info=dict(data["info"]),
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Partition):
            return NotImplemented
        return (
            self.kind == other.kind
            and self.num_train_split == other.num_train_split
            and self.params == other.params
            and self.info == other.info
            and self.num_clients == other.num_clients
            and all(np.array_equal(a, b) for a, b in zip(self.train, other.train))
            and all(np.array_equal(a, b) for a, b in zip(self.test, other.test))
        )

    __hash__ = None  # type: ignore[assignment]


def pool_labels(train_labels: np.ndarray, test_labels: np.ndarray) -> np.ndarray:
    """Labels of the pooled space ``concat(train split, test split)``."""
    return np.concatenate([np.asarray(train_labels), np.asarray(test_labels)])


# ------------------------------------------------------------------- small helpers


def _frozen_index_array(a: Any) -> np.ndarray:
    arr = np.asarray(a)
    if arr.ndim != 1 or not (arr.size == 0 or np.issubdtype(arr.dtype, np.integer)):
        raise PartitionError(
            f"client index arrays must be 1-D integer arrays, got shape {arr.shape} "
            f"dtype {arr.dtype}."
        )
    out = np.array(arr, dtype=np.int64, copy=True)
    out.setflags(write=False)
    return out


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise PartitionError(f"value {obj!r} of type {type(obj).__name__} is not JSON-serialisable.")


def _round_half_up(x: Any) -> np.ndarray:
    return np.floor(np.asarray(x, dtype=np.float64) + 0.5).astype(np.int64)


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _is_real(v: Any) -> bool:
    return _is_int(v) or (isinstance(v, (float, np.floating)) and math.isfinite(v))


def _need_int(kind: str, name: str, v: Any, lo: int) -> None:
    if not _is_int(v) or v < lo:
        raise PartitionError(f"{name}={v!r} is invalid for kind {kind!r}: it must be an integer >= {lo}.", param=name)


def _need_fraction(kind: str, name: str, v: Any, *, closed_right: bool = True) -> None:
    ok = _is_real(v) and 0 < v and (v <= 1 if closed_right else v < 1)
    if not ok:
        interval = "(0, 1]" if closed_right else "(0, 1)"
        raise PartitionError(f"{name}={v!r} is invalid for kind {kind!r}: it must be a number in {interval}.",
                             param=name)


def _need_choice(kind: str, name: str, v: Any, allowed: Sequence[str]) -> None:
    if v not in allowed:
        raise PartitionError(
            f"{name}={v!r} is invalid for kind {kind!r}: allowed values are {', '.join(map(repr, allowed))}.",
            param=name,
        )


def _need_bool(kind: str, name: str, v: Any) -> None:
    if not isinstance(v, (bool, np.bool_)):
        raise PartitionError(f"{name}={v!r} is invalid for kind {kind!r}: it must be True or False.", param=name)


def _need_unused(kind: str, name: str, v: Any, why: str) -> None:
    if v is not None:
        raise PartitionError(f"{name}={v!r} is not used for kind {kind!r} {why}; leave it unset.", param=name)


def _need_int_list(kind: str, name: str, v: Any, lo: int) -> None:
    if (
        isinstance(v, (str, bytes))
        or not isinstance(v, (Sequence, np.ndarray))
        or len(v) == 0
        or not all(_is_int(x) and x >= lo for x in v)
    ):
        raise PartitionError(
            f"{name}={v!r} is invalid for kind {kind!r}: it must be a non-empty list of integers >= {lo}.",
            param=name,
        )


def _even_counts(total: int, m: int, rotate: int) -> np.ndarray:
    """Split ``total`` into ``m`` near-equal integers; the ``total % m`` extra units go to
    positions ``rotate, rotate+1, ...`` (mod m)."""
    q, r = divmod(int(total), m)
    out = np.full(m, q, dtype=np.int64)
    out[(rotate + np.arange(r)) % m] += 1
    return out


def _apportion(weights: np.ndarray, totals: np.ndarray) -> np.ndarray:
    """Row-wise largest-remainder split of ``totals[i]`` proportional to ``weights[i]``
    (integers, exact; ties go to the lower column).  Rows with zero weight get zeros."""
    weights = np.asarray(weights, dtype=np.int64)
    totals = np.asarray(totals, dtype=np.int64)
    wsum = weights.sum(axis=1)
    safe = np.maximum(wsum, 1)[:, None]
    prod = weights * totals[:, None]
    base = prod // safe
    rem = prod % safe
    short = totals - base.sum(axis=1)
    short[wsum == 0] = 0
    rank = np.argsort(np.argsort(-rem, axis=1, kind="stable"), axis=1, kind="stable")
    return base + (rank < short[:, None])


def _class_pools(labels: np.ndarray, num_classes: int, rng: np.random.Generator, offset: int = 0) -> list[np.ndarray]:
    """Indices (plus ``offset``) of each class, each pool in random order."""
    perm = rng.permutation(labels.size)
    order = perm[np.argsort(labels[perm], kind="stable")]
    counts = np.bincount(labels, minlength=num_classes)
    return np.split(order.astype(np.int64) + offset, np.cumsum(counts)[:-1])


def _check_demand(
    kind: str, demand: np.ndarray, supply: np.ndarray, split: str, recycle: bool
) -> None:
    """Refuse demands no recycling can serve, and any overflow when ``recycle=False``."""
    over = demand > supply[None, :]
    if over.any():
        i, k = (int(v) for v in np.argwhere(over)[0])
        raise PartitionError(
            f"kind {kind!r} is infeasible: client {i} needs {int(demand[i, k])} samples of class {k} "
            f"from the {split} split but only {int(supply[k])} exist; lower samples_per_client or "
            "test_fraction, or give clients more classes."
        )
    total = demand.sum(axis=0)
    if not recycle and (total > supply).any():
        k = int(np.argmax(total > supply))
        raise PartitionError(
            f"recycle=False but class {k} needs {int(total[k])} samples from the {split} split and "
            f"only {int(supply[k])} exist; lower samples_per_client or num_clients, or set recycle=True."
        )


def _class_stream(pool: np.ndarray, need: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """Concatenated draws of one class for all clients (client ``c`` takes the next
    ``need[c]`` entries).  The pool is used once without replacement; overflow comes from
    fresh permutations of the pool, reordered so that the client straddling a cycle
    boundary never receives an index twice.  Requires ``need <= pool.size``."""
    supply, total = pool.size, int(need.sum())
    if total <= supply:
        return pool[:total], 0
    ends = np.cumsum(need)
    starts = ends - need
    parts, prev, pos = [pool], pool, supply
    while pos < total:
        nxt = rng.permutation(pool)
        c = int(np.searchsorted(ends, pos, side="right"))
        if starts[c] < pos:  # client c already took a tail of the previous cycle
            tail = prev[starts[c] - (pos - supply):]
            clash = np.isin(nxt, tail)
            nxt = np.concatenate([nxt[~clash], nxt[clash]])
        parts.append(nxt)
        prev, pos = nxt, pos + supply
    return np.concatenate(parts)[:total], total - supply


def _draw_from_pools(
    pools: Sequence[np.ndarray], demand: np.ndarray, rng: np.random.Generator
) -> tuple[list[np.ndarray], int]:
    """Give client ``i`` ``demand[i, k]`` distinct indices of pool ``k``; disjoint across
    clients while a pool lasts, recycled beyond.  Returns sorted per-client arrays and the
    number of recycled draws."""
    num_clients = demand.shape[0]
    streams, owners, recycled = [], [], 0
    for k, pool in enumerate(pools):
        need = demand[:, k]
        if not need.any():
            continue
        stream, extra = _class_stream(pool, need, rng)
        streams.append(stream)
        owners.append(np.repeat(np.arange(num_clients, dtype=np.int64), need))
        recycled += extra
    return _group_by_owner(streams, owners, num_clients), recycled


def _group_by_owner(
    streams: Sequence[np.ndarray], owners: Sequence[np.ndarray], num_clients: int
) -> list[np.ndarray]:
    if not streams:
        return [np.zeros(0, dtype=np.int64) for _ in range(num_clients)]
    idx = np.concatenate(streams)
    own = np.concatenate(owners)
    order = np.lexsort((idx, own))
    counts = np.bincount(own, minlength=num_clients)
    return np.split(idx[order], np.cumsum(counts)[:-1])


def _split_train_test(
    members: Sequence[np.ndarray],
    pooled_labels: np.ndarray,
    num_classes: int,
    train_fraction: float,
    rng: np.random.Generator,
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Split each client's samples into train/test, stratified by class (FedCP section 4:
    75/25 per client; pFedFDA section 5.1: 80/20).  A client of ``n >= 2`` samples keeps
    ``clip(round(train_fraction * n), 1, n - 1)`` for training, apportioned over its
    classes by largest remainder; the samples kept are random within each class."""
    train, test = [], []
    for idx in members:
        n = idx.size
        if n == 0:
            train.append(idx)
            test.append(idx)
            continue
        t = int(_round_half_up(train_fraction * n))
        t = min(max(t, 1), n - 1) if n >= 2 else n
        idx = rng.permutation(idx)
        lab = pooled_labels[idx]
        order = np.argsort(lab, kind="stable")
        idx, lab = idx[order], lab[order]
        counts = np.bincount(lab, minlength=num_classes)
        keep = _apportion(counts[None, :], np.array([t]))[0]
        rank = np.arange(n) - (np.cumsum(counts) - counts)[lab]
        is_train = rank < keep[lab]
        train.append(np.sort(idx[is_train]))
        test.append(np.sort(idx[~is_train]))
    return train, test


def _client_groups(num_clients: int, num_groups: int) -> np.ndarray:
    """Client ``i`` belongs to group ``i % num_groups`` (FedPAC appendix B.2)."""
    return np.arange(num_clients, dtype=np.int64) % num_groups


# ---------------------------------------------------------------- partitioners


@dataclass(frozen=True)
class _Context:
    kind: str
    train_labels: np.ndarray
    test_labels: np.ndarray
    num_clients: int | None
    num_classes: int
    rng: np.random.Generator

    @property
    def n_train(self) -> int:
        return int(self.train_labels.size)

    @property
    def pooled_labels(self) -> np.ndarray:
        return np.concatenate([self.train_labels, self.test_labels])

    def supply(self, split: str) -> np.ndarray:
        labels = self.train_labels if split == "train" else self.test_labels
        return np.bincount(labels, minlength=self.num_classes).astype(np.int64)

    def pools(self, split: str) -> list[np.ndarray]:
        if split == "train":
            return _class_pools(self.train_labels, self.num_classes, self.rng)
        return _class_pools(self.test_labels, self.num_classes, self.rng, offset=self.n_train)


_Result = tuple[list[np.ndarray], list[np.ndarray], dict]

_DEFAULT_GROUPS: dict[int, list[list[int]]] = {
    10: [[0, 1, 2], [2, 3, 4], [4, 5, 6], [6, 7, 8], [8, 9, 0]],
    62: [list(range(10)), list(range(10, 36)), list(range(36, 62))],
}


def _draw_train_and_test(
    ctx: _Context, train_demand: np.ndarray, test_demand: np.ndarray, recycle: bool
) -> _Result:
    """Check both demand matrices, then draw train from the train split and test from the
    test split (with recycling where a class runs out)."""
    _check_demand(ctx.kind, train_demand, ctx.supply("train"), "train", recycle)
    _check_demand(ctx.kind, test_demand, ctx.supply("test"), "test", recycle)
    train, rec_train = _draw_from_pools(ctx.pools("train"), train_demand, ctx.rng)
    test, rec_test = _draw_from_pools(ctx.pools("test"), test_demand, ctx.rng)
    return train, test, {"recycled_train": rec_train, "recycled_test": rec_test}


def _dominant(
    ctx: _Context,
    *,
    samples_per_client: int = 600,
    s: float = 0.2,
    groups: Sequence[Sequence[int]] | None = None,
    size_choices: Sequence[int] | None = None,
    test_fraction: float | None = None,
    recycle: bool = True,
) -> _Result:
    """Dominant-class groups, FedPAC (ICLR 2023) appendix B.2 (also C.1, C.9: 1000 clients
    x 50 samples); quantity skew appendix C.6.

    Client ``i`` (group ``i % len(groups)``) gets ``n`` train samples: ``round(s * n)``
    spread evenly over all classes and the rest evenly over its group's dominant classes
    (remainders to classes ``i, i+1, ...`` mod the set size).  ``n`` is
    ``samples_per_client`` or, with ``size_choices``, drawn uniformly from that set.
    ``groups`` defaults to FedPAC's: 10 classes -> five groups of three consecutive
    classes starting at 0, 2, 4, 6, 8; 62 classes (EMNIST byclass) -> digits,
    uppercase, lowercase.  The client's test set comes from the test split with the same
    class proportions and ``round(test_fraction * n)`` samples (default 0.5: the upstream
    code uses 300 test samples per 600-sample CIFAR client).
    """
    num_clients, num_classes, rng = ctx.num_clients, ctx.num_classes, ctx.rng
    assert num_clients is not None
    resolved = [[int(c) for c in g] for g in (groups if groups is not None else _DEFAULT_GROUPS[num_classes])]
    group_of = _client_groups(num_clients, len(resolved))
    if size_choices is not None:
        sizes = rng.choice(np.asarray(size_choices, dtype=np.int64), size=num_clients)
    else:
        sizes = np.full(num_clients, samples_per_client, dtype=np.int64)
    train_demand = np.zeros((num_clients, num_classes), dtype=np.int64)
    for i in range(num_clients):
        n_uniform = int(_round_half_up(s * sizes[i]))
        dom = np.asarray(resolved[group_of[i]], dtype=np.int64)
        train_demand[i] += _even_counts(n_uniform, num_classes, i)
        train_demand[i, dom] += _even_counts(int(sizes[i]) - n_uniform, dom.size, i)
    tf = 0.5 if test_fraction is None else test_fraction
    test_demand = _apportion(train_demand, _round_half_up(tf * sizes))
    train, test, info = _draw_train_and_test(ctx, train_demand, test_demand, recycle)
    info.update(group=group_of.tolist(), groups=resolved, test_fraction=tf)
    return train, test, info


def _pathological(
    ctx: _Context,
    *,
    classes_per_client: int | Sequence[int],
    class_sets: str = "random",
    num_groups: int | None = None,
    samples_per_client: int | None = 600,
    on: str = "train",
    test_fraction: float | None = None,
    train_fraction: float | None = None,
    recycle: bool = True,
) -> _Result:
    """#C classes per client: FedPAC appendix C.7 (3/3/5/5/8 classes by group, random or
    clustered class sets, 600 balanced samples), FedFA section 5 (#C = 2), FedCP section 4
    (pathological setting, disjoint data).

    Client ``i`` is in group ``i % G`` with ``G = len(classes_per_client)`` for a list
    (else ``num_groups``, default 1).  ``class_sets="random"``: each client draws its own
    classes; ``"clustered"``: each group draws one set shared by its clients (redrawn up
    to 100 times so the group sets differ).  With ``samples_per_client`` an int, the
    client's samples are balanced over its classes and its test set follows the same
    proportions with ``round(test_fraction * n)`` samples (default 0.5).  With
    ``samples_per_client=None`` (FedCP style) each class's pool is split evenly among
    the clients holding it: the train and test splits separately (``on="train"``), or
    the union of both splits followed by a stratified per-client train/test split of
    ``train_fraction`` (``on="union"``, default 0.75).
    """
    num_clients, num_classes, rng = ctx.num_clients, ctx.num_classes, ctx.rng
    assert num_clients is not None
    if _is_int(classes_per_client):
        per_group = [int(classes_per_client)]  # type: ignore[arg-type]
    else:
        per_group = [int(c) for c in classes_per_client]  # type: ignore[union-attr]
    n_groups = num_groups if num_groups is not None else len(per_group)
    if len(per_group) == 1:
        per_group = per_group * n_groups
    group_of = _client_groups(num_clients, n_groups)
    if class_sets == "random":
        keys = np.argsort(rng.random((num_clients, num_classes)), axis=1)
        sets = [np.sort(keys[i, : per_group[group_of[i]]]) for i in range(num_clients)]
    else:
        for _ in range(100):
            keys = np.argsort(rng.random((n_groups, num_classes)), axis=1)
            group_sets = [np.sort(keys[g, : per_group[g]]) for g in range(n_groups)]
            if len({tuple(x) for x in group_sets}) == n_groups:
                break
        sets = [group_sets[g] for g in group_of]
    holds = np.zeros((num_clients, num_classes), dtype=bool)
    for i, cls in enumerate(sets):
        holds[i, cls] = True
    info: dict[str, Any] = {"group": group_of.tolist(), "class_sets": [c.tolist() for c in sets]}

    if samples_per_client is not None:
        train_demand = np.zeros((num_clients, num_classes), dtype=np.int64)
        for i, cls in enumerate(sets):
            train_demand[i, cls] = _even_counts(samples_per_client, cls.size, i)
        tf = 0.5 if test_fraction is None else test_fraction
        test_demand = _apportion(train_demand, _round_half_up(np.full(num_clients, tf * samples_per_client)))
        train, test, drawn = _draw_train_and_test(ctx, train_demand, test_demand, recycle)
        info.update(drawn, test_fraction=tf)
        return train, test, info

    holders = holds.sum(axis=0)

    def even_demand(supply: np.ndarray, split: str) -> np.ndarray:
        short = (supply < holders) & (holders > 0)
        if short.any():
            k = int(np.argmax(short))
            raise PartitionError(
                f"kind 'pathological' is infeasible: class {k} has {int(supply[k])} samples in the "
                f"{split} but {int(holders[k])} clients hold it; use fewer clients or classes_per_client."
            )
        demand = np.zeros((num_clients, num_classes), dtype=np.int64)
        for k in np.flatnonzero(holders):
            who = np.flatnonzero(holds[:, k])
            demand[who, k] = _even_counts(int(supply[k]), who.size, int(k))
        return demand

    if on == "train":
        train_demand = even_demand(ctx.supply("train"), "train split")
        test_demand = even_demand(ctx.supply("test"), "test split")
        train, test, drawn = _draw_train_and_test(ctx, train_demand, test_demand, recycle=False)
        info.update(drawn)
        return train, test, info
    pooled = ctx.pooled_labels
    demand = even_demand(np.bincount(pooled, minlength=num_classes), "union of both splits")
    members, _ = _draw_from_pools(_class_pools(pooled, num_classes, rng), demand, rng)
    trf = 0.75 if train_fraction is None else train_fraction
    train, test = _split_train_test(members, pooled, num_classes, trf, rng)
    info.update(train_fraction=trf)
    return train, test, info


def _dirichlet(
    ctx: _Context,
    *,
    alpha: float,
    on: str = "train",
    min_size: int = 10,
    max_retries: int = 100,
    test_fraction: float | None = None,
    train_fraction: float | None = None,
    recycle: bool = True,
) -> _Result:
    """Per-class Dirichlet allocation: FedPAC appendix C.8 (beta = 1.0), FedCP section 4
    (practical setting Dir(0.1), union of splits, 75/25 per client), pFedFDA section 5.1
    and appendix C.1.2 (Dir(0.1 / 0.5), union, 80/20 per client).

    For each class ``k``, ``p_k ~ Dir_N(alpha)`` and client ``i`` receives the slice
    ``[floor(P_{k,<i} * n_k), floor(P_{k,<=i} * n_k))`` of class ``k``'s shuffled pool
    (``P`` the cumulative proportions).  The draw is repeated (up to ``max_retries``
    times) until every client has at least ``min_size`` samples (counted before the
    train/test split in union mode).

    ``on="train"``: the train split is partitioned.  Test sets: by default the test
    split is partitioned with the SAME proportions ``p_k`` (disjoint, label proportions
    match the train set up to rounding, test size about ``n_i * n_test / n_train``);
    with ``test_fraction`` set, each client instead draws ``round(test_fraction * n_i)``
    test samples with its train label proportions (recycling where needed).
    ``on="union"``: both splits are partitioned together, then each client's samples are
    split train/test, stratified, with ``train_fraction`` (default 0.75).
    """
    num_clients, num_classes, rng = ctx.num_clients, ctx.num_classes, ctx.rng
    assert num_clients is not None
    labels = ctx.train_labels if on == "train" else ctx.pooled_labels
    supply = np.bincount(labels, minlength=num_classes).astype(np.int64)
    where = "train split" if on == "train" else "union of both splits"
    if min_size * num_clients > labels.size:
        raise PartitionError(
            f"min_size={min_size} is infeasible: {num_clients} clients x {min_size} samples exceed "
            f"the {labels.size} samples of the {where}; lower min_size or num_clients."
        )
    concentration = np.full(num_clients, float(alpha))
    for attempt in range(1, max_retries + 1):
        props = rng.dirichlet(concentration, size=num_classes)  # (C, N)
        if not np.isfinite(props).all():
            continue
        cum = np.cumsum(props, axis=1)
        bounds = np.floor(cum * supply[:, None]).astype(np.int64)
        bounds[:, -1] = supply
        counts = np.diff(bounds, axis=1, prepend=0)  # (C, N)
        if counts.sum(axis=0).min() >= min_size:
            break
    else:
        raise PartitionError(
            f"alpha={alpha} with min_size={min_size} and num_clients={num_clients} did not give "
            f"every client at least min_size samples in max_retries={max_retries} draws; raise "
            "alpha or max_retries, or lower min_size or num_clients."
        )
    info: dict[str, Any] = {"attempts": attempt}
    if on == "union":
        pooled = ctx.pooled_labels
        members, _ = _draw_from_pools(_class_pools(pooled, num_classes, rng), counts.T, rng)
        trf = 0.75 if train_fraction is None else train_fraction
        train, test = _split_train_test(members, pooled, num_classes, trf, rng)
        info.update(train_fraction=trf)
        return train, test, info
    train_demand = counts.T.copy()
    if test_fraction is None:
        test_supply = ctx.supply("test")
        test_bounds = np.floor(cum * test_supply[:, None]).astype(np.int64)
        test_bounds[:, -1] = test_supply
        test_demand = np.diff(test_bounds, axis=1, prepend=0).T.copy()
    else:
        test_demand = _apportion(train_demand, _round_half_up(test_fraction * train_demand.sum(axis=1)))
    train, test, drawn = _draw_train_and_test(ctx, train_demand, test_demand, recycle)
    info.update(drawn)
    return train, test, info


def _single_pool_draw(
    ctx: _Context, train_sizes: np.ndarray, test_sizes: np.ndarray, recycle: bool
) -> _Result:
    """Label-IID draw: every client takes its sizes uniformly from the whole split."""
    def check(sizes: np.ndarray, supply: int, split: str) -> None:
        _check_demand(ctx.kind, sizes[:, None], np.array([supply]), split, recycle)

    check(train_sizes, ctx.n_train, "train")
    check(test_sizes, ctx.test_labels.size, "test")
    train_pool = ctx.rng.permutation(ctx.n_train).astype(np.int64)
    test_pool = ctx.rng.permutation(ctx.test_labels.size).astype(np.int64) + ctx.n_train
    train, rec_train = _draw_from_pools([train_pool], train_sizes[:, None], ctx.rng)
    test, rec_test = _draw_from_pools([test_pool], test_sizes[:, None], ctx.rng)
    return train, test, {"recycled_train": rec_train, "recycled_test": rec_test}


def _iid(
    ctx: _Context,
    *,
    samples_per_client: int | None = None,
    test_fraction: float | None = None,
    recycle: bool = True,
) -> _Result:
    """Label-IID split ("without skew", FedFA appendix; FedPAC's IID references).

    ``samples_per_client=None``: the shuffled train split is cut into ``num_clients``
    near-equal parts, and so is the test split (or, with ``test_fraction``, each client
    draws ``round(test_fraction * n_i)`` test samples).  With ``samples_per_client``
    each client draws that many train samples uniformly (disjoint while the split
    lasts) and ``round(test_fraction * n)`` test samples (default 0.5).
    """
    num_clients = ctx.num_clients
    assert num_clients is not None
    if samples_per_client is None:
        train_sizes = np.array([len(a) for a in np.array_split(np.arange(ctx.n_train), num_clients)])
        if test_fraction is None:
            test_sizes = np.array([len(a) for a in np.array_split(np.arange(ctx.test_labels.size), num_clients)])
        else:
            test_sizes = _round_half_up(test_fraction * train_sizes)
    else:
        train_sizes = np.full(num_clients, samples_per_client, dtype=np.int64)
        tf = 0.5 if test_fraction is None else test_fraction
        test_sizes = _round_half_up(tf * train_sizes)
    return _single_pool_draw(ctx, train_sizes.astype(np.int64), test_sizes.astype(np.int64), recycle)


def _quantity(
    ctx: _Context,
    *,
    size_choices: Sequence[int],
    test_fraction: float | None = None,
    recycle: bool = True,
) -> _Result:
    """Quantity skew with IID labels, FedPAC appendix C.6: each client's train size is
    drawn uniformly from ``size_choices`` (e.g. {300, 600, 1200}), samples uniformly from
    the train split; ``round(test_fraction * n_i)`` test samples (default 0.5)."""
    assert ctx.num_clients is not None
    train_sizes = ctx.rng.choice(np.asarray(size_choices, dtype=np.int64), size=ctx.num_clients)
    tf = 0.5 if test_fraction is None else test_fraction
    train, test, info = _single_pool_draw(ctx, train_sizes, _round_half_up(tf * train_sizes), recycle)
    info.update(test_fraction=tf)
    return train, test, info


def _natural(
    ctx: _Context,
    *,
    ids: Sequence[Any] | np.ndarray | None = None,
    train_ids: Sequence[Any] | np.ndarray | None = None,
    test_ids: Sequence[Any] | np.ndarray | None = None,
    train_fraction: float | None = None,
) -> _Result:
    """Natural clients from a per-sample id (e.g. EMNIST writers, pFedFDA section 5.1).

    Each distinct id, in sorted order, is one client (``info["client_ids"]``).  With
    ``ids`` (one per pooled sample) or ``train_ids`` alone, each client's samples are
    split train/test, stratified, with ``train_fraction`` (default 0.75); with
    ``train_ids`` and ``test_ids`` the splits are kept as given.
    """
    n_train, n_test = ctx.n_train, ctx.test_labels.size

    def as_ids(name: str, value: Any, length: int) -> np.ndarray:
        arr = np.asarray(value)
        if arr.ndim != 1 or arr.size != length:
            raise PartitionError(
                f"{name} has shape {arr.shape} but must be 1-D with {length} entries (one per sample)."
            )
        return arr

    if ids is not None:
        all_ids = as_ids("ids", ids, n_train + n_test)
    elif test_ids is None:
        all_ids = as_ids("train_ids", train_ids, n_train)
    else:
        all_ids = np.concatenate([as_ids("train_ids", train_ids, n_train), as_ids("test_ids", test_ids, n_test)])
    try:
        uniq, inverse = np.unique(all_ids, return_inverse=True)
    except TypeError as exc:
        raise PartitionError(f"client ids cannot be sorted ({exc}); use one type (ints or strings).") from exc
    num = uniq.size
    if ctx.num_clients is not None and ctx.num_clients != num:
        raise PartitionError(
            f"num_clients={ctx.num_clients} is invalid for kind 'natural': the ids define {num} "
            "clients; pass num_clients=None or the matching number."
        )
    positions = np.arange(all_ids.size, dtype=np.int64)
    members = _group_by_owner([positions], [inverse.astype(np.int64).ravel()], num)
    info: dict[str, Any] = {"client_ids": uniq.tolist()}
    if test_ids is not None:
        train = [m[m < n_train] for m in members]
        test = [m[m >= n_train] for m in members]
        empty = [str(uniq[i]) for i, a in enumerate(train) if a.size == 0]
        if empty:
            raise PartitionError(
                f"test_ids contains ids never seen in train_ids ({', '.join(empty[:5])}); every "
                "client needs train samples."
            )
        return train, test, info
    trf = 0.75 if train_fraction is None else train_fraction
    train, test = _split_train_test(members, ctx.pooled_labels, ctx.num_classes, trf, ctx.rng)
    info.update(train_fraction=trf)
    return train, test, info


PARTITIONERS: dict[str, Callable[..., _Result]] = {
    "dominant": _dominant,
    "pathological": _pathological,
    "dirichlet": _dirichlet,
    "iid": _iid,
    "quantity": _quantity,
    "natural": _natural,
}
"""Registry of partition kinds: ``kind -> partitioner(ctx, **params)``.  The accepted
parameter names and defaults are the keyword-only parameters of each function."""


# ----------------------------------------------------------- label-free validation


def _check_dominant(p: dict, num_classes: int | None) -> None:
    _need_int("dominant", "samples_per_client", p["samples_per_client"], 1)
    s = p["s"]
    if not _is_real(s) or not 0 <= s <= 1:
        raise PartitionError(f"s={s!r} is invalid for kind 'dominant': it must be a number in [0, 1].", param="s")
    groups = p["groups"]
    if groups is None:
        if num_classes is not None and num_classes not in _DEFAULT_GROUPS:
            raise PartitionError(
                f"groups is required for kind 'dominant' when num_classes={num_classes} "
                "(defaults exist only for 10 and 62 classes).",
                param="groups",
            )
    else:
        if isinstance(groups, (str, bytes)) or not isinstance(groups, Sequence) or len(groups) == 0:
            raise PartitionError(f"groups={groups!r} is invalid: it must be a non-empty list of lists of class ids.",
                                 param="groups")
        for g in groups:
            _need_int_list("dominant", "groups", g, 0)
            if len(set(int(x) for x in g)) != len(g):
                raise PartitionError(f"groups={groups!r} is invalid: a group lists class {g} with repeats.",
                                     param="groups")
            if num_classes is not None and max(g) >= num_classes:
                raise PartitionError(
                    f"groups={groups!r} is invalid: class {max(g)} does not exist (num_classes={num_classes}).",
                    param="groups",
                )
    if p["size_choices"] is not None:
        _need_int_list("dominant", "size_choices", p["size_choices"], 1)
    if p["test_fraction"] is not None:
        _need_fraction("dominant", "test_fraction", p["test_fraction"])
    _need_bool("dominant", "recycle", p["recycle"])


def _check_pathological(p: dict, num_classes: int | None) -> None:
    k = "pathological"
    cpc = p["classes_per_client"]
    if _is_int(cpc):
        _need_int(k, "classes_per_client", cpc, 1)
        per_group = [int(cpc)]
    else:
        _need_int_list(k, "classes_per_client", cpc, 1)
        per_group = [int(c) for c in cpc]
    if num_classes is not None and max(per_group) > num_classes:
        raise PartitionError(
            f"classes_per_client={cpc!r} is invalid: a client cannot hold more than "
            f"num_classes={num_classes} classes.",
            param="classes_per_client",
        )
    _need_choice(k, "class_sets", p["class_sets"], ("random", "clustered"))
    ng = p["num_groups"]
    if ng is not None:
        _need_int(k, "num_groups", ng, 1)
        if len(per_group) > 1 and ng != len(per_group):
            raise PartitionError(
                f"num_groups={ng} is invalid: classes_per_client lists {len(per_group)} groups; "
                "leave num_groups unset or make them agree.",
                param="num_groups",
            )
    elif p["class_sets"] == "clustered" and len(per_group) == 1:
        raise PartitionError(
            "num_groups is required for kind 'pathological' when class_sets='clustered' and "
            "classes_per_client is a single integer.",
            param="num_groups",
        )
    spc = p["samples_per_client"]
    _need_choice(k, "on", p["on"], ("train", "union"))
    if spc is not None:
        _need_int(k, "samples_per_client", spc, 1)
        if p["on"] != "train":
            raise PartitionError(
                f"on={p['on']!r} is invalid for kind 'pathological' with samples_per_client={spc}: "
                "on='union' requires samples_per_client=None.",
                param="on",
            )
        if p["test_fraction"] is not None:
            _need_fraction(k, "test_fraction", p["test_fraction"])
    else:
        _need_unused(k, "test_fraction", p["test_fraction"], "when samples_per_client=None")
    if p["on"] == "union":
        if p["train_fraction"] is not None:
            _need_fraction(k, "train_fraction", p["train_fraction"], closed_right=False)
    else:
        _need_unused(k, "train_fraction", p["train_fraction"], "unless on='union'")
    _need_bool(k, "recycle", p["recycle"])


def _check_dirichlet(p: dict, num_classes: int | None) -> None:
    k = "dirichlet"
    alpha = p["alpha"]
    if not _is_real(alpha) or alpha <= 0:
        raise PartitionError(f"alpha={alpha!r} is invalid for kind 'dirichlet': it must be a number > 0.",
                             param="alpha")
    _need_choice(k, "on", p["on"], ("train", "union"))
    _need_int(k, "min_size", p["min_size"], 0)
    _need_int(k, "max_retries", p["max_retries"], 1)
    if p["on"] == "train":
        _need_unused(k, "train_fraction", p["train_fraction"], "unless on='union'")
        if p["test_fraction"] is not None:
            _need_fraction(k, "test_fraction", p["test_fraction"])
    else:
        _need_unused(k, "test_fraction", p["test_fraction"], "when on='union' (use train_fraction)")
        if p["train_fraction"] is not None:
            _need_fraction(k, "train_fraction", p["train_fraction"], closed_right=False)
    _need_bool(k, "recycle", p["recycle"])


def _check_iid(p: dict, num_classes: int | None) -> None:
    if p["samples_per_client"] is not None:
        _need_int("iid", "samples_per_client", p["samples_per_client"], 1)
    if p["test_fraction"] is not None:
        _need_fraction("iid", "test_fraction", p["test_fraction"])
    _need_bool("iid", "recycle", p["recycle"])


def _check_quantity(p: dict, num_classes: int | None) -> None:
    _need_int_list("quantity", "size_choices", p["size_choices"], 1)
    if p["test_fraction"] is not None:
        _need_fraction("quantity", "test_fraction", p["test_fraction"])
    _need_bool("quantity", "recycle", p["recycle"])


def _check_natural(p: dict, num_classes: int | None) -> None:
    ids, train_ids, test_ids = p["ids"], p["train_ids"], p["test_ids"]
    if ids is not None and (train_ids is not None or test_ids is not None):
        raise PartitionError(
            "ids cannot be combined with train_ids/test_ids for kind 'natural'; pass ids (pooled) "
            "or train_ids (optionally with test_ids).",
            param="ids",
        )
    if ids is None and train_ids is None:
        raise PartitionError(
            "ids or train_ids is required for kind 'natural' (test_ids alone cannot define clients).",
            param="ids",
        )
    if test_ids is not None:
        _need_unused("natural", "train_fraction", p["train_fraction"], "when test_ids is given")
    elif p["train_fraction"] is not None:
        _need_fraction("natural", "train_fraction", p["train_fraction"], closed_right=False)


_CHECKS: dict[str, Callable[[dict, int | None], None]] = {
    "dominant": _check_dominant,
    "pathological": _check_pathological,
    "dirichlet": _check_dirichlet,
    "iid": _check_iid,
    "quantity": _check_quantity,
    "natural": _check_natural,
}

def _bind_params(kind: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """Named parameters of ``kind`` with defaults applied; unknown/missing -> error."""
    if kind not in PARTITIONERS:
        raise PartitionError(f"kind={kind!r} is unknown; allowed kinds: {', '.join(sorted(PARTITIONERS))}.",
                             param="kind")
    sig = inspect.signature(PARTITIONERS[kind])
    names = [n for n, prm in sig.parameters.items() if prm.kind is inspect.Parameter.KEYWORD_ONLY]
    unknown = sorted(set(params) - set(names))
    if unknown:
        raise PartitionError(
            f"parameter {unknown[0]!r} is unknown for kind {kind!r}; allowed: {', '.join(names)}.",
            param=unknown[0],
        )
    bound: dict[str, Any] = {}
    for n in names:
        if n in params:
            bound[n] = params[n]
        elif sig.parameters[n].default is inspect.Parameter.empty:
            raise PartitionError(f"parameter {n!r} is required for kind {kind!r}.", param=n)
        else:
            bound[n] = sig.parameters[n].default
    return bound


def validate_partition_args(
    kind: str, num_clients: int | None = None, *, num_classes: int | None = None, **params: Any
) -> dict[str, Any]:
    """Check everything that does not need the labels (kind, parameter names, types and
    ranges) and return the parameters with defaults applied.  Used by
    :func:`make_partition` and by config validation; raises :class:`PartitionError`."""
    bound = _bind_params(kind, params)
    if num_clients is None:
        if kind != "natural":
            raise PartitionError(f"num_clients is required for kind {kind!r} (an integer >= 1).", param="num_clients")
    else:
        _need_int(kind, "num_clients", num_clients, 1)
    if num_classes is not None:
        _need_int(kind, "num_classes", num_classes, 1)
    _CHECKS[kind](bound, num_classes)
    return bound


def _as_labels(name: str, labels: Any) -> np.ndarray:
    arr = np.asarray(labels)
    if arr.ndim != 1 or not (arr.size == 0 or np.issubdtype(arr.dtype, np.integer)):
        raise PartitionError(f"{name} must be a 1-D integer array, got shape {arr.shape} dtype {arr.dtype}.")
    arr = arr.astype(np.int64)
    if arr.size and arr.min() < 0:
        raise PartitionError(f"{name} contains the negative label {int(arr.min())}; labels must be >= 0.")
    return arr


def _summarise_params(kind: str, bound: dict[str, Any]) -> dict[str, Any]:
    out = dict(bound)
    if kind == "natural":
        for name in ("ids", "train_ids", "test_ids"):
            if out[name] is not None:
                out[name] = f"<{len(out[name])} ids>"
    return out


def make_partition(
    kind: str,
    train_labels: np.ndarray,
    test_labels: np.ndarray,
    num_clients: int | None = None,
    *,
    seed: int,
    num_classes: int | None = None,
    **params: Any,
) -> Partition:
    """Partition a dataset among clients (see the module docstring and each kind's
    partitioner for the paper section it implements).

    ``num_classes`` defaults to ``max label + 1`` over both splits; ``num_clients`` may
    be ``None`` only for ``kind="natural"`` (inferred from the ids).  All arguments are
    validated before any work; problems raise :class:`PartitionError`.
    """
    bound = validate_partition_args(kind, num_clients, num_classes=num_classes, **params)
    if not _is_int(seed) or seed < 0:
        raise PartitionError(f"seed={seed!r} is invalid: it must be an integer >= 0.")
    train_labels = _as_labels("train_labels", train_labels)
    test_labels = _as_labels("test_labels", test_labels)
    top = int(max(train_labels.max(initial=-1), test_labels.max(initial=-1)))
    if num_classes is None:
        num_classes = max(top + 1, 1)
        _CHECKS[kind](bound, num_classes)
    elif top >= num_classes:
        raise PartitionError(f"num_classes={num_classes} is invalid: the labels contain class {top}.")
    if train_labels.size == 0:
        raise PartitionError("train_labels is empty; a partition needs training samples.")
    union = kind == "natural" or bound.get("on") == "union"
    available = train_labels.size + (test_labels.size if union else 0)
    if num_clients is not None and num_clients > available:
        raise PartitionError(
            f"num_clients={num_clients} is invalid for kind {kind!r}: only {available} samples are "
            "available to share."
        )
    ctx = _Context(kind, train_labels, test_labels, num_clients, num_classes, np.random.default_rng(seed))
    train, test, info = PARTITIONERS[kind](ctx, **bound)
    empty_test = [i for i, a in enumerate(test) if a.size == 0]
    if empty_test:
        info["empty_test_clients"] = empty_test
    recycled = int(info.get("recycled_train", 0)) + int(info.get("recycled_test", 0))
    if recycled:
        warnings.warn(
            RecyclingWarning(
                f"partition kind {kind!r}: demand exceeded supply for some classes, so "
                f"{info.get('recycled_train', 0)} train and {info.get('recycled_test', 0)} test draws "
                "reuse samples already given to other clients (never twice within a client)."
            ),
            stacklevel=2,
        )
    recorded = _summarise_params(kind, bound)
    recorded.update(num_clients=len(train), seed=int(seed), num_classes=int(num_classes))
    return Partition(
        train=tuple(train),
        test=tuple(test),
        num_train_split=int(train_labels.size),
        kind=kind,
        params=recorded,
        info=info,
    )


def subsample(partition: Partition, fraction: float, seed: int) -> Partition:
    """Keep ``max(1, round(fraction * n_i))`` of each client's train indices, chosen
    uniformly at random; test sets unchanged (pFedFDA section 5.1: 75/50/25% of the
    training samples).  With the same seed, smaller fractions give nested subsets of
    larger ones.  ``kind`` gains a ``"+subsample"`` suffix, ``params["subsample"]`` lists
    the applied ``{"fraction", "seed"}`` steps and ``info["train_sizes_before_subsample"]``
    keeps the original sizes (of the first subsampling)."""
    _need_fraction("subsample", "fraction", fraction)
    if not _is_int(seed) or seed < 0:
        raise PartitionError(f"seed={seed!r} is invalid: it must be an integer >= 0.")
    rng = np.random.default_rng(seed)
    new_train = []
    for idx in partition.train:
        n = idx.size
        keep = max(1, int(_round_half_up(fraction * n))) if n else 0
        new_train.append(np.sort(rng.permutation(idx)[:keep]))
    params = dict(partition.params)
    params["subsample"] = list(params.get("subsample", [])) + [{"fraction": float(fraction), "seed": int(seed)}]
    info = dict(partition.info)
    info.setdefault("train_sizes_before_subsample", partition.sizes("train").tolist())
    return Partition(
        train=tuple(new_train),
        test=partition.test,
        num_train_split=partition.num_train_split,
        kind=f"{partition.kind}+subsample",
        params=params,
        info=info,
    )
