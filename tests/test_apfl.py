"""APFL's defining behaviour on the tiny federation: the uploaded w is FedAvg's whatever alpha
is, alpha = 0 predicts with FedAvg's model, alpha = 1 makes v Local-only's model, the
personal model is the parameter mixture, and the adaptive alpha follows the paper's step."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pflcore.algorithms.apfl import mix, mixed_state
from pflcore.config import ConfigError
from pflcore.engine import Simulation, build_data, run
from pflcore.training import EVAL_KEY, TRAIN_KEY

from conftest import advance, run_killed_after, strip


def simulate(make_config, method: str, rounds: int = 3, **params):
    config = make_config(method=method, method_params=params) if params else make_config(method=method)
    return advance(Simulation(config, build_data(config)), rounds)


def equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def predictor_state(sim, cid: int) -> dict:
    payload = sim.algorithm.payload(sim.state, cid, "evaluate")
    return {k: v.clone() for k, v in sim.algorithm.predictor(payload, sim.client(cid, 0, EVAL_KEY)).state_dict().items()}


@pytest.mark.parametrize("params", [{"alpha": 0.0}, {"alpha": 0.25}, {"alpha": 1.0},
                                    {"adaptive_alpha": True, "alpha_lr": 0.5}])
def test_the_uploaded_w_follows_fedavgs_trajectory_for_any_alpha(make_config, params):
    apfl, fedavg = simulate(make_config, "apfl", **params), simulate(make_config, "fedavg")
    assert equal(apfl.state["model"], fedavg.state["model"])


def test_alpha_0_predicts_with_fedavgs_model(make_config):
    apfl, fedavg = simulate(make_config, "apfl", alpha=0.0), simulate(make_config, "fedavg")
    for cid in range(4):
        assert equal(predictor_state(apfl, cid), predictor_state(fedavg, cid)), cid


def test_alpha_1_makes_v_local_only(make_config):
    apfl, local = simulate(make_config, "apfl", alpha=1.0), simulate(make_config, "local")
    for cid in range(4):
        assert equal(apfl.client_states[cid]["local"], local.client_states[cid]["model"]), cid
        assert equal(predictor_state(apfl, cid), predictor_state(local, cid)), cid


def test_the_personal_model_is_the_parameter_mixture_with_the_current_global_model(make_config):
    sim = simulate(make_config, "apfl", rounds=2, alpha=0.3)
    v, w = sim.client_states[1]["local"], sim.state["model"]
    personal = predictor_state(sim, 1)
    for key in w:
        assert torch.equal(personal[key], 0.3 * v[key] + 0.7 * w[key]), key
    assert not equal(personal, w) and not equal(personal, v)


def test_mix_is_exact_at_both_ends():
    g = torch.Generator().manual_seed(0)
    local, shared = [torch.randn(5, 3, generator=g)], [torch.randn(5, 3, generator=g)]
    assert torch.equal(mix(local, shared, 1.0)[0], local[0]) and torch.equal(mix(local, shared, 0.0)[0], shared[0])
    counters = mixed_state({"n": torch.tensor(3)}, {"n": torch.tensor(9)}, 0.75)
    assert counters["n"].item() == 3  # an integer buffer comes from the heavier side


def test_the_state_is_a_detached_copy(make_config):
    sim = simulate(make_config, "apfl", rounds=1, adaptive_alpha=True)
    client = sim.client(0, 1, TRAIN_KEY)
    modules = [t for m in client.modules.values() for t in m.state_dict().values()]
    for tensor in [*sim.client_states[0]["local"].values(), sim.client_states[0]["alpha"]]:
        assert not tensor.requires_grad
        assert all(tensor.data_ptr() != m.data_ptr() for m in modules)


def one_step_client(make_config, alpha: float, alpha_lr: float, direction: float):
    """Client 0 with all its data in one batch, plain SGD, and v = w + direction * grad f(w):
    one step from (w, v) and the alpha the paper's formula gives for it."""
    config = make_config(method="apfl", method_params={"alpha": alpha, "adaptive_alpha": True, "alpha_lr": alpha_lr},
                         batch_size=10_000, momentum=0.0, weight_decay=0.0)
    sim = Simulation(config, build_data(config))
    payload = sim.algorithm.payload(sim.state, 0)
    client = sim.client(0, 0, TRAIN_KEY)
    w = payload["model"]
    model = client.model
    model.load_state_dict(w)
    grads = torch.autograd.grad(F.cross_entropy(model(client.x), client.y), list(model.parameters()))
    names = [name for name, _ in model.named_parameters()]
    v = {**w, **{n: w[n] + direction * g for n, g in zip(names, grads)}}
    client.state["local"] = v
    # by hand: d f(alpha v + (1 - alpha) w) / d alpha = <v - w, grad f(vbar)>
    model.load_state_dict({k: alpha * v[k] + (1 - alpha) * w[k] for k in w})
    at_mixture = torch.autograd.grad(F.cross_entropy(model(client.x), client.y), list(model.parameters()))
    slope = sum(float(((v[n] - w[n]) * g).sum()) for n, g in zip(names, at_mixture))
    sim.algorithm.local_update(payload, client)
    return float(client.state["alpha"]), min(1.0, max(0.0, alpha - alpha_lr * slope)), slope


@pytest.mark.parametrize("direction, moves", [(-0.5, "up"), (0.5, "down")])
def test_adaptive_alpha_moves_as_the_formula_says(make_config, direction, moves):
    """v a descent step away from w: more of v lowers the loss, so alpha grows; v an ascent
    step: alpha shrinks; either way by alpha_lr * <v - w, grad f(vbar)>."""
    alpha, expected, slope = one_step_client(make_config, 0.4, 0.1, direction)
    assert (slope < 0) == (moves == "up")
    assert (alpha > 0.4) == (moves == "up")
    assert alpha == pytest.approx(expected, rel=1e-5)


def test_adaptive_alpha_stays_in_0_1(make_config):
    assert one_step_client(make_config, 0.9, 1e4, -0.5)[0] == 1.0
    assert one_step_client(make_config, 0.1, 1e4, 0.5)[0] == 0.0
    sim = simulate(make_config, "apfl", adaptive_alpha=True, alpha_lr=100.0)
    alphas = [float(sim.client_states[c]["alpha"]) for c in range(4)]
    assert all(0.0 <= a <= 1.0 for a in alphas)
    assert 0.0 <= sim.algorithm.report(sim.state)["alpha_mean"] <= 1.0


def test_fixed_alpha_keeps_no_alpha_in_the_state(make_config):
    sim = simulate(make_config, "apfl", rounds=1)
    assert set(sim.client_states[0]) == {"local"} and sim.algorithm.report(sim.state) == {}


def test_same_seed_same_result_and_resume_keeps_the_adaptive_alpha(make_config):
    params = {"adaptive_alpha": True}
    full = run(make_config(method="apfl", method_params=params, rounds=5, name="full"))
    again = run(make_config(method="apfl", method_params=params, rounds=5, name="again"))
    assert strip(again.history) == strip(full.history)
    np.testing.assert_array_equal(again.acc_history, full.acc_history)
    assert len({h["alpha_mean"] for h in full.history}) == 5  # alpha moved every round

    cfg = make_config(method="apfl", method_params=params, rounds=5, name="killed", checkpoint_every=2)
    run_killed_after(cfg, 3)
    resumed = run(cfg)
    assert strip(resumed.history) == strip(full.history)
    np.testing.assert_array_equal(resumed.acc_history, full.acc_history)


def test_alpha_outside_0_1_is_refused(make_config):
    with pytest.raises(ConfigError, match="alpha"):
        make_config(method="apfl", method_params={"alpha": 1.5})


def test_fedpac_runs_apfl_with_alpha_quarter():
    from pflcore.papers.fedpac import fedpac_config

    assert fedpac_config("apfl", "fmnist", 20).method_params == {"alpha": 0.25}
