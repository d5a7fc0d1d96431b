"""pFedFDA's defining behaviour (McLaughlin & Su, NeurIPS 2024): the generative head is the
Bayes classifier of its Gaussians, beta interpolates local and global statistics, and the
cross-validated beta trusts local statistics when they are plentiful and different, the
global ones when local data is scarce and typical."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pflcore.algorithms.base import Client, TrainSettings
from pflcore.algorithms.pfedfda import (FAILED, LOCAL_ONLY, SOLVED, UNSPLITTABLE, PFedFDA, class_statistics,
                                        covariance_estimate, generative_head, interpolate, label_priors,
                                        nearest_correlation_clip, solve_beta)
from pflcore.engine import Simulation, build_data, run
from pflcore.models import build_model

from conftest import advance, strip


def gaussian_client(n_per_class: int, means: torch.Tensor, seed: int, scale: float = 1.0):
    g = torch.Generator().manual_seed(seed)
    c, d = means.shape
    labels = torch.arange(c).repeat_interleave(n_per_class)
    return means[labels] + scale * torch.randn(len(labels), d, generator=g, dtype=torch.float64), labels


# ---------------------------------------------------------------------- the head
def test_head_is_the_bayes_classifier_of_two_gaussians_with_a_shared_covariance():
    from scipy.stats import multivariate_normal

    means = torch.tensor([[3.0, 0.0], [-3.0, 1.0]], dtype=torch.float64)
    cov = torch.tensor([[2.0, 0.5], [0.5, 1.0]], dtype=torch.float64)
    priors = torch.tensor([0.3, 0.7], dtype=torch.float64)
    weight, bias = generative_head(means, cov, priors, eps=0.0)
    z = torch.randn(200, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 3
    posterior = torch.softmax(z @ weight.T + bias, dim=1)
    joint = np.stack([priors[k].item() * multivariate_normal(means[k].numpy(), cov.numpy()).pdf(z.numpy())
                      for k in range(2)], axis=1)
    np.testing.assert_allclose(posterior.numpy(), joint / joint.sum(1, keepdims=True), atol=1e-10)
    # closed form: W = S^-1 mu_k, b_k = -1/2 mu_k S^-1 mu_k + log pi_k
    inverse = torch.linalg.inv(cov)
    torch.testing.assert_close(weight, means @ inverse)
    torch.testing.assert_close(bias, -0.5 * torch.einsum("kd,de,ke->k", means, inverse, means) + priors.log())


def test_head_shrinks_the_covariance_towards_its_mean_eigenvalue():
    cov = torch.diag(torch.tensor([4.0, 0.0], dtype=torch.float64))  # singular: the shrinkage makes it solvable
    weight, _ = generative_head(torch.eye(2, dtype=torch.float64), cov, torch.tensor([0.5, 0.5], dtype=torch.float64))
    shrunk = torch.diag(torch.tensor([(1 - 1e-4) * 4 + 1e-4 * 2, 1e-4 * 2], dtype=torch.float64))
    torch.testing.assert_close(weight, torch.linalg.inv(shrunk))


def test_priors_are_label_frequencies_plus_1e_4_renormalised():
    priors = label_priors(torch.tensor([0, 0, 0, 1]), 3)
    expected = torch.tensor([0.75, 0.25, 0.0], dtype=torch.float64) + 1e-4
    torch.testing.assert_close(priors, expected / expected.sum())


# ---------------------------------------------------------------------- statistics
def test_class_statistics_by_hand():
    z = torch.tensor([[0.0, 0.0], [2.0, 0.0], [4.0, 0.0], [1.0, 1.0], [3.0, 3.0]], dtype=torch.float64)
    y = torch.tensor([0, 0, 0, 1, 1])
    fallback = torch.tensor([[9.0, 9.0], [2.0, 2.0], [5.0, 5.0]], dtype=torch.float64)
    means, scatter, n = class_statistics(z, y, fallback)
    # class 0 has 3 samples (its own mean); class 1 only 2 (the fallback); class 2 none (the fallback)
    torch.testing.assert_close(means, torch.tensor([[2.0, 0.0], [2.0, 2.0], [5.0, 5.0]], dtype=torch.float64))
    centered = torch.tensor([[-2.0, 0.0], [0.0, 0.0], [2.0, 0.0], [-1.0, -1.0], [1.0, 1.0]], dtype=torch.float64)
    torch.testing.assert_close(scatter, centered.T @ centered)
    assert n == 5


def test_upstream_covariance_adds_1e_4_everywhere_and_the_identity_and_ridge_adds_ridge_identity():
    scatter = torch.tensor([[4.0, 2.0], [2.0, 6.0]], dtype=torch.float64)
    upstream = covariance_estimate(scatter, 3, "upstream")
    torch.testing.assert_close(upstream, scatter / 2 + 1e-4 + torch.eye(2, dtype=torch.float64))
    torch.testing.assert_close(covariance_estimate(scatter, 3, "ridge", ridge=0.5),
                               scatter / 2 + 0.5 * torch.eye(2, dtype=torch.float64))


def test_nearest_correlation_clip_repairs_an_indefinite_matrix_and_keeps_the_variances():
    bad = torch.tensor([[1.0, 0.9, -0.9], [0.9, 1.0, 0.9], [-0.9, 0.9, 1.0]], dtype=torch.float64) * 4
    assert torch.linalg.eigvalsh(bad).min() < 0
    fixed = nearest_correlation_clip(bad)
    assert torch.linalg.eigvalsh(fixed).min() > -1e-12
    torch.testing.assert_close(torch.diagonal(fixed), torch.diagonal(bad))
    good = torch.tensor([[2.0, 0.3], [0.3, 1.0]], dtype=torch.float64)
    assert torch.equal(nearest_correlation_clip(good), good)


def test_beta_1_is_local_statistics_only_and_beta_0_global_only():
    local = (torch.ones(3, 2, dtype=torch.float64), 2 * torch.eye(2, dtype=torch.float64))
    global_ = (torch.zeros(3, 2, dtype=torch.float64), torch.eye(2, dtype=torch.float64))
    for beta, expected in (((1.0, 1.0), local), ((0.0, 0.0), global_)):
        means, cov = interpolate(beta, local, global_)
        assert torch.equal(means, expected[0]) and torch.equal(cov, expected[1])
    means, cov = interpolate((1.0, 0.0), local, global_)  # MB: the means' and the covariance's betas apart
    assert torch.equal(means, local[0]) and torch.equal(cov, global_[1])


# ---------------------------------------------------------------------- choosing beta
GLOBAL_MEANS = torch.tensor([[2.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 2.0]], dtype=torch.float64)
GLOBAL_COV = torch.eye(3, dtype=torch.float64)
UNIFORM = torch.full((3,), 1 / 3, dtype=torch.float64)


def test_cross_validated_beta_trusts_plentiful_local_data_that_differs_from_the_global_distribution():
    z, y = gaussian_client(300, -GLOBAL_MEANS, seed=1)  # every class sits on the other side of the origin
    (beta_means, beta_cov), status = solve_beta(z, y, GLOBAL_MEANS, GLOBAL_COV, UNIFORM)
    assert status == SOLVED and beta_means == beta_cov and beta_means > 0.9


def test_cross_validated_beta_trusts_the_global_statistics_when_local_data_is_scarce_and_typical():
    # 6 samples per class drawn from the global Gaussians themselves: 3 per class in a fold
    for seed in range(5):
        z, y = gaussian_client(6, GLOBAL_MEANS, seed=seed)
        (beta, _), status = solve_beta(z, y, GLOBAL_MEANS, GLOBAL_COV, UNIFORM)
        assert status == SOLVED and beta < 0.2, seed


def test_multi_beta_frees_the_covariance_beta_and_none_is_local_only():
    z, y = gaussian_client(200, -GLOBAL_MEANS, seed=3)
    (bm, bc), status = solve_beta(z, y, GLOBAL_MEANS, GLOBAL_COV, UNIFORM, mode="multi")
    assert status == SOLVED and 0 <= bm <= 1 and 0 <= bc <= 1 and bm > 0.9
    assert solve_beta(z, y, GLOBAL_MEANS, GLOBAL_COV, UNIFORM, mode="none") == ((1.0, 1.0), LOCAL_ONLY)


def test_a_client_that_cannot_be_split_in_two_folds_uses_the_global_statistics():
    z, y = gaussian_client(1, GLOBAL_MEANS, seed=4)  # one sample per class
    assert solve_beta(z, y, GLOBAL_MEANS, GLOBAL_COV, UNIFORM) == ((0.0, 0.0), UNSPLITTABLE)


def test_grouped_folds_keep_every_feature_of_a_sample_in_one_fold():
    from pflcore.algorithms.pfedfda import cv_folds

    labels = np.tile(np.repeat(np.arange(3), 10), 4)  # 4 epochs' features of 30 samples
    groups = np.tile(np.arange(30), 4)
    for train, held in cv_folds(labels, groups):
        assert not set(groups[train]) & set(groups[held])


# ---------------------------------------------------------------------- the method
def tiny_client(seed: int = 0, n: int = 60, state: dict | None = None) -> Client:
    torch.manual_seed(seed)
    model = build_model("mlp", 1, 3, 8)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 1, 8, 8, generator=g)
    y = torch.arange(n) % 3
    x[:, 0, 0, :3] += 3 * torch.nn.functional.one_hot(y, 3).float()
    settings = TrainSettings(epochs=2, batch_size=10, lr=0.05, momentum=0.5, weight_decay=5e-4)
    return Client(0, 0, x, y, 3, state if state is not None else {}, torch.Generator().manual_seed(seed), model,
                  settings)


def server_state(method: PFedFDA, client: Client) -> dict:
    from pflcore.algorithms.base import FederationInfo

    info = FederationInfo(1, 3, (client.num_samples,), 0, client.settings)
    return method.init(client.model, info)


def test_the_head_is_built_from_global_statistics_and_stays_frozen_while_the_body_trains():
    method, client = PFedFDA(), tiny_client()
    state = server_state(method, client)
    body_before = {k: v.clone() for k, v in state["body"].items()}
    update = method.local_update(method.payload(state, 0), client)
    weight, bias = generative_head(state["means"], state["covariance"], label_priors(client.y, 3))
    torch.testing.assert_close(client.model.head.weight, weight.float())
    torch.testing.assert_close(client.model.head.bias, bias.float())
    assert any(not torch.equal(update["body"][k], body_before[k]) for k in body_before)
    assert update["beta_status"] == SOLVED and update["means"].shape == (3, client.model.head.in_features)


def test_the_upload_is_the_interpolation_of_the_training_passes_statistics():
    method, client = PFedFDA(beta="none"), tiny_client()  # beta = 1: the upload is the local statistics
    state = server_state(method, client)
    update = method.local_update(method.payload(state, 0), client)
    # all_epochs: every sample's features, once per epoch (2 epochs of 60 samples)
    assert update["num_samples"] == 60
    fresh = PFedFDA(beta="none", stat_features="fresh_pass")
    other = fresh.local_update(fresh.payload(state, 0), tiny_client())
    z = tiny_client().features(client.model)  # not the trained body: only the shape matters here
    assert other["means"].shape == update["means"].shape == (3, z.shape[1])
    assert not torch.allclose(update["means"], state["means"].double())  # beta = 1: the global means are not used


def test_a_failed_beta_solve_keeps_the_previous_beta_and_is_counted(monkeypatch, make_config):
    import scipy.optimize

    def broken(*args, **kwargs):
        raise ValueError("line search failed")

    monkeypatch.setattr(scipy.optimize, "minimize", broken)
    method = PFedFDA()
    client = tiny_client(state={"beta": torch.tensor([0.25, 0.25], dtype=torch.float64)})
    update = method.local_update(method.payload(server_state(method, client), 0), client)
    assert update["beta_status"] == FAILED and update["beta"].tolist() == [0.25, 0.25]
    with pytest.warns(UserWarning, match="beta_failures"):
        result = run(make_config(method="pfedfda", rounds=2))
    assert result.summary["beta_failures_total"] == 2 * 4 and result.summary["status"] == "finished with failures"


def test_pfedfda_resumed_equals_uninterrupted(make_config, tmp_path):
    first = run(make_config(method="pfedfda", rounds=3))

    class Stop(Exception):
        pass

    def stop_after_2(r, record):
        if r == 2:
            raise Stop

    resumed_cfg = make_config(method="pfedfda", rounds=3, checkpoint_every=1, output_dir=str(tmp_path / "resumed"))
    with pytest.raises(Stop):
        run(resumed_cfg, on_round_end=stop_after_2)
    resumed = run(resumed_cfg)
    assert strip(resumed.history) == strip(first.history)
    assert first.summary["acc_mean"] > 50
    betas = np.load(first.path / "arrays" / "round_0003.npz")["beta"]  # each client's beta, for Fig. 2
    assert betas.shape == (4, 2) and np.all((0 <= betas) & (betas <= 1))


def test_the_predictor_solves_beta_on_the_clients_own_train_features(make_config):
    sim = advance(Simulation(make_config(method="pfedfda"), build_data(make_config())), 2)
    payload = sim.algorithm.payload(sim.state, 0, "evaluate")
    model = sim.algorithm.predictor(payload, sim.client(0, 1, 12))
    features = sim.client(0, 1, 12).features(model).float()
    beta, _ = solve_beta(features, sim.data.train[0].y, payload["means"], payload["covariance"],
                         label_priors(sim.data.train[0].y, sim.data.num_classes))
    assert 0 <= beta[0] <= 1 and math.isfinite(beta[0])


def test_a_model_without_a_linear_head_is_refused_in_one_sentence():
    from pflcore.config import ConfigError

    model = build_model("mlp", 1, 3, 8)
    model.head = torch.nn.Sequential(torch.nn.Linear(model.feature_dim, 3))
    with pytest.raises(ConfigError, match="linear head"):
        PFedFDA().check_head(model)
