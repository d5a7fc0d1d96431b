"""Each baseline's defining behaviour on tiny problems: Ditto, pFedMe, pFedHN, CCVR."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from pflcore.algorithms.base import TrainSettings
from pflcore.algorithms.ccvr import class_moments, pool_class_moments, sample_virtual_features
from pflcore.algorithms.pfedme import moreau_steps
from pflcore.engine import Simulation, build_data, run
from pflcore.training import SGDStep

from conftest import advance, strip


# ---------------------------------------------------------------------- Ditto
def test_ditto_global_trajectory_is_fedavgs_bit_for_bit(make_config):
    ditto = advance(Simulation(make_config(method="ditto"), build_data(make_config())), 3)
    fedavg = advance(Simulation(make_config(method="fedavg"), build_data(make_config())), 3)
    for key, tensor in fedavg.state["model"].items():
        assert torch.equal(ditto.state["model"][key], tensor), key


def test_ditto_with_lambda_0_gives_local_only_models(make_config):
    ditto = advance(Simulation(make_config(method="ditto", method_params={"lam": 0.0}), build_data(make_config())), 3)
    local = advance(Simulation(make_config(method="local"), build_data(make_config())), 3)
    for cid in range(4):
        for key, tensor in local.client_states[cid]["model"].items():
            assert torch.equal(ditto.client_states[cid]["personal"][key], tensor), (cid, key)


def test_ditto_lambda_pulls_the_personal_model_towards_the_global_one(make_config):
    def distance(lam: float) -> float:
        sim = advance(Simulation(make_config(method="ditto", method_params={"lam": lam}), build_data(make_config())), 2)
        return sum(float((sim.client_states[0]["personal"][k] - v).norm() ** 2) for k, v in sim.state["model"].items())

    assert distance(10.0) < distance(0.0)


# ---------------------------------------------------------------------- pFedMe
def test_pfedme_inner_steps_reach_the_moreau_envelope_minimiser():
    """On l(theta) = 0.5 ||theta - a||^2 many steps give theta = (a + lambda w) / (1 + lambda)."""
    a, w = torch.tensor([1.0, -2.0, 3.0]), torch.tensor([0.5, 0.5, -1.0])
    lam = 4.0
    theta = torch.zeros(3, requires_grad=True)
    step = SGDStep([theta], TrainSettings(1, 1, lr=0.05, momentum=0.0, weight_decay=0.0))
    moreau_steps([theta], [w], lambda: 0.5 * ((theta - a) ** 2).sum(), 500, step, lam)
    torch.testing.assert_close(theta.detach(), (a + lam * w) / (1 + lam))


def test_pfedme_beta_0_leaves_the_global_model_unchanged(make_config):
    sim = Simulation(make_config(method="pfedme", method_params={"beta": 0.0}), build_data(make_config()))
    before = {k: v.clone() for k, v in sim.state["model"].items()}
    advance(sim, 2)
    assert all(torch.equal(sim.state["model"][k], v) for k, v in before.items())
    assert sim.client_states[0]["personal"]  # the clients still personalise


def test_pfedme_scores_the_detached_personal_model_not_the_uploaded_one(make_config):
    sim = advance(Simulation(make_config(method="pfedme"), build_data(make_config())), 1)
    payload = sim.algorithm.payload(sim.state, 0, "evaluate")
    client = sim.client(0, 1, 12)
    model = sim.algorithm.predictor(payload, client)
    personal = sim.client_states[0]["personal"]
    assert all(torch.equal(v, personal[k]) for k, v in model.state_dict().items())
    assert any(not torch.equal(v, sim.state["model"][k]) for k, v in personal.items())


def test_pfedme_inner_weight_decay_moves_the_minimiser_to_a_plus_lambda_w_over_1_plus_lambda_plus_mu():
    """pFedMe's code adds mu theta to each inner gradient: on l(theta) = 0.5 ||theta - a||^2 the
    inner problem's minimiser becomes (a + lambda w) / (1 + lambda + mu)."""
    a, w = torch.tensor([1.0, -2.0, 3.0]), torch.tensor([0.5, 0.5, -1.0])
    lam, mu = 4.0, 0.5
    theta = torch.zeros(3, requires_grad=True)
    step = SGDStep([theta], TrainSettings(1, 1, lr=0.05, momentum=0.0, weight_decay=mu))
    moreau_steps([theta], [w], lambda: 0.5 * ((theta - a) ** 2).sum(), 500, step, lam)
    torch.testing.assert_close(theta.detach(), (a + lam * w) / (1 + lam + mu))


def test_pfedme_local_iterations_train_that_many_mini_batches_and_mu_reaches_the_inner_steps(make_config,
                                                                                              monkeypatch):
    import pflcore.algorithms.pfedme as pfedme

    calls, decays = [], []
    original = pfedme.moreau_steps

    def counted(params, local, loss_of, steps, step, lam):
        calls.append(steps)
        decays.append(step.weight_decay)
        return original(params, local, loss_of, steps, step, lam)

    monkeypatch.setattr(pfedme, "moreau_steps", counted)
    config = make_config(method="pfedme", workers=0, method_params={"local_iterations": 3,
                                                                    "inner_weight_decay": 0.25})
    sim = advance(Simulation(config, build_data(config)), 1)
    trained = sum(1 for state in sim.client_states.values() if state.get("personal"))
    assert trained > 0 and len(calls) == 3 * trained and set(calls) == {5}  # R batches of K inner steps each
    assert set(decays) == {0.25}


def test_pfedmes_authors_code_options_left_off_keep_the_fingerprint_of_runs_from_before_them(make_config):
    plain = make_config(method="pfedme")
    off = make_config(method="pfedme", method_params={"local_iterations": 0, "inner_weight_decay": 0.0})
    assert off.fingerprint() == plain.fingerprint()
    assert make_config(method="pfedme", method_params={"local_iterations": 20}).fingerprint() != plain.fingerprint()
    assert make_config(method="pfedme", method_params={"inner_weight_decay": 0.001}).fingerprint() != \
        plain.fingerprint()


# ---------------------------------------------------------------------- pFedHN
def test_pfedhn_without_local_steps_leaves_the_hypernetwork_unchanged(make_config):
    sim = Simulation(make_config(method="pfedhn", local_epochs=0), build_data(make_config()))
    before = {k: v.clone() for k, v in sim.state["hypernetwork"].items()}
    advance(sim, 2)
    assert all(torch.equal(sim.state["hypernetwork"][k], v) for k, v in before.items())


def test_pfedhn_server_step_follows_the_clients_deltas(make_config):
    """A client whose trained model is the target: one server step with momentum and
    weight decay off moves h(e_i) towards it (the chain rule through the hypernetwork)."""
    cfg = make_config(method="pfedhn", method_params={"server_momentum": 0.0, "server_weight_decay": 0.0,
                                                      "server_lr": 0.01})
    sim = Simulation(cfg, build_data(cfg))
    embeddings = sim.state["hypernetwork"]["embeddings.weight"].clone()
    theta = sim.algorithm.payload(sim.state, 1)["model"]
    target = {k: v + 0.1 for k, v in theta.items()}
    delta = {k: theta[k] - target[k] for k in theta}
    sim.state = sim.algorithm.aggregate(sim.state, {1: {"delta": delta, "num_samples": 1}}, sim.server_context(0))
    after = sim.algorithm.payload(sim.state, 1)["model"]
    gap = lambda m: sum(float((m[k] - target[k]).norm() ** 2) for k in m)  # noqa: E731
    assert gap(after) < gap(theta)
    moved = sim.state["hypernetwork"]["embeddings.weight"] != embeddings
    assert moved[1].all() and not moved[[0, 2, 3]].any()  # only the participant's embedding moved


def test_pfedhn_generates_a_different_model_per_client(make_config):
    sim = Simulation(make_config(method="pfedhn"), build_data(make_config()))
    a, b = sim.algorithm.payload(sim.state, 0)["model"], sim.algorithm.payload(sim.state, 1)["model"]
    assert any(not torch.equal(a[k], b[k]) for k in a)


# ---------------------------------------------------------------------- CCVR
def test_ccvr_pooled_moments_equal_those_of_the_concatenated_features():
    g = torch.Generator().manual_seed(0)
    parts = [(torch.randn(n, 5, generator=g, dtype=torch.float64) * (k + 1),
              torch.randint(0, 3, (n,), generator=g)) for k, n in enumerate((30, 7, 55))]
    parts[1] = (parts[1][0], torch.zeros(7, dtype=torch.long))  # a client holding one class only
    pooled = pool_class_moments([class_moments(z, y, 3) for z, y in parts])
    whole = class_moments(torch.cat([z for z, _ in parts]), torch.cat([y for _, y in parts]), 3)
    for key in ("counts", "means", "covs"):
        torch.testing.assert_close(pooled[key], whole[key], rtol=1e-10, atol=1e-10)


def test_ccvr_virtual_features_follow_the_pooled_gaussian():
    moments = {"counts": torch.tensor([10.0, 0.0]), "means": torch.tensor([[1.0, -1.0], [0.0, 0.0]]).double(),
               "covs": torch.tensor([[[2.0, 0.5], [0.5, 1.0]], [[0.0, 0.0], [0.0, 0.0]]]).double()}
    x, y = sample_virtual_features(moments, 20000, torch.Generator().manual_seed(1))
    assert y.unique().tolist() == [0]  # an empty class gets no virtual features
    np.testing.assert_allclose(x.mean(0).numpy(), [1.0, -1.0], atol=0.05)
    np.testing.assert_allclose(np.cov(x.numpy().T), [[2.0, 0.5], [0.5, 1.0]], atol=0.08)


def test_ccvr_calibrates_only_the_classifier_after_the_last_round(make_config):
    base = run(make_config(method="fedavg", name="base"))
    ccvr = run(make_config(method="ccvr", name="ccvr"))
    assert strip(base.history)[:-1] == [{k: v for k, v in h.items() if k != "calibrated"}
                                        for h in strip(ccvr.history)[:-1]]  # FedAvg untouched before
    assert [h["calibrated"] for h in ccvr.history] == [0, 0, 1]
    assert ccvr.summary["acc_mean"] != base.summary["acc_mean"]


def test_ccvr_refuses_a_personalised_base(make_config):
    from pflcore.config import ConfigError

    with pytest.raises(ConfigError, match="'method_params.base' = 'fedrep'"):
        make_config(method="ccvr", method_params={"base": "fedrep"})
    with pytest.raises(ConfigError, match="base_params.*'method_params.mu' = -1"):
        make_config(method="ccvr", method_params={"base": "fedprox", "base_params": {"mu": -1}})
