"""The defining behaviour of kNN-Per on tiny problems (pflcore/algorithms/knn_per.py)."""
from __future__ import annotations

import math

import pytest
import torch

from pflcore.algorithms.knn_per import KNNMixture, knn_probabilities, squared_distances
from pflcore.engine import Simulation, build_data, run
from pflcore.training import EVAL_KEY, predict_correct

from conftest import advance, strip, assert_workers_give_the_in_process_numbers


def simulation(make_config, **changes) -> Simulation:
    config = make_config(**changes)
    return Simulation(config, build_data(config))


# ---------------------------------------------------------------------- kNN-Per
def test_knn_weights_on_a_hand_example():
    keys = torch.tensor([[1.0, 0.0], [0.0, 2.0], [3.0, 0.0], [0.0, -5.0]])
    labels = torch.tensor([0, 1, 1, 2])
    query = torch.zeros(1, 2)
    assert squared_distances(query, keys).tolist() == [[1.0, 4.0, 9.0, 25.0]]
    # k = 2: neighbours at d = 1 (class 0) and d = 4 (class 1), D = 2, s = 1.5.
    a, b = math.exp(-1 / 3.0), math.exp(-4 / 3.0)
    p = knn_probabilities(query, keys, labels, k=2, scale=1.5, num_classes=3)
    torch.testing.assert_close(p, torch.tensor([[a / (a + b), b / (a + b), 0.0]]))
    # k = 3: the two class-1 neighbours add up.
    a, b, c = math.exp(-1 / 2), math.exp(-4 / 2), math.exp(-9 / 2)
    p = knn_probabilities(query, keys, labels, k=3, scale=1.0, num_classes=3)
    torch.testing.assert_close(p, torch.tensor([[a, b + c, 0.0]]) / (a + b + c))
    # k beyond the datastore: all entries; far-away queries still give a distribution.
    p = knn_probabilities(torch.tensor([[1e4, 1e4]]), keys, labels, k=10, scale=1.0, num_classes=3)
    assert torch.isfinite(p).all() and float(p.sum()) == pytest.approx(1.0)


def test_knn_mixture_mixes_probabilities_or_logits():
    model = torch.nn.Module()
    model.body, model.head = torch.nn.Identity(), torch.nn.Linear(2, 3)
    keys, labels = torch.tensor([[1.0, 0.0], [0.0, 2.0], [3.0, 0.0]]), torch.tensor([0, 1, 1])
    x = torch.tensor([[0.5, 0.2], [2.0, 1.0]])
    p_knn = knn_probabilities(x, keys, labels, 2, 1.0, 3)
    with torch.no_grad():
        logits = model.head(x)
        out = KNNMixture(model, keys, labels, k=2, lam=0.3, scale=1.0)(x)
        torch.testing.assert_close(out, torch.log(0.3 * p_knn + 0.7 * torch.softmax(logits, 1)))
        out = KNNMixture(model, keys, labels, k=2, lam=0.3, scale=1.0, mix="logits")(x)
        torch.testing.assert_close(out, 0.3 * p_knn + 0.7 * logits)


def test_knn_per_with_lam_0_is_fedavg(make_config):
    knn = run(make_config(method="knn_per", method_params={"lam": 0.0}, name="knn"))
    fedavg = run(make_config(method="fedavg", name="fedavg"))
    assert strip(knn.history) == strip(fedavg.history)
    assert (knn.acc_history == fedavg.acc_history).all()


def test_knn_per_with_lam_1_and_k_1_predicts_each_training_point_own_label(make_config):
    sim = advance(simulation(make_config, method="knn_per", method_params={"lam": 1.0, "k": 1}), 1)
    for cid in range(4):
        client = sim.client(cid, 1, EVAL_KEY)
        model = sim.algorithm.predictor(sim.algorithm.payload(sim.state, cid, "evaluate"), client)
        hits = predict_correct(model, client.x, client.y)
        for i in (~hits).nonzero()[0]:  # a miss only where the same input carries another label
            same = (client.x == client.x[i]).flatten(1).all(1)
            assert bool((client.y[same] != client.y[i]).any()), (cid, i)
        assert hits.mean() > 0.95


def test_knn_per_capacity_subsamples_deterministically(make_config):
    sim = advance(simulation(make_config, method="knn_per", method_params={"capacity": 20}), 1)
    payload = sim.algorithm.payload(sim.state, 1, "evaluate")
    first = sim.algorithm.predictor(payload, sim.client(1, 1, EVAL_KEY))
    keys, labels = first.keys.clone(), first.labels.clone()
    again = sim.algorithm.predictor(payload, sim.client(1, 1, EVAL_KEY))
    assert keys.shape == (20, sim.model.feature_dim) and torch.equal(again.keys, keys)
    assert torch.equal(again.labels, labels)
    full = sim.algorithm.__class__(capacity=0).predictor(payload, sim.client(1, 1, EVAL_KEY))
    assert full.keys.shape[0] == sim.client(1, 1, EVAL_KEY).num_samples


# ---------------------------------------------------------------------- the variants the registry tests skip
@pytest.mark.parametrize("method, params", [("knn_per", {"capacity": 30, "k": 3, "mix": "logits"})])
def test_variants_in_two_workers_give_the_in_process_numbers(make_config, method, params):
    assert_workers_give_the_in_process_numbers(make_config, method, params)
