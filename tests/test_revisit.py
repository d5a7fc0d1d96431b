"""A finished run keeps its final states: re-scoring it reproduces its final accuracies,
and evaluation-time settings (kNN-Per's lambda) can be changed without training again."""
from __future__ import annotations

import numpy as np
import pytest

from pflcore.engine import ResultsError, RunResult, run
from pflcore.engine.revisit import client_predictions, final_simulation, reevaluate


def test_reevaluating_a_finished_run_reproduces_its_final_accuracies(make_config):
    result = run(make_config(method="knn_per", method_params={"lam": 0.5}, rounds=2))
    again = reevaluate(result.path)
    np.testing.assert_array_equal(again, result.client_acc)
    loaded = RunResult.load(result.path)
    state = loaded.final_state()
    assert set(state) == {"state", "client_states"}
    # lambda = 0 is the global model alone: kNN-Per without its datastore
    fedavg_like = reevaluate(loaded, {"lam": 0.0})
    assert not np.array_equal(fedavg_like, result.client_acc)


def test_the_restored_simulation_holds_the_final_model(make_config):
    import torch

    result = run(make_config(method="fedavg", rounds=2))
    sim = final_simulation(result)
    saved = result.final_state()["state"]["model"]
    assert all(torch.equal(sim.state["model"][k], v) for k, v in saved.items())


def test_a_run_without_a_final_state_says_so(make_config):
    result = run(make_config(method="fedavg", rounds=1))
    (result.path / "final_state.pt").unlink()
    with pytest.raises(ResultsError, match="kept no final state"):
        RunResult.load(result.path).final_state()


@pytest.mark.parametrize("method", ["fedavg", "fedper"])
def test_client_predictions_agree_with_the_scored_accuracy(make_config, method):
    # a global predictor (FedAvg) and a personal one (FedPer's own head)
    result = run(make_config(method=method, rounds=2))
    sim = final_simulation(result)
    for client in range(result.config.num_clients):
        predicted = client_predictions(result, client)
        labels = sim.data.test[client].y.numpy()
        assert predicted.shape == labels.shape
        assert (predicted == labels).mean() == pytest.approx(result.client_acc[client])
