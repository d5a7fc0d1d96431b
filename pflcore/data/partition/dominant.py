"""Kind ``dominant``: dominant-class groups (FedPAC appendix B.2, C.1, C.6, C.9)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from .common import (
    RECYCLE,
    TEST_FRACTION,
    Context,
    PartitionError,
    PartitionKind,
    Result,
    apportion,
    client_groups,
    draw_train_and_test,
    even_counts,
    round_half_up,
)
from ...errors import shorten
from ...spec import Field


#: FedPAC's dominant-class groups by number of classes: 10 classes (Fashion-MNIST, CIFAR-10,
#: CINIC-10) and 62 classes (EMNIST byclass: digits, uppercase, lowercase).
DEFAULT_GROUPS: dict[int, list[list[int]]] = {
    10: [[0, 1, 2], [2, 3, 4], [4, 5, 6], [6, 7, 8], [8, 9, 0]],
    62: [list(range(10)), list(range(10, 36)), list(range(36, 62))],
}


def partition(
    ctx: Context,
    *,
    samples_per_client: int = 600,
    s: float = 0.2,
    groups: Sequence[Sequence[int]] | None = None,
    size_choices: Sequence[int] | None = None,
    test_fraction: float | None = None,
    recycle: bool = True,
) -> Result:
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
    resolved = [[int(c) for c in g] for g in (groups if groups is not None else DEFAULT_GROUPS[num_classes])]
    group_of = client_groups(num_clients, len(resolved))
    if size_choices is not None:
        sizes = rng.choice(np.asarray(size_choices, dtype=np.int64), size=num_clients)
    else:
        sizes = np.full(num_clients, samples_per_client, dtype=np.int64)
    train_demand = np.zeros((num_clients, num_classes), dtype=np.int64)
    for i in range(num_clients):
        n_uniform = int(round_half_up(s * sizes[i]))
        dom = np.asarray(resolved[group_of[i]], dtype=np.int64)
        train_demand[i] += even_counts(n_uniform, num_classes, i)
        train_demand[i, dom] += even_counts(int(sizes[i]) - n_uniform, dom.size, i)
    tf = 0.5 if test_fraction is None else test_fraction
    test_demand = apportion(train_demand, round_half_up(tf * sizes))
    train, test, info = draw_train_and_test(ctx, train_demand, test_demand, recycle)
    info.update(group=group_of.tolist(), groups=resolved, test_fraction=tf)
    return train, test, info


PARAMS = {
    "samples_per_client": Field(600, low=1, doc="train samples per client (FedPAC: 600)"),
    "s": Field(0.2, low=0, high=1, doc="the share of a client's samples spread over all classes; the rest go to "
                                       "its group's dominant classes"),
    "groups": Field(None, type=list, min_length=1,
                    items=Field(type=list, items=Field(type=int, low=0), min_length=1, distinct=True),
                    doc="each group's dominant classes; client i is in group i % len(groups) (null: FedPAC's, for "
                        "10 or 62 classes)"),
    "size_choices": Field(None, type=list, items=Field(type=int, low=1), min_length=1,
                          doc="draw each client's train size from these instead (quantity skew, FedPAC C.6)"),
    "test_fraction": replace(TEST_FRACTION, doc="round(test_fraction * n) test samples in the train proportions "
                                                "(null: 0.5)"),
    "recycle": RECYCLE,
}


def check(p: dict, num_classes: int | None) -> None:
    """The rules between parameters and the class count: default groups exist for 10 and 62
    classes only, and every listed class must exist."""
    groups = p["groups"]
    if groups is None:
        if num_classes is not None and num_classes not in DEFAULT_GROUPS:
            raise PartitionError(
                f"groups is required for kind 'dominant' when num_classes={num_classes} "
                "(defaults exist only for 10 and 62 classes).",
                param="groups",
            )
    elif num_classes is not None:
        for g in groups:
            if max(g) >= num_classes:
                raise PartitionError(
                    f"groups={shorten(groups)} is invalid: class {max(g)} does not exist (num_classes={num_classes}).",
                    param="groups",
                )


KIND = PartitionKind("dominant", partition=partition, params=PARAMS, check=check,
                     doc="dominant-class groups (FedPAC appendix B.2, C.1, C.6, C.9)")
