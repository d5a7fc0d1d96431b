"""The ONE evaluation (algorithms.md, "Evaluation, one definition for every method").

For each client: the model that client would use for inference at this point (its
personal model for personalised methods, the global model otherwise) scored on its own
test split. Summaries: unweighted mean and std over clients, sample-weighted mean.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..algorithms.base import Algorithm, Client
from ..data.federated import FederatedData
from ..models import SplitModel
from ..training import predict_correct


def client_accuracies(algorithm: Algorithm, state: dict, data: FederatedData, model: SplitModel,
                      make_client: Callable[[int], Client]) -> np.ndarray:
    """Accuracy of every client's predictor on its test split (NaN for an empty split).

    A global method's model (``shared_predictor``) scores all clients' test data in one
    batched pass; personalised predictors are built and scored client by client.
    """
    sizes = data.test_sizes
    shared = algorithm.shared_predictor(state, model)
    if shared is not None:
        hits = predict_correct(shared, data.all_test_x(), data.all_test_y())
        bounds = np.concatenate([[0], np.cumsum(sizes)])
        correct = np.array([hits[a:b].sum() for a, b in zip(bounds[:-1], bounds[1:])], dtype=np.float64)
    else:
        correct = np.zeros(data.num_clients)
        for cid in range(data.num_clients):
            if sizes[cid] > 0:
                test = data.test[cid]
                predictor = algorithm.predictor(state, make_client(cid))
                correct[cid] = predict_correct(predictor, test.x, test.y).sum()
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(sizes > 0, correct / np.maximum(sizes, 1), np.nan)


def summarize(acc: np.ndarray, test_sizes: np.ndarray) -> dict[str, float]:
    """acc_mean / acc_std over clients (unweighted, in %) and acc_weighted (by test size)."""
    ok = ~np.isnan(acc)
    return {
        "acc_mean": float(100 * acc[ok].mean()),
        "acc_std": float(100 * acc[ok].std()),
        "acc_weighted": float(100 * np.average(acc[ok], weights=test_sizes[ok])),
    }
