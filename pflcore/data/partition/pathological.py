"""Kind ``pathological``: #C classes per client (FedPAC appendix C.7, FedFA section 5, FedCP
section 4)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from .common import (
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
    client_groups,
    draw_from_pools,
    draw_train_and_test,
    even_counts,
    need_unused,
    round_half_up,
    split_train_test,
)
from ...errors import shorten
from ...spec import REQUIRED, Field


def partition(
    ctx: Context,
    *,
    classes_per_client: int | Sequence[int],
    class_sets: str = "random",
    num_groups: int | None = None,
    samples_per_client: int | None = 600,
    on: str = "train",
    test_fraction: float | None = None,
    train_fraction: float | None = None,
    recycle: bool = True,
) -> Result:
    """#C classes per client: FedPAC appendix C.7 (3/3/5/5/8 classes by group, random or
    clustered class sets, 600 balanced samples), FedFA section 5 (#C = 2), FedCP section 4
    (pathological setting, disjoint data).

    Client ``i`` is in group ``i % G`` with ``G = len(classes_per_client)`` for a list
    (else ``num_groups``, default 1).  ``class_sets="random"``: each client draws its own
    classes; ``"clustered"``: each group draws one set shared by its clients (redrawn up
    to 100 times so the group sets differ); ``"balanced"``: every class is held by the same
    number of clients give or take one (:func:`balanced_class_sets`).  With ``samples_per_client`` an int, the
    client's samples are balanced over its classes and its test set follows the same
    proportions with ``round(test_fraction * n)`` samples (default 0.5).  With
    ``samples_per_client=None`` (FedCP style) each class's pool is split evenly among
    the clients holding it: the train and test splits separately (``on="train"``), or
    the union of both splits followed by a stratified per-client train/test split of
    ``train_fraction`` (``on="union"``, default 0.75).
    """
    num_clients, num_classes, rng = ctx.num_clients, ctx.num_classes, ctx.rng
    assert num_clients is not None
    if isinstance(classes_per_client, (list, tuple, np.ndarray)):
        per_group = [int(c) for c in classes_per_client]
    else:
        per_group = [int(classes_per_client)]
    n_groups = num_groups if num_groups is not None else len(per_group)
    if len(per_group) == 1:
        per_group = per_group * n_groups
    group_of = client_groups(num_clients, n_groups)
    if class_sets == "random":
        keys = np.argsort(rng.random((num_clients, num_classes)), axis=1)
        sets = [np.sort(keys[i, : per_group[group_of[i]]]) for i in range(num_clients)]
    elif class_sets == "balanced":
        sets = balanced_class_sets([per_group[group_of[i]] for i in range(num_clients)], num_classes, rng)
    else:
        for _ in range(100):
            keys = np.argsort(rng.random((n_groups, num_classes)), axis=1)
            group_sets = [np.sort(keys[g, : per_group[g]]) for g in range(n_groups)]
            if len({tuple(x) for x in group_sets}) == n_groups:
                break
        sets = [group_sets[g] for g in group_of]
    holds = np.zeros((num_clients, num_classes), dtype=bool)
    for i, cls in enumerate(sets):
        holds[i, cls] = True
    info: dict[str, Any] = {"group": group_of.tolist(), "class_sets": [c.tolist() for c in sets]}

    if samples_per_client is not None:
        train_demand = np.zeros((num_clients, num_classes), dtype=np.int64)
        for i, cls in enumerate(sets):
            train_demand[i, cls] = even_counts(samples_per_client, cls.size, i)
        tf = 0.5 if test_fraction is None else test_fraction
        test_demand = apportion(train_demand, round_half_up(np.full(num_clients, tf * samples_per_client)))
        train, test, drawn = draw_train_and_test(ctx, train_demand, test_demand, recycle)
        info.update(drawn, test_fraction=tf)
        return train, test, info

    holders = holds.sum(axis=0)

    def even_demand(supply: np.ndarray, split: str) -> np.ndarray:
        short = (supply < holders) & (holders > 0)
        if short.any():
            k = int(np.argmax(short))
            raise PartitionError(
                f"kind 'pathological' is infeasible: class {k} has {int(supply[k])} samples in the "
                f"{split} but {int(holders[k])} clients hold it; use fewer clients or classes_per_client."
            )
        demand = np.zeros((num_clients, num_classes), dtype=np.int64)
        for k in np.flatnonzero(holders):
            who = np.flatnonzero(holds[:, k])
            demand[who, k] = even_counts(int(supply[k]), who.size, int(k))
        return demand

    if on == "train":
        train_demand = even_demand(ctx.supply("train"), "train split")
        test_demand = even_demand(ctx.supply("test"), "test split")
        train, test, drawn = draw_train_and_test(ctx, train_demand, test_demand, recycle=False)
        info.update(drawn)
        return train, test, info
    pooled = ctx.pooled_labels
    demand = even_demand(np.bincount(pooled, minlength=num_classes), "union of both splits")
    members, _ = draw_from_pools(class_pools(pooled, num_classes, rng), demand, rng)
    trf = 0.75 if train_fraction is None else train_fraction
    train, test = split_train_test(members, pooled, num_classes, trf, rng)
    info.update(train_fraction=trf)
    return train, test, info


def balanced_class_sets(sizes: Sequence[int], num_classes: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Class sets of the given sizes, distinct classes within a client, every class held by
    as many clients as every other give or take one: clients take consecutive classes
    from a sequence of random permutations of the classes (redrawn, up to 1000 times, until
    no client's run of classes repeats one)."""
    total = int(sum(sizes))
    bounds = np.cumsum([0, *sizes])
    for _ in range(1000):
        deal = np.concatenate([rng.permutation(num_classes) for _ in range(-(-total // num_classes))])[:total]
        sets = [np.sort(deal[bounds[i]:bounds[i + 1]]) for i in range(len(sizes))]
        if all(len(np.unique(c)) == len(c) for c in sets):
            return sets
    raise PartitionError("class_sets='balanced' found no deal with distinct classes within every client in 1000 "
                         "draws; use class_sets='random'.", param="class_sets")


PARAMS = {
    "classes_per_client": Field(REQUIRED, type=(int, list), low=1, items=Field(type=int, low=1), min_length=1,
                                doc="#C, the classes each client holds, or one count per group (FedPAC C.7: "
                                    "[3, 3, 5, 5, 8])"),
    "class_sets": Field("random", choices=("random", "clustered", "balanced"),
                        doc="how a client's classes are chosen: at random, shared within a group, or balanced so "
                            "that every class is held equally often"),
    "num_groups": Field(None, type=int, low=1, doc="groups of clients (client i in group i % num_groups)"),
    "samples_per_client": Field(600, type=int, low=1, nullable=True,
                                doc="train samples per client, balanced over its classes (null: the classes' "
                                    "samples shared out, disjoint)"),
    "on": ON,
    "test_fraction": replace(TEST_FRACTION, doc="with samples_per_client, round(test_fraction * n) test samples "
                                                "(null: 0.5)"),
    "train_fraction": TRAIN_FRACTION,
    "recycle": RECYCLE,
}


def check(p: dict, num_classes: int | None) -> None:
    """The rules between parameters and the class count."""
    k = "pathological"
    cpc = p["classes_per_client"]
    per_group = [int(c) for c in cpc] if isinstance(cpc, list) else [int(cpc)]
    if num_classes is not None and max(per_group) > num_classes:
        raise PartitionError(
            f"classes_per_client={shorten(cpc)} is invalid: a client cannot hold more than "
            f"num_classes={num_classes} classes.",
            param="classes_per_client",
        )
    ng = p["num_groups"]
    if ng is not None:
        if len(per_group) > 1 and ng != len(per_group):
            raise PartitionError(
                f"num_groups={ng} is invalid: classes_per_client lists {len(per_group)} groups; "
                "leave num_groups unset or make them agree.",
                param="num_groups",
            )
    elif p["class_sets"] == "clustered" and len(per_group) == 1:
        raise PartitionError(
            "num_groups is required for kind 'pathological' when class_sets='clustered' and "
            "classes_per_client is a single integer.",
            param="num_groups",
        )
    spc = p["samples_per_client"]
    if spc is not None:
        if p["on"] != "train":
            raise PartitionError(
                f"on={shorten(p['on'])} is invalid for kind 'pathological' with samples_per_client={spc}: "
                "on='union' requires samples_per_client=None.",
                param="on",
            )
    else:
        need_unused(k, "test_fraction", p["test_fraction"], "when samples_per_client=None")
    if p["on"] != "union":
        need_unused(k, "train_fraction", p["train_fraction"], "unless on='union'")


KIND = PartitionKind("pathological", partition=partition, params=PARAMS, check=check,
                     doc="#C classes per client (FedPAC appendix C.7, FedFA section 5, FedCP section 4)")
