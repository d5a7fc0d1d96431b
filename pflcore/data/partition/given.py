"""Kind ``given``: the split that came with a dataset shipped already federated (PFLlib's
format; FedCP, Zhang et al., KDD 2023, section 4)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .common import Context, PartitionError, PartitionKind, Result, group_by_owner
from ...spec import Field


def partition(
    ctx: Context,
    *,
    train_owners: np.ndarray | None = None,
    test_owners: np.ndarray | None = None,
) -> Result:
    """Client ``i`` keeps exactly the train and test samples its files held (FedCP section 4,
    the authors' own PFLlib partition of Table 2). ``train_owners`` / ``test_owners`` give the
    client id of each train-split / test-split sample (the dataset's ``owners``, passed by
    the engine); clients are ``0 .. max id``. Nothing is random."""
    if train_owners is None or test_owners is None:
        raise PartitionError(
            "kind 'given' keeps the client split that came with the dataset's files, and this dataset has "
            "none; use dataset 'pfllib' (a folder in PFLlib's format) or another partition kind.",
            param="kind",
        )
    owners = []
    for name, value, length in (("train_owners", train_owners, ctx.n_train),
                                ("test_owners", test_owners, ctx.test_labels.size)):
        arr = np.asarray(value)
        if arr.ndim != 1 or arr.size != length or not (arr.size == 0 or np.issubdtype(arr.dtype, np.integer)) \
                or (arr.size and arr.min() < 0):
            raise PartitionError(f"{name} must hold one client id >= 0 per sample of its split ({length}).",
                                 param=name)
        owners.append(arr.astype(np.int64))
    num = int(max(owners[0].max(initial=-1), owners[1].max(initial=-1))) + 1
    if ctx.num_clients is not None and ctx.num_clients != num:
        raise PartitionError(
            f"num_clients={ctx.num_clients} is invalid for kind 'given': the dataset's files hold {num} "
            f"clients; set num_clients to {num}.",
            param="num_clients",
        )
    train = group_by_owner([np.arange(ctx.n_train, dtype=np.int64)], [owners[0]], num)
    test = group_by_owner([np.arange(ctx.test_labels.size, dtype=np.int64) + ctx.n_train], [owners[1]], num)
    return train, test, {}


PARAMS = {
    "train_owners": Field(None, words="one client index per sample",
                          doc="the client of each train-split sample (the engine passes the dataset's own)"),
    "test_owners": Field(None, words="one client index per sample",
                         doc="the client of each test-split sample (likewise)"),
}


def check(p: dict, num_classes: int | None) -> None:
    """Reject bad parameters before any label is seen (the owners come with the data)."""
    if (p["train_owners"] is None) != (p["test_owners"] is None):
        raise PartitionError("train_owners and test_owners go together for kind 'given'; pass both or neither.",
                             param="train_owners")


def record(params: dict[str, Any]) -> dict[str, Any]:
    """The parameters as stored in the partition: each owner array summarised as ``"<n ids>"``."""
    return {k: (None if v is None else f"<{len(v)} ids>") for k, v in params.items()}


KIND = PartitionKind(
    "given", partition=partition, params=PARAMS, check=check, infers_num_clients=True,
    uses_both_splits=lambda params: True, record=record,
    doc="the split a dataset shipped already federated came with (PFLlib's format, FedCP section 4)",
)
