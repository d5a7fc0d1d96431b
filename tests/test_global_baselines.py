"""The defining behaviour of the global-model baselines on tiny problems: SCAFFOLD,
FedDyn, MOON, FedProc."""
from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call

from pflcore.algorithms import make_algorithm
from pflcore.algorithms.fedproc import (FedProc, class_means, initial_prototypes, prototype_loss,
                                        update_prototypes)
from pflcore.algorithms.moon import model_contrastive_loss
from pflcore.engine import Simulation, build_data, run
from pflcore.training import EVAL_KEY, TRAIN_KEY

from conftest import advance, strip


def simulation(make_config, **changes) -> Simulation:
    config = make_config(**changes)
    return Simulation(config, build_data(config))


def fresh_client(sim: Simulation, cid: int, round_index: int, state: dict | None = None):
    """Client ``cid`` with the round's training generator and a private copy of a state."""
    return sim.worker.client(cid, round_index, TRAIN_KEY, dict(state or {}))


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


PLAIN_SGD = dict(momentum=0.0, weight_decay=0.0)


def first_round_updates_are_fedavgs(sim: Simulation) -> dict[int, dict]:
    """Round 0's local updates of every participant, each asserted to be FedAvg's bit for bit
    (model and loss); the participants must differ in size, so n_i-weighting matters."""
    fedavg = make_algorithm("fedavg")
    updates = {}
    for c in (int(c) for c in sim.participants(0)):
        payload = sim.algorithm.payload(sim.state, c)
        updates[c] = sim.algorithm.local_update(payload, fresh_client(sim, c, 0))
        reference = fedavg.local_update({"model": payload["model"]}, fresh_client(sim, c, 0))
        assert same(updates[c]["model"], reference["model"])
        assert updates[c]["loss"] == reference["loss"]
    assert len({u["num_samples"] for u in updates.values()}) > 1
    return updates


# ---------------------------------------------------------------------- SCAFFOLD
def test_scaffold_first_round_is_fedavg_with_uniform_weights(make_config):
    """c = c_i = 0: every local model is FedAvg's bit for bit, and with eta_g = 1 the server
    takes their UNIFORM mean (the clients differ in size, so the n_i-weighted mean differs)."""
    sim = simulation(make_config, method="scaffold", rounds=1,
                     partition={"kind": "quantity", "size_choices": [40, 120]}, seed=1)
    updates = first_round_updates_are_fedavgs(sim)
    ids = sorted(updates)
    state = sim.algorithm.aggregate(sim.state, updates, sim.server_context(0))
    for key, value in state["model"].items():
        uniform = sum(updates[c]["model"][key].double() for c in ids) / len(ids)
        torch.testing.assert_close(value, uniform.float(), rtol=1e-6, atol=1e-7)
    weighted = make_algorithm("fedavg").aggregate(sim.state, updates, sim.server_context(0))["model"]
    assert not all(torch.allclose(state["model"][k], weighted[k]) for k in weighted)


@pytest.mark.parametrize("rule", ["option2", "mean_gradient"])
def test_scaffold_control_is_stored_and_follows_option_ii_on_plain_sgd(make_config, rule):
    """One batch per epoch, two epochs (K = 2 steps), plain SGD: c_i+ = c_i - c + (x - y)/(K eta),
    in the first round (c = c_i = 0) and in the second (c, c_i not zero). Both rules agree there."""
    sim = simulation(make_config, method="scaffold", batch_size=256, local_epochs=2, rounds=2,
                     method_params={"control_update": rule}, **PLAIN_SGD)
    lr = sim.settings.lr
    for r in range(2):
        before = {c: copy.deepcopy(sim.client_states.get(c, {})) for c in range(4)}
        x, c_server = sim.state["model"], sim.state["control"]
        record = sim.run_round(r)
        assert record  # the round ran
        for cid in range(4):
            stored = sim.client_states[cid]["control"]
            old = before[cid].get("control", {k: torch.zeros_like(v) for k, v in c_server.items()})
            if r == 1:
                assert any(bool(v.abs().max() > 0) for v in old.values())
            # y: redo the client's work on a private copy of its state (the same generator)
            update = sim.algorithm.local_update(sim.algorithm.payload({"model": x, "control": c_server}, cid),
                                                fresh_client(sim, cid, r, before[cid]))
            assert update["steps"] == 2
            for k, value in stored.items():
                expected = old[k] - c_server[k] + (x[k] - update["model"][k]) / (2 * lr)
                torch.testing.assert_close(value, expected, rtol=1e-3, atol=2e-4)
                torch.testing.assert_close(update["delta_control"][k], value - old[k])
    # the server control is the mean of all clients' controls (full participation)
    for k, value in sim.state["control"].items():
        mean = sum(sim.client_states[c]["control"][k] for c in range(4)) / 4
        torch.testing.assert_close(value, mean, rtol=1e-5, atol=1e-6)


def test_scaffold_control_under_momentum_is_the_mean_gradient(make_config):
    """Momentum 0.9, one full batch, two steps from y_0 = x (c = c_i = 0): y_1 = y_0 - eta g(y_0), so
    c_i+ = (g(y_0) + g(y_1)) / 2, while option II's displacement counts g(y_0) twice more
    ((1 + 0.9) g(y_0) + g(y_1)) / 2: the bias the default rule avoids."""
    controls = {}
    for rule in ("mean_gradient", "option2"):
        sim = simulation(make_config, method="scaffold", batch_size=256, local_epochs=2, momentum=0.9,
                         weight_decay=0.0, method_params={"control_update": rule})
        payload = sim.algorithm.payload(sim.state, 3)
        client = fresh_client(sim, 3, 0)
        sim.algorithm.local_update(payload, client)
        controls[rule] = client.state["control"]
    model = copy.deepcopy(sim.model)
    names = [n for n, _ in model.named_parameters()]

    def grad_l(theta):
        theta = {n: t.detach().requires_grad_(True) for n, t in theta.items()}
        loss = F.cross_entropy(functional_call(model, theta, (client.x,)), client.y)
        return dict(zip(names, torch.autograd.grad(loss, list(theta.values()))))

    y0 = {n: payload["model"][n] for n in names}
    g0 = grad_l(y0)
    g1 = grad_l({n: y0[n] - sim.settings.lr * g0[n] for n in names})
    for n in names:
        torch.testing.assert_close(controls["mean_gradient"][n], (g0[n] + g1[n]) / 2, rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(controls["option2"][n], (1.9 * g0[n] + g1[n]) / 2, rtol=1e-3, atol=1e-4)


def test_scaffold_server_control_stays_the_mean_under_partial_participation(make_config):
    """c <- c + (1/N) sum_S Delta c keeps c = mean_i c_i over ALL clients, which holds only if
    every participant's c_i+ is stored (clients never seen count as c_i = 0)."""
    sim = advance(simulation(make_config, method="scaffold", participation=0.5, rounds=3), 3)
    assert 0 < sum(1 for c in range(4) if sim.client_states.get(c)) <= 4
    for k, value in sim.state["control"].items():
        total = sum(sim.client_states[c]["control"][k] for c in range(4) if "control" in sim.client_states.get(c, {}))
        torch.testing.assert_close(value, total / 4, rtol=1e-5, atol=1e-6)


def test_scaffold_global_lr_scales_the_step(make_config):
    sim = simulation(make_config, method="scaffold", method_params={"global_lr": 0.5})
    ids = [int(c) for c in sim.participants(0)]
    updates = {c: sim.algorithm.local_update(sim.algorithm.payload(sim.state, c), fresh_client(sim, c, 0))
               for c in ids}
    state = sim.algorithm.aggregate(sim.state, updates, sim.server_context(0))
    for key, x in sim.state["model"].items():
        mean = sum(updates[c]["model"][key].double() for c in ids) / len(ids)
        torch.testing.assert_close(state["model"][key], (x.double() + 0.5 * (mean - x.double())).float())


# ---------------------------------------------------------------------- FedDyn
def test_feddyn_first_round_with_full_participation_is_two_means_minus_the_start(make_config):
    """h^0 = 0 and S = all N clients, so h^1 = -(alpha/N) sum_k (theta_k - theta^0)
    = -alpha (thetabar - theta^0) and theta^1 = thetabar - h^1/alpha = 2 thetabar - theta^0,
    thetabar the uniform mean of the local models. Each g_k = -alpha (theta_k - theta^0) is kept."""
    alpha = 0.3
    sim = simulation(make_config, method="feddyn", method_params={"alpha": alpha})
    theta0 = copy.deepcopy(sim.state["model"])
    updates = {c: sim.algorithm.local_update(sim.algorithm.payload(sim.state, c), sim.client(c, 0, TRAIN_KEY))
               for c in range(4)}
    state = sim.algorithm.aggregate(sim.state, updates, sim.server_context(0))
    for key, value in state["model"].items():
        mean = sum(updates[c]["model"][key].double() for c in range(4)) / 4
        torch.testing.assert_close(value, (2 * mean - theta0[key].double()).float(), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(state["h"][key], (-alpha * (mean - theta0[key].double())).float())
    for c in range(4):
        for key, g in sim.client_states[c]["gradient"].items():
            torch.testing.assert_close(g, -alpha * (updates[c]["model"][key] - theta0[key]))


def test_feddyn_local_steps_follow_the_dynamic_regulariser(make_config):
    """Two full-batch plain-SGD steps from theta^{t-1} with the stored g_k:
    theta_1 = theta_0 - eta (grad l(theta_0) - g_k),
    theta_2 = theta_1 - eta (grad l(theta_1) - g_k + alpha (theta_1 - theta_0)); no clipping."""
    alpha = 0.5
    sim = advance(simulation(make_config, method="feddyn", batch_size=256, local_epochs=2, rounds=2,
                             method_params={"alpha": alpha, "max_grad_norm": 0.0}, **PLAIN_SGD), 1)
    g_k = sim.client_states[1]["gradient"]
    assert any(bool(v.abs().max() > 0) for v in g_k.values())
    payload = sim.algorithm.payload(sim.state, 1)
    client = fresh_client(sim, 1, 1, sim.client_states[1])
    model = copy.deepcopy(sim.model)
    names = [n for n, _ in model.named_parameters()]
    theta0 = {n: payload["model"][n] for n in names}

    def grad_l(theta):
        theta = {n: t.detach().requires_grad_(True) for n, t in theta.items()}
        loss = F.cross_entropy(functional_call(model, theta, (client.x,)), client.y)
        return dict(zip(names, torch.autograd.grad(loss, list(theta.values()))))

    eta = sim.settings.lr
    g0 = grad_l(theta0)
    theta1 = {n: theta0[n] - eta * (g0[n] - g_k[n]) for n in names}
    g1 = grad_l(theta1)
    theta2 = {n: theta1[n] - eta * (g1[n] - g_k[n] + alpha * (theta1[n] - theta0[n])) for n in names}
    update = sim.algorithm.local_update(payload, client)
    for n in names:
        torch.testing.assert_close(update["model"][n], theta2[n], rtol=1e-4, atol=1e-6)


def test_feddyn_clips_the_step_direction(make_config):
    """With max_grad_norm tiny, one plain-SGD step moves the parameters by eta * max_norm."""
    sim = simulation(make_config, method="feddyn", batch_size=256, local_epochs=1,
                     method_params={"max_grad_norm": 1e-3}, **PLAIN_SGD)
    payload = sim.algorithm.payload(sim.state, 0)
    update = sim.algorithm.local_update(payload, fresh_client(sim, 0, 0))
    moved = torch.sqrt(sum(((update["model"][n] - payload["model"][n]).double() ** 2).sum()
                           for n, _ in sim.model.named_parameters()))
    assert float(moved) == pytest.approx(sim.settings.lr * 1e-3, rel=1e-3)


def test_feddyn_fedfa_code_variant_is_fedavg_at_first_then_pulls_by_the_last_local_model(make_config):
    """FedFA's FedDyn: a client's first participation is FedAvg's local update and the server
    takes the n_i-weighted mean (no h). Afterwards one full-batch plain-SGD step follows
    theta_1 = theta_0 - eta (grad l(theta_0) + alpha_k (theta_k^prev - theta_0)),
    alpha_k = alpha * mean n / n_k, theta_k^prev the client's model after its last round."""
    alpha = 0.5
    params = {"alpha": alpha, "max_grad_norm": 0.0, "variant": "fedfa_code"}
    partition = {"kind": "quantity", "size_choices": [40, 120]}
    sim = simulation(make_config, method="feddyn", batch_size=256, local_epochs=1, rounds=2, seed=1,
                     partition=partition, method_params=params, **PLAIN_SGD)
    updates = first_round_updates_are_fedavgs(sim)
    state = sim.algorithm.aggregate(sim.state, updates, sim.server_context(0))
    assert same(state["model"], make_algorithm("fedavg").aggregate(sim.state, updates, sim.server_context(0))["model"])

    sim = advance(simulation(make_config, method="feddyn", batch_size=256, local_epochs=1, rounds=2, seed=1,
                             partition=partition, method_params=params, **PLAIN_SGD), 1)
    c = int(sim.participants(0)[0])
    previous = sim.client_states[c]["previous_model"]
    payload = sim.algorithm.payload(sim.state, c)
    client = fresh_client(sim, c, 1, sim.client_states[c])
    model = copy.deepcopy(sim.model)
    names = [n for n, _ in model.named_parameters()]
    theta0 = {n: payload["model"][n] for n in names}
    theta = {n: t.detach().requires_grad_(True) for n, t in theta0.items()}
    loss = F.cross_entropy(functional_call(model, theta, (client.x,)), client.y)
    grads = dict(zip(names, torch.autograd.grad(loss, list(theta.values()))))
    alpha_k = sim.algorithm.local_alpha(payload, client)
    assert alpha_k == pytest.approx(alpha * payload["mean_train_size"] / client.num_samples)
    assert alpha_k != pytest.approx(alpha)
    update = sim.algorithm.local_update(payload, client)
    eta = sim.settings.lr
    for n in names:
        expected = theta0[n] - eta * (grads[n] + alpha_k * (previous[n] - theta0[n]))
        torch.testing.assert_close(update["model"][n], expected, rtol=1e-4, atol=1e-6)
    assert not same({n: previous[n] for n in names}, {n: theta0[n] for n in names})


# ---------------------------------------------------------------------- MOON
def test_moon_contrastive_loss_is_log_2_with_zero_gradient_when_previous_is_global():
    torch.manual_seed(0)
    p = torch.randn(5, 8, requires_grad=True)
    g = torch.randn(5, 8)
    loss = model_contrastive_loss(p, g, g.clone(), tau=0.5)
    assert float(loss.detach()) == pytest.approx(math.log(2), abs=1e-6)
    (grad,) = torch.autograd.grad(loss, p)
    assert float(grad.abs().max()) < 1e-7
    # and otherwise it pulls towards the global representation
    other = model_contrastive_loss(p, p.detach(), -p.detach(), tau=0.5)
    assert float(other.detach()) == pytest.approx(math.log(1 + math.exp(-2 / 0.5)), rel=1e-5)


def test_moon_first_round_is_fedavg_and_leaves_the_projection_alone(make_config):
    """No client has a previous model in round 1 (full participation): l_con = 0, the
    projection head takes no part in CE, so the run is FedAvg's bit for bit."""
    moon = run(make_config(method="moon", rounds=1, name="moon"))
    fedavg = run(make_config(method="fedavg", rounds=1, name="fedavg"))
    assert strip(moon.history) == strip(fedavg.history)
    sim = advance(simulation(make_config, method="moon", rounds=1), 1)
    initial = simulation(make_config, method="moon", rounds=1).state["projection"]
    assert same(sim.state["projection"], initial)
    for c in range(4):  # each client now keeps its trained model as the previous one
        assert set(sim.client_states[c]["previous"]) == {"body", "projection"}


def test_moon_with_previous_equal_to_global_trains_like_fedavg(make_config):
    """Previous model = received global model: l_con = log 2 at every step and its gradient
    is zero, so body and head follow FedAvg's steps and the loss is higher by mu log 2."""
    mu = 3.0
    sim = simulation(make_config, method="moon", method_params={"mu": mu}, weight_decay=0.0)
    payload = sim.algorithm.payload(sim.state, 0)
    body = {k[len("body."):]: v for k, v in payload["model"].items() if k.startswith("body.")}
    state = {"previous": {"body": body, "projection": payload["projection"]}}
    update = sim.algorithm.local_update(payload, fresh_client(sim, 0, 0, state))
    reference = make_algorithm("fedavg").local_update({"model": payload["model"]}, fresh_client(sim, 0, 0))
    for k, value in reference["model"].items():
        torch.testing.assert_close(update["model"][k], value, rtol=1e-5, atol=1e-6)
    assert update["loss"] - reference["loss"] == pytest.approx(mu * math.log(2), abs=1e-4)
    torch.testing.assert_close(update["projection"], payload["projection"], rtol=0, atol=1e-7)


def test_moon_contrast_changes_training_and_predicts_with_body_and_head(make_config):
    sim = advance(simulation(make_config, method="moon", rounds=3), 2)
    fedavg = advance(simulation(make_config, method="fedavg", rounds=3), 2)
    assert not same(sim.state["model"], fedavg.state["model"])
    assert not same(sim.state["projection"], simulation(make_config, method="moon").state["projection"])
    payload = sim.algorithm.payload(sim.state, 0, "evaluate")
    assert set(payload) == {"model"}
    model = sim.algorithm.predictor(payload, sim.worker.client(0, 2, EVAL_KEY, {}))
    assert same(model.state_dict(), sim.state["model"])
    x = sim.data.test[0].x[:8]
    torch.testing.assert_close(model(x), model.head(model.body(x)))


# ---------------------------------------------------------------------- FedProc
def test_fedproc_weighs_ce_by_t_over_T():
    assert FedProc.ce_weight(0, 10) == pytest.approx(0.1)
    assert FedProc.ce_weight(9, 10) == 1.0
    assert FedProc.ce_weight(12, 10) == 1.0


def test_fedproc_last_round_is_fedavg_bit_for_bit(make_config):
    """At t = T the loss is cross-entropy alone: the local update is FedAvg's."""
    sim = advance(simulation(make_config, method="fedproc", rounds=3), 2)
    payload = sim.algorithm.payload(sim.state, 1)
    update = sim.algorithm.local_update(payload, fresh_client(sim, 1, 2))
    reference = make_algorithm("fedavg").local_update({"model": payload["model"]}, fresh_client(sim, 1, 2))
    assert same(update["model"], reference["model"]) and update["loss"] == reference["loss"]
    earlier = sim.algorithm.local_update(payload, fresh_client(sim, 1, 1))
    later = make_algorithm("fedavg").local_update({"model": payload["model"]}, fresh_client(sim, 1, 1))
    assert not same(earlier["model"], later["model"])
    # a one-round run (t = T = 1) is FedAvg's run
    assert strip(run(make_config(method="fedproc", rounds=1, name="p")).history) == \
        strip(run(make_config(method="fedavg", rounds=1, name="a")).history)


@pytest.mark.parametrize("variant", ["fedproc", "fedfa_code"])
def test_fedproc_first_round_loss_is_the_weighted_mix(make_config, variant):
    """One full-batch step in round 1 of T = 4: the reported loss is
    (1/4) CE + (3/4) l_pc at the received model, l_pc over the initial prototypes:
    -log softmax_c(cos(z, p_c) / tau)[y] (FedProc), or -log softmax_c(z . p_c)[y] without
    normalisation or temperature (``variant = "fedfa_code"``, what FedFA's code ran)."""
    sim = simulation(make_config, method="fedproc", rounds=4, batch_size=256, local_epochs=1,
                     method_params={"variant": variant})
    payload = sim.algorithm.payload(sim.state, 2)
    client = fresh_client(sim, 2, 0)
    model = copy.deepcopy(sim.model)
    model.load_state_dict(payload["model"])
    with torch.no_grad():
        z = model.body(client.x)
        ce = F.cross_entropy(model.head(z), client.y)
        cos = F.normalize(z, dim=1) @ F.normalize(payload["prototypes"], dim=1).T
        scores = cos / 0.5 if variant == "fedproc" else z @ payload["prototypes"].T
        lpc = -torch.log_softmax(scores, dim=1)[torch.arange(len(client.y)), client.y].mean()
    update = sim.algorithm.local_update(payload, client)
    assert update["loss"] == pytest.approx(float(0.25 * ce + 0.75 * lpc), rel=1e-5)
    faithful = float(prototype_loss(z, client.y, payload["prototypes"], 0.5))
    assert (faithful == pytest.approx(float(lpc), rel=1e-6)) == (variant == "fedproc")


def test_fedproc_fedfa_code_variant_never_moves_its_anchors(make_config):
    sim = simulation(make_config, method="fedproc", rounds=4, method_params={"variant": "fedfa_code"})
    initial = sim.state["prototypes"].clone()
    assert torch.equal(advance(sim, 2).state["prototypes"], initial)


def test_fedproc_prototype_aggregation_by_hand():
    """Class 0 seen before (momentum), class 1 new (replaced), class 2 held by no one (kept)."""
    prototypes = torch.tensor([[1.0, 0.0], [0.0, 1.0], [5.0, 5.0]])
    seen = torch.tensor([1.0, 0.0, 0.0])
    means = [torch.tensor([[2.0, 2.0], [0.0, 0.0], [0.0, 0.0]]),
             torch.tensor([[6.0, -2.0], [4.0, 8.0], [0.0, 0.0]])]
    counts = [torch.tensor([1, 0, 0]), torch.tensor([3, 2, 0])]
    new, new_seen = update_prototypes(prototypes, seen, means, counts, momentum=0.5)
    pooled0 = (torch.tensor([2.0, 2.0]) + 3 * torch.tensor([6.0, -2.0])) / 4  # (5, -1)
    torch.testing.assert_close(new[0], 0.5 * prototypes[0] + 0.5 * pooled0)
    torch.testing.assert_close(new[1], torch.tensor([4.0, 8.0]))
    torch.testing.assert_close(new[2], prototypes[2])
    assert new_seen.tolist() == [1.0, 1.0, 0.0]


def test_fedproc_prototypes_start_orthogonal_and_follow_the_clients(make_config):
    g = torch.Generator().manual_seed(0)
    p = initial_prototypes(10, 32, g)
    torch.testing.assert_close(p @ p.T, torch.eye(10))
    z = torch.tensor([[1.0, 0.0], [3.0, 2.0], [0.0, 4.0]])
    means, counts = class_means(z, torch.tensor([0, 0, 2]), 3)
    torch.testing.assert_close(means, torch.tensor([[2.0, 1.0], [0.0, 0.0], [0.0, 4.0]]))
    assert counts.tolist() == [2, 0, 1]
    sim = advance(simulation(make_config, method="fedproc", rounds=2), 1)
    held = torch.zeros(10, dtype=torch.bool)
    for c in range(4):
        held |= torch.bincount(sim.data.train[c].y, minlength=10) > 0
    assert sim.state["seen"].bool().tolist() == held.tolist()

