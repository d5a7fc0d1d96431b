"""Each first method on a tiny real problem: the behaviour that defines it."""
from __future__ import annotations

import copy

import pytest
import torch

from pflcore.algorithms import ALGORITHMS, make_algorithm
from pflcore.algorithms.base import weighted_average
from pflcore.engine import Simulation, build_data, run


def simulate(config, rounds=2):
    sim = Simulation(config, build_data(config))
    for r in range(rounds):
        sim.run_round(r)
    return sim


def equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_weighted_average_by_hand():
    a = {"w": torch.tensor([1.0, 2.0])}
    b = {"w": torch.tensor([3.0, 6.0])}
    out = weighted_average([a, b], [1, 3])
    torch.testing.assert_close(out["w"], torch.tensor([2.5, 5.0]))


def test_fedavg_aggregates_by_train_size(make_config):
    cfg = make_config(partition={"kind": "quantity", "size_choices": [40, 120]}, rounds=1, seed=1)
    sim = Simulation(cfg, build_data(cfg))
    ids = [int(c) for c in sim.participants(0)]
    updates = {c: sim.algorithm.local_update(sim.algorithm.payload(sim.state, c), sim.client(c, 0, 11))
               for c in ids}
    sizes = {c: updates[c]["num_samples"] for c in ids}
    assert len(set(sizes.values())) > 1
    state = sim.algorithm.aggregate(sim.state, updates, sim.server_context(0))
    for key in state["model"]:
        expected = sum(sizes[c] * updates[c]["model"][key].double() for c in ids) / sum(sizes.values())
        torch.testing.assert_close(state["model"][key], expected.float())


def test_fedprox_with_mu_zero_is_fedavg(make_config):
    avg = simulate(make_config(method="fedavg"))
    prox0 = simulate(make_config(method="fedprox", method_params={"mu": 0.0}))
    prox = simulate(make_config(method="fedprox", method_params={"mu": 1.0}))
    assert equal(avg.state["model"], prox0.state["model"])
    assert not equal(avg.state["model"], prox.state["model"])


def test_fedprox_term_pulls_towards_the_global_model(make_config):
    start = Simulation(make_config(method="fedavg"), build_data(make_config())).state["model"]
    dist = {}
    for mu in (0.0, 10.0):
        sim = simulate(make_config(method="fedprox", method_params={"mu": mu}, local_epochs=3), rounds=1)
        dist[mu] = sum(float((sim.state["model"][k] - start[k]).norm() ** 2) for k in start)
    assert dist[10.0] < dist[0.0]


def test_fedper_never_averages_the_head(make_config):
    sim = simulate(make_config(method="fedper"))
    init_head = Simulation(make_config(method="fedper"), sim.data).state["init_head"]
    assert equal(sim.state["init_head"], init_head)          # the server's head never moves
    heads = [sim.client_states[c]["head"] for c in range(4)]
    assert set(sim.client_states[0]) == {"head"}              # compact: only the head is kept per client
    assert not equal(heads[0], heads[1])                      # heads are personal
    assert not equal(heads[0], init_head)                     # and trained


def test_fedrep_trains_head_with_body_frozen(make_config):
    cfg = make_config(method="fedrep", local_epochs=0)
    sim = Simulation(cfg, build_data(cfg))
    payload = sim.algorithm.payload(sim.state, 0)
    update = sim.algorithm.local_update(payload, sim.client(0, 0, 11))
    assert equal(update["body"], payload["body"])             # E=0 body epochs: the body is untouched
    assert not equal(sim.client_states[0]["head"], payload["init_head"])
    cfg = make_config(method="fedrep", local_epochs=1, method_params={"head_epochs": 0})
    sim = Simulation(cfg, build_data(cfg))
    payload = sim.algorithm.payload(sim.state, 0)
    update = sim.algorithm.local_update(payload, sim.client(0, 0, 11))
    assert equal(sim.client_states[0]["head"], payload["init_head"])  # body phase keeps the head frozen
    assert not equal(update["body"], payload["body"])


def test_head_training_on_features_equals_frozen_body_training(make_config):
    """The FedRep/FedBABU shortcut is exact: training the head on precomputed features is
    the same computation as training it through a frozen body."""
    cfg = make_config(method="fedrep")
    sim = Simulation(cfg, build_data(cfg))
    client = sim.client(1, 0, 11)
    model = client.model
    start = copy.deepcopy(model.state_dict())
    client.train_head_on_features(model.head, client.features(model), epochs=2)
    shortcut = copy.deepcopy(model.head.state_dict())
    model.load_state_dict(start)
    sim.client(1, 0, 11).train(model.head.parameters(), epochs=2)
    for k in shortcut:
        torch.testing.assert_close(model.head.state_dict()[k], shortcut[k], rtol=1e-5, atol=1e-6)


def test_lg_fedavg_keeps_the_body_local(make_config):
    sim = simulate(make_config(method="lg_fedavg"))
    assert set(sim.client_states[0]) == {"body"}
    assert not equal(sim.client_states[0]["body"], sim.client_states[1]["body"])
    assert equal(sim.state["init_body"], Simulation(make_config(method="lg_fedavg"), sim.data).state["init_body"])


def test_fedbabu_never_trains_the_head_during_federation(make_config):
    sim = simulate(make_config(method="fedbabu"), rounds=3)
    init = Simulation(make_config(method="fedbabu"), sim.data).state
    assert equal(sim.state["head"], init["head"])
    assert not equal(sim.state["body"], init["body"])
    # For inference a client fine-tunes the head (and only the head by default).
    model = sim.algorithm.predictor(sim.algorithm.payload(sim.state, 0), sim.client(0, 2, 12))
    assert not equal({k: v for k, v in model.head.state_dict().items()}, init["head"])
    assert equal(dict(model.body.state_dict()), sim.state["body"])
    assert sim.client_states.get(0, {}) == {}                 # fine-tuning leaves no state behind


def test_fedavg_ft_fine_tunes_only_at_evaluation(make_config):
    ft = simulate(make_config(method="fedavg_ft"))
    avg = simulate(make_config(method="fedavg"))
    assert equal(ft.state["model"], avg.state["model"])      # same training as FedAvg
    model = ft.algorithm.predictor(ft.algorithm.payload(ft.state, 0), ft.client(0, 1, 12))
    assert not equal(dict(model.state_dict()), ft.state["model"])


def test_local_only_shares_nothing(make_config):
    sim = simulate(make_config(method="local"))
    init = sim.state["init"]
    alone = simulate(make_config(method="local", num_clients=4))
    assert equal(alone.client_states[2]["model"], sim.client_states[2]["model"])
    assert equal(sim.state["init"], init)
    assert not equal(sim.client_states[0]["model"], sim.client_states[1]["model"])


@pytest.mark.parametrize("method", sorted(ALGORITHMS))
def test_every_method_learns_the_tiny_problem(make_config, method):
    result = run(make_config(method=method, rounds=4, local_epochs=2))
    assert result.summary["acc_mean"] > 50, result.summary    # digits: chance is 10%


def test_unknown_method_parameter():
    with pytest.raises(ValueError, match="has no parameter 'lr'"):
        make_algorithm("fedprox", lr=0.1)
