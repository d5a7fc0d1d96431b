"""Kind ``dirichlet``: per-class Dirichlet allocation (FedPAC appendix C.8, FedCP section 4,
pFedFDA section 5.1)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from .common import (
    MAX_RETRIES,
    ON,
    RECYCLE,
    TEST_FRACTION,
    TRAIN_FRACTION,
    Context,
    PartitionError,
    PartitionKind,
    Result,
    apportion,
    class_pools,
    draw_from_pools,
    draw_train_and_test,
    need_unused,
    round_half_up,
    split_train_test,
)
from ...spec import REQUIRED, Field


def partition(
    ctx: Context,
    *,
    alpha: float,
    on: str = "train",
    min_size: int = 10,
    max_retries: int = 100,
    test_fraction: float | None = None,
    train_fraction: float | None = None,
    recycle: bool = True,
) -> Result:
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
        members, _ = draw_from_pools(class_pools(pooled, num_classes, rng), counts.T, rng)
        trf = 0.75 if train_fraction is None else train_fraction
        train, test = split_train_test(members, pooled, num_classes, trf, rng)
        info.update(train_fraction=trf)
        return train, test, info
    train_demand = counts.T.copy()
    if test_fraction is None:
        test_supply = ctx.supply("test")
        test_bounds = np.floor(cum * test_supply[:, None]).astype(np.int64)
        test_bounds[:, -1] = test_supply
        test_demand = np.diff(test_bounds, axis=1, prepend=0).T.copy()
    else:
        test_demand = apportion(train_demand, round_half_up(test_fraction * train_demand.sum(axis=1)))
    train, test, drawn = draw_train_and_test(ctx, train_demand, test_demand, recycle)
    info.update(drawn)
    return train, test, info


PARAMS = {
    "alpha": Field(REQUIRED, type=float, low=0, low_open=True, doc="the Dirichlet concentration (smaller: more skew)"),
    "on": ON,
    "min_size": Field(10, low=0, doc="redraw until every client holds at least this many samples"),
    "max_retries": Field(100, low=1, high=MAX_RETRIES, doc="the most redraws"),
    "test_fraction": replace(TEST_FRACTION, doc="with on='train', each client draws round(test_fraction * n_i) "
                             "test samples in its train proportions (null: the test split shared in the same "
                             "proportions)"),
    "train_fraction": TRAIN_FRACTION,
    "recycle": RECYCLE,
}


def check(p: dict, num_classes: int | None) -> None:
    """The rules between parameters: each fraction belongs to one setting of ``on``."""
    if p["on"] == "train":
        need_unused("dirichlet", "train_fraction", p["train_fraction"], "unless on='union'")
    else:
        need_unused("dirichlet", "test_fraction", p["test_fraction"], "when on='union' (use train_fraction)")


KIND = PartitionKind("dirichlet", partition=partition, params=PARAMS, check=check,
                     doc="per-class Dirichlet allocation (FedPAC C.8, FedCP section 4, pFedFDA section 5.1)")
