"""The defining behaviour of FedCP's personalised baselines on tiny problems: Per-FedAvg,
FedAMP, Fed-RoD."""
from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call, grad

from pflcore.algorithms.fedamp import FedAMP, attention_weights, combine, squared_distances
from pflcore.algorithms.fedrod import LOG_ZERO, TwoHeads, balanced_softmax_loss, log_class_counts
from pflcore.engine import Simulation, build_data, run
from pflcore.training import EVAL_KEY, TRAIN_KEY

from conftest import advance, strip


def simulation(make_config, **changes) -> Simulation:
    config = make_config(**changes)
    return Simulation(config, build_data(config))


# ---------------------------------------------------------------------- Per-FedAvg
@pytest.mark.parametrize("variant", ["fo", "hf"])
def test_perfedavg_with_alpha_0_is_fedavg_with_lr_beta_bit_for_bit(make_config, variant):
    per = run(make_config(method="perfedavg", method_params={"alpha": 0.0, "beta": 0.03, "variant": variant},
                          name="per"))
    fedavg = run(make_config(method="fedavg", lr=0.03, name="fedavg"))
    assert strip(per.history) == strip(fedavg.history)
    assert (per.acc_history == fedavg.acc_history).all()


def test_perfedavg_alpha_changes_the_trajectory(make_config):
    per = advance(simulation(make_config, method="perfedavg", method_params={"alpha": 0.05}), 1)
    fedavg = advance(simulation(make_config, method="fedavg"), 1)  # beta = 0: the run's lr
    assert any(not torch.equal(per.state["model"][k], v) for k, v in fedavg.state["model"].items())


def _one_batch_client(make_config, variant: str):
    """A client whose train set is one batch, plain SGD: one local step is the formula."""
    alpha, beta = 0.3, 0.2
    sim = simulation(make_config, method="perfedavg", batch_size=256, momentum=0.0, weight_decay=0.0,
                     method_params={"alpha": alpha, "beta": beta, "variant": variant})
    payload = sim.algorithm.payload(sim.state, 0)
    client = sim.client(0, 0, TRAIN_KEY)
    w = {k: v.double() for k, v in payload["model"].items()}
    model = copy.deepcopy(sim.model).double()
    x, y = client.x.double(), client.y

    def f(params):
        return F.cross_entropy(functional_call(model, params, (x,)), y)

    return sim, payload, client, w, f, alpha, beta


@pytest.mark.parametrize("variant", ["fo", "hf"])
def test_perfedavg_local_step_is_the_meta_gradient_step(make_config, variant):
    """One step on the full data, computed in float64: w - beta grad f(w~) (FO), or
    w - beta (v - alpha H v) with v = grad f(w~) and
    H v = [grad f(w + delta v) - grad f(w - delta v)] / (2 delta) (HF)."""
    sim, payload, client, w, f, alpha, beta = _one_batch_client(make_config, variant)
    g = grad(f)(w)
    w_tilde = {k: w[k] - alpha * g[k] for k in w}
    v = grad(f)(w_tilde)
    correction = {k: torch.zeros_like(t) for k, t in v.items()}
    if variant == "hf":
        delta = sim.algorithm.delta
        plus, minus = grad(f)({k: w[k] + delta * v[k] for k in w}), grad(f)({k: w[k] - delta * v[k] for k in w})
        correction = {k: alpha * beta * (plus[k] - minus[k]) / (2 * delta) for k in v}
        assert max(float(c.abs().max()) for c in correction.values()) > 1e-3  # the Hessian term shows
    expected = {k: w[k] - beta * v[k] + correction[k] for k in w}
    update = sim.algorithm.local_update(payload, client)
    for k, value in update["model"].items():
        torch.testing.assert_close(value.double(), expected[k], rtol=0, atol=1e-5)


def test_perfedavg_personal_model_is_one_sgd_step_on_train_data(make_config):
    sim = advance(simulation(make_config, method="perfedavg", method_params={"alpha": 0.1}), 1)
    payload = sim.algorithm.payload(sim.state, 2, "evaluate")
    model = sim.algorithm.predictor(payload, sim.client(2, 1, EVAL_KEY))
    client = sim.client(2, 1, EVAL_KEY)  # the same generator: the same first train batch
    x, y = next(client.batches(epochs=1))
    w = {k: v.clone().requires_grad_(True) for k, v in payload["model"].items()}
    loss = F.cross_entropy(functional_call(sim.model, w, (x,)), y)
    grads = dict(zip(w, torch.autograd.grad(loss, list(w.values()))))
    for k, value in model.state_dict().items():
        torch.testing.assert_close(value, payload["model"][k] - 0.1 * grads[k])
    assert not sim.client_states[2]  # no personal state, and evaluation added none


def test_perfedavg_without_personal_steps_scores_the_global_model(make_config):
    sim = advance(simulation(make_config, method="perfedavg", method_params={"personal_steps": 0}), 1)
    payload = sim.algorithm.payload(sim.state, 0, "evaluate")
    model = sim.algorithm.predictor(payload, sim.client(0, 1, EVAL_KEY))
    assert all(torch.equal(v, sim.state["model"][k]) for k, v in model.state_dict().items())


# ---------------------------------------------------------------------- FedAMP
def _vectors(*rows):
    return [{"w": torch.tensor(r, dtype=torch.float32)} for r in rows]


def test_fedamp_attention_weights_on_a_three_client_example():
    models = _vectors([0.0, 0.0], [1.0, 0.0], [0.0, 2.0])  # d12 = 1, d13 = 4, d23 = 5
    d = squared_distances(models, ["w"])
    assert d.tolist() == [[0, 1, 4], [1, 0, 5], [4, 5, 0]]
    xi = attention_weights(d, alpha_k=0.1, sigma=2.0)
    a = lambda x: math.exp(-x / 2.0) / 2.0  # noqa: E731  A'(x) for sigma = 2
    expected = [[1 - 0.1 * (a(1) + a(4)), 0.1 * a(1), 0.1 * a(4)],
                [0.1 * a(1), 1 - 0.1 * (a(1) + a(5)), 0.1 * a(5)],
                [0.1 * a(4), 0.1 * a(5), 1 - 0.1 * (a(4) + a(5))]]
    torch.testing.assert_close(xi, torch.tensor(expected, dtype=torch.float64))
    u0 = combine(models, xi[0], 0)["w"]
    torch.testing.assert_close(u0, torch.tensor([0.1 * a(1), 2 * 0.1 * a(4)]))


def test_fedamp_alpha_k_0_gives_each_client_its_own_model():
    models = _vectors([0.5, -1.0], [1.0, 3.0], [0.0, 2.0])
    xi = attention_weights(squared_distances(models, ["w"]), alpha_k=0.0, sigma=1.0)
    assert torch.equal(xi, torch.eye(3, dtype=torch.float64))
    for i in range(3):
        assert torch.equal(combine(models, xi[i], i)["w"], models[i]["w"])


def test_fedamp_identical_models_give_that_model(make_config):
    sim = simulation(make_config, method="fedamp", method_params={"alpha_k": 0.5, "sigma": 3.0})
    for cid in range(4):  # every stored model is the initial one
        payload = sim.algorithm.payload(sim.state, cid)
        for k, v in payload["cloud"].items():
            torch.testing.assert_close(v, sim.state["models"][cid][k], rtol=0, atol=1e-6)
    models = _vectors([1.5, -2.0], [1.5, -2.0], [1.5, -2.0])
    xi = attention_weights(squared_distances(models, ["w"]), alpha_k=0.3, sigma=0.7)
    assert torch.equal(combine(models, xi[1], 1)["w"], models[0]["w"])


def test_fedamp_penalty_is_squared_by_default_and_the_plain_norm_on_request(make_config):
    sim = simulation(make_config, method="fedamp")
    model = sim.model
    x, y = sim.client(0, 0, TRAIN_KEY).x[:8], sim.client(0, 0, TRAIN_KEY).y[:8]
    cloud = [p.detach() + 0.5 for p in model.parameters()]  # ||w - u||^2 = 0.25 * |theta|
    size = sum(p.numel() for p in model.parameters())
    ce = float(F.cross_entropy(model(x), y).detach())
    for penalty, term in (("squared", 0.25 * size), ("norm", math.sqrt(0.25 * size))):
        method = FedAMP(alpha_k=4.0, lam=2.0, penalty=penalty)
        value = float(method._pulled_towards(cloud)(model, x, y).detach())
        assert value == pytest.approx(ce + 2.0 / (2 * 4.0) * term, rel=1e-5), penalty


def test_fedamp_with_lambda_0_gives_local_only_models_as_pfllib_s_gradient_free_penalty_does(make_config):
    """With ``lam = 0`` the penalty is gone and each client trains alone from its own model: the
    personal models are Local's, bit for bit (PFLlib's FedAMP, whose penalty passes no gradient)."""
    amp = advance(simulation(make_config, method="fedamp", method_params={"lam": 0.0}), 3)
    local = advance(simulation(make_config, method="local"), 3)
    for cid in range(4):
        for key, tensor in local.client_states[cid]["model"].items():
            assert torch.equal(amp.state["models"][cid][key], tensor), (cid, key)


def test_fedamp_server_keeps_every_clients_latest_model(make_config):
    sim = simulation(make_config, method="fedamp")
    init = {k: v.clone() for k, v in sim.state["models"][0].items()}
    sim.run_round(0, clients=[3, 1])
    for cid in (0, 2):  # not sampled: still the initial model
        assert all(torch.equal(sim.state["models"][cid][k], v) for k, v in init.items())
    for cid in (1, 3):
        assert any(not torch.equal(sim.state["models"][cid][k], v) for k, v in init.items())
    payload = sim.algorithm.payload(sim.state, 3, "evaluate")  # the personal model is w_3
    model = sim.algorithm.predictor(payload, sim.client(3, 1, EVAL_KEY))
    assert all(torch.equal(v, sim.state["models"][3][k]) for k, v in model.state_dict().items())
    xi = sim.state["xi"]
    torch.testing.assert_close(xi.sum(1), torch.ones(4, dtype=torch.float64))


# ---------------------------------------------------------------------- Fed-RoD
def test_fedrod_uniform_class_counts_make_the_balanced_softmax_plain_cross_entropy():
    g = torch.Generator().manual_seed(0)
    logits, y = torch.randn(12, 5, generator=g), torch.randint(0, 5, (12,), generator=g)
    torch.testing.assert_close(balanced_softmax_loss(logits, y, log_class_counts(torch.full((5,), 7))),
                               F.cross_entropy(logits, y))
    counts = torch.tensor([3, 1, 0, 2, 6])  # a missing class: probability exactly 0, no NaN
    log_counts = log_class_counts(counts)
    assert log_counts[2] == LOG_ZERO
    logits.requires_grad_(True)
    y = torch.tensor([0, 1, 3, 4] * 3)
    loss = balanced_softmax_loss(logits, y, log_counts)
    (gradient,) = torch.autograd.grad(loss, logits)
    assert torch.isfinite(loss) and torch.isfinite(gradient).all() and (gradient[:, 2] == 0).all()
    torch.testing.assert_close(loss, F.cross_entropy(logits + counts.float().log(), y))  # = the -inf version


def test_fedrod_zero_personal_head_predicts_like_the_generic_head(make_config):
    sim = advance(simulation(make_config, method="fedrod"), 1)
    x = sim.client(0, 1, EVAL_KEY).x[:20]
    fresh = sim.algorithm.predictor(sim.algorithm.payload(sim.state, 0, "evaluate"), sim.client(0, 1, EVAL_KEY))
    generic = sim.model
    generic.load_state_dict({**{f"body.{k}": v for k, v in sim.state["body"].items()},
                             **{f"head.{k}": v for k, v in sim.state["head"].items()}})
    with torch.no_grad():
        trained = fresh(x)
        assert not torch.equal(trained, generic(x))  # a trained personal head changes the logits
        zero = {k: torch.zeros_like(v) for k, v in sim.client_states[0]["personal_head"].items()}
        sim.client_states[0]["personal_head"] = zero
        model = sim.algorithm.predictor(sim.algorithm.payload(sim.state, 0, "evaluate"), sim.client(0, 1, EVAL_KEY))
        assert torch.equal(model(x), generic(x))


def test_fedrod_only_the_body_and_generic_head_leave_the_client(make_config):
    sim = simulation(make_config, method="fedrod")
    client = sim.client(1, 0, TRAIN_KEY)
    update = sim.algorithm.local_update(sim.algorithm.payload(sim.state, 1), client)
    assert set(update) == {"body", "head", "num_samples", "loss"}
    assert set(update["body"]) == set(sim.model.body.state_dict())
    assert set(update["head"]) == set(sim.model.head.state_dict())
    assert set(client.state) == {"personal_head"}
    assert any(v.abs().sum() > 0 for v in client.state["personal_head"].values())  # it trained from zero


def test_fedrod_personal_head_never_moves_the_shared_parts(make_config):
    """phi and g are exactly what the balanced-softmax loss alone trains (z and g(z) are
    detached in the personal loss)."""
    sim = simulation(make_config, method="fedrod")
    payload = sim.algorithm.payload(sim.state, 2)
    update = sim.algorithm.local_update(payload, sim.client(2, 0, TRAIN_KEY))
    client = sim.client(2, 0, TRAIN_KEY)
    model = client.model
    model.body.load_state_dict(payload["body"])
    model.head.load_state_dict(payload["head"])
    log_counts = log_class_counts(client.class_counts())
    client.train(model.parameters(), loss_fn=lambda m, x, y: balanced_softmax_loss(m(x), y, log_counts))
    assert all(torch.equal(update["body"][k], v) for k, v in model.body.state_dict().items())
    assert all(torch.equal(update["head"][k], v) for k, v in model.head.state_dict().items())


def test_fedrod_prediction_switches(make_config):
    sim = advance(simulation(make_config, method="fedrod"), 1)
    payload = sim.algorithm.payload(sim.state, 0, "evaluate")
    x = sim.client(0, 1, EVAL_KEY).x[:10]
    with torch.no_grad():
        outputs = {}
        for mode in ("sum", "generic", "personal"):
            sim.algorithm.predict = mode
            model = sim.algorithm.predictor(payload, sim.client(0, 1, EVAL_KEY))
            assert isinstance(model, TwoHeads)
            outputs[mode] = model(x)
        torch.testing.assert_close(outputs["sum"], outputs["generic"] + outputs["personal"])
    start = simulation(make_config, method="fedrod", method_params={"personal_init": "initial_head"})
    head = start.algorithm.personal_head(start.algorithm.payload(start.state, 0), start.client(0, 0, TRAIN_KEY))
    assert all(torch.equal(v, start.state["head"][k]) for k, v in head.state_dict().items())


# ---------------------------------------------------------------------- end to end
@pytest.mark.parametrize("method, params", [
    ("perfedavg", {}), ("perfedavg", {"variant": "hf"}), ("fedamp", {}), ("fedamp", {"penalty": "norm"}),
    ("fedrod", {}), ("fedrod", {"predict": "personal", "personal_init": "initial_head"}),
])
def test_runs_end_to_end_on_the_tiny_federation(make_config, method, params):
    result = run(make_config(method=method, method_params=params, rounds=3, local_epochs=2))
    assert all(math.isfinite(h["train_loss"]) for h in result.history)
    assert result.summary["acc_mean"] > 50, result.summary
