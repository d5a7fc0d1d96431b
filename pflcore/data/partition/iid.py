"""Kind ``iid``: label-IID split ("without skew", FedFA appendix)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .common import (
    RECYCLE,
    TEST_FRACTION,
    Context,
    PartitionKind,
    Result,
    round_half_up,
    single_pool_draw,
)
from ...spec import Field


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


PARAMS = {
    "samples_per_client": Field(None, type=int, low=1, doc="train samples each client draws (null: the train split "
                                                           "cut into num_clients near-equal parts)"),
    "test_fraction": replace(TEST_FRACTION, doc="round(test_fraction * n_i) test samples per client (null: 0.5 with "
                                                "samples_per_client, else the test split cut like the train split)"),
    "recycle": RECYCLE,
}

KIND = PartitionKind("iid", partition=partition, params=PARAMS, doc="label-IID split (FedFA appendix: without skew)")
