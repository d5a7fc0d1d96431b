"""What every partition kind shares (the kinds themselves are the sibling modules).

The result type :class:`Partition` and its JSON form, :class:`PartitionError` (with
``param`` naming the parameter at fault), :class:`PartitionKind` (one registry entry:
a partitioner, its parameter fields and its label-free rules between them), the fields
several kinds share and the refusal of a value (:func:`check_value`), exact
integer splits (round half up, largest remainder), class-pool draws with recycling,
the per-client stratified train/test split, and the :func:`subsample` transform.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import shorten
from ...spec import REQUIRED, Field, Refusal

_FORMAT_VERSION = 1
_SPLITS = ("train", "test", "all")


class PartitionError(ValueError):
    """A partition argument is invalid or the requested partition is infeasible;
    ``param`` names the partition parameter at fault, when there is one, and ``refusal``
    (:class:`~pflcore.spec.Refusal`) is set when its field refused the value."""

    def __init__(self, message: str, param: str | None = None, refusal: Refusal | None = None):
        super().__init__(message)
        self.param = param
        self.refusal = refusal


class RecyclingWarning(UserWarning):
    """Some samples were handed to more than one client because a class ran out."""


# ------------------------------------------------------------------------------- result


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
            raise PartitionError(f"split={shorten(split)} is invalid; allowed: {', '.join(_SPLITS)}.")
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
                f"format={shorten(data.get('format'))} version={shorten(data.get('version'))} is not a "
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


def subsample(partition: Partition, fraction: float, seed: int) -> Partition:
    """Keep ``max(1, round(fraction * n_i))`` of each client's train indices, chosen
    uniformly at random; test sets unchanged (pFedFDA section 5.1: 75/50/25% of the
    training samples).  With the same seed, smaller fractions give nested subsets of
    larger ones.  ``kind`` gains a ``"+subsample"`` suffix, ``params["subsample"]`` lists
    the applied ``{"fraction", "seed"}`` steps and ``info["train_sizes_before_subsample"]``
    keeps the original sizes (of the first subsampling)."""
    check_value("subsample", "fraction", SUBSAMPLE, plain(fraction))
    check_value("subsample", "seed", SEED, plain(seed))
    rng = np.random.default_rng(seed)
    new_train = []
    for idx in partition.train:
        n = idx.size
        keep = max(1, int(round_half_up(fraction * n))) if n else 0
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


# ----------------------------------------------------------------------- result helpers


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
    raise PartitionError(f"value {shorten(obj)} of type {type(obj).__name__} is not JSON-serialisable.")


# --------------------------------------------------------------------- parameter checks

#: The most redraws a retrying partitioner may make (each redraws the whole partition).
MAX_RETRIES = 100_000
#: Parameter fields several kinds share (a kind may give one its own doc with ``dataclasses.replace``).
TEST_FRACTION = Field(None, type=float, low=0, high=1, low_open=True,
                      doc="each client draws round(test_fraction * n_i) test samples (null: the kind's default)")
TRAIN_FRACTION = Field(None, type=float, low=0, high=1, low_open=True, high_open=True,
                       doc="with on='union', the share of each client's samples kept for training (null: 0.75)")
RECYCLE = Field(True, doc="serve a class that runs out from a fresh permutation of its pool (False: refuse)")
ON = Field("train", choices=("train", "union"), doc="'train': the train split is shared out (test sets follow); "
                                                   "'union': both splits together, then each client's samples split")
#: ``subsample``'s fraction (and the config's ``partition.subsample``).
SUBSAMPLE = Field(1.0, low=0, high=1, low_open=True,
                  doc="keep this fraction of each client's training samples, chosen at random, test sets unchanged "
                      "(pFedFDA section 5.1: 0.75, 0.5, 0.25)")
#: A partition's seed, and its client and class counts.
SEED = Field(REQUIRED, type=int, low=0)
COUNT = Field(REQUIRED, type=int, low=1)


def plain(value: Any, spec: Field | None = None) -> Any:
    """NumPy scalars as the Python values they hold and, for a list field, a NumPy array or a
    sequence as a list of Python values: a partition's Python callers may pass NumPy."""
    if isinstance(value, np.generic):
        return value.item()
    if spec is not None and list in spec.kinds() and isinstance(value, (np.ndarray, list, tuple)):
        return [plain(v, spec.items) for v in value]
    return value


def refuse(kind: str, refusal: Refusal) -> PartitionError:
    """The error for a parameter value its field refuses."""
    return PartitionError(refusal.sentence("partition parameter", f" for kind {kind!r}"), param=refusal.name,
                          refusal=refusal)


def check_value(kind: str, name: str, spec: Field, value: Any) -> None:
    """Raise :func:`refuse`'s error unless ``spec`` allows ``value``."""
    words = spec.problem(value)
    if words is not None:
        raise refuse(kind, Refusal(name, value, words))


def need_unused(kind: str, name: str, v: Any, why: str) -> None:
    """A rule between parameters: ``name`` means nothing in this setting, so it must be unset."""
    if v is not None:
        raise PartitionError(f"{name}={shorten(v)} is not used for kind {shorten(kind)} {why}; leave it unset.", param=name)


# ----------------------------------------------------------------- exact integer splits


def round_half_up(x: Any) -> np.ndarray:
    """``floor(x + 0.5)`` as int64 (the rounding every kind uses)."""
    return np.floor(np.asarray(x, dtype=np.float64) + 0.5).astype(np.int64)


def even_counts(total: int, m: int, rotate: int) -> np.ndarray:
    """Split ``total`` into ``m`` near-equal integers; the ``total % m`` extra units go to
    positions ``rotate, rotate+1, ...`` (mod m)."""
    q, r = divmod(int(total), m)
    out = np.full(m, q, dtype=np.int64)
    out[(rotate + np.arange(r)) % m] += 1
    return out


def apportion(weights: np.ndarray, totals: np.ndarray) -> np.ndarray:
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


# ---------------------------------------------------------------------- drawing samples


def class_pools(labels: np.ndarray, num_classes: int, rng: np.random.Generator, offset: int = 0) -> list[np.ndarray]:
    """Indices (plus ``offset``) of each class, each pool in random order."""
    perm = rng.permutation(labels.size)
    order = perm[np.argsort(labels[perm], kind="stable")]
    counts = np.bincount(labels, minlength=num_classes)
    return np.split(order.astype(np.int64) + offset, np.cumsum(counts)[:-1])


def check_demand(
    kind: str, demand: np.ndarray, supply: np.ndarray, split: str, recycle: bool
) -> None:
    """Refuse demands no recycling can serve, and any overflow when ``recycle=False``."""
    over = demand > supply[None, :]
    if over.any():
        i, k = (int(v) for v in np.argwhere(over)[0])
        raise PartitionError(
            f"kind {shorten(kind)} is infeasible: client {i} needs {int(demand[i, k])} samples of class {k} "
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


def draw_from_pools(
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
    return group_by_owner(streams, owners, num_clients), recycled


def group_by_owner(
    streams: Sequence[np.ndarray], owners: Sequence[np.ndarray], num_clients: int
) -> list[np.ndarray]:
    if not streams:
        return [np.zeros(0, dtype=np.int64) for _ in range(num_clients)]
    idx = np.concatenate(streams)
    own = np.concatenate(owners)
    order = np.lexsort((idx, own))
    counts = np.bincount(own, minlength=num_clients)
    return np.split(idx[order], np.cumsum(counts)[:-1])


def split_train_test(
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
        t = int(round_half_up(train_fraction * n))
        t = min(max(t, 1), n - 1) if n >= 2 else n
        idx = rng.permutation(idx)
        lab = pooled_labels[idx]
        order = np.argsort(lab, kind="stable")
        idx, lab = idx[order], lab[order]
        counts = np.bincount(lab, minlength=num_classes)
        keep = apportion(counts[None, :], np.array([t]))[0]
        rank = np.arange(n) - (np.cumsum(counts) - counts)[lab]
        is_train = rank < keep[lab]
        train.append(np.sort(idx[is_train]))
        test.append(np.sort(idx[~is_train]))
    return train, test


def client_groups(num_clients: int, num_groups: int) -> np.ndarray:
    """Client ``i`` belongs to group ``i % num_groups`` (FedPAC appendix B.2)."""
    return np.arange(num_clients, dtype=np.int64) % num_groups


# ---------------------------------------------------------------------- partition kinds


@dataclass(frozen=True)
class Context:
    """What a partitioner works on: the validated labels of both splits, the client and
    class counts and the one random generator (``numpy.random.default_rng(seed)``)."""

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
            return class_pools(self.train_labels, self.num_classes, self.rng)
        return class_pools(self.test_labels, self.num_classes, self.rng, offset=self.n_train)


Result = tuple[list[np.ndarray], list[np.ndarray], dict]
"""What a partitioner returns: per-client train index arrays, per-client test index
arrays (both into the pooled space) and the ``info`` dict."""


def _on_union(params: Mapping[str, Any]) -> bool:
    return params.get("on") == "union"


def _no_rules(params: dict, num_classes: int | None) -> None:
    return None


@dataclass(frozen=True)
class PartitionKind:
    """One partition kind, as registered in :data:`pflcore.data.partition.KINDS`.

    ``partition(ctx, **params) -> (train, test, info)`` draws the clients' index arrays;
    ``params`` declares its keyword-only parameters (:class:`~pflcore.spec.Field`: default,
    type, range, choices, doc), from which each value is checked and the documentation
    table is made. ``check(params, num_classes)`` holds the rules between parameters (one
    constraining another, or the class count) that a field cannot say, run once every value
    has passed its field, before any label is seen (``num_classes`` may be None); it raises
    :class:`PartitionError`.
    ``infers_num_clients``: ``num_clients`` may be None (the data defines the clients).
    ``uses_both_splits(params)``: the kind shares out the union of both splits.
    ``record(params)``: the parameters as stored in :attr:`Partition.params`.
    ``doc``: one line for the documentation.
    """

    name: str
    partition: Callable[..., Result]
    params: Mapping[str, Field]
    check: Callable[[dict, int | None], None] = _no_rules
    infers_num_clients: bool = False
    uses_both_splits: Callable[[Mapping[str, Any]], bool] = _on_union
    record: Callable[[dict], dict] = dict
    doc: str = ""


def draw_train_and_test(
    ctx: Context, train_demand: np.ndarray, test_demand: np.ndarray, recycle: bool
) -> Result:
    """Check both demand matrices, then draw train from the train split and test from the
    test split (with recycling where a class runs out)."""
    check_demand(ctx.kind, train_demand, ctx.supply("train"), "train", recycle)
    check_demand(ctx.kind, test_demand, ctx.supply("test"), "test", recycle)
    train, rec_train = draw_from_pools(ctx.pools("train"), train_demand, ctx.rng)
    test, rec_test = draw_from_pools(ctx.pools("test"), test_demand, ctx.rng)
    return train, test, {"recycled_train": rec_train, "recycled_test": rec_test}


def single_pool_draw(
    ctx: Context, train_sizes: np.ndarray, test_sizes: np.ndarray, recycle: bool
) -> Result:
    """Label-IID draw: every client takes its sizes uniformly from the whole split."""
    def check(sizes: np.ndarray, supply: int, split: str) -> None:
        check_demand(ctx.kind, sizes[:, None], np.array([supply]), split, recycle)

    check(train_sizes, ctx.n_train, "train")
    check(test_sizes, ctx.test_labels.size, "test")
    train_pool = ctx.rng.permutation(ctx.n_train).astype(np.int64)
    test_pool = ctx.rng.permutation(ctx.test_labels.size).astype(np.int64) + ctx.n_train
    train, rec_train = draw_from_pools([train_pool], train_sizes[:, None], ctx.rng)
    test, rec_test = draw_from_pools([test_pool], test_sizes[:, None], ctx.rng)
    return train, test, {"recycled_train": rec_train, "recycled_test": rec_test}


def split_unstratified(
    members: Sequence[np.ndarray], train_fraction: float, rng: np.random.Generator
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """PFLlib's per-client split (FedCP section 4: 75/25 per client): each client's
    samples shuffled, the first ``floor(train_fraction * n)`` for training and the rest for
    testing, with no regard to class (scikit-learn's ``train_test_split(train_size=...)``)."""
    train, test = [], []
    for idx in members:
        t = int(math.floor(train_fraction * idx.size))
        shuffled = rng.permutation(idx)
        train.append(np.sort(shuffled[:t]))
        test.append(np.sort(shuffled[t:]))
    return train, test
