"""The defining behaviour of FedProto (-G / -L) on tiny problems (pflcore/algorithms/fedproto.py)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from pflcore.algorithms.fedproto import FedProto, average_prototypes, prototype_loss
from pflcore.engine import Simulation, build_data, run
from pflcore.training import TRAIN_KEY

from conftest import advance, strip, assert_workers_give_the_in_process_numbers


def simulation(make_config, **changes) -> Simulation:
    config = make_config(**changes)
    return Simulation(config, build_data(config))


# ---------------------------------------------------------------------- FedProto
@pytest.mark.parametrize("variant", ["global", "local"])
def test_fedproto_with_lam_0_is_local_only_bit_for_bit(make_config, variant):
    proto = run(make_config(method="fedproto", method_params={"lam": 0.0, "prototypes": variant}, name="proto"))
    local = run(make_config(method="local", name="local"))
    assert strip(proto.history) == strip(local.history)
    assert (proto.acc_history == local.acc_history).all()


def test_fedproto_lam_changes_the_trajectory_from_round_1(make_config):
    proto = advance(simulation(make_config, method="fedproto"), 2)
    local = advance(simulation(make_config, method="local"), 2)
    head = "head.weight"
    assert not torch.equal(proto.client_states[0]["model"][head], local.client_states[0]["model"][head])
    first = advance(simulation(make_config, method="fedproto"), 1)   # round 0: no prototypes, CE alone
    local1 = advance(simulation(make_config, method="local"), 1)
    assert all(torch.equal(v, local1.client_states[0]["model"][k]) for k, v in first.client_states[0]["model"].items())


def test_server_prototype_is_the_unweighted_mean_over_clients_holding_the_class():
    protos = torch.tensor([[[1.0, 0.0], [0.0, 0.0], [2.0, 2.0]],    # client a: classes 0, 2
                           [[3.0, 4.0], [5.0, 5.0], [0.0, 0.0]],    # client b: classes 0, 1
                           [[8.0, 8.0], [1.0, 1.0], [4.0, 0.0]]])   # client c: classes 1, 2
    has = torch.tensor([[True, False, True], [True, True, False], [False, True, True]])
    mean, held = average_prototypes(protos, has)
    torch.testing.assert_close(mean, torch.tensor([[2.0, 2.0], [3.0, 3.0], [3.0, 1.0]]))
    assert held.tolist() == [True, True, True]
    mean, held = average_prototypes(protos[:1], has[:1])
    assert held.tolist() == [True, False, True] and mean[1].tolist() == [0.0, 0.0]

    method = FedProto()
    updates = {cid: {"prototypes": protos[i], "has_prototype": has[i], "num_samples": 10 ** i, "loss": 0.0}
               for i, cid in enumerate((4, 0, 2))}  # sample counts play no part
    state = {"init": {}, "prototypes": torch.zeros(3, 2), "has_prototype": torch.zeros(3, dtype=torch.bool)}
    new = method.aggregate(state, updates, None)
    torch.testing.assert_close(new["prototypes"], torch.tensor([[2.0, 2.0], [3.0, 3.0], [3.0, 1.0]]))


def test_fedproto_prototypes_are_the_last_epoch_class_means_of_the_training_features(make_config):
    """One full batch, one epoch: the prototypes are the class means of the features of
    the model the step started from; the server averages them over the clients."""
    sim = simulation(make_config, method="fedproto", batch_size=1000, local_epochs=1)
    init = sim.state["init"]
    expected = []
    for cid in range(4):
        client = sim.client(cid, 0, TRAIN_KEY)
        model = sim.model
        model.load_state_dict(init)
        with torch.no_grad():
            z = model.body(client.x)
        counts = torch.bincount(client.y, minlength=10)
        means = torch.zeros(10, z.shape[1]).index_add_(0, client.y, z) / counts.clamp(min=1)[:, None]
        expected.append((means, counts > 0))
        update = sim.algorithm.local_update(sim.algorithm.payload(sim.state, cid), client)
        torch.testing.assert_close(update["prototypes"], means, rtol=1e-5, atol=1e-6)
        assert update["has_prototype"].tolist() == (counts > 0).tolist()
    sim = advance(simulation(make_config, method="fedproto", batch_size=1000, local_epochs=1), 1)
    mean, held = average_prototypes(torch.stack([e[0] for e in expected]), torch.stack([e[1] for e in expected]))
    torch.testing.assert_close(sim.state["prototypes"], mean, rtol=1e-5, atol=1e-6)
    assert torch.equal(sim.state["has_prototype"], held)


def test_fedproto_local_keeps_prototypes_on_the_client_and_sends_only_counts(make_config):
    sim = advance(simulation(make_config, method="fedproto", method_params={"prototypes": "local"}), 2)
    assert set(sim.state) == {"init"}
    for cid in range(4):
        state = sim.client_states[cid]
        assert {"model", "prototypes", "has_prototype"} <= set(state)
        assert torch.equal(state["has_prototype"], torch.bincount(sim.client(cid, 2, TRAIN_KEY).y, minlength=10) > 0)
    client = sim.client(1, 2, TRAIN_KEY)
    update = sim.algorithm.local_update(sim.algorithm.payload(sim.state, 1), client)
    assert set(update) == {"num_samples", "loss"}
    assert set(sim.algorithm.payload(sim.state, 1)) == {"init"}


def test_prototype_loss_is_mse_over_all_entries_and_ignores_classes_without_prototype():
    z = torch.tensor([[1.0, 2.0], [3.0, 5.0], [7.0, 7.0]], requires_grad=True)
    y = torch.tensor([0, 1, 2])
    protos = torch.tensor([[0.0, 0.0], [3.0, 3.0], [9.0, 9.0]])
    has = torch.tensor([True, True, False])
    loss = prototype_loss(z, y, protos, has)
    assert float(loss.detach()) == pytest.approx((1 + 4 + 0 + 4) / 6)  # B x D = 6 entries, row 3 contributes 0
    (g,) = torch.autograd.grad(loss, z)
    torch.testing.assert_close(g, torch.tensor([[2 / 6, 4 / 6], [0.0, 4 / 6], [0.0, 0.0]]))


def test_one_step_on_the_prototype_term_pulls_features_toward_the_prototypes(make_config):
    sim = simulation(make_config, method="fedproto")
    client = sim.client(0, 0, TRAIN_KEY)
    model = sim.model
    model.load_state_dict(sim.state["init"])
    x, y = client.x, client.y
    protos = torch.randn(10, model.feature_dim, generator=torch.Generator().manual_seed(0))
    has = torch.ones(10, dtype=torch.bool)

    def distance():
        with torch.no_grad():
            return float(prototype_loss(model.body(x), y, protos, has))

    before = distance()
    step = client.sgd(list(model.parameters()), momentum=0.0, weight_decay=0.0, lr=0.05)
    step(prototype_loss(model.body(x), y, protos, has))
    assert distance() < before
    # and the full objective with lam > 0 reduces the distance more than CE alone
    def one_step(lam):
        model.load_state_dict(sim.state["init"])
        z = model.body(x)
        client.sgd(list(model.parameters()), momentum=0.0, weight_decay=0.0, lr=0.05)(
            F.cross_entropy(model.head(z), y) + lam * prototype_loss(z, y, protos, has))
        return distance()
    assert one_step(1.0) < one_step(0.0)


# ---------------------------------------------------------------------- the variants the registry tests skip
@pytest.mark.parametrize("method, params", [("fedproto", {"prototypes": "local"})])
def test_variants_in_two_workers_give_the_in_process_numbers(make_config, method, params):
    assert_workers_give_the_in_process_numbers(make_config, method, params)
