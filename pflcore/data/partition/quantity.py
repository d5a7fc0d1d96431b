"""Kind ``quantity``: quantity skew with IID labels (FedPAC appendix C.6)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .common import (
    Context,
    PartitionKind,
    Result,
    need_bool,
    need_fraction,
    need_int_list,
    round_half_up,
    single_pool_draw,
)


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


def check(p: dict, num_classes: int | None) -> None:
    """Reject bad parameters before any label is seen (``num_classes`` may be None)."""
    need_int_list("quantity", "size_choices", p["size_choices"], 1)
    if p["test_fraction"] is not None:
        need_fraction("quantity", "test_fraction", p["test_fraction"])
    need_bool("quantity", "recycle", p["recycle"])


KIND = PartitionKind("quantity", partition=partition, check=check)
