"""Kind ``pfllib_dirichlet``: PFLlib's Dirichlet generator, as the FedCP authors made their
practical setting (FedCP, Zhang et al., KDD 2023, section 4; PFLlib's generators)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .common import (
    Context,
    PartitionError,
    PartitionKind,
    Result,
    is_real,
    need_fraction,
    need_int,
    split_unstratified,
)


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
    n, rng = ctx.num_clients, ctx.rng
    assert n is not None
    labels = ctx.pooled_labels
    total = labels.size
    if least_samples * n > total:
        raise PartitionError(
            f"least_samples={least_samples} is infeasible for kind 'pfllib_dirichlet': {n} clients x "
            f"{least_samples} samples exceed the {total} samples; lower least_samples or num_clients.",
            param="least_samples",
        )
    by_class = [np.flatnonzero(labels == k) for k in range(ctx.num_classes)]
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
        if usable and sizes.min() >= least_samples:
            break
    else:
        raise PartitionError(
            f"alpha={alpha} with least_samples={least_samples} and num_clients={n} did not give every client "
            f"at least least_samples samples in max_retries={max_retries} draws; raise alpha or max_retries, "
            "or lower least_samples or num_clients.",
            param="alpha",
        )
    members = [np.sort(np.concatenate(p)) if p else np.zeros(0, dtype=np.int64) for p in pieces]
    train, test = split_unstratified(members, train_fraction, rng)
    info: dict[str, Any] = {"attempts": attempt, "train_fraction": float(train_fraction)}
    return train, test, info


def check(p: dict, num_classes: int | None) -> None:
    """Reject bad parameters before any label is seen (``num_classes`` may be None)."""
    k = "pfllib_dirichlet"
    alpha = p["alpha"]
    if not is_real(alpha) or alpha <= 0:
        raise PartitionError(f"alpha={alpha!r} is invalid for kind {k!r}: it must be a number > 0.", param="alpha")
    need_int(k, "least_samples", p["least_samples"], 0)
    need_int(k, "max_retries", p["max_retries"], 1)
    need_fraction(k, "train_fraction", p["train_fraction"], closed_right=False)


KIND = PartitionKind("pfllib_dirichlet", partition=partition, check=check, uses_both_splits=lambda params: True)
