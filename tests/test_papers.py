"""The paper modules' settings and helpers that the notebooks call (issue 31): each config
function builds, from the notebook's scale parameters, the config the notebook built itself
before (finished runs and committed records are keyed by the config's fingerprint), and each
helper computes what the notebook computed. No training here."""
from __future__ import annotations

import numpy as np
import pytest

from pflcore.engine import RunResult
from pflcore.papers.fedcp import fedcp_config, fedcp_sweep_config
from pflcore.papers.fedfa import (FEDFA_PARTITIONS, domain_accuracy, fedfa_config, fedfa_feature_skew_config,
                                  feature_skew_score, mean_reached, momentum_label, rounds_to_target)
from pflcore.papers.pfedfda import parse_setting, pfedfda_config, pfedfda_setting_config, round_seconds

SCALE = dict(num_clients=10, participation=0.5, rounds=3, local_epochs=1, eval_every=1, output_dir="results/x")


@pytest.mark.parametrize("setting", sorted(FEDFA_PARTITIONS))
def test_fedfa_subsample_builds_the_partition_the_notebooks_built(setting):
    partition = {**FEDFA_PARTITIONS[setting], "subsample": 0.02}  # the block five notebooks repeated
    before = fedfa_config("fedfa", "fmnist", setting, seed=2021, partition=partition, **SCALE)
    assert fedfa_config("fedfa", "fmnist", setting, seed=2021, subsample=0.02, **SCALE) == before
    assert fedfa_config("fedfa", "fmnist", setting, subsample=1.0).partition == FEDFA_PARTITIONS[setting]


def test_feature_skew_config_rotates_a_stand_in_and_splits_mixed_digits(tmp_path):
    stand_in = fedfa_feature_skew_config("fedavg", "fmnist", "c2", clients_per_domain=2, subsample=0.5)
    assert stand_in.num_clients == 10 and stand_in.shift == {"kind": "rotation", "groups": 5}
    assert stand_in.partition == {"kind": "fedfa_shards", "subsample": 0.5}
    assert fedfa_feature_skew_config("fedavg", "fmnist", "iid", clients_per_domain=2).shift is None
    digits = fedfa_feature_skew_config("fedavg", "digit5", "dir0.5", clients_per_domain=4, data_root=str(tmp_path))
    assert digits.num_clients == 20 and digits.model == "fedfa_cnn" and digits.data_root == str(tmp_path)
    assert digits.partition == {"kind": "domains", "clients_per_domain": 4, "alpha": 0.5}


def _result(config, client_acc, test_sizes, history=()):
    n = len(client_acc)
    return RunResult(config, {"acc_weighted": 50.0}, list(history), np.asarray(client_acc, dtype=float),
                     np.array([1]), np.zeros((1, n)), clients={"test_sizes": np.asarray(test_sizes)})


def test_domain_accuracy_weights_each_domains_clients_by_their_test_sizes():
    config = fedfa_feature_skew_config("fedavg", "fmnist", "feature", clients_per_domain=2)
    acc = [10.0, 20, 30, 40, 50, 90, 80, 70, 60, np.nan]  # percent; stand-in domains: client % 5
    sizes = [1, 1, 1, 1, 1, 3, 1, 1, 1, 5]
    per_domain = domain_accuracy(_result(config, acc, sizes), "feature", 2)
    np.testing.assert_allclose(per_domain, [(10 + 3 * 90) / 4, 50, 50, 50, 50])  # client 9's NaN is left out
    assert feature_skew_score(_result(config, acc, sizes), "feature", 2) == pytest.approx(per_domain.mean())
    assert feature_skew_score(_result(config, acc, sizes), "iid", 2) == 50.0  # no skew: acc_weighted
    digits = fedfa_feature_skew_config("fedavg", "digit5", "feature", clients_per_domain=2)
    np.testing.assert_allclose(domain_accuracy(_result(digits, acc, sizes), "feature", 2)[:2], [15, 35])


def test_rounds_to_target_and_labels():
    config = fedfa_config("fedavg", "fmnist", "c2")
    history = [{"round": r, "acc_weighted": v} for r, v in ((1, 40.0), (2, 61.0), (3, 70.0))]
    result = _result(config, [50.0], [1], history)
    assert rounds_to_target(result, 60.0) == (2, 61.0)
    assert all(np.isnan(rounds_to_target(result, 80.0)))
    assert mean_reached([(2, 61.0), (np.nan, np.nan), (4, 63.0)], 0) == 3.0
    assert momentum_label(0.5) == "fedfa anchor_momentum=0.5" and momentum_label(0.25) == "fedfa anchor_momentum=0.25"


def test_fedcp_sweeps_build_what_the_notebooks_built():
    common = dict(dataset="cifar10", subsample=0.02, rounds=1, eval_every=1, seed=0, output_dir="results/x")
    pfllib = {"kind": "pfllib_dirichlet", "subsample": 0.02}
    assert fedcp_sweep_config("fedcp", "beta", 0.5, **common) == fedcp_config(
        "fedcp", **common, partition={**pfllib, "alpha": 0.5})
    assert fedcp_sweep_config("fedavg", "clients", 50, **common) == fedcp_config(
        "fedavg", **common, num_clients=50, partition={**pfllib, "alpha": 0.1})
    assert fedcp_sweep_config("fedcp", "local_epochs", 5, **common) == fedcp_config("fedcp", **common, local_epochs=5)
    assert fedcp_sweep_config("fedrep", "dropout", "0.1-1", **common).dropout == [0.1, 1.0]
    with pytest.raises(ValueError, match="sweep must be one of"):
        fedcp_sweep_config("fedcp", "lr", 0.1, **common)


def test_pfedfda_column_labels():
    assert parse_setting("dir0.5 -S 25%") == (0.5, 25.0, True)
    assert parse_setting("dir0.1") == (0.1, 100.0, False)
    assert pfedfda_setting_config("pfedfda", "fmnist", "dir0.5 -S 25%", subsample=0.02, rounds=1) == pfedfda_config(
        "pfedfda", "fmnist", 0.5, corrupted=True, samples=0.02 * 25 / 100, rounds=1)


def test_round_seconds_leaves_out_evaluated_rounds():
    history = [{"round": 1, "seconds": 2.0, "participants": [0, 1]},
               {"round": 2, "seconds": 10.0, "participants": [0, 1], "acc_mean": 50.0},  # an evaluation: 8 s
               {"round": 3, "seconds": 14.0, "participants": [0, 1, 2, 3]}]
    result = _result(pfedfda_config("fedavg"), [50.0], [1], history)
    assert round_seconds(result) == (3.0, 1.0)  # medians of rounds 1 and 3: 2 and 4 s, 2/2 and 4/4 s per client


def test_every_method_and_every_dataset_has_a_display_name():
    from pflcore.algorithms import ALGORITHMS
    from pflcore.data.sources import DATASETS
    from pflcore.papers import display_name

    for name in (*ALGORITHMS, *(d for d in DATASETS if d != "pfllib")):
        assert display_name(name) != name or name.isupper(), name
    assert display_name("fmnist") == "Fashion-MNIST" and display_name("fedavg_ft") == "FedAvg-FT"
