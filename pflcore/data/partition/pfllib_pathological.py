"""Kind ``pfllib_pathological``: PFLlib's pathological generator, as the FedCP authors made
their pathological setting (FedCP, Zhang et al., KDD 2023, section 4; PFLlib's
generators)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .common import (
    Context,
    PartitionError,
    PartitionKind,
    Result,
    split_unstratified,
)
from .pfllib_dirichlet import PFLLIB_TRAIN_FRACTION
from ...errors import shorten
from ...spec import REQUIRED, Field


def partition(
    ctx: Context,
    *,
    classes_per_client: int,
    least_samples: int = 40,
    train_fraction: float = 0.75,
) -> Result:
    """PFLlib's pathological partition (FedCP section 4: 2 classes per client on MNIST).

    Train and test splits are merged; every client has ``classes_per_client`` class slots.
    For each class ``k`` in turn, its holders are the first ``ceil(N / K *
    classes_per_client)`` clients (in client order) with a free slot, so consecutive
    clients share their classes. With ``m`` holders and ``n = n_k / m``, the first
    ``m - 1`` each take a random count in ``[floor(max(n / 10, least_samples / K)),
    floor(n))`` of the shuffled class, the last takes the remainder: unbalanced sizes.
    Each client's samples are then split train/test without stratification
    (``train_fraction``, the first ``floor(0.75 n)`` of a shuffle). Unlike kind
    ``pathological``, the class sets are contiguous groups, not random draws.
    """
    num_clients, num_classes, rng = ctx.num_clients, ctx.num_classes, ctx.rng
    assert num_clients is not None
    labels = ctx.pooled_labels
    free = np.full(num_clients, classes_per_client, dtype=np.int64)
    cap = math.ceil(num_clients / num_classes * classes_per_client)
    pieces: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    class_sets: list[list[int]] = [[] for _ in range(num_clients)]
    for k in range(num_classes):
        pool = rng.permutation(np.flatnonzero(labels == k))
        if pool.size == 0:
            continue
        holders = np.flatnonzero(free > 0)[:cap]
        if holders.size == 0:
            raise PartitionError(
                f"kind 'pfllib_pathological' is infeasible: no client has a free class slot left for class {k} "
                f"({num_clients} clients x {classes_per_client} slots, at most {cap} clients per class); "
                "change num_clients or classes_per_client.",
                param="classes_per_client",
            )
        m = holders.size
        share = pool.size / m
        counts = np.zeros(0, dtype=np.int64)
        if m > 1:
            low, high = int(max(share / 10, least_samples / num_classes)), int(share)
            if low >= high:
                raise PartitionError(
                    f"kind 'pfllib_pathological' is infeasible: class {k} has {pool.size} samples for {m} clients, "
                    f"too few for a count in [{low}, {high}) each; use fewer clients or lower least_samples.",
                    param="least_samples",
                )
            counts = rng.integers(low, high, size=m - 1)
        counts = np.append(counts, pool.size - counts.sum())
        for client, part in zip(holders, np.split(pool, np.cumsum(counts)[:-1])):
            pieces[client].append(part)
            class_sets[client].append(k)
        free[holders] -= 1
    empty = [i for i, p in enumerate(pieces) if not p]
    if empty:
        raise PartitionError(
            f"kind 'pfllib_pathological' is infeasible: client {empty[0]} receives no class (each class goes to "
            f"at most {cap} clients); lower num_clients or raise classes_per_client.",
            param="classes_per_client",
        )
    members = [np.sort(np.concatenate(p)) for p in pieces]
    train, test = split_unstratified(members, train_fraction, rng)
    info: dict[str, Any] = {"class_sets": class_sets, "train_fraction": float(train_fraction)}
    return train, test, info


PARAMS = {
    "classes_per_client": Field(REQUIRED, type=int, low=1, doc="the classes each client holds"),
    "least_samples": Field(40, low=0, doc="the fewest samples a client may hold"),
    "train_fraction": PFLLIB_TRAIN_FRACTION,
}


def check(p: dict, num_classes: int | None) -> None:
    """The rule with the class count: a client cannot hold more classes than exist."""
    if num_classes is not None and p["classes_per_client"] > num_classes:
        raise PartitionError(
            f"classes_per_client={shorten(p['classes_per_client'])} is invalid: a client cannot hold more than "
            f"num_classes={num_classes} classes.",
            param="classes_per_client",
        )


KIND = PartitionKind("pfllib_pathological", partition=partition, params=PARAMS, check=check,
                     uses_both_splits=lambda params: True,
                     doc="PFLlib's pathological generator over both splits, as FedCP made its pathological setting")
