"""FedPHP's defining behaviour on the tiny federation (pflcore/algorithms/fedphp.py)."""
from __future__ import annotations

import math

import pytest
import torch

from pflcore.algorithms.base import EVALUATE, TRAIN
from pflcore.algorithms.fedphp import adaptive_rbf_mmd
from pflcore.algorithms.losses import rbf_mmd
from pflcore.engine import Simulation, build_data, run
from pflcore.training import TRAIN_KEY

from conftest import advance, noisy
from conftest import states_equal as equal


# ---------------------------------------------------------------------- FedPHP
def test_fedphp_lambda_0_gives_fedavgs_global_trajectory_bit_for_bit(make_config):
    php = advance(Simulation(make_config(method="fedphp", method_params={"lam": 0.0}), build_data(make_config())), 3)
    fedavg = advance(Simulation(make_config(method="fedavg"), build_data(make_config())), 3)
    assert equal(php.state["model"], fedavg.state["model"])
    other = advance(Simulation(make_config(method="fedphp"), build_data(make_config())), 3)
    assert not equal(other.state["model"], fedavg.state["model"])  # lambda > 0 changes the training


def test_fedphp_mu_0_keeps_the_last_local_model(make_config):
    cfg = make_config(method="fedphp", method_params={"mu": 0.0, "evaluate": "local"})
    sim = advance(Simulation(cfg, build_data(cfg)), 3)
    for cid in range(4):
        state = sim.client_states[cid]
        assert equal(state["personal"], state["local"]) and state["participations"] == 3


def test_fedphp_moving_average_follows_the_participation_count(make_config):
    cfg = make_config(method="fedphp", rounds=8, participation=0.5)
    sim = Simulation(cfg, build_data(cfg))
    assert sim.state["expected_participations"] == 4  # C T
    v = noisy(sim.state["model"], 0.1, 5)
    client = sim.client(0, 0, TRAIN_KEY)
    client.state.update({"personal": v, "participations": 2})
    update = sim.algorithm.local_update(sim.algorithm.payload(sim.state, 0, TRAIN), client)
    mu_t = 0.9 * 2 / 4
    for key, w in update["model"].items():
        torch.testing.assert_close(client.state["personal"][key], mu_t * v[key] + (1 - mu_t) * w)
    assert client.state["participations"] == 3
    client.state["participations"] = 40  # mu_t is capped at mu
    v = dict(client.state["personal"])
    update = sim.algorithm.local_update(sim.algorithm.payload(sim.state, 0, TRAIN), client)
    for key, w in update["model"].items():
        torch.testing.assert_close(client.state["personal"][key], 0.9 * v[key] + 0.1 * w)
    assert client.state["participations"] == 41


def test_fedphp_first_participation_makes_v_the_local_model(make_config):
    cfg = make_config(method="fedphp")
    sim = Simulation(cfg, build_data(cfg))
    client = sim.client(1, 0, TRAIN_KEY)
    update = sim.algorithm.local_update(sim.algorithm.payload(sim.state, 1, TRAIN), client)
    assert equal(client.state["personal"], update["model"])


@pytest.mark.parametrize("mmd", [rbf_mmd, adaptive_rbf_mmd])
def test_mmd_of_identical_batches_is_zero(mmd):
    x = torch.randn(16, 8, generator=torch.Generator().manual_seed(0))
    assert abs(float(mmd(x, x.clone()))) < 1e-6
    assert float(mmd(x, x + 1.0)) > 1e-3


def test_mmd_two_points_by_hand():
    x, y = torch.tensor([[0.0, 0.0]]), torch.tensor([[3.0, 0.0]])  # squared distance 9
    fixed = 2 * 4 - 2 * sum(math.exp(-9 / (2 * a)) for a in (10, 15, 20, 50))
    assert math.isclose(float(rbf_mmd(x, y)), fixed, rel_tol=1e-5)
    # adaptive: s_0 = mean squared distance between distinct points = 9, s = 9 * 2^k, k = -2..2
    adaptive = 2 * 5 - 2 * sum(math.exp(-9 / (9 * 2.0 ** k)) for k in range(-2, 3))
    assert math.isclose(float(adaptive_rbf_mmd(x, y)), adaptive, rel_tol=1e-5)


@pytest.mark.parametrize("params", [{"reg": "kd"}, {"mmd_kernel": "fixed", "evaluate": "local"}])
def test_fedphp_switches_end_to_end(make_config, params):
    result = run(make_config(method="fedphp", rounds=4, local_epochs=2, method_params=params))
    assert result.summary["acc_mean"] > 50


def test_fedphp_scores_the_personal_model(make_config):
    cfg = make_config(method="fedphp")
    sim = advance(Simulation(cfg, build_data(cfg)), 2)
    payload = sim.algorithm.payload(sim.state, 0, EVALUATE)
    assert list(payload) == ["model"]
    model = sim.algorithm.predictor(payload, sim.client(0, 2, TRAIN_KEY))
    assert all(torch.equal(v, sim.client_states[0]["personal"][k]) for k, v in model.state_dict().items())
