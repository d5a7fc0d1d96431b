"""Kind ``iid``: label-IID split ("without skew", FedFA appendix)."""

from __future__ import annotations

import numpy as np

from .common import (
    Context,
    PartitionKind,
    Result,
    need_bool,
    need_fraction,
    need_int,
    round_half_up,
    single_pool_draw,
)


def partition(
    ctx: Context,
    *,
    samples_per_client: int | None = None,
    test_fraction: float | None = None,
    recycle: bool = True,
) -> Result:
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
            test_sizes = round_half_up(test_fraction * train_sizes)
    else:
        train_sizes = np.full(num_clients, samples_per_client, dtype=np.int64)
        tf = 0.5 if test_fraction is None else test_fraction
        test_sizes = round_half_up(tf * train_sizes)
    return single_pool_draw(ctx, train_sizes.astype(np.int64), test_sizes.astype(np.int64), recycle)


def check(p: dict, num_classes: int | None) -> None:
    """Reject bad parameters before any label is seen (``num_classes`` may be None)."""
    if p["samples_per_client"] is not None:
        need_int("iid", "samples_per_client", p["samples_per_client"], 1)
    if p["test_fraction"] is not None:
        need_fraction("iid", "test_fraction", p["test_fraction"])
    need_bool("iid", "recycle", p["recycle"])


KIND = PartitionKind("iid", partition=partition, check=check)
