"""Kind ``quantity``: quantity skew with IID labels (FedPAC appendix C.6)."""

from __future__ import annotations

from collections.abc import Sequence
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
from ...spec import REQUIRED, Field


def partition(
    ctx: Context,
    *,
    size_choices: Sequence[int],
    test_fraction: float | None = None,
    recycle: bool = True,
) -> Result:
    """Quantity skew with IID labels, FedPAC appendix C.6: each client's train size is
    drawn uniformly from ``size_choices`` (e.g. {300, 600, 1200}), samples uniformly from
    the train split; ``round(test_fraction * n_i)`` test samples (default 0.5)."""
    assert ctx.num_clients is not None
    train_sizes = ctx.rng.choice(np.asarray(size_choices, dtype=np.int64), size=ctx.num_clients)
    tf = 0.5 if test_fraction is None else test_fraction
    train, test, info = single_pool_draw(ctx, train_sizes, round_half_up(tf * train_sizes), recycle)
    info.update(test_fraction=tf)
    return train, test, info


PARAMS = {
    "size_choices": Field(REQUIRED, type=list, items=Field(type=int, low=1), min_length=1,
                          doc="each client's train size is drawn uniformly from these (FedPAC: 300, 600, 1200)"),
    "test_fraction": replace(TEST_FRACTION, doc="round(test_fraction * n_i) test samples (null: 0.5)"),
    "recycle": RECYCLE,
}

KIND = PartitionKind("quantity", partition=partition, params=PARAMS,
                     doc="quantity skew with label-IID samples (FedPAC appendix C.6)")
