"""Kind ``fedfa_shards``: label-sorted shards, a few random shards per client (FedFA,
Zhou et al., ICLR 2023, section 5 and appendix E: label skew "#C = 2", after McMahan et
al.'s FedAvg shards; the authors made it with FedLab's shard partitioner).

Also holds :func:`proportional_test`, the test-set rule that ``fedfa_dirichlet`` shares.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from .common import (
    RECYCLE,
    TEST_FRACTION,
    Context,
    PartitionError,
    PartitionKind,
    Result,
    apportion,
    check_demand,
    draw_from_pools,
    round_half_up,
)
from ...spec import Field


def proportional_test(
    ctx: Context, train: list[np.ndarray], test_fraction: float | None, recycle: bool
) -> tuple[list[np.ndarray], dict[str, Any]]:
    """Each client's test set, drawn from the test split with its train label proportions.

    FedFA evaluates the global model on the whole test set; pflcore's evaluation also
    scores each client on its own test split, so each client gets one like the other
    label-skew kinds give: with ``test_fraction=None`` each class's test samples are shared
    out among the clients in proportion to how many train samples of that class each holds
    (largest remainder: disjoint, every test sample of a held class used once, as kind
    ``pathological`` with ``samples_per_client=None`` and kind ``dirichlet`` do); with a
    number, client ``i`` draws ``round(test_fraction * n_i)`` test samples in its train
    proportions (as ``pathological`` with ``samples_per_client``; recycling where a class
    runs out)."""
    num_classes = ctx.num_classes
    counts = np.stack([np.bincount(ctx.train_labels[a], minlength=num_classes) for a in train]).astype(np.int64)
    if test_fraction is None:
        demand = apportion(counts.T, ctx.supply("test")).T.copy()
    else:
        demand = apportion(counts, round_half_up(test_fraction * counts.sum(axis=1)))
        check_demand(ctx.kind, demand, ctx.supply("test"), "test", recycle)
    test, recycled = draw_from_pools(ctx.pools("test"), demand, ctx.rng)
    info: dict[str, Any] = {"recycled_train": 0, "recycled_test": recycled}
    if test_fraction is not None:
        info["test_fraction"] = float(test_fraction)
    return test, info


def partition(
    ctx: Context,
    *,
    shards_per_client: int = 2,
    shard_size: int | None = None,
    test_fraction: float | None = None,
    recycle: bool = True,
) -> Result:
    """FedFA's "#C = 2" label skew (section 5; FMNIST: 200 shards of 300, 2 per client,
    100 clients of 600 samples holding at most 2 classes).

    The train split is sorted by label (stably: dataset order within a class) and cut into
    consecutive shards of ``shard_size`` samples; ``shard_size=None`` means
    ``floor(n_train / (num_clients * shards_per_client))``, the size FedLab derives from
    its shard count (the authors pass 200 shards for 100 clients: 300 on FMNIST). A random
    permutation of the shards is dealt out, ``shards_per_client`` consecutive ones per
    client; shards left over and the tail beyond the last whole shard go to nobody
    (``info["unused_train"]``). A shard straddling two classes gives its client both.
    Test sets: see :func:`proportional_test` (FedFA itself scores only the global test set).
    """
    num_clients, rng = ctx.num_clients, ctx.rng
    assert num_clients is not None
    n, wanted = ctx.n_train, num_clients * shards_per_client
    size = n // wanted if shard_size is None else int(shard_size)
    if size < 1:
        raise PartitionError(
            f"kind 'fedfa_shards' is infeasible: {num_clients} clients x {shards_per_client} shards need "
            f"{wanted} shards but the train split has only {n} samples; lower num_clients or shards_per_client."
        )
    num_shards = n // size
    if wanted > num_shards:
        raise PartitionError(
            f"shard_size={shard_size} is infeasible for kind 'fedfa_shards': the {n} train samples make "
            f"{num_shards} shards but {num_clients} clients x {shards_per_client} shards need {wanted}; "
            "lower shard_size, num_clients or shards_per_client.",
            param="shard_size",
        )
    by_label = np.argsort(ctx.train_labels, kind="stable").astype(np.int64)
    dealt = rng.permutation(num_shards)[:wanted].reshape(num_clients, shards_per_client)
    train = [np.sort(np.concatenate([by_label[s * size:(s + 1) * size] for s in row])) for row in dealt]
    test, info = proportional_test(ctx, train, test_fraction, recycle)
    info.update(
        shard_size=size,
        num_shards=num_shards,
        shards=dealt.tolist(),
        unused_train=n - wanted * size,
        class_sets=[np.unique(ctx.train_labels[a]).tolist() for a in train],
    )
    return train, test, info


#: FedFA's test sets: proportional to each client's train classes (see :func:`proportional_test`).
PROPORTIONAL_TEST = replace(TEST_FRACTION, doc="each client draws round(test_fraction * n_i) test samples in its "
                                               "train proportions (null: the test split shared in proportion)")

PARAMS = {
    "shards_per_client": Field(2, low=1, doc="label-sorted shards each client receives (FedFA's #C = 2)"),
    "shard_size": Field(None, type=int, low=1, doc="samples per shard (null: n_train / (shards_per_client * N))"),
    "test_fraction": PROPORTIONAL_TEST,
    "recycle": RECYCLE,
}

KIND = PartitionKind("fedfa_shards", partition=partition, params=PARAMS,
                     doc="label-sorted shards, a few per client (FedFA section 5, after FedAvg's shards)")
