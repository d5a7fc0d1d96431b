"""The defining behaviour of the multiple-global-model baselines on tiny problems:
HypCluster, FedEM and FedEM-FT."""
from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call, grad

from pflcore.algorithms.base import load, weighted_average
from pflcore.algorithms.fedem import Mixture, mixture_weights, responsibilities, sample_losses
from pflcore.algorithms.hypcluster import pick
from pflcore.training import mean_loss
from pflcore.engine import Simulation, build_data, run
from pflcore.training import EVAL_KEY, TRAIN_KEY

from conftest import advance, strip


def simulation(make_config, **changes) -> Simulation:
    config = make_config(**changes)
    return Simulation(config, build_data(config))


def without_cluster_sizes(history: list[dict]) -> list[dict]:
    return [{k: v for k, v in h.items() if not k.startswith("cluster_")} for h in strip(history)]


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def loaded(sim: Simulation, weights: dict) -> torch.nn.Module:
    return load(copy.deepcopy(sim.model), weights)


# ---------------------------------------------------------------------- equal to FedAvg
def test_hypcluster_with_one_cluster_is_fedavg_bit_for_bit(make_config):
    hyp = run(make_config(method="hypcluster", method_params={"k": 1}, name="hyp"))
    fedavg = run(make_config(method="fedavg", name="fedavg"))
    assert without_cluster_sizes(hyp.history) == strip(fedavg.history)
    assert (hyp.acc_history == fedavg.acc_history).all()
    assert all(h["cluster_0_clients"] == 4 for h in hyp.history)


def test_fedem_with_one_component_is_fedavg_bit_for_bit(make_config):
    fedem = run(make_config(method="fedem", method_params={"M": 1}, name="fedem"))
    fedavg = run(make_config(method="fedavg", name="fedavg"))
    assert strip(fedem.history) == strip(fedavg.history)
    assert (fedem.acc_history == fedavg.acc_history).all()


def test_fedem_ft_with_one_component_is_fedavg_ft_bit_for_bit(make_config):
    fedem = run(make_config(method="fedem_ft", method_params={"M": 1, "ft_epochs": 2}, rounds=2, name="fedem"))
    fedavg = run(make_config(method="fedavg_ft", method_params={"ft_epochs": 2}, rounds=2, name="fedavg"))
    assert strip(fedem.history) == strip(fedavg.history)
    assert (fedem.acc_history == fedavg.acc_history).all()


# ---------------------------------------------------------------------- initialisation
def test_initial_models_are_independent_and_deterministic(make_config):
    a = simulation(make_config, method="hypcluster", method_params={"k": 3})
    b = simulation(make_config, method="hypcluster", method_params={"k": 3})
    fedem = simulation(make_config, method="fedem", method_params={"M": 3})
    initial = {k: v for k, v in a.model.state_dict().items()}
    models = a.state["models"]
    assert same(models[0], initial)  # cluster 0 is the run's initial model
    for m in range(3):
        assert same(models[m], b.state["models"][m])  # the same draws on every run
        assert same(models[m], fedem.state["components"][m])  # and for FedEM's components
    for m, other in ((1, 0), (2, 0), (2, 1)):
        for key in initial:  # every tensor redrawn, with the initial one's dtype and scale
            assert not torch.equal(models[m][key], models[other][key]), (m, other, key)
            assert models[m][key].dtype == initial[key].dtype
    for key in initial:
        ratio = float(models[1][key].std() / initial[key].std())
        assert 0.8 < ratio < 1.25, key  # the same init distribution (the MLP's default init)


# ---------------------------------------------------------------------- HypCluster
def test_pick_takes_the_least_loss_and_the_lowest_index_on_ties():
    assert pick([0.7, 0.3, 0.5]) == 1
    assert pick([0.5, 0.3, 0.3]) == 1
    assert pick([math.nan, 0.9, math.inf]) == 1
    assert pick([math.nan, math.nan]) == 0


def test_hypcluster_trains_the_least_loss_cluster_and_leaves_unpicked_ones(make_config):
    sim = simulation(make_config, method="hypcluster", method_params={"k": 3})
    alg = sim.algorithm
    # Cluster 1 becomes a model trained on client 2's data: its loss there is the least.
    fedavg = simulation(make_config, method="fedavg", local_epochs=5)
    trained = fedavg.algorithm.local_update({"model": sim.state["models"][0]}, fedavg.client(2, 0, TRAIN_KEY))
    state = {**sim.state, "models": [sim.state["models"][0], trained["model"], sim.state["models"][2]]}
    updates = {}
    for cid in range(4):
        client = sim.client(cid, 0, TRAIN_KEY)
        losses = [mean_loss(loaded(sim, m), client.x, client.y) for m in state["models"]]
        updates[cid] = alg.local_update(alg.payload(state, cid), client)
        assert updates[cid]["cluster"] == min(range(3), key=losses.__getitem__)
    assert updates[2]["cluster"] == 1
    new = alg.aggregate(state, updates, sim.server_context(0))
    picked = {updates[c]["cluster"] for c in updates}
    assert len(picked) < 3  # some cluster went unpicked
    for m in range(3):
        ids = [c for c in sorted(updates) if updates[c]["cluster"] == m]
        assert new["cluster_sizes"][m] == len(ids)
        if not ids:
            assert same(new["models"][m], state["models"][m])
        else:
            expected = weighted_average([updates[c]["model"] for c in ids],
                                        [updates[c]["num_samples"] for c in ids])
            assert same(new["models"][m], expected)
    assert alg.report(new) == {f"cluster_{m}_clients": new["cluster_sizes"][m] for m in range(3)}


def test_hypcluster_predicts_with_the_least_loss_cluster(make_config):
    sim = advance(simulation(make_config, method="hypcluster", method_params={"k": 3}), 2)
    for cid in range(4):
        client = sim.client(cid, 2, EVAL_KEY)
        losses = [mean_loss(loaded(sim, m), client.x, client.y) for m in sim.state["models"]]
        best = sim.state["models"][pick(losses)]
        model = sim.algorithm.predictor(sim.algorithm.payload(sim.state, cid, "evaluate"), client)
        assert same(model.state_dict(), best)


# ---------------------------------------------------------------------- FedEM
def test_fedem_e_step_and_m_step_by_hand():
    # pi = (1/4, 3/4); sample 0 has equal losses, sample 1 costs component 1 ln 3 less.
    losses = torch.tensor([[0.0, math.log(3.0)], [0.0, 0.0]])
    pi = torch.tensor([0.25, 0.75])
    q = responsibilities(losses, pi)
    # sample 0: (1/4, 3/4); sample 1: (1/4 / 3, 3/4) normalised = (1/10, 9/10)
    expected = torch.tensor([[0.25, 0.1], [0.75, 0.9]], dtype=torch.float64)
    torch.testing.assert_close(q, expected)
    torch.testing.assert_close(mixture_weights(q), torch.tensor([0.175, 0.825], dtype=torch.float64))


def test_fedem_mixture_prediction_is_the_log_of_the_weighted_softmaxes():
    torch.manual_seed(0)
    heads = [torch.nn.Linear(4, 3), torch.nn.Linear(4, 3)]
    pi = torch.tensor([0.3, 0.7], dtype=torch.float64)
    x = torch.randn(5, 4)
    expected = torch.log(0.3 * F.softmax(heads[0](x), 1) + 0.7 * F.softmax(heads[1](x), 1))
    torch.testing.assert_close(Mixture(heads, pi)(x), expected)


def test_fedem_local_round_is_one_e_step_then_q_weighted_sgd(make_config):
    """One batch holding all the client's data, plain SGD, one epoch: pi is the M-step of
    the E-step from uniform pi, and component m takes one step on sum_j q_jm l_jm / n."""
    lr = 0.1
    sim = simulation(make_config, method="fedem", method_params={"M": 2}, batch_size=256, lr=lr, momentum=0.0,
                     weight_decay=0.0)
    payload = sim.algorithm.payload(sim.state, 1)
    client = sim.client(1, 0, TRAIN_KEY)
    models = [loaded(sim, w) for w in payload["components"]]
    q = responsibilities(sample_losses(models, client.x, client.y), torch.full((2,), 0.5, dtype=torch.float64))
    update = sim.algorithm.local_update(payload, client)
    torch.testing.assert_close(sim.client_states[1]["pi"], mixture_weights(q))
    assert abs(float(sim.client_states[1]["pi"][0]) - 0.5) > 1e-3  # the M-step moved pi
    model = copy.deepcopy(sim.model).double()
    for m in range(2):
        w = {k: v.double() for k, v in payload["components"][m].items()}

        def f(params):
            losses = F.cross_entropy(functional_call(model, params, (client.x.double(),)), client.y, reduction="none")
            return (losses * q[m]).sum() / client.num_samples

        g = grad(f)(w)
        for k, value in update["components"][m].items():
            torch.testing.assert_close(value.double(), w[k] - lr * g[k], rtol=0, atol=1e-5)


def test_fedem_aggregates_every_component_by_train_size(make_config):
    sim = simulation(make_config, method="fedem", method_params={"M": 2},
                     partition={"kind": "quantity", "size_choices": [40, 120]}, seed=1)
    alg = sim.algorithm
    updates = {c: alg.local_update(alg.payload(sim.state, c), sim.client(c, 0, TRAIN_KEY)) for c in range(4)}
    sizes = [updates[c]["num_samples"] for c in range(4)]
    assert len(set(sizes)) > 1
    new = alg.aggregate(sim.state, updates, sim.server_context(0))
    for m in range(2):
        assert same(new["components"][m], weighted_average([updates[c]["components"][m] for c in range(4)], sizes))


def test_fedem_mixture_weights_persist_across_rounds(make_config):
    sim = advance(simulation(make_config, method="fedem", method_params={"M": 3}), 1)
    pi = sim.client_states[0]["pi"].clone()
    assert pi.shape == (3,) and float(pi.sum()) == pytest.approx(1.0)
    payload = sim.algorithm.payload(sim.state, 0)
    client = sim.client(0, 1, TRAIN_KEY)
    losses = sample_losses([loaded(sim, w) for w in payload["components"]], client.x, client.y)
    expected = mixture_weights(responsibilities(losses, pi))
    reset = mixture_weights(responsibilities(losses, torch.full((3,), 1 / 3, dtype=torch.float64)))
    assert not torch.allclose(expected, reset)
    sim.run_round(1)
    torch.testing.assert_close(sim.client_states[0]["pi"], expected)


def test_fedem_ft_fine_tunes_the_components_and_keeps_pi(make_config):
    sim = advance(simulation(make_config, method="fedem_ft", method_params={"M": 2, "ft_epochs": 2}), 1)
    pi = sim.client_states[3]["pi"].clone()
    payload = sim.algorithm.payload(sim.state, 3, "evaluate")
    x = sim.data.test[3].x
    plain = Mixture([loaded(sim, w) for w in payload["components"]], pi).eval()
    tuned = sim.algorithm.predictor(payload, sim.client(3, 0, EVAL_KEY)).eval()
    with torch.no_grad():
        assert not torch.allclose(tuned(x), plain(x))
        for h, w in zip(tuned.components, payload["components"]):
            assert not same(h.state_dict(), w)  # every component was fine-tuned
    torch.testing.assert_close(tuned.log_pi, torch.log(pi).float())
    assert torch.equal(sim.client_states[3]["pi"], pi)
    # no fine-tuning: FedEM's prediction
    sim.algorithm.ft_epochs = 0
    untuned = sim.algorithm.predictor(payload, sim.client(3, 0, EVAL_KEY)).eval()
    with torch.no_grad():
        assert torch.equal(untuned(x), plain(x))


def test_fedem_ft_weighted_fine_tuning_uses_the_responsibilities(make_config):
    sim = advance(simulation(make_config, method="fedem_ft", method_params={"M": 2, "ft_epochs": 1}), 1)
    payload = sim.algorithm.payload(sim.state, 0, "evaluate")
    x = sim.data.test[0].x
    plain = sim.algorithm.predictor(payload, sim.client(0, 0, EVAL_KEY)).eval()
    with torch.no_grad():
        plain_out = plain(x).clone()
    sim.algorithm.ft_loss = "weighted"
    weighted = sim.algorithm.predictor(payload, sim.client(0, 0, EVAL_KEY)).eval()
    with torch.no_grad():
        assert not torch.allclose(weighted(x), plain_out)
