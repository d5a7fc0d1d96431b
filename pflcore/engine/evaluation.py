"""The ONE evaluation, the same definition for every method.

For each client: the model that client would use for inference at this point (its
personal model for personalised methods, the global model otherwise) scored on its own
test split. Personalised predictors are built where the client's work runs (the
executors); a shared model is scored here for all clients at once. Summaries: unweighted
mean and std over clients, sample-weighted mean. Every accuracy is in percent.
"""
from __future__ import annotations

import numpy as np
import torch

from ..data.federated import FederatedData
from ..training import predict_correct
from .hooks import RunHook, register_hook


def shared_correct(model: torch.nn.Module, data: FederatedData) -> np.ndarray:
    """Correct test predictions per client of one model used by every client, in one
    batched pass over all clients' test data."""
    hits = predict_correct(model, data.all_test_x(), data.all_test_y())
    bounds = np.concatenate([[0], np.cumsum(data.test_sizes)])
    return np.array([hits[a:b].sum() for a, b in zip(bounds[:-1], bounds[1:])], dtype=np.float64)


def _fractions(correct: np.ndarray, test_sizes: np.ndarray) -> np.ndarray:
    """Per-client share of correct test predictions (NaN for a client with no test data)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(test_sizes > 0, np.asarray(correct, dtype=np.float64) / np.maximum(test_sizes, 1), np.nan)


def accuracies(correct: np.ndarray, test_sizes: np.ndarray) -> np.ndarray:
    """Per-client accuracy in percent from correct counts (NaN for a client with no test data,
    or whose count is NaN): the one place a per-client accuracy is made, so every array of
    them (``RunResult.client_acc``, ``acc_history``, ``clients.npz``, records) is in percent."""
    return 100 * _fractions(correct, test_sizes)


def summarize(correct: np.ndarray, test_sizes: np.ndarray) -> dict[str, float]:
    """acc_mean / acc_std over clients (unweighted) and acc_weighted (by test size), in
    percent, from correct counts: 100 times the statistic of the fractions, as pflcore has
    always computed them (so summaries of earlier runs and records stay equal bit for bit)."""
    acc = _fractions(correct, test_sizes)
    ok = ~np.isnan(acc)
    return {
        "acc_mean": float(100 * acc[ok].mean()),
        "acc_std": float(100 * acc[ok].std()),
        "acc_weighted": float(100 * np.average(acc[ok], weights=test_sizes[ok])),
    }


class NewClientScoring(RunHook):
    """New-client generalisation (pFedFDA section 5, Table 4; ``config.new_clients``): after
    the last round's evaluation every held-out client adapts as its method prescribes and
    is scored (:meth:`~pflcore.engine.Simulation.evaluate_new_clients`); the record gets the
    ``new_`` summary and the per-client accuracies (percent)."""

    def evaluated(self, sim, round_index: int, record: dict) -> None:
        if round_index != sim.config.rounds - 1 or not len(sim.new_clients):
            return
        correct, sizes = sim.count_correct_new_clients(round_index), sim.data.test_sizes
        record.update({f"new_{k}": v for k, v in summarize(correct, sizes).items()})
        record["new_clients_acc"] = accuracies(correct, sizes).tolist()  # percent


register_hook("new_clients", lambda config, data: NewClientScoring() if config.new_clients else None)
