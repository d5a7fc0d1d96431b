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

Kinds (:data:`KINDS`, one module each in this package, holding its partitioner and its
parameter fields and label-free rules): ``dominant``, ``pathological``, ``dirichlet``, ``iid``, ``quantity``,
``natural``, ``given`` (the split a dataset came with), ``pfllib_dirichlet`` and
``pfllib_pathological`` (PFLlib's generators, as FedCP used them), ``fedfa_shards`` and
``fedfa_dirichlet`` (FedFA's label skews: FedLab's shards and capped hetero-Dirichlet over
the train split) and ``domains`` (one domain of a multi-domain dataset per client,
pFedFDA appendix D.1); plus the transform
:func:`subsample`.  A new kind is a new module defining
``KIND = PartitionKind(name, partition=..., params={...: Field(...)}, check=...)`` plus its
name in ``_KIND_MODULES``.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from . import common
from .common import (
    COUNT,
    SEED,
    SUBSAMPLE,
    Context,
    Partition,
    PartitionError,
    PartitionKind,
    RecyclingWarning,
    Result,
    check_value,
    plain,
    pool_labels,
    subsample,
)
from ...errors import shorten
from ...spec import first_refusal, missing_name, unknown_name

__all__ = [
    "KINDS",
    "PARTITIONERS",
    "Partition",
    "PartitionError",
    "PartitionKind",
    "RecyclingWarning",
    "SUBSAMPLE",
    "make_partition",
    "pool_labels",
    "subsample",
    "validate_partition_args",
]

#: The kind modules of this package, in registry order (each defines ``KIND``).
_KIND_MODULES = (
    "dominant", "pathological", "dirichlet", "iid", "quantity", "natural", "given", "pfllib_dirichlet",
    "pfllib_pathological", "fedfa_shards", "fedfa_dirichlet", "domains",
)


def _collect(modules: tuple[str, ...]) -> dict[str, PartitionKind]:
    kinds: dict[str, PartitionKind] = {}
    for module in modules:
        kind = importlib.import_module(f"{__name__}.{module}").KIND
        kinds[kind.name] = kind
    return kinds


KINDS: dict[str, PartitionKind] = _collect(_KIND_MODULES)
"""Registry of partition kinds: ``kind -> PartitionKind`` (partitioner and check together)."""

PARTITIONERS: dict[str, Callable[..., Result]] = {name: kind.partition for name, kind in KINDS.items()}
"""Registry of partition kinds: ``kind -> partitioner(ctx, **params)``.  The accepted
parameters, their defaults and what each allows are the kind's fields, ``KINDS[kind].params``."""


def _bind_params(kind: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """Named parameters of ``kind`` with defaults applied, each checked by its field;
    unknown, missing or refused -> error."""
    if not isinstance(kind, str) or kind not in KINDS:
        raise PartitionError(f"kind={shorten(kind)} is unknown; allowed kinds: {', '.join(sorted(KINDS))}.",
                             param="kind")
    fields = KINDS[kind].params
    owner = f"partition kind {kind!r}"
    unknown = next((name for name in params if name not in fields), None)
    if unknown is not None:
        raise PartitionError(unknown_name(owner, unknown, fields), param=str(unknown))
    missing = next((name for name, spec in fields.items() if spec.required and name not in params), None)
    if missing is not None:
        raise PartitionError(missing_name(owner, missing, fields[missing]), param=missing)
    bound = {name: plain(params[name], spec) if name in params else spec.default for name, spec in fields.items()}
    refusal = first_refusal(fields, bound)
    if refusal is not None:
        raise common.refuse(kind, refusal)
    return bound


def validate_partition_args(
    kind: str, num_clients: int | None = None, *, num_classes: int | None = None, **params: Any
) -> dict[str, Any]:
    """Check everything that does not need the labels (kind, parameter names, each value
    against its field, then the kind's rules between parameters) and return the parameters
    with defaults applied.  Used by :func:`make_partition` and by config validation; raises
    :class:`PartitionError`."""
    bound = _bind_params(kind, params)
    if num_clients is None:
        if not KINDS[kind].infers_num_clients:
            raise PartitionError(f"num_clients is required for kind {shorten(kind)} (an integer >= 1).", param="num_clients")
    else:
        check_value(kind, "num_clients", COUNT, plain(num_clients))
    if num_classes is not None:
        check_value(kind, "num_classes", COUNT, plain(num_classes))
    KINDS[kind].check(bound, num_classes)
    return bound


def _as_labels(name: str, labels: Any) -> np.ndarray:
    arr = np.asarray(labels)
    if arr.ndim != 1 or not (arr.size == 0 or np.issubdtype(arr.dtype, np.integer)):
        raise PartitionError(f"{name} must be a 1-D integer array, got shape {arr.shape} dtype {arr.dtype}.")
    arr = arr.astype(np.int64)
    if arr.size and arr.min() < 0:
        raise PartitionError(f"{name} contains the negative label {int(arr.min())}; labels must be >= 0.")
    return arr


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
    num_clients, num_classes, seed = plain(num_clients), plain(num_classes), plain(seed)
    bound = validate_partition_args(kind, num_clients, num_classes=num_classes, **params)
    spec = KINDS[kind]
    check_value(kind, "seed", SEED, seed)
    train_labels = _as_labels("train_labels", train_labels)
    test_labels = _as_labels("test_labels", test_labels)
    top = int(max(train_labels.max(initial=-1), test_labels.max(initial=-1)))
    if num_classes is None:
        num_classes = max(top + 1, 1)
        spec.check(bound, num_classes)
    elif top >= num_classes:
        raise PartitionError(f"num_classes={num_classes} is invalid: the labels contain class {top}.")
    if train_labels.size == 0:
        raise PartitionError("train_labels is empty; a partition needs training samples.")
    available = train_labels.size + (test_labels.size if spec.uses_both_splits(bound) else 0)
    if num_clients is not None and num_clients > available:
        raise PartitionError(
            f"num_clients={num_clients} is invalid for kind {shorten(kind)}: only {available} samples are "
            "available to share."
        )
    ctx = Context(kind, train_labels, test_labels, num_clients, num_classes, np.random.default_rng(seed))
    train, test, info = spec.partition(ctx, **bound)
    empty_test = [i for i, a in enumerate(test) if a.size == 0]
    if empty_test:
        info["empty_test_clients"] = empty_test
    recycled = int(info.get("recycled_train", 0)) + int(info.get("recycled_test", 0))
    if recycled:
        warnings.warn(
            RecyclingWarning(
                f"partition kind {shorten(kind)}: demand exceeded supply for some classes, so "
                f"{info.get('recycled_train', 0)} train and {info.get('recycled_test', 0)} test draws "
                "reuse samples already given to other clients (never twice within a client)."
            ),
            stacklevel=2,
        )
    recorded = spec.record(bound)
    recorded.update(num_clients=len(train), seed=int(seed), num_classes=int(num_classes))
    return Partition(
        train=tuple(train),
        test=tuple(test),
        num_train_split=int(train_labels.size),
        kind=kind,
        params=recorded,
        info=info,
    )
