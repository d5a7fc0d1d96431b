"""Kind ``pfllib_dirichlet``: PFLlib's Dirichlet generator, as the FedCP authors made their
practical setting (FedCP, Zhang et al., KDD 2023, section 4; PFLlib's generators)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .common import (
    MAX_RETRIES,
    Context,
    PartitionError,
    PartitionKind,
    Result,
    split_unstratified,
)
from ...errors import shorten
from ...spec import Field


def partition(
    ctx: Context,
    *,
    alpha: float = 0.1,
    least_samples: int = 40,
    max_retries: int = 1000,
    train_fraction: float = 0.75,
) -> Result:
    """PFLlib's Dirichlet partition (FedCP section 4, practical setting Dir(0.1)).

    Train and test splits are merged. For each class ``k`` in turn, its samples are
    shuffled, ``q ~ Dir_N(alpha)`` is drawn, clients already holding more than
    ``N_total / N`` samples get ``q_i = 0``, ``q`` is renormalised and client ``i`` takes
    the slice ``[floor(Q_{<i} n_k), floor(Q_{<=i} n_k))`` (the last client the rest). All
    of this is redrawn, up to ``max_retries`` times, until every client has at least
    ``least_samples`` samples (PFLlib: batch size / (1 - train ratio) = 40). Each client's
    samples are then split train/test without stratification (``train_fraction``, the
    first ``floor(0.75 n)`` of a shuffle). Unlike kind ``dirichlet``, the cap on full
    clients shapes the draw and the per-client split ignores classes.
    """
    n = ctx.num_clients
    assert n is not None
    members, attempt = capped_dirichlet(ctx.pooled_labels, ctx.num_classes, n, alpha, least_samples, max_retries,
                                        ctx.rng, kind="pfllib_dirichlet", size_param="least_samples")
    train, test = split_unstratified(members, train_fraction, ctx.rng)
    info: dict[str, Any] = {"attempts": attempt, "train_fraction": float(train_fraction)}
    return train, test, info


def capped_dirichlet(labels: np.ndarray, num_classes: int, n: int, alpha: float, min_size: int, max_retries: int,
                     rng: np.random.Generator, *, kind: str, size_param: str) -> tuple[list[np.ndarray], int]:
    """The capped Dirichlet allocation shared by PFLlib's and FedLab's generators: for each
    class in turn its samples are shuffled, ``q ~ Dir_n(alpha)`` is drawn, clients already
    holding at least ``len(labels) / n`` samples get ``q_i = 0``, ``q`` is renormalised and
    client ``i`` takes the slice ``[floor(Q_{<i} n_k), floor(Q_{<=i} n_k))``. Redrawn, up to
    ``max_retries`` times, until every client holds at least ``min_size``. Returns each
    client's sorted sample indices and the number of draws; errors name ``size_param``."""
    total = labels.size
    if min_size * n > total:
        raise PartitionError(
            f"{size_param}={min_size} is infeasible for kind {shorten(kind)}: {n} clients x {min_size} samples "
            f"exceed the {total} samples; lower {size_param} or num_clients.",
            param=size_param,
        )
    by_class = [np.flatnonzero(labels == k) for k in range(num_classes)]
    concentration = np.full(n, float(alpha))
    for attempt in range(1, max_retries + 1):
        pieces: list[list[np.ndarray]] = [[] for _ in range(n)]
        sizes = np.zeros(n, dtype=np.int64)
        usable = True
        for idx_k in by_class:
            idx_k = rng.permutation(idx_k)
            q = rng.dirichlet(concentration) * (sizes < total / n)
            mass = q.sum()
            if not (np.isfinite(mass) and mass > 0):
                usable = False
                break
            cuts = (np.cumsum(q / mass) * idx_k.size).astype(np.int64)[:-1]
            for i, part in enumerate(np.split(idx_k, cuts)):
                pieces[i].append(part)
                sizes[i] += part.size
        if usable and sizes.min() >= min_size:
            members = [np.sort(np.concatenate(p)).astype(np.int64) if p else np.zeros(0, dtype=np.int64)
                       for p in pieces]
            return members, attempt
    raise PartitionError(
        f"alpha={alpha} with {size_param}={min_size} and num_clients={n} did not give every client at least "
        f"{size_param} samples in max_retries={max_retries} draws; raise alpha or max_retries, or lower "
        f"{size_param} or num_clients.",
        param="alpha",
    )


#: PFLlib's per-client split: the first floor(0.75 n) shuffled samples train (FedCP section 4).
PFLLIB_TRAIN_FRACTION = Field(0.75, type=float, low=0, high=1, low_open=True, high_open=True,
                              doc="each client's share of training samples, the rest test (FedCP: 0.75)")

PARAMS = {
    "alpha": Field(0.1, low=0, low_open=True, doc="the Dirichlet concentration (FedCP's practical setting: 0.1)"),
    "least_samples": Field(40, low=0, doc="redraw until every client holds at least this many samples"),
    "max_retries": Field(1000, low=1, high=MAX_RETRIES, doc="the most redraws"),
    "train_fraction": PFLLIB_TRAIN_FRACTION,
}

KIND = PartitionKind("pfllib_dirichlet", partition=partition, params=PARAMS, uses_both_splits=lambda params: True,
                     doc="PFLlib's Dirichlet generator over both splits, as FedCP made its practical setting")
