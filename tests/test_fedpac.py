"""FedPAC's maths on hand-checkable cases, its ablation switches, and its round."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.optimize import minimize

from pflcore.algorithms.fedpac import (FedPAC, SimplexQP, alignment_loss, combination_matrix,
                                       combination_weights, feature_statistics)
from pflcore.engine import Simulation, build_data, run


def test_feature_statistics_by_hand():
    z = torch.tensor([[1.0, 0.0], [3.0, 0.0], [0.0, 2.0]])
    y = torch.tensor([0, 0, 2])
    s = feature_statistics(z, y, num_classes=3)
    torch.testing.assert_close(s["counts"], torch.tensor([2.0, 0.0, 1.0]))
    torch.testing.assert_close(s["means"], torch.tensor([[2.0, 0.0], [0.0, 0.0], [0.0, 2.0]]))
    # v = [pi0 * E||z||^2 + pi2 * E||z||^2 - pi0^2 ||mu0||^2 - pi2^2 ||mu2||^2] / n
    pi0, pi2 = 2 / 3, 1 / 3
    v = (pi0 * (1 + 9) / 2 + pi2 * 4 - pi0 ** 2 * 4 - pi2 ** 2 * 4) / 3
    assert float(s["v"]) == pytest.approx(v)
    torch.testing.assert_close(s["h"], torch.tensor([[4 / 3, 0.0], [0.0, 0.0], [0.0, 2 / 3]]))


def test_alignment_loss_by_hand():
    # features (1, 0) and (0, 2) against class centroids c_0 = (0, 0), c_1 = (0, 1):
    # squared distances 1 and 1 over 2 samples x 2 dimensions -> 0.5
    z = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    centroids = torch.tensor([[0.0, 0.0], [0.0, 1.0]])
    assert float(alignment_loss(z, torch.tensor([0, 1]), centroids)) == pytest.approx(0.5)
    assert float(alignment_loss(centroids, torch.tensor([0, 1]), centroids)) == 0.0


def test_matrix_is_diag_v_plus_gram_of_differences():
    h = torch.randn(3, 4, 5)
    v = torch.rand(3)
    p = combination_matrix(v, h, 1)
    for a in range(3):
        for b in range(3):
            expected = float(((h[1] - h[a]) * (h[1] - h[b])).sum()) + (float(v[a]) if a == b else 0.0)
            assert p[a, b] == pytest.approx(expected, rel=1e-5, abs=1e-6)


def test_identical_clients_get_equal_weights():
    h = torch.ones(2, 3, 4)
    v = torch.tensor([0.5, 0.5])
    a = combination_weights(combination_matrix(v, h, 0), SimplexQP())
    np.testing.assert_allclose(a, [0.5, 0.5], atol=1e-4)


def test_a_client_unlike_the_others_keeps_its_own_head():
    torch.manual_seed(0)
    h = 0.01 * torch.randn(4, 3, 4)
    h[2] += 5.0                                   # client 2's statistics differ from everyone else's
    v = torch.full((4,), 0.01)
    a = combination_weights(combination_matrix(v, h, 2), SimplexQP())
    assert a[2] > 0.99
    b = combination_weights(combination_matrix(v, h, 0), SimplexQP())
    assert b[2] == 0.0 and b[[0, 1, 3]].sum() == pytest.approx(1.0)


@pytest.mark.parametrize("seed", range(5))
def test_qp_agrees_with_scipy_on_random_positive_definite_problems(seed):
    rng = np.random.default_rng(seed)
    m = int(rng.integers(2, 8))
    a_ = rng.normal(size=(m, m))
    p = a_ @ a_.T + 0.1 * np.eye(m)
    ours = SimplexQP().solve(p)
    assert (ours >= -1e-8).all() and ours.sum() == pytest.approx(1.0, abs=1e-6)
    ref = minimize(lambda a: a @ p @ a, np.full(m, 1 / m), jac=lambda a: 2 * p @ a, method="SLSQP",
                   bounds=[(0, 1)] * m, constraints=[{"type": "eq", "fun": lambda a: a.sum() - 1}],
                   options={"ftol": 1e-14, "maxiter": 500})
    assert ours @ p @ ours == pytest.approx(ref.fun, rel=1e-5, abs=1e-8)
    np.testing.assert_allclose(ours, ref.x, atol=1e-3)
    thresholded = combination_weights(p, SimplexQP())
    assert (thresholded >= 0).all() and thresholded.sum() == pytest.approx(1.0)
    assert ((thresholded == 0) | (thresholded > 1e-3)).all()


def test_negative_eigenvalues_are_floored():
    v = torch.tensor([-1.0, 0.5, 0.5])  # forces a negative eigenvalue
    p = combination_matrix(v, torch.zeros(3, 2, 2), 0)
    assert np.linalg.eigvalsh(p).min() >= -1e-9


def fake_update(counts, centroids, head_value, d=2):
    return {"counts": torch.tensor(counts, dtype=torch.float32), "centroids": torch.tensor(centroids),
            "num_samples": int(sum(counts)), "body": {"w": torch.zeros(1)},
            "head": {"weight": torch.full((3, d), head_value), "bias": torch.zeros(3)},
            "h": torch.zeros(3, d), "v": torch.tensor(1.0), "loss": 0.0}


def test_centroid_aggregation_by_hand():
    algo = FedPAC(classifier_collab=False)
    state = {"body": {"w": torch.zeros(1)}, "init_head": {}, "heads": {},
             "centroids": torch.tensor([[9.0, 9.0], [8.0, 8.0], [7.0, 7.0]]),
             "has_centroid": torch.tensor([False, True, False]), "weights": torch.zeros(0, 0), "qp_failures": 0}
    u0 = fake_update([1, 3, 0], [[1.0, 1.0], [2.0, 0.0], [0.0, 0.0]], 0.0)
    u1 = fake_update([3, 1, 0], [[5.0, 1.0], [6.0, 4.0], [0.0, 0.0]], 1.0)
    new = algo.aggregate(state, {0: u0, 1: u1}, None)  # FedPAC's server needs no context
    torch.testing.assert_close(new["centroids"][0], torch.tensor([(1 + 15) / 4, (1 + 3) / 4]))
    torch.testing.assert_close(new["centroids"][1], torch.tensor([(6 + 6) / 4, (0 + 4) / 4]))
    torch.testing.assert_close(new["centroids"][2], torch.tensor([7.0, 7.0]))   # held by nobody: kept
    assert new["has_centroid"].tolist() == [True, True, False]
    assert torch.equal(new["heads"][0]["weight"], u0["head"]["weight"])       # CC off: own head


def test_failed_solve_falls_back_to_own_head_and_is_counted(monkeypatch):
    algo = FedPAC()
    monkeypatch.setattr(algo._qp, "solve", lambda p: (_ for _ in ()).throw(RuntimeError("LDL")))
    state = {"body": {"w": torch.zeros(1)}, "init_head": {}, "heads": {}, "centroids": torch.zeros(3, 2),
             "has_centroid": torch.zeros(3, dtype=torch.bool), "weights": torch.zeros(0, 0), "qp_failures": 0}
    new = algo.aggregate(state, {0: fake_update([1, 1, 1], [[0.0, 0.0]] * 3, 0.0),
                                 2: fake_update([1, 1, 1], [[0.0, 0.0]] * 3, 1.0)}, None)
    assert new["qp_failures"] == 2
    assert torch.equal(new["heads"][2]["weight"], torch.ones(3, 2))
    torch.testing.assert_close(new["weights"], torch.eye(2))
    assert new["weight_clients"].tolist() == [0, 2]


def updates_of_round(config, rounds):
    """Run ``rounds`` rounds, then return the local update of client 0 in the next one."""
    sim = Simulation(config, build_data(config))
    for r in range(rounds):
        sim.run_round(r)
    return sim.algorithm.local_update(sim.algorithm.payload(sim.state, 0), sim.client(0, rounds, 11))


def test_no_alignment_in_round_zero_and_lambda_zero_is_alignment_off(make_config):
    base = make_config(method="fedpac")
    with_fa = updates_of_round(base, 0)
    without = updates_of_round(make_config(method="fedpac", method_params={"feature_alignment": False}), 0)
    assert all(torch.equal(with_fa["body"][k], without["body"][k]) for k in with_fa["body"])
    later_fa = updates_of_round(base, 1)
    later_lam0 = updates_of_round(make_config(method="fedpac", method_params={"lam": 0.0}), 1)
    later_off = updates_of_round(make_config(method="fedpac", method_params={"feature_alignment": False}), 1)
    assert all(torch.equal(later_lam0["body"][k], later_off["body"][k]) for k in later_off["body"])
    assert not all(torch.equal(later_fa["body"][k], later_off["body"][k]) for k in later_off["body"])


def test_alignment_pulls_features_towards_the_centroids(make_config):
    def spread(params):
        sim = Simulation(make_config(method="fedpac", method_params=params, local_epochs=3), build_data(make_config()))
        for r in range(3):
            sim.run_round(r)
        upd = {c: sim.algorithm.local_update(sim.algorithm.payload(sim.state, c), sim.client(c, 3, 11))
               for c in range(4)}
        cents = torch.stack([u["centroids"] for u in upd.values()])
        counts = torch.stack([u["counts"] for u in upd.values()])
        held = counts > 0
        dist = ((cents - sim.state["centroids"][None]) ** 2).sum(-1)
        return float(dist[held].mean())

    assert spread({"lam": 5.0}) < spread({"feature_alignment": False})


def test_fedpac_run_keeps_the_weight_matrix_of_every_round(make_config):
    result = run(make_config(method="fedpac", rounds=3))
    weights = result.arrays("weights")
    assert sorted(weights) == [1, 2, 3]
    w = weights[3]
    assert w.shape == (4, 4)
    np.testing.assert_allclose(w.sum(1), 1.0, atol=1e-6)
    assert (w >= 0).all()
    assert result.arrays("weight_clients")[3].tolist() == [0, 1, 2, 3]
    assert all(h["qp_failures"] == 0 for h in result.history)
    assert result.summary["acc_mean"] > 50


# ---------------------------------------------------------------------- the paper's table rows
def test_row_labels_carry_their_method_settings():
    from pflcore.papers import split_label
    from pflcore.papers.fedpac import fedpac_config

    assert split_label("fedavg") == ("fedavg", {})
    assert split_label("hypcluster k=3") == ("hypcluster", {"k": 3})
    assert split_label("fedproto prototypes=local lam=0.5") == ("fedproto", {"prototypes": "local", "lam": 0.5})
    with pytest.raises(ValueError):
        split_label("fedem M3")
    config = fedpac_config("fedem_ft M=5", "fmnist", 20)
    assert config.method == "fedem_ft" and config.method_params == {"M": 5}
    # FedPAC's own choice for a baseline stays, and a label's setting is added to it
    assert fedpac_config("ditto lam=0.1", "fmnist", 20).method_params == {"lam": 0.1}
    assert fedpac_config("pfedme", "fmnist", 20).method_params == {"lam": 10.0, "inner_steps": 5}


def test_every_fedpac_table_row_names_a_method_or_is_reported_missing():
    """Rows of FedPAC's tables are keyed by labels whose method is registered, except the
    methods still to come, which tables list as "not implemented yet"."""
    from pflcore.algorithms import ALGORITHMS
    from pflcore.analysis.tables import _missing_rows
    from pflcore.papers import fedpac, split_label

    tables = [fedpac.FEDPAC_TABLE1["fmnist"][20], fedpac.FEDPAC_TABLE4["fmnist"][20], fedpac.FEDPAC_TABLE5["fmnist"],
              fedpac.FEDPAC_TABLE6["fmnist"], fedpac.FEDPAC_TABLE8["fmnist"], fedpac.FEDPAC_TABLE10["fmnist"]]
    labels = {label for table in tables for label in table}
    unknown = {label for label in labels if split_label(label)[0] not in ALGORITHMS}
    assert not unknown, unknown
    status = {row["method"]: row["status"] for row in _missing_rows({}, fedpac.FEDPAC_TABLE1["fmnist"][20])}
    assert status["ditto"] == "not run" and status["apfl"] == "not run"
    status = {row["method"]: row["status"] for row in _missing_rows({}, fedpac.FEDPAC_TABLE4["fmnist"][20])}
    assert status["hypcluster k=5"] == "not run"
    # free-text rows are listed too, never an error: an ablation's row pflcore runs is "not run" (issue 78)
    assert _missing_rows({}, {"w.o. cs": 43.76})[0]["status"] == "not run"
    assert _missing_rows({}, {"w FA": 89.74})[0]["status"] == "not run"
    assert _missing_rows({}, {"w.o. something else": 1.0})[0]["status"] == "not implemented yet"
