"""Kind ``natural``: one client per distinct sample id (e.g. EMNIST writers, pFedFDA section 5.1)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from .common import (
    TRAIN_FRACTION,
    Context,
    PartitionError,
    PartitionKind,
    Result,
    group_by_owner,
    need_unused,
    split_train_test,
)
from ...spec import Field


def partition(
    ctx: Context,
    *,
    ids: Sequence[Any] | np.ndarray | None = None,
    train_ids: Sequence[Any] | np.ndarray | None = None,
    test_ids: Sequence[Any] | np.ndarray | None = None,
    train_fraction: float | None = None,
) -> Result:
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
    members = group_by_owner([positions], [inverse.astype(np.int64).ravel()], num)
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
    train, test = split_train_test(members, ctx.pooled_labels, ctx.num_classes, trf, ctx.rng)
    info.update(train_fraction=trf)
    return train, test, info


PARAMS = {
    "ids": Field(None, words="one id per sample",
                 doc="one id per pooled sample (train split, then test split); each distinct id is a client"),
    "train_ids": Field(None, words="one id per sample",
                       doc="one id per train-split sample (instead of ids)"),
    "test_ids": Field(None, words="one id per sample",
                      doc="with train_ids, one id per test-split sample: the splits are kept as given"),
    "train_fraction": replace(TRAIN_FRACTION, doc="without test_ids, the share of each client's samples kept for "
                                                  "training (null: 0.75)"),
}


def check(p: dict, num_classes: int | None) -> None:
    """The rules between parameters: ids, or train_ids (optionally with test_ids)."""
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
        need_unused("natural", "train_fraction", p["train_fraction"], "when test_ids is given")


def record(params: dict[str, Any]) -> dict[str, Any]:
    """The parameters as stored in the partition: each id array summarised as ``"<n ids>"``."""
    out = dict(params)
    for name in ("ids", "train_ids", "test_ids"):
        if out[name] is not None:
            out[name] = f"<{len(out[name])} ids>"
    return out


KIND = PartitionKind(
    "natural", partition=partition, params=PARAMS, check=check, infers_num_clients=True,
    uses_both_splits=lambda params: True, record=record,
    doc="one client per distinct sample id (EMNIST writers, pFedFDA section 5.1)",
)
