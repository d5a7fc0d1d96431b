"""Statistics for comparing runs: two runs' final predictors paired on the same test samples,
and the exact McNemar test of the samples only one of them gets right.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from ..engine.results import RunResult
from ..engine.revisit import final_simulation
from ..training import predict_correct


def paired_comparison(result_a: RunResult | str | Path, result_b: RunResult | str | Path) -> dict[str, float | int]:
    """Two finished runs' final predictors compared sample by sample on the same test samples
    (the runs must share dataset and partition): how many samples only A, only B classifies
    correctly, and the exact two-sided McNemar p-value of that split. At the top of a table
    one seed's pooled accuracies differ by a few samples (FedCP, Table 2: 0.07 points of
    17,508); pairing the samples keeps their common difficulty out of the comparison, which
    treating the two accuracies as independent does not."""
    results = [r if isinstance(r, RunResult) else RunResult.load(r) for r in (result_a, result_b)]
    sims = [final_simulation(r) for r in results]
    try:
        data_a, data_b = (sim.data for sim in sims)
        if data_a.num_clients != data_b.num_clients or not all(
                torch.equal(data_a.test[c].x, data_b.test[c].x) and torch.equal(data_a.test[c].y, data_b.test[c].y)
                for c in range(data_a.num_clients)):
            raise ValueError("the two runs were not scored on the same test samples (their datasets or partitions "
                             "differ), so they cannot be compared sample by sample.")
        a, b = (np.concatenate([predict_correct(sim.predictor(c, r.config.rounds - 1), sim.data.test[c].x,
                                                sim.data.test[c].y) for c in range(sim.data.num_clients)])
                for sim, r in zip(sims, results))
    finally:
        for sim in sims:
            sim.close()
    only_a, only_b = int((a & ~b).sum()), int((~a & b).sum())
    return {"samples": int(a.size), "acc_a": 100.0 * float(a.mean()), "acc_b": 100.0 * float(b.mean()),
            "only_a": only_a, "only_b": only_b, "p_value": mcnemar_exact(only_a, only_b)}


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Exact two-sided McNemar test: under "A and B are equally accurate" each of the
    ``only_a + only_b`` discordant samples goes either way with probability 1/2, so the
    p-value is 2 P(X <= min(only_a, only_b)), X ~ Binomial(only_a + only_b, 1/2), at most 1."""
    n = only_a + only_b
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(only_a, only_b) + 1))
    return min(1.0, 2 * tail / 2 ** n)


__all__ = ["mcnemar_exact", "paired_comparison"]
