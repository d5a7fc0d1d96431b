"""Kind ``domains``: every client holds the samples of one domain of a multi-domain dataset
(pFedFDA appendix D.1 and Table 7: DIGIT-5, 20 clients, 4 per domain, Dirichlet(0.5)
within each domain)."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import dirichlet, iid
from .common import (
    ON,
    TRAIN_FRACTION,
    Context,
    PartitionError,
    PartitionKind,
    Result,
    need_unused,
    split_train_test,
)
from ...spec import Field


def partition(
    ctx: Context,
    *,
    train_domains: np.ndarray | None = None,
    test_domains: np.ndarray | None = None,
    clients_per_domain: int = 4,
    alpha: float | None = None,
    on: str = "train",
    train_fraction: float | None = None,
    min_size: int | None = None,
) -> Result:
    """One domain per client (pFedFDA appendix D.1): client ``c`` belongs to domain
    ``c // clients_per_domain``, so ``num_clients`` is ``clients_per_domain`` times the
    number of domains. ``train_domains`` / ``test_domains`` give the domain index of each
    train-split / test-split sample (a multi-domain dataset's ``domains``, e.g. ``digit5``'s,
    passed by the engine).

    Within each domain its clients share that domain's samples:

    * ``alpha=None``: uniformly at random, near-equal parts. ``on="train"``: the domain's
      train split is cut among its clients and its test split likewise (kind ``iid``);
      ``on="union"``: both splits pooled and cut, then each client's samples split
      train/test, stratified, with ``train_fraction`` (default 0.75).
    * ``alpha``: per-class Dirichlet(alpha) proportions, exactly kind ``dirichlet`` run on
      the domain's samples with ``on``, ``train_fraction`` and ``min_size`` (default 10).
      pFedFDA's Table 7 is ``alpha=0.5, on="union", train_fraction=0.8`` (Dir(0.5) within
      each domain, appendix D.1; 80/20 per client, appendix C.2); its "% Samples" is
      ``subsample``.

    Domains are shared out one after the other from the one random generator; every
    sample of a domain goes to one of its clients (nothing is recycled).
    """
    if train_domains is None or test_domains is None:
        raise PartitionError(
            "kind 'domains' gives each client the samples of one domain, and this dataset records none; use a "
            "multi-domain dataset such as 'digit5', or another partition kind.",
            param="kind",
        )
    train_ids = _domain_ids("train_domains", train_domains, ctx.n_train)
    test_ids = _domain_ids("test_domains", test_domains, ctx.test_labels.size)
    num_domains = int(max(train_ids.max(initial=-1), test_ids.max(initial=-1))) + 1
    needed = clients_per_domain * num_domains
    if ctx.num_clients is not None and ctx.num_clients != needed:
        raise PartitionError(
            f"num_clients={ctx.num_clients} is invalid for kind 'domains': the dataset has {num_domains} domains "
            f"and clients_per_domain={clients_per_domain}, so num_clients must be {needed}.",
            param="num_clients",
        )
    no_train = [d for d in range(num_domains) if not np.any(train_ids == d)]
    if no_train:
        raise PartitionError(f"domain {no_train[0]} has no train-split samples for kind 'domains'; every domain "
                             "needs some for its clients.", param="train_domains")
    train: list[np.ndarray] = []
    test: list[np.ndarray] = []
    info: dict[str, Any] = {"num_domains": num_domains, "recycled_train": 0, "recycled_test": 0}
    for d in range(num_domains):
        train_members, test_members = np.flatnonzero(train_ids == d), np.flatnonzero(test_ids == d)
        sub = Context(ctx.kind, ctx.train_labels[train_members], ctx.test_labels[test_members], clients_per_domain,
                      ctx.num_classes, ctx.rng)
        try:
            sub_train, sub_test, sub_info = _share_domain(sub, alpha, on, train_fraction, min_size)
        except PartitionError as exc:  # a domain's clients are the kind's num_clients there
            reason = str(exc).replace("num_clients", "clients_per_domain")
            raise PartitionError(f"in domain {d} ({train_members.size} train and {test_members.size} test samples), "
                                 f"{reason}", param="clients_per_domain" if exc.param == "num_clients" else exc.param) \
                from None
        to_pooled = np.concatenate([train_members, ctx.n_train + test_members]).astype(np.int64)
        train += [np.sort(to_pooled[a]) for a in sub_train]
        test += [np.sort(to_pooled[a]) for a in sub_test]
        for key, value in sub_info.items():
            if key.startswith("recycled_"):
                info[key] += int(value)
            elif key == "attempts":
                info.setdefault("attempts", []).append(int(value))
            else:
                info[key] = value
    info["client_domains"] = [c // clients_per_domain for c in range(needed)]
    _check_single_domain(train, test, train_ids, test_ids, clients_per_domain)
    return train, test, info


def _domain_ids(name: str, value: Any, length: int) -> np.ndarray:
    arr = np.asarray(value)
    if arr.ndim != 1 or arr.size != length or not (arr.size == 0 or np.issubdtype(arr.dtype, np.integer)) \
            or (arr.size and arr.min() < 0):
        raise PartitionError(f"{name} must hold one domain index >= 0 per sample of its split ({length}).",
                             param=name)
    return arr.astype(np.int64)


def _share_domain(sub: Context, alpha: float | None, on: str, train_fraction: float | None,
                  min_size: int | None) -> Result:
    """One domain's samples shared among its clients (``sub``: that domain alone)."""
    if alpha is not None:
        return dirichlet.partition(sub, alpha=alpha, on=on, train_fraction=train_fraction,
                                   min_size=10 if min_size is None else min_size)
    assert sub.num_clients is not None
    available = sub.n_train if on == "train" else sub.n_train + sub.test_labels.size
    if available < sub.num_clients:
        raise PartitionError(f"clients_per_domain={sub.num_clients} is infeasible: that many clients cannot share "
                             f"{available} sample(s); lower clients_per_domain.", param="clients_per_domain")
    if on == "train":
        return iid.partition(sub)
    pooled = sub.rng.permutation(sub.n_train + sub.test_labels.size).astype(np.int64)
    fraction = 0.75 if train_fraction is None else train_fraction
    train, test = split_train_test(np.array_split(pooled, sub.num_clients), sub.pooled_labels, sub.num_classes,
                                   fraction, sub.rng)
    return train, test, {"train_fraction": fraction}


def _check_single_domain(train: list[np.ndarray], test: list[np.ndarray], train_ids: np.ndarray,
                         test_ids: np.ndarray, clients_per_domain: int) -> None:
    """The kind's promise: client ``c`` holds only samples of domain ``c // clients_per_domain``."""
    pooled_ids = np.concatenate([train_ids, test_ids])
    for c, (a, b) in enumerate(zip(train, test)):
        ids = pooled_ids[np.concatenate([a, b])]
        assert np.all(ids == c // clients_per_domain), f"client {c} holds samples of another domain"


PARAMS = {
    "train_domains": Field(None, words="one domain index per sample",
                           doc="the domain of each train-split sample (the engine passes a multi-domain "
                               "dataset's own)"),
    "test_domains": Field(None, words="one domain index per sample",
                          doc="the domain of each test-split sample (likewise)"),
    "clients_per_domain": Field(4, low=1, doc="clients sharing each domain (pFedFDA Table 7: 4)"),
    "alpha": Field(None, type=float, low=0, low_open=True,
                   doc="Dirichlet(alpha) class proportions within each domain (null: a uniform split)"),
    "on": ON,
    "train_fraction": TRAIN_FRACTION,
    "min_size": Field(None, type=int, low=0, doc="with alpha, the fewest samples per client (null: 10)"),
}


def check(p: dict, num_classes: int | None) -> None:
    """The rules between parameters: both domain arrays or neither, and each of
    ``train_fraction`` and ``min_size`` only where it means something."""
    k = "domains"
    if (p["train_domains"] is None) != (p["test_domains"] is None):
        raise PartitionError("train_domains and test_domains go together for kind 'domains'; pass both or neither.",
                             param="train_domains")
    if p["on"] == "train":
        need_unused(k, "train_fraction", p["train_fraction"], "unless on='union'")
    if p["alpha"] is None:
        need_unused(k, "min_size", p["min_size"], "without alpha (it bounds the Dirichlet draw)")


def record(params: dict[str, Any]) -> dict[str, Any]:
    """The parameters as stored in the partition: each domain array summarised as ``"<n ids>"``."""
    out = dict(params)
    for name in ("train_domains", "test_domains"):
        if out[name] is not None:
            out[name] = f"<{len(out[name])} ids>"
    return out


KIND = PartitionKind("domains", partition=partition, params=PARAMS, check=check, infers_num_clients=True,
                     record=record, doc="one domain of a multi-domain dataset per client (pFedFDA appendix D.1)")
