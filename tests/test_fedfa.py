"""FedFA's defining behaviour on tiny problems (Zhou, Zhang, Tsang: feature anchors), and
the per-round learning-rate decay (config field ``lr_decay``) its setting uses."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pflcore.algorithms import make_algorithm
from pflcore.algorithms.base import Client, snapshot
from pflcore.algorithms.fedfa import AdamStep, Calibration, FedFA, anchor_loss, initial_anchors
from pflcore.config import ConfigError, ExperimentConfig
from pflcore.engine import Simulation, build_data, run
from pflcore.models import mlp
from pflcore.training import TrainSettings

from conftest import advance, run_killed_after, strip


def two_class_config(make_config, **changes):
    """4 digits clients holding 2 classes each: most classes are held by nobody."""
    return make_config(method="fedfa", partition={"kind": "pathological", "classes_per_client": 2,
                                                  "samples_per_client": 60}, **changes)


def hand_client(x, y, num_classes, settings, model=None):
    model = model or mlp(1, num_classes, image_size=2, hidden=4)
    return Client(0, 0, x, y, num_classes, {}, torch.Generator().manual_seed(0), model, settings)


# ------------------------------------------------------------------ the building blocks
def test_anchor_loss_by_hand():
    anchors = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]])
    f = torch.tensor([[1.0, 1.0], [3.0, 0.0], [0.0, 0.0]])
    y = torch.tensor([0, 0, 2])
    # class 0: (1 + 4) / 2; class 2: 0.5; class 1 absent; divided by C = 3
    assert float(anchor_loss(f, y, anchors)) == pytest.approx((2.5 + 0.5) / 3)


def test_initial_anchors():
    g = torch.Generator().manual_seed(3)
    a = initial_anchors(10, 192, "identity", g)
    assert a.shape == (10, 192) and torch.equal(a.sum(1), torch.ones(10)) and set(a.unique().tolist()) == {0.0, 1.0}
    assert int(a.argmax(1).unique().numel()) == 10  # distinct rows of I_d
    for kind, (c, d) in (("gaussian", (10, 192)), ("identity", (12, 8))):  # C > d: Gaussian
        b = initial_anchors(c, d, kind, g)
        torch.testing.assert_close(b.norm(dim=1), torch.ones(c))
        assert (b != 0).float().mean() > 0.9


def test_adam_step_is_torch_adam_bit_for_bit():
    torch.manual_seed(0)
    head = torch.nn.Linear(16, 5)
    ref = torch.nn.Linear(16, 5)
    ref.load_state_dict(head.state_dict())
    ours = AdamStep([head.weight, head.bias], lr=1e-3)
    theirs = torch.optim.Adam(ref.parameters(), lr=1e-3, foreach=True)
    x, y = torch.randn(7, 16), torch.randint(0, 5, (7,))
    for _ in range(5):
        ours.update(list(torch.autograd.grad(F.cross_entropy(head(x), y), [head.weight, head.bias])))
        theirs.zero_grad()
        F.cross_entropy(ref(x), y).backward()
        theirs.step()
    assert torch.equal(head.weight, ref.weight) and torch.equal(head.bias, ref.bias)


@pytest.mark.parametrize("optimizer, lr", [("adam", 0.05), ("sgd", 1.0)])
def test_calibration_maps_each_anchor_to_its_class(optimizer, lr):
    torch.manual_seed(1)
    anchors = initial_anchors(6, 12, "identity", torch.Generator().manual_seed(2))
    head = torch.nn.Linear(12, 6)
    assert not torch.equal(head(anchors).argmax(1), torch.arange(6))
    calibrate = Calibration(head, anchors, optimizer, lr)
    for _ in range(200):
        calibrate()
    assert torch.equal(head(anchors).argmax(1), torch.arange(6))


@pytest.mark.parametrize("upstream", [False, True])
def test_anchor_update_divides_by_the_batches_holding_the_class(upstream):
    """Batch size 1, samples of classes (0, 1, 1), one epoch, lr 0 (the features stay f(x)):
    class 0 is in 1 of 3 batches, class 1 in 2, class 2 in none."""
    x = torch.randn(3, 1, 2, 2)
    y = torch.tensor([0, 1, 1])
    client = hand_client(x, y, 3, TrainSettings(1, 1, 0.0, momentum=0.0, weight_decay=0.0))
    anchors = torch.randn(3, 4)
    with torch.no_grad():
        f = client.model.body(x)
    method = FedFA(calibration="none", upstream_anchor_division=upstream)
    update = method.local_update({"model": snapshot(client.model), "anchors": anchors}, client)
    means = torch.stack([f[0] / 3, (f[1] + f[2]) / 3]) if upstream else torch.stack([f[0], (f[1] + f[2]) / 2])
    torch.testing.assert_close(update["anchors"][:2], 0.5 * anchors[:2] + 0.5 * means)
    assert torch.equal(update["anchors"][2], anchors[2])


# ------------------------------------------------------------------ the federation
def test_anchors_of_classes_nobody_holds_pass_through_the_server_unchanged(make_config):
    sim = Simulation(two_class_config(make_config), build_data(two_class_config(make_config)))
    initial = sim.state["anchors"].clone()
    held = torch.zeros(10, dtype=torch.bool)
    for c in range(4):
        held |= torch.bincount(sim.worker.train_data[c][1], minlength=10) > 0
    assert 0 < int(held.sum()) < 10
    advance(sim, 2)
    anchors = sim.state["anchors"]
    assert torch.equal(anchors[~held], initial[~held])
    assert not torch.equal(anchors[held], initial[held])


def test_momentum_one_or_no_update_keeps_the_anchors(make_config):
    for params in ({"anchor_momentum": 1.0}, {"anchor_update": False}):
        config = make_config(method="fedfa", method_params=params)
        sim = Simulation(config, build_data(config))
        initial = sim.state["anchors"].clone()
        model = {k: v.clone() for k, v in sim.state["model"].items()}
        advance(sim, 2)
        assert torch.equal(sim.state["anchors"], initial), params
        assert any(not torch.equal(model[k], v) for k, v in sim.state["model"].items())


def test_same_seed_same_result(make_config):
    config = make_config(method="fedfa")
    a = advance(Simulation(config, build_data(config)), 2)
    b = advance(Simulation(config, build_data(config)), 2)
    assert torch.equal(a.state["anchors"], b.state["anchors"])
    assert all(torch.equal(v, b.state["model"][k]) for k, v in a.state["model"].items())
    other = make_config(method="fedfa", seed=8)
    assert not torch.equal(Simulation(other, build_data(other)).state["anchors"],
                           Simulation(config, build_data(config)).state["anchors"])


@pytest.mark.parametrize("calibration, calls", [("batch", "steps"), ("epoch", "epochs"), ("none", 0)])
def test_calibration_schedule(make_config, monkeypatch, calibration, calls):
    config = make_config(method="fedfa", local_epochs=2, method_params={"calibration": calibration})
    sim = Simulation(config, build_data(config))
    count = []
    real = Calibration.__call__
    monkeypatch.setattr(Calibration, "__call__", lambda self: (count.append(1), real(self))[1])
    client = sim.client(0, 0, 11)
    sim.algorithm.local_update(sim.algorithm.payload(sim.state, 0), client)
    steps = 2 * math.ceil(client.num_samples / config.batch_size)
    assert len(count) == {"steps": steps, "epochs": 2, 0: 0}[calls]


def test_fedavg_round_initialisation_drops_the_anchor_loss_in_round_0_only(make_config):
    config = make_config(method="fedfa")
    sim = Simulation(config, build_data(config))
    plain = FedFA(mu=0.0)
    late = FedFA(mu=5.0, initialization="fedavg_round")
    for r, same in ((0, True), (1, False)):
        payload = sim.algorithm.payload(sim.state, 0)
        a = plain.local_update(payload, sim.client(0, r, 11))
        b = late.local_update(payload, sim.client(0, r, 11))
        equal = all(torch.equal(v, b["model"][k]) for k, v in a["model"].items())
        assert equal == same and torch.equal(a["anchors"], b["anchors"]) == same


def test_anchors_from_a_finished_run(make_config, tmp_path):
    saved = torch.randn(10, 64)
    folder = tmp_path / "finished"
    folder.mkdir()
    torch.save({"sim": {"state": {"anchors": saved}, "client_states": {}}}, folder / "final_state.pt")
    config = make_config(method="fedfa", method_params={"initialization": "from_run", "anchors_from": str(folder)})
    sim = Simulation(config, build_data(config))
    assert torch.equal(sim.state["anchors"], saved)
    with pytest.raises(ConfigError, match="goes with initialization 'from_run'"):
        make_config(method="fedfa", method_params={"initialization": "from_run"})
    with pytest.raises(ConfigError, match="does not exist"):
        FedFA(initialization="from_run", anchors_from=str(tmp_path / "nothing")).saved_anchors(10, 64)
    torch.save({"sim": {"state": {"anchors": torch.zeros(3, 3)}}}, folder / "final_state.pt")
    with pytest.raises(ConfigError, match="not 10 x 64"):
        FedFA(initialization="from_run", anchors_from=str(folder)).saved_anchors(10, 64)


def test_ccvr_calibrates_fedfa(make_config):
    result = run(make_config(method="ccvr", method_params={"base": "fedfa"}, rounds=2))
    assert result.history[-1]["calibrated"] == 1


# ------------------------------------------------------------------ lr decay
def test_lr_decay_validation_and_identity(make_config):
    for bad in (0, 1.5, -0.1, float("nan"), True, "0.9"):
        with pytest.raises(ConfigError, match="'lr_decay'"):
            make_config(lr_decay=bad)
    plain = make_config()
    values = plain.to_dict()
    del values["lr_decay"]  # a config written before the field existed
    assert ExperimentConfig.from_dict(values).fingerprint() == plain.fingerprint()
    assert make_config(lr_decay=0.99).fingerprint() != plain.fingerprint()
    sim = Simulation(plain, build_data(plain))
    assert sim.client(0, 5, 11).settings is sim.worker.settings  # no decay: the very same settings


def one_batch_sgd(make_config, **changes):
    """FedAvg, one local step on the client's whole data, plain SGD."""
    return make_config(batch_size=1000, local_epochs=1, momentum=0.0, weight_decay=0.0, **changes)


def test_a_flower_node_builds_the_decayed_lr(make_config):
    """A Flower node's worker, built from the config the server sends, decays the lr too."""
    pytest.importorskip("flwr")
    import json

    from pflcore.flower.app import client_worker

    config = make_config(lr_decay=0.9)
    worker = client_worker(json.dumps(config.to_dict(), sort_keys=True))
    assert worker.client(1, 4, 11, {}).settings.lr == config.lr * 0.9 ** 4


def test_round_t_steps_with_the_decayed_lr(make_config):
    config = one_batch_sgd(make_config, lr_decay=0.5)
    sim = Simulation(config, build_data(config))
    payload = sim.algorithm.payload(sim.state, 0)
    for t in (0, 3):
        client = sim.client(0, t, 11)
        assert client.settings.lr == 0.05 * 0.5 ** t
        update = sim.algorithm.local_update(payload, client)
        model = sim.model
        model.load_state_dict(payload["model"])
        loss = F.cross_entropy(model(client.x), client.y)
        grads = torch.autograd.grad(loss, list(model.parameters()))
        for (name, w), g in zip(model.named_parameters(), grads):
            torch.testing.assert_close(update["model"][name], w.detach() - 0.05 * 0.5 ** t * g,
                                       rtol=1e-5, atol=1e-6)


def test_lr_decay_in_worker_processes_equals_in_process(make_config):
    """The decayed lr reaches worker processes (one thread here, like each worker, so the
    numbers match bit for bit)."""
    config = make_config(method="fedfa", lr_decay=0.7, rounds=3)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        here = advance(Simulation(config, build_data(config)), 3)
    finally:
        torch.set_num_threads(threads)
    there = Simulation(config, build_data(config))
    there.use_workers(2)
    try:
        advance(there, 3)
    finally:
        there.close()
    assert torch.equal(here.state["anchors"], there.state["anchors"])
    assert all(torch.equal(v, there.state["model"][k]) for k, v in here.state["model"].items())
    plain = advance(Simulation(make_config(method="fedfa", rounds=3), build_data(config)), 3)
    assert not torch.equal(plain.state["anchors"], here.state["anchors"])


def test_resume_with_lr_decay_equals_uninterrupted(make_config):
    full = run(make_config(method="fedfa", lr_decay=0.8, rounds=5, name="full"))

    cfg = make_config(method="fedfa", lr_decay=0.8, rounds=5, name="killed", checkpoint_every=2)
    run_killed_after(cfg, 3)
    resumed = run(cfg)
    assert strip(resumed.history) == strip(full.history)
    np.testing.assert_array_equal(resumed.acc_history, full.acc_history)


# ------------------------------------------------------------------ the paper's settings
def test_paper_settings_and_row_labels():
    from pflcore.papers import split_label
    from pflcore.papers.fedfa import (FEDFA_PARTITIONS, FEDFA_TABLE2, FEDFA_TABLE3, FEDFA_TABLE5, FEDFA_TABLE6,
                                      FEDFA_TABLE7, fedfa_config)

    config = fedfa_config("fedfa anchor_momentum=0.9", setting="iid", seed=2022)
    assert (config.num_clients, config.participation, config.batch_size, config.local_epochs, config.rounds) == \
        (100, 0.1, 64, 5, 200)
    assert (config.lr, config.lr_decay, config.weight_decay, config.momentum, config.model) == \
        (0.01, 0.99, 1e-3, 0.0, "fedfa_cnn")
    assert config.method_params == {"anchor_momentum": 0.9} and config.seed == 2022
    assert fedfa_config("fedprox", setting="iid").method_params == {"mu": 0.1}
    assert FEDFA_PARTITIONS["dir0.1"] == {"kind": "fedfa_dirichlet", "alpha": 0.1, "min_size": 10}
    assert FEDFA_TABLE2["c2"]["fedfa"] == 84.08 and FEDFA_TABLE2["iid"]["fedavg"] == 85.90
    assert len(FEDFA_TABLE6) == 11 and FEDFA_TABLE6["fedfa anchor_momentum=1.0"] == 81.55
    for table in (FEDFA_TABLE3, FEDFA_TABLE5, FEDFA_TABLE6, FEDFA_TABLE7):
        for label in table:
            method, params = split_label(label)
            if params.get("initialization") == "from_run":
                params["anchors_from"] = "a finished run"
            make_algorithm(method, **params)  # every row is a valid method with valid parameters


def test_validation_run_gives_every_class_to_two_clients():
    """Appendix F.2: 10 clients x 2 classes x 500 samples; every class held by exactly 2 clients,
    so the global test set has no class the federation never saw."""
    from pflcore.data.partition import make_partition, pool_labels
    from pflcore.papers.fedfa import fedfa_validation_config

    config = fedfa_validation_config("fedfa", seed=2021)
    assert (config.num_clients, config.participation, config.local_epochs, config.rounds) == (10, 1.0, 10, 15)
    rng = np.random.default_rng(0)
    train, test = rng.permutation(np.repeat(np.arange(10), 6000)), rng.permutation(np.repeat(np.arange(10), 1000))
    spec = dict(config.partition)
    p = make_partition(spec.pop("kind"), train, test, config.num_clients, seed=config.seed, **spec)
    counts = p.label_counts(pool_labels(train, test), 10)
    assert np.array_equal((counts > 0).sum(axis=0), np.full(10, 2))  # every class, exactly 2 holders
    assert np.array_equal((counts > 0).sum(axis=1), np.full(10, 2))  # every client, 2 classes ...
    assert set(counts[counts > 0].tolist()) == {500}  # ... of 500 samples each
    assert fedfa_validation_config("fedfa", samples_per_client=100).partition["samples_per_client"] == 100
