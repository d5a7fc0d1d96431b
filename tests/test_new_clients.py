"""pFedFDA's protocol features, for every method: Bernoulli client sampling (appendix C.2)
and new-client generalisation (section 5, Table 4)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from pflcore.config import ConfigError
from pflcore.engine import Simulation, build_data, run
from pflcore.engine.evaluation import accuracies, shared_correct
from pflcore.engine.schedule import SCHEDULE_KEY, held_out_clients, participants
from pflcore.training import derive_seed

from conftest import strip


# ---------------------------------------------------------------------- sampling
def test_uniform_sampling_draws_exactly_what_it_drew_before_the_pool_existed():
    for r in range(5):
        rng = np.random.default_rng(derive_seed(3, SCHEDULE_KEY, r))
        expected = np.sort(rng.choice(100, size=30, replace=False))
        got = participants(r, num_clients=100, rounds=10, participation=0.3, seed=3)
        assert np.array_equal(got, expected)


def test_bernoulli_sampling_takes_each_client_with_probability_q_and_the_last_round_whole():
    rounds = [participants(r, num_clients=50, rounds=400, participation=0.3, sampling="bernoulli",
                           full_last_round=True, seed=1) for r in range(400)]
    sizes = np.array([len(p) for p in rounds[:-1]])
    assert len(set(sizes)) > 5  # the count varies round to round (uniform sampling always takes 15)
    freq = np.bincount(np.concatenate(rounds[:-1]), minlength=50) / 399
    assert abs(freq.mean() - 0.3) < 0.01 and freq.min() > 0.2 and freq.max() < 0.4
    assert np.array_equal(rounds[-1], np.arange(50))
    assert np.array_equal(rounds[7], participants(7, num_clients=50, rounds=400, participation=0.3,
                                                  sampling="bernoulli", full_last_round=True, seed=1))


def test_a_round_nobody_joins_leaves_the_server_state_and_the_run_goes_on(make_config):
    config = make_config(participation=0.05, sampling="bernoulli", rounds=4, full_last_round=True)
    empty = [r for r in range(3) if len(Simulation(config, build_data(config)).participants(r)) == 0]
    assert empty, "the test needs a round without participants"
    result = run(config)
    for r in empty:
        assert result.history[r]["skipped"] and result.history[r]["participants"] == []
    assert result.history[-1]["participants"] == [0, 1, 2, 3]


# ---------------------------------------------------------------------- new clients
def test_held_out_clients_are_a_seeded_fraction():
    held = held_out_clients(10, 0.5, seed=4)
    assert len(held) == 5 and np.array_equal(held, held_out_clients(10, 0.5, seed=4))
    assert not np.array_equal(held, held_out_clients(10, 0.5, seed=5))
    assert len(held_out_clients(10, 0.0)) == 0


def test_new_clients_never_train_and_are_scored_only_at_the_end(make_config):
    config = make_config(method="fedper", num_clients=6, new_clients=0.5, rounds=3)
    result = run(config)
    held = held_out_clients(6, 0.5, config.seed)
    for h in result.history:
        assert not set(h["participants"]) & set(held.tolist())
    assert np.isnan(result.client_acc[held]).all() and not np.isnan(np.delete(result.client_acc, held)).any()
    new = np.load(result.path / "clients.npz")["new_final"]
    assert not np.isnan(new[held]).any() and np.isnan(np.delete(new, held)).all()
    assert result.summary["new_clients"] == 3
    np.testing.assert_allclose(result.summary["new_acc_mean"], new[held].mean())  # both in percent
    np.testing.assert_array_equal(result.clients["new_final"], new)


def test_a_global_methods_new_client_uses_the_global_model_as_it_is(make_config):
    config = make_config(method="fedavg", num_clients=6, new_clients=0.5, rounds=2)
    sim = Simulation(config, build_data(config))
    for r in range(2):
        sim.run_round(r)
    new = sim.evaluate_new_clients(1)
    everyone = accuracies(shared_correct(sim.algorithm.shared_predictor(sim.state, sim.model), sim.data),
                          sim.data.test_sizes)
    np.testing.assert_array_equal(new[sim.new_clients], everyone[sim.new_clients])


def test_a_personalised_new_client_adapts_with_a_local_update_and_its_state_is_not_kept(make_config):
    config = make_config(method="fedper", num_clients=6, new_clients=0.5, rounds=2)
    sim = Simulation(config, build_data(config))
    for r in range(2):
        sim.run_round(r)
    adapted = sim.evaluate_new_clients(1)[sim.new_clients]
    assert all(sim.client_states.get(int(c), {}) == {} for c in sim.new_clients)
    untrained = sim.evaluate(1)  # held-out clients are NaN in the per-round evaluation
    assert np.isnan(untrained[sim.new_clients]).all()
    assert np.isfinite(adapted).all()


@pytest.mark.parametrize("method", ["pfedfda", "knn_per", "fedavg_ft", "fedbabu"])
def test_new_clients_of_methods_whose_predictor_adapts_run_no_local_update(make_config, monkeypatch, method):
    """pFedFDA estimates statistics and beta, kNN-Per builds its datastore, FedAvg-FT and
    FedBABU fine-tune: all in the predictor, so a new client trains no round."""
    from pflcore.algorithms import ALGORITHMS

    config = make_config(method=method, num_clients=6, new_clients=0.5, rounds=2)
    sim = Simulation(config, build_data(config))
    for r in range(2):
        sim.run_round(r)

    def no_training(*args, **kwargs):
        raise AssertionError(f"a new {method} client must not run a local update")

    monkeypatch.setattr(ALGORITHMS[method], "local_update", no_training)
    assert np.isfinite(sim.evaluate_new_clients(1)[sim.new_clients]).all()


def test_new_clients_with_workers_equal_in_process(make_config, tmp_path, monkeypatch):
    saved = torch.get_num_threads()
    torch.set_num_threads(1)  # as in each worker: the same kernels, the same last digits
    try:
        _compare_in_process_and_workers(make_config, tmp_path)
    finally:
        torch.set_num_threads(saved)


def _compare_in_process_and_workers(make_config, tmp_path):
    here = run(make_config(method="fedper", num_clients=6, new_clients=0.5, rounds=2))
    pooled = run(make_config(method="fedper", num_clients=6, new_clients=0.5, rounds=2, workers=2,
                             output_dir=str(tmp_path / "pooled")))
    assert strip(here.history) == strip(pooled.history)
    assert here.summary["new_acc_mean"] == pooled.summary["new_acc_mean"]


def test_ccvr_collects_statistics_from_training_clients_only(make_config):
    config = make_config(method="ccvr", num_clients=6, new_clients=0.5, rounds=2)
    sim = Simulation(config, build_data(config))
    seen = []
    original = sim.executor.run
    sim.executor.run = lambda jobs: (seen.extend((j.kind, j.client_id) for j in jobs), original(jobs))[1]
    for r in range(2):
        sim.run_round(r)
    collected = {cid for kind, cid in seen if kind == "collect"}
    assert collected and not collected & set(sim.new_clients.tolist())


# ---------------------------------------------------------------------- config
@pytest.mark.parametrize("changes, field", [
    ({"sampling": "poisson"}, "sampling"),
    ({"new_clients": 1.0}, "new_clients"),
    ({"new_clients": -0.1}, "new_clients"),
    ({"new_clients": 0.01}, "new_clients"),  # 0.01 of 4 clients holds out nobody
])
def test_bad_sampling_or_new_clients_get_one_sentence(make_config, changes, field):
    with pytest.raises(ConfigError, match=f"'{field}'") as info:
        make_config(**changes)
    assert str(info.value).count(".") <= 3 and "\n" not in str(info.value)


def test_the_defaults_keep_the_fingerprint_of_runs_from_before_these_fields(make_config):
    config = make_config()
    # the fingerprints these configs had before sampling and new_clients existed (their results stay found)
    assert config.fingerprint() == "4a8179e5b9"
    assert make_config(method="fedper", participation=0.5).fingerprint() == "74e4b7d3da"
    assert make_config(sampling="bernoulli").fingerprint() != config.fingerprint()
    assert make_config(new_clients=0.5).fingerprint() != config.fingerprint()


def test_new_clients_rescored_clean_equal_the_runs_own_and_a_corruption_changes_their_data(make_config):
    from pflcore.engine.revisit import new_client_accuracy

    result = run(make_config(method="pfedfda", num_clients=6, new_clients=0.5, rounds=2))
    stored = np.load(result.path / "clients.npz")["new_final"]
    clean = new_client_accuracy(result)
    np.testing.assert_array_equal(np.isnan(clean), np.isnan(stored))
    np.testing.assert_allclose(clean[~np.isnan(clean)], stored[~np.isnan(stored)])
    corrupted = [new_client_accuracy(result, name, severity=5) for name in ("gaussian_noise", "contrast", "fog")]
    assert all(np.isnan(acc).sum() == 3 for acc in corrupted)
    assert any(not np.array_equal(acc[~np.isnan(acc)], clean[~np.isnan(clean)]) for acc in corrupted)
    # the corruption reaches the new clients' train and test images, and only theirs
    from pflcore.engine.revisit import _corrupt_clients, final_simulation

    sim = final_simulation(result)
    before = [(x.clone(), t.clone()) for (x, _), (t, _) in zip(sim.worker.train_data, sim.worker.test_data)]
    _corrupt_clients(sim, sim.new_clients.tolist(), "gaussian_noise", 5)
    for cid, (x, t) in enumerate(before):
        changed = not torch.equal(sim.worker.train_data[cid][0], x) and not torch.equal(sim.worker.test_data[cid][0], t)
        assert changed == (cid in sim.new_clients), cid
    with pytest.raises(ValueError, match="held out no new clients"):
        new_client_accuracy(run(make_config(method="fedavg", rounds=1)))
