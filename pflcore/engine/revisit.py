"""A finished run, revisited: its final server and client states restored into a
simulation, to analyse the trained models (features, t-SNE) or to score them again with
other evaluation-time settings (kNN-Per's lambda and k, FedAvg-FT's or FedEM-FT's
fine-tuning epochs, Fed-RoD's prediction) without training again, (two runs compared
sample by sample: :func:`pflcore.analysis.statistics.paired_comparison`).

    from pflcore.engine.revisit import reevaluate
    acc = reevaluate("results/paper/fedpac/knn_per-fmnist-...", {"lam": 0.7})

Only parameters that act at prediction time make sense here: the restored states are
those the run's own settings trained.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

from ..data.shifts import corrupt_client
from ..data.sources import load_dataset
from ..training import INFERENCE_BATCH, predict_correct
from .evaluation import accuracies
from .results import RunResult
from .simulation import Simulation, build_data


def final_simulation(result: RunResult | str | Path, method_params: Mapping[str, Any] | None = None,
                     *, workers: int | str = 0) -> Simulation:
    """A :class:`Simulation` of the run's config (its method's parameters updated with
    ``method_params``) holding the run's final states; ``workers`` as in a config (0: this
    process). Close it when done (``sim.close()``) if it uses worker processes."""
    result = result if isinstance(result, RunResult) else RunResult.load(result)
    config = result.config
    if method_params:
        config = config.replace(method_params={**config.method_params, **dict(method_params)})
    config = config.replace(workers=workers)
    sim = Simulation(config, build_data(config))
    sim.restore(result.final_state())
    return sim


def reevaluate(result: RunResult | str | Path, method_params: Mapping[str, Any] | None = None) -> np.ndarray:
    """Every client's test accuracy (percent, as ``result.client_acc``) of the run's final
    models, predicted with the run's method under ``method_params``: with none, exactly the
    run's final accuracies."""
    result = result if isinstance(result, RunResult) else RunResult.load(result)
    sim = final_simulation(result, method_params)
    try:
        return sim.evaluate(result.config.rounds - 1)
    finally:
        sim.close()


def client_predictions(result: RunResult | str | Path, client_id: int, split: str = "test") -> np.ndarray:
    """The labels client ``client_id``'s final predictor (as the evaluation builds it)
    predicts for its own ``split`` ("test" or "train") samples."""
    result = result if isinstance(result, RunResult) else RunResult.load(result)
    sim = final_simulation(result)
    try:
        return _predictions(sim, result, client_id, split)
    finally:
        sim.close()


def _predictions(sim: Simulation, result: RunResult, client_id: int, split: str) -> np.ndarray:
    x = getattr(sim.data, split)[client_id].x
    model = sim.predictor(client_id, result.config.rounds - 1)
    device = next(model.parameters()).device
    with torch.inference_mode():
        return torch.cat([model(part.to(device)).argmax(1).cpu() for part in x.split(INFERENCE_BATCH)]).numpy()


def final_correctness(result: RunResult | str | Path) -> list[np.ndarray] | None:
    """Which of its own test samples each client's final predictor classifies correctly (one
    boolean array per client, empty for a client without test data or held out as new), built
    as the run's last evaluation built it, in one torch thread as the workers run; ``None``
    if that does not reproduce the run's final accuracies exactly. Two runs' arrays on the same
    test samples give the paired (McNemar) comparison without the models
    (:func:`pflcore.analysis.mcnemar_exact`)."""
    result = result if isinstance(result, RunResult) else RunResult.load(result)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    sim = final_simulation(result)
    try:
        last = result.config.rounds - 1
        out = []
        for cid in range(sim.data.num_clients):
            test = sim.data.test[cid]
            if test.y.shape[0] == 0 or cid in set(sim.new_clients.tolist()):
                out.append(np.zeros(0, dtype=bool))
                continue
            out.append(predict_correct(sim.predictor(cid, last), test.x, test.y))
    finally:
        sim.close()
        torch.set_num_threads(threads)
    final = np.asarray(result.client_acc, dtype=np.float64)
    rescored = accuracies(np.array([hits.sum() for hits in out]), np.array([hits.size for hits in out]))
    for cid, hits in enumerate(out):
        if hits.size and not rescored[cid] == final[cid]:
            return None
    return out


def global_test_accuracy(result: RunResult | str | Path) -> float:
    """The metric of the global-model papers (FedFA, section 5 and appendix F.3: "the top-1
    accuracy on all datasets based on the global model"), in %: the run's final global
    model scored on the dataset's whole test split, every class counted as often as the
    dataset has it, clean (no per-client shift). pflcore's ``acc_weighted`` pools only the
    clients' test splits instead: under label skew with few clients those over- or
    under-represent classes, and a class no client holds is missing from them. A run read
    from its record gives the value the record keeps (computed so when the run finished)."""
    result = result if isinstance(result, RunResult) else RunResult.load(result)
    if result.record is not None and "global_test_acc" in result.summary:
        return float(result.summary["global_test_acc"])
    sim = final_simulation(result)
    try:
        model = sim.algorithm.shared_predictor(sim.state, sim.model)
        if model is None:
            raise ValueError(f"global_test_accuracy scores one global model, but method {result.config.method!r} "
                             "predicts with a personal model per client; use the run's per-client accuracies.")
        dataset = load_dataset(result.config.dataset, root=result.config.data_root)
        x = dataset.test_x if dataset.inputs == "tokens" else sim.data.normalise(dataset.test_x.float() / 255.0)
        return 100.0 * float(predict_correct(model, x.to(sim.data.device), dataset.test_y.to(sim.data.device)).mean())
    finally:
        sim.close()


def new_client_accuracy(result: RunResult | str | Path, corruption: str | None = None, severity: int = 3,
                        method_params: Mapping[str, Any] | None = None) -> np.ndarray:
    """The run's new clients (config ``new_clients``) scored again after adapting as their
    method prescribes, with their train and test images under ``corruption`` at
    ``severity`` (pFedFDA Table 4: each corruption at severity 3; None: clean, exactly the
    run's ``new_final``). Per-client accuracy (percent, as ``new_final``), NaN for the
    training clients."""
    result = result if isinstance(result, RunResult) else RunResult.load(result)
    if not result.config.new_clients:
        raise ValueError(f"the run in {result.path} held out no new clients (its config has new_clients = 0).")
    sim = final_simulation(result, method_params)
    try:
        if corruption is not None:
            _corrupt_clients(sim, sim.new_clients.tolist(), corruption, severity)
        return sim.evaluate_new_clients(result.config.rounds - 1)
    finally:
        sim.close()


def _corrupt_clients(sim: Simulation, clients: list[int], corruption: str, severity: int) -> None:
    """Replace these clients' train and test images (in the simulation's worker) by their
    corrupted copies, seeded and cached as the "-S" shift does: undo the normalisation,
    corrupt in [0, 1], normalise again."""
    data, worker = sim.data, sim.worker
    if data.mean is None:
        raise ValueError(f"corruptions change images, and {data.dataset_name!r} holds token ids.")
    for cid in clients:
        for store in (worker.train_data, worker.test_data):
            x, y = store[cid]
            images = (x * data.std + data.mean).clamp_(0, 1)
            store[cid] = ((corrupt_client(images, cid, corruption, severity, sim.config.seed) - data.mean)
                          / data.std, y)


__all__ = ["final_simulation", "new_client_accuracy", "reevaluate"]
