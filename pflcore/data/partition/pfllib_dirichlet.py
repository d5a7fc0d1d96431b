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
    is_real,
    need_fraction,
    need_int,
    split_unstratified,
)
from ...errors import shorten


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


def check(p: dict, num_classes: int | None) -> None:
    """Reject bad parameters before any label is seen (``num_classes`` may be None)."""
    k = "pfllib_dirichlet"
    alpha = p["alpha"]
    if not is_real(alpha) or alpha <= 0:
        raise PartitionError(f"alpha={shorten(alpha)} is invalid for kind {shorten(k)}: it must be a number > 0.", param="alpha")
    need_int(k, "least_samples", p["least_samples"], 0)
    need_int(k, "max_retries", p["max_retries"], 1, MAX_RETRIES)
    need_fraction(k, "train_fraction", p["train_fraction"], closed_right=False)


KIND = PartitionKind("pfllib_dirichlet", partition=partition, check=check, uses_both_splits=lambda params: True)
