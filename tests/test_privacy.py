"""The DLG privacy evaluation (FedCP appendix B, Table 9; Zhu et al. 2019): PSNR, the
attack on a case with a known answer, and the method-agnostic entry point on the tiny
digits federation."""
from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from pflcore.algorithms import make_algorithm
from pflcore.engine.jobs import ClientWorker
from pflcore.engine.simulation import Simulation, build_data
from pflcore.privacy import body_update, dlg_psnr, dlg_reconstruct, psnr, simulation_dlg_psnr


# ---------------------------------------------------------------------------- PSNR
def test_psnr_by_hand():
    target = torch.zeros(2, 1, 2, 2)
    recon = torch.full((2, 1, 2, 2), 0.1)  # MSE 0.01 -> 20 log10(1 / 0.1) = 20 dB
    assert psnr(recon, target) == pytest.approx(20.0)
    assert psnr(recon, target, reduction="mean") == pytest.approx(20.0)
    assert torch.allclose(psnr(recon, target, reduction="none"), torch.full((2,), 20.0, dtype=torch.float64))
    # per image vs pooled: image 0 exact, image 1 off by 0.1 everywhere
    mixed = torch.cat([target[:1], recon[1:]])
    assert psnr(mixed, target) == pytest.approx(10 * math.log10(1 / 0.005))  # pooled MSE 0.005
    per_image = psnr(mixed, target, reduction="none")
    assert per_image[0] == math.inf and per_image[1].item() == pytest.approx(20.0)
    assert psnr(target, target) == math.inf
    with pytest.raises(ValueError):
        psnr(recon, target[:1])
    with pytest.raises(ValueError):
        psnr(recon, target, reduction="sum")


# ---------------------------------------------------------------------------- known answer
def _linear_case(label_loss: str):
    """One sample through one linear layer: dW = g x^T and db = g, so x = dW[k] / db[k]."""
    torch.manual_seed(0)
    d, k = 16, 4
    model = torch.nn.Linear(d, k)
    x = torch.rand(1, d) * 0.8 + 0.1  # inside (0, 1): reachable by sigmoid
    out = torch.randn(1, k)
    loss = F.mse_loss(model(x), out) if label_loss == "mse" else F.cross_entropy(model(x), F.softmax(out, -1))
    grads = torch.autograd.grad(loss, list(model.parameters()))
    return model, x, grads


def test_the_linear_case_is_analytically_invertible():
    model, x, (dw, db) = _linear_case("mse")
    k = int(db.abs().argmax())
    assert psnr(dw[k:k + 1] / db[k], x) > 60


@pytest.mark.parametrize("label_loss", ["mse", "soft_ce"])
def test_dlg_recovers_a_linear_layers_input(label_loss):
    model, x, grads = _linear_case(label_loss)
    flags = [p.requires_grad for p in model.parameters()]
    model.train()
    result = dlg_reconstruct(model, ["weight", "bias"], grads, (1, 16), 4, steps=10,
                             generator=torch.Generator().manual_seed(0), label_loss=label_loss)
    assert result.stopped is None and result.steps == 10
    assert result.loss < 1e-6
    assert psnr(result.reconstruction, x) > 30
    assert result.reconstruction.min() >= 0 and result.reconstruction.max() <= 1
    # the model is left as it was
    assert model.training and [p.requires_grad for p in model.parameters()] == flags
    # the same seed, the same reconstruction; parameters given as tensors work too
    again = dlg_reconstruct(model, list(model.parameters()), grads, (1, 16), 4, steps=10,
                            generator=torch.Generator().manual_seed(0), label_loss=label_loss)
    assert torch.equal(again.reconstruction, result.reconstruction)


def test_dlg_stops_cleanly_on_a_non_finite_loss():
    model, x, (dw, db) = _linear_case("mse")
    result = dlg_reconstruct(model, ["weight", "bias"], {"weight": dw, "bias": torch.full_like(db, math.nan)},
                             (1, 16), 4, steps=5)
    assert result.stopped is not None and "non-finite" in result.stopped
    assert result.steps == 0 and torch.isfinite(result.reconstruction).all()


def test_dlg_refuses_mismatched_updates():
    model, _, (dw, db) = _linear_case("mse")
    with pytest.raises(ValueError):
        dlg_reconstruct(model, ["weight", "bias"], [dw], (1, 16), 4, steps=1)
    with pytest.raises(ValueError):
        dlg_reconstruct(model, ["weight", "bias"], [db, dw], (1, 16), 4, steps=1)
    with pytest.raises(ValueError):
        dlg_reconstruct(model, ["nope"], [dw], (1, 16), 4, steps=1)
    with pytest.raises(ValueError):
        dlg_reconstruct(model, ["weight", "bias"], [dw, db], (1, 16), 4, steps=1, label_loss="l1")


# ---------------------------------------------------------------------------- any method
@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    from conftest import tiny_config

    config = tiny_config(tmp_path_factory.mktemp("privacy"))
    return config, build_data(config)


def _mean_std(config):
    from pflcore.data.sources import load_dataset

    ds = load_dataset(config.dataset, root=config.data_root, download=False)
    return ds.mean, ds.std


@pytest.fixture(scope="module")
def fedavg_after_one_round(digits):
    config, data = digits
    sim = Simulation(config, data)
    sim.run_round(0)
    return copy.deepcopy(sim.snapshot())


def _restored(digits, snapshot):
    sim = Simulation(*digits)
    sim.restore(copy.deepcopy(snapshot))
    return sim


def test_dlg_psnr_end_to_end_for_fedavg(digits, fedavg_after_one_round):
    config, data = digits
    sim = _restored(digits, fedavg_after_one_round)
    mean, std = _mean_std(config)
    report = dlg_psnr(sim.algorithm, sim.state, ClientWorker.for_run(config, data, sim.algorithm, sim.model), 1,
                      mean=mean, std=std, round_index=1, steps=2, max_iter=5)
    assert math.isfinite(report.psnr) and len(report.psnr_per_batch) == 2
    assert report.psnr == pytest.approx(sum(report.psnr_per_batch) / 2)
    assert report.stopped == [None, None] and all(math.isfinite(v) for v in report.losses)
    assert report.targets[0].shape == (config.batch_size, 1, 8, 8)
    for recon, truth in zip(report.reconstructions, report.targets):
        assert recon.shape == truth.shape and 0 <= truth.min() and truth.max() <= 1
    # the targets are the client's own training images, de-normalised
    x = data.train[1].x * std[0] + mean[0]
    assert any(torch.allclose(report.targets[0][0], row, atol=1e-5) for row in x)


def test_the_attack_leaves_the_run_unchanged(digits, fedavg_after_one_round):
    attacked, untouched = (_restored(digits, fedavg_after_one_round) for _ in range(2))
    report = simulation_dlg_psnr(attacked, 2, 1, steps=1, max_iter=2, batches=1)
    assert math.isfinite(report.psnr) and len(report.psnr_per_batch) == 1
    for sim in (attacked, untouched):
        sim.run_round(1)
    for key, value in untouched.state["model"].items():
        assert torch.equal(attacked.state["model"][key], value)


def test_the_update_is_received_minus_trained_body(digits):
    config, data = digits
    algorithm = make_algorithm("fedper")
    sim = Simulation(config, data, algorithm)
    payload = algorithm.payload(sim.state, 0)
    update = algorithm.local_update(payload, sim.client(0, 0, 11))
    names = [n for n, _ in sim.model.body.named_parameters()]
    delta = body_update(algorithm, payload, update, names)
    for n in names:
        assert torch.equal(delta[n], payload["body"][n] - update["body"][n])
    assert any(delta[n].abs().sum() > 0 for n in names)


@pytest.mark.parametrize("method", ["local", "lg_fedavg"])
def test_a_method_that_uploads_no_body_is_refused(digits, method):
    config, data = digits
    algorithm = make_algorithm(method)
    sim = Simulation(config, data, algorithm)
    mean, std = _mean_std(config)
    with pytest.raises(ValueError, match="uploads no body parameters"):
        dlg_psnr(algorithm, sim.state, sim.worker, 0, mean=mean, std=std, steps=1)
