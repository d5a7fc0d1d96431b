"""Feature analysis (FedFA figures 2, 4, 6-9): known answers on hand-made cases, and the
functions on real tiny runs of a global and a personalised method."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from torch import nn

from pflcore.analysis import (classifier_update_similarity, client_features, cosine_pairs, feature_distance,
                              held_classes, local_models, plot_cosine_histograms, plot_tsne, received_head,
                              round_feature_statistics, tsne_embedding, verification_set)
from pflcore.engine import Simulation, build_data
from pflcore.models import SplitModel

from conftest import advance


# ------------------------------------------------------------------ helpers
def linear_model(bias: torch.Tensor, d_in: int = 5, seed: int = 0) -> SplitModel:
    """A SplitModel whose body is one Linear layer: all share the weight, the bias is given."""
    torch.manual_seed(seed)
    body = nn.Linear(d_in, bias.numel())
    with torch.no_grad():
        body.bias.copy_(bias)
    return SplitModel(body, bias.numel(), 3)


def head(weight, bias) -> dict:
    return {"weight": torch.tensor(weight, dtype=torch.float32), "bias": torch.tensor(bias, dtype=torch.float32)}


def literal_pairs(features, labels, held, clients):
    """The cosine pairs by the definition's loops (FedFA's histogram construction)."""
    cos = lambda a, b: float(torch.cosine_similarity(a, b, dim=0, eps=1e-8))  # noqa: E731
    y = labels.tolist()
    of = lambda k, c: [features[k][i] for i in range(len(y)) if y[i] == c]  # noqa: E731
    positive, negative = [], []
    for c in sorted(set(y)):
        holders = [k for k in clients if c in held[k]]
        for i, k in enumerate(holders):
            for j in holders[i + 1:]:
                positive += [cos(a, b) for a in of(k, c) for b in of(j, c)]
    for i, k in enumerate(clients):
        for c in sorted(held[k]):
            for k2 in clients[i + 1:]:
                for c2 in sorted(held[k2]):
                    if c2 != c:
                        negative += [cos(a, b) for a in of(k, c) for b in of(k2, c2)]
    return np.array(positive), np.array(negative)


# ------------------------------------------------------------------ Figure 4 statistics
def test_identical_models_distance_zero_similarity_one():
    models = [linear_model(torch.tensor([1.0, -2.0, 0.5])) for _ in range(3)]
    x = torch.randn(20, 5)
    assert feature_distance(models, x) == 0.0
    start = head([[0.0, 0.0, 0.0]] * 3, [0.0] * 3)
    trained = head([[1.0, 2.0, 0.0], [0.0, -1.0, 3.0], [0.5, 0.5, 0.5]], [0.1, 0.0, -0.2])
    assert classifier_update_similarity([trained] * 3, start) == pytest.approx(1.0, abs=1e-12)


def test_feature_distance_hand_case():
    # Same weight, biases differing by (3, 4): every output differs by a vector of norm 5.
    a, b = linear_model(torch.tensor([0.0, 0.0])), linear_model(torch.tensor([3.0, 4.0]))
    x = torch.randn(7, 5)
    # ordered pairs (a,a) (a,b) (b,a) (b,b): 0, 5, 5, 0
    assert feature_distance([a, b], x) == pytest.approx(2.5, abs=1e-5)
    # the same from the features themselves
    fa, fb = a.body(x).detach(), b.body(x).detach()
    assert feature_distance([fa, fb]) == pytest.approx(2.5, abs=1e-5)
    assert feature_distance([fa, fb, fb]) == pytest.approx(4 * 5 / 9, abs=1e-5)


def test_classifier_update_similarity_hand_cases():
    g = head([[0.0, 0.0], [0.0, 0.0]], [0.0, 0.0])
    e1, e2 = head([[1.0, 0.0], [1.0, 0.0]], [0.0, 0.0]), head([[0.0, 1.0], [0.0, 1.0]], [0.0, 0.0])
    minus_e1 = head([[-1.0, 0.0], [-1.0, 0.0]], [0.0, 0.0])
    # diagonal (1, 1) included: orthogonal updates (1 + 1 + 0 + 0) / 4, opposite (1 + 1 - 1 - 1) / 4
    assert classifier_update_similarity([e1, e2], g) == pytest.approx(0.5)
    assert classifier_update_similarity([e1, minus_e1], g) == pytest.approx(0.0)
    # per class: class 0 opposite (-1), class 1 orthogonal (0): off-diagonal -0.5
    mixed = head([[-1.0, 0.0], [0.0, 1.0]], [0.0, 0.0])
    assert classifier_update_similarity([e1, mixed], g) == pytest.approx((1 + 1 - 0.5 - 0.5) / 4)
    # the bias is part of the update: [1, 0 | 0] vs [1, 0 | 1] has cosine 1/sqrt(2)
    with_bias = head([[1.0, 0.0], [1.0, 0.0]], [1.0, 1.0])
    assert classifier_update_similarity([e1, with_bias], g) == pytest.approx((2 + 2 / math.sqrt(2)) / 4)
    # relative to a non-zero global head; modules and full-model state dicts are accepted too
    g2 = head([[2.0, 2.0], [2.0, 2.0]], [1.0, 1.0])
    shifted = [{k: v + g2[k] for k, v in h.items()} for h in (e1, e2)]
    assert classifier_update_similarity(shifted, g2) == pytest.approx(0.5)
    linear = nn.Linear(2, 2)
    with torch.no_grad():
        linear.weight.copy_(shifted[1]["weight"])
        linear.bias.copy_(shifted[1]["bias"])
    full = {"head.weight": shifted[0]["weight"], "head.bias": shifted[0]["bias"], "body.0.weight": torch.zeros(1)}
    assert classifier_update_similarity([full, linear], g2) == pytest.approx(0.5)
    # one starting head per client
    assert classifier_update_similarity(shifted, [g2, g2]) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="one per client"):
        classifier_update_similarity(shifted, [g2])


def test_round_feature_statistics_on_models():
    models = [linear_model(torch.tensor([0.0, 0.0])), linear_model(torch.tensor([3.0, 4.0]))]
    start = {k: v.clone() for k, v in models[0].head.state_dict().items()}
    with torch.no_grad():
        models[0].head.weight.add_(1.0)
        models[1].head.weight.add_(1.0)
    stats = round_feature_statistics(models, start, torch.randn(4, 5))
    assert stats["feature_distance"] == pytest.approx(2.5, abs=1e-5)
    assert stats["classifier_update_similarity"] == pytest.approx(1.0)


# ------------------------------------------------------------------ cosine pairs
def test_cosine_pair_counts_and_values_match_the_definition():
    labels = torch.tensor([0, 0, 1, 1, 1, 2])  # 2, 3 and 1 samples of classes 0, 1, 2
    held = {0: {0, 1}, 1: {1, 2}, 2: {0, 1, 2}}
    g = torch.Generator().manual_seed(0)
    features = {k: torch.randn(6, 4, generator=g).relu() for k in held}
    features[1][5] = 0.0  # an all-zero post-ReLU feature: cosine 0
    positive, negative = cosine_pairs(features, labels, held)
    # positive: class 0 (clients 0, 2): 2*2; class 1 (0, 1, 2): 3 pairs * 3*3; class 2 (1, 2): 1*1
    assert len(positive) == 4 + 27 + 1
    # negative, by (k, c) -> later k' with c' != c:
    # (0,0)->1:{1,2} 6+2, (0,1)->1:{2} 3, (0,0)->2:{1,2} 6+2, (0,1)->2:{0,2} 6+3, (1,1)->2:{0,2} 6+3, (1,2)->2:{0,1} 2+3
    assert len(negative) == 8 + 3 + 8 + 9 + 9 + 5
    ref_pos, ref_neg = literal_pairs(features, labels, held, [0, 1, 2])
    np.testing.assert_allclose(np.sort(positive), np.sort(ref_pos), atol=1e-6)
    np.testing.assert_allclose(np.sort(negative), np.sort(ref_neg), atol=1e-6)
    # no class held by two clients: no positive pair; one client: no pair at all
    none_shared = cosine_pairs(features, labels, {0: {0}, 1: {1}, 2: {2}})
    assert len(none_shared[0]) == 0 and len(none_shared[1]) == 2 * 3 + 2 * 1 + 3 * 1
    assert [len(v) for v in cosine_pairs({0: features[0]}, labels, held)] == [0, 0]


def test_identical_features_positive_pairs_of_same_sample_are_one():
    labels = torch.tensor([0, 1])
    f = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    positive, negative = cosine_pairs({0: f, 1: f.clone()}, labels)
    np.testing.assert_allclose(np.sort(positive), [1.0, 1.0])
    np.testing.assert_allclose(negative, [0.0, 0.0])


# ------------------------------------------------------------------ t-SNE
def test_tsne_one_point_per_triple_and_deterministic():
    g = torch.Generator().manual_seed(1)
    labels = torch.arange(4).repeat_interleave(6)  # 4 classes x 6 samples
    features = {k: torch.randn(24, 8, generator=g).relu() for k in range(3)}
    held = {0: [0, 1], 1: [1, 2, 3], 2: [3]}
    emb = tsne_embedding(features, labels, held=held, random_state=3, max_iter=250)
    assert emb.points.shape == (12 + 18 + 6, 2)
    assert (np.bincount(emb.clients) == [12, 18, 6]).all()
    for k, classes in held.items():
        assert set(emb.classes[emb.clients == k].tolist()) == set(classes)
    np.testing.assert_array_equal(labels.numpy()[emb.samples], emb.classes)
    again = tsne_embedding(features, labels, held=held, random_state=3, max_iter=250)
    np.testing.assert_array_equal(emb.points, again.points)
    # (with init='pca' the PCA's converged randomised SVD is the only draw: here random_state changes nothing)
    with pytest.raises(ValueError, match="at least 4"):
        tsne_embedding({0: features[0]}, labels, held={0: []})


def test_plots_draw(tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    g = torch.Generator().manual_seed(2)
    labels = torch.arange(3).repeat_interleave(4)
    features = {k: torch.randn(12, 5, generator=g) for k in range(2)}
    ax = plot_tsne(tsne_embedding(features, labels, max_iter=250), title="t-SNE")
    assert len(ax.collections) == 2
    assert [len(legend.get_texts()) for legend in (ax.artists[0], ax.get_legend())] == [3, 2]  # class, client
    ax = plot_cosine_histograms(*cosine_pairs(features, labels))
    assert len(ax.patches) > 0
    ax.figure.savefig(tmp_path / "h.png")


# ------------------------------------------------------------------ wrappers
def test_features_of_wrappers_and_a_clear_error():
    model = linear_model(torch.tensor([1.0, 2.0]))
    x = torch.randn(3, 5)

    class WithBody(nn.Module):  # e.g. Fed-RoD's TwoHeads, FedCP's ConditionalModel
        def __init__(self):
            super().__init__()
            self.body, self.head = model.body, model.head

    class Inner(nn.Module):  # e.g. kNN-Per's predictor
        def __init__(self):
            super().__init__()
            self.model = model

    expected = model.body(x).detach()
    for wrapped in (model, WithBody(), Inner()):
        torch.testing.assert_close(client_features({0: wrapped}, x)[0], expected)
    with pytest.raises(TypeError, match="no feature extractor `body`"):
        client_features({0: nn.Linear(5, 2)}, x)
    with pytest.raises(TypeError, match="Simulation or a mapping"):
        client_features([model], x)


def test_features_in_eval_mode_without_changing_the_mode():
    body = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.9), nn.ReLU())
    model = SplitModel(body, 8, 2).train()
    x = torch.randn(16, 4)
    f = client_features({0: model}, x)[0]
    assert model.training and body[1].training
    model.eval()
    torch.testing.assert_close(f, body(x).detach())
    assert (f >= 0).all()


# ------------------------------------------------------------------ real tiny runs
def test_verification_set_on_real_data(make_config):
    data = build_data(make_config())
    with pytest.warns(UserWarning, match="class\\(es\\) 9 \\(0\\)"):  # digits' tiny test split lacks class 9
        x, y = verification_set(data, per_class=10, seed=0)
    counts = torch.bincount(y, minlength=10)
    assert counts[:9].tolist() == [10] * 9 and counts[9] == 0
    assert x.shape[0] == 90
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x2, y2 = verification_set(data, per_class=10, seed=0)
        x3, _ = verification_set(data, per_class=10, seed=1)
        x4, y4 = verification_set(data, per_class=11, seed=0)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    assert not torch.equal(x, x3)
    assert torch.bincount(y4, minlength=10)[:9].tolist() == [11] * 9
    # every sample is one of the pooled test samples with its label
    pooled = {tuple(row.flatten().tolist()): int(lab) for row, lab in zip(data.all_test_x(), data.all_test_y())}
    assert all(pooled[tuple(row.flatten().tolist())] == int(lab) for row, lab in zip(x, y))


def test_held_classes(make_config):
    partition = {"kind": "pathological", "classes_per_client": 2, "samples_per_client": 60}
    data = build_data(make_config(partition=partition))
    counts = data.class_counts("train")
    for k in range(data.num_clients):
        held = held_classes(data, k)
        assert held == tuple(int(c) for c in np.flatnonzero(counts[k]))
        assert len(held) == 2


def _sim(make_config, method):
    cfg = make_config(method=method)
    return Simulation(cfg, build_data(cfg))


@pytest.mark.filterwarnings("ignore:the pooled test data")
@pytest.mark.parametrize("method", ["fedavg", "fedrep"])
def test_everything_on_a_real_run(make_config, method):
    sim = advance(_sim(make_config, method), 1)
    x, y = verification_set(sim.data, per_class=5)
    feats = client_features(sim, x)
    assert sorted(feats) == [0, 1, 2, 3]
    assert all(f.shape == (len(y), 64) and (f >= 0).all() for f in feats.values())
    # FedAvg's predictor and FedRep's shared body: the same features for every client
    assert all(torch.equal(feats[0], f) for f in feats.values())
    # the paper's local models (after the next round's local training) differ
    state_before = {k: v.clone() for k, v in sim.state["body" if method == "fedrep" else "model"].items()}
    personal_before = {k: {n: t.clone() for n, t in s.get("head", {}).items()} for k, s in sim.client_states.items()}
    start = received_head(sim)
    local = local_models(sim, 1)
    after = sim.state["body" if method == "fedrep" else "model"]
    assert all(torch.equal(v, after[k]) for k, v in state_before.items())  # sim untouched
    assert all(torch.equal(t, sim.client_states[k]["head"][n])
               for k, s in personal_before.items() for n, t in s.items())
    local_feats = client_features(local, x)
    assert not torch.equal(local_feats[0], local_feats[1])
    distance = feature_distance(list(local.values()), x)
    assert distance > 0 and distance == pytest.approx(feature_distance(list(local_feats.values())))
    if method == "fedavg":
        assert start is not None
        stats = round_feature_statistics(list(local.values()), start, x)
        assert -1 <= stats["classifier_update_similarity"] <= 1 and stats["feature_distance"] == distance
        # the local models are exactly those the engine trains: their average is the next global model
        sim.run_round(1)
        sizes = sim.data.train_sizes / sim.data.train_sizes.sum()
        for name, value in sim.state["model"].items():
            mean = sum(float(w) * dict(local[k].named_parameters())[name].detach() for k, w in enumerate(sizes))
            torch.testing.assert_close(mean, value, rtol=1e-5, atol=1e-6)
    else:
        assert start is None  # personal heads: no one received classifier
    pos, neg = cosine_pairs(local_feats, y, sim.data)
    n_per_class = np.bincount(y.numpy(), minlength=10)
    held = {k: set(held_classes(sim.data, k)) for k in range(4)}
    assert len(pos) == sum(n_per_class[c] ** 2 for c in range(10) for i, j in itertools.combinations(range(4), 2)
                           if c in held[i] and c in held[j])
    assert len(neg) > 0 and np.all(np.abs(pos) <= 1 + 1e-9)
    emb = tsne_embedding(local_feats, y, held=sim.data, max_iter=250)
    assert emb.points.shape == (sum(int(np.isin(y.numpy(), sorted(held[k])).sum()) for k in range(4)), 2)


@pytest.mark.filterwarnings("ignore:the pooled test data")
def test_personal_bodies_give_different_features(make_config):
    sim = advance(_sim(make_config, "local"), 1)
    x, _ = verification_set(sim.data, per_class=3)
    feats = client_features(sim, x, clients=[0, 2])
    assert sorted(feats) == [0, 2] and not torch.equal(feats[0], feats[2])
    assert feature_distance([feats[0], feats[2]]) > 0


# ---------------------------------------------------------------------- the engine's per-round probe
def test_feature_probe_records_fig4_statistics_without_changing_training(make_config):
    from pflcore.engine import run

    from conftest import strip

    plain = run(make_config(method="fedavg", rounds=2, name="plain"))
    probed = run(make_config(method="fedavg", rounds=2, feature_probe=3, name="probed"))
    keys = ("feature_distance", "classifier_update_similarity")
    for record in probed.history:
        assert record["feature_distance"] >= 0 and -1 <= record["classifier_update_similarity"] <= 1
    assert [{k: v for k, v in h.items() if k not in keys} for h in strip(probed.history)] == strip(plain.history)
    # worker processes measure the same (one thread each: float sums ordered differently than in
    # this process's two threads, so equal to rounding)
    workers = run(make_config(method="fedavg", rounds=2, feature_probe=3, workers=2, name="workers"))
    for a, b in zip(workers.history, probed.history):
        assert [a[k] for k in keys] == pytest.approx([b[k] for k in keys], rel=1e-6)


def test_feature_probe_on_personal_predictors_reports_the_distance_only(make_config):
    from pflcore.engine import run

    result = run(make_config(method="local", rounds=1, feature_probe=2))
    assert result.history[0]["feature_distance"] > 0  # every client trains its own model
    assert "classifier_update_similarity" not in result.history[0]


def test_feature_probe_is_validated_and_off_keeps_fingerprints(make_config):
    import pytest

    from pflcore.config import ConfigError

    assert make_config(feature_probe=0).fingerprint() == make_config().fingerprint()
    assert make_config(feature_probe=5).fingerprint() != make_config().fingerprint()
    with pytest.raises(ConfigError, match="feature_probe"):
        make_config(feature_probe=-1)


def test_f2_views_are_kept_in_the_record_and_drawn_again_from_it(tmp_path, monkeypatch, make_config):
    """Appendix F.2 from a record alone: the t-SNE points and cosine pairs computed from the
    final models after the run come back, equal, when the run is read from its record."""
    import shutil

    from pflcore import records
    from pflcore.engine import run
    from pflcore.papers.fedfa import f2_feature_views

    (tmp_path / "notebooks").mkdir()
    (tmp_path / "params").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(records.TRAIN_ENV, raising=False)
    config = make_config(method="fedavg", rounds=2)
    with records.recording("fedfa/f2_tsne"):
        embedding, (positive, negative) = f2_feature_views(run(config), per_class=3)
    shutil.rmtree(config.output_dir)  # a fresh clone: the record only
    with records.recording("fedfa/f2_tsne"):
        result = run(config)
        again, (positive2, negative2) = f2_feature_views(result, per_class=3)
    assert result.record is not None
    assert len(embedding.points) == len(embedding.classes) == len(embedding.clients) > 0 and len(positive) > 0
    for a, b in ((embedding.points, again.points), (embedding.clients, again.clients), (positive, positive2),
                 (negative, negative2)):
        np.testing.assert_array_equal(a, b)
