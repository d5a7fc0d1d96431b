"""A finished run keeps its final states: re-scoring it reproduces its final accuracies,
and evaluation-time settings (kNN-Per's lambda) can be changed without training again."""
from __future__ import annotations

import numpy as np
import pytest

from pflcore.engine import ResultsError, RunResult, run
from pflcore.engine.revisit import client_predictions, final_simulation, reevaluate, global_test_accuracy


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
        assert 100 * (predicted == labels).mean() == pytest.approx(result.client_acc[client])  # percent


def test_global_test_accuracy_is_the_pooled_accuracy_when_the_clients_hold_the_whole_test_set(make_config):
    result = run(make_config(method="fedavg", rounds=2, partition={"kind": "iid"}))
    sim = final_simulation(result)
    from pflcore.data.sources import load_dataset

    assert int(sim.data.test_sizes.sum()) == len(load_dataset("digits").test_y)  # every test sample, once
    assert global_test_accuracy(result) == pytest.approx(result.summary["acc_weighted"], abs=1e-9)


def test_global_test_accuracy_counts_the_classes_no_client_holds(make_config):
    from pflcore.data.sources import load_dataset

    # 4 clients x 1 class: at most 4 of the 10 digits are held, the others are never predicted right
    result = run(make_config(method="fedavg", rounds=2,
                             partition={"kind": "pathological", "classes_per_client": 1, "samples_per_client": 40}))
    held = set(np.concatenate([np.unique(final_simulation(result).data.train[k].y.numpy()) for k in range(4)]).tolist())
    test_y = load_dataset("digits").test_y.numpy()
    ceiling = 100 * np.isin(test_y, sorted(held)).mean()
    assert len(held) < 10 and global_test_accuracy(result) <= ceiling + 1e-9
    assert result.summary["acc_weighted"] > ceiling  # the clients' pooled splits hold only their classes


def test_global_test_accuracy_refuses_a_personalised_method(make_config):
    result = run(make_config(method="fedper", rounds=1))
    with pytest.raises(ValueError, match="personal model per client"):
        global_test_accuracy(result)


def test_tables_report_the_global_test_accuracy_as_a_metric(make_config):
    from pflcore.analysis import seeds_table

    result = run(make_config(method="fedavg", rounds=2,
                             partition={"kind": "pathological", "classes_per_client": 1, "samples_per_client": 40}))
    table = seeds_table({"fedavg": [result]}, paper={"fedavg": 50.0}, metric="global_test_acc")
    assert table.loc["fedavg", "global_test_acc"] == pytest.approx(global_test_accuracy(result))
    assert table.loc["fedavg", "diff"] == pytest.approx(global_test_accuracy(result) - 50.0)
    assert table.loc["fedavg", "acc_mean"] == result.summary["acc_mean"]  # pflcore's one evaluation beside it
