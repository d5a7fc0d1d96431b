"""FedFomo's defining behaviour on the tiny federation (pflcore/algorithms/fedfomo.py)."""
from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from pflcore.algorithms.base import EVALUATE, TRAIN
from pflcore.algorithms.fedfomo import validation_split
from pflcore.engine import Simulation, build_data, run
from pflcore.training import TRAIN_KEY

from conftest import advance, noisy
from conftest import states_equal as equal


# ---------------------------------------------------------------------- FedFomo
@pytest.fixture
def fomo(make_config):
    """A FedFomo federation after one round (every client has trained and uploaded)."""
    cfg = make_config(method="fedfomo", local_epochs=2)
    return advance(Simulation(cfg, build_data(cfg)), 1)


def combination_only(sim: Simulation, cid: int):
    """Client ``cid`` with no local epochs: its update shows the combined theta_i."""
    client = sim.client(cid, 1, TRAIN_KEY)
    client.settings = dataclasses.replace(client.settings, epochs=0)
    return client


def test_fedfomo_keeps_theta_i_when_every_candidate_is_worse(fomo):
    own = fomo.state["models"][0]
    payload = {**fomo.algorithm.payload(fomo.state, 0, TRAIN),
               "candidates": {1: noisy(own, 3.0, 1), 2: noisy(own, 3.0, 2)}}
    update = fomo.algorithm.local_update(payload, combination_only(fomo, 0))
    assert equal(update["model"], own)
    assert update["ids"] == [1, 2] and torch.equal(update["weights"], torch.zeros(2, dtype=torch.float64))


def test_fedfomo_takes_the_one_better_candidate_exactly(fomo):
    trained = fomo.state["models"][0]
    payload = {**fomo.algorithm.payload(fomo.state, 0, TRAIN), "model": fomo.state["initial"],
               "candidates": {1: noisy(trained, 3.0, 1), 3: trained}}
    update = fomo.algorithm.local_update(payload, combination_only(fomo, 0))
    assert equal(update["model"], trained)
    assert update["weights"].tolist() == [0.0, 1.0]


def test_fedfomo_evaluation_payload_carries_only_the_personal_model(fomo):
    evaluate = fomo.algorithm.payload(fomo.state, 2, EVALUATE)
    assert list(evaluate) == ["model"] and equal(evaluate["model"], fomo.state["models"][2])
    train = fomo.algorithm.payload(fomo.state, 2, TRAIN)
    assert sorted(train["candidates"]) == [0, 1, 3]  # M = 5 > the 3 others: all of them, never itself


def test_fedfomo_adds_the_weights_to_the_affinity_matrix(fomo):
    fomo.state["models"][0] = noisy(fomo.state["models"][0], 3.0, 0)  # client 0 gains from any other model
    before = fomo.state["P"].clone()
    updates = {cid: fomo.algorithm.local_update(fomo.algorithm.payload(fomo.state, cid, TRAIN),
                                                fomo.client(cid, 1, TRAIN_KEY)) for cid in range(4)}
    state = fomo.algorithm.aggregate(fomo.state, updates, fomo.server_context(1))
    expected = before.clone()
    for cid, update in updates.items():
        assert cid not in update["ids"]
        assert math.isclose(float(update["weights"].sum()), 1.0) or float(update["weights"].sum()) == 0
        expected[cid, update["ids"]] += update["weights"]
    assert torch.equal(state["P"], expected)
    assert math.isclose(float(state["P"][0].sum()), 2.0)  # client 0's normalised weights went to the others
    assert state["round"] == 2 and all(equal(state["models"][c], updates[c]["model"]) for c in updates)


def test_fedfomo_first_round_has_no_candidates_and_trains_from_the_initial_model(make_config):
    cfg = make_config(method="fedfomo")
    sim = Simulation(cfg, build_data(cfg))
    payload = sim.algorithm.payload(sim.state, 1, TRAIN)
    assert payload["candidates"] == {} and equal(payload["model"], sim.state["initial"])
    advance(sim, 1)
    assert torch.equal(sim.state["P"], torch.eye(4, dtype=torch.float64))


def test_fedfomo_candidates_follow_the_affinities_and_explore(fomo):
    from pflcore.algorithms.fedfomo import FedFomo

    state = {**fomo.state, "P": fomo.state["P"].clone()}
    state["P"][0] = torch.tensor([1.0, 0.2, 0.9, 0.5], dtype=torch.float64)
    greedy = FedFomo(num_models=2, epsilon=0.0)
    assert greedy.candidates(state, 0) == [2, 3]
    assert greedy.candidates(state, 0) == greedy.candidates(state, 0)  # a pure function of the state
    explorer = FedFomo(num_models=2, epsilon=1.0, epsilon_decay=0.0)
    picks = {tuple(explorer.candidates({**state, "round": r}, 0)) for r in range(30)}
    assert len(picks) > 2 and all(0 not in p and len(set(p)) == 2 for p in picks)
    decayed = FedFomo(num_models=2, epsilon=0.3, epsilon_decay=0.05)
    assert all(decayed.candidates({**state, "round": r}, 0) == [2, 3] for r in range(6, 12))  # epsilon_t = 0


def test_fedfomo_validation_split_is_fixed_and_disjoint(fomo):
    val, train = validation_split(80, 0.2, 123)
    again, _ = validation_split(80, 0.2, 123)
    assert torch.equal(val, again) and len(val) == 16 and len(train) == 64
    assert set(val.tolist()).isdisjoint(train.tolist()) and len(set(val.tolist()) | set(train.tolist())) == 80
    seeds = {fomo.algorithm.payload({**fomo.state, "round": r}, 1, TRAIN)["split_seed"] for r in range(3)}
    assert len(seeds) == 1  # the same split every round


def test_fedfomo_end_to_end_with_the_pfllib_affinity(make_config):
    result = run(make_config(method="fedfomo", rounds=4, local_epochs=2, method_params={"affinity": "raw"}))
    assert result.summary["acc_mean"] > 50
    assert result.arrays("affinity")[4].shape == (4, 4)
