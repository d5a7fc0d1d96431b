"""pflcore.analysis.statistics: the exact McNemar test and two runs paired on their test samples."""
from __future__ import annotations

import pytest

from pflcore.analysis.statistics import mcnemar_exact, paired_comparison
from pflcore.engine import run
from pflcore.engine.revisit import final_simulation


@pytest.mark.parametrize("only_a, only_b, expected", [(0, 0, 1.0), (3, 3, 1.0), (0, 5, 2 / 32), (5, 0, 2 / 32),
                                                      (1, 9, 2 * (1 + 10) / 1024), (44, 20, None)])
def test_mcnemar_exact_is_the_two_sided_binomial_tail(only_a, only_b, expected):
    from math import comb

    n = only_a + only_b
    if expected is None:  # by definition, for a split too long to check by hand
        expected = 2 * sum(comb(n, k) for k in range(min(only_a, only_b) + 1)) / 2 ** n
    assert mcnemar_exact(only_a, only_b) == pytest.approx(expected, rel=1e-12)
    assert mcnemar_exact(only_a, only_b) == mcnemar_exact(only_b, only_a)


def test_paired_comparison_counts_the_samples_only_one_run_gets_right(make_config):
    a = run(make_config(method="fedavg", rounds=2))
    b = run(make_config(method="fedper", rounds=2))
    same = paired_comparison(a, a.path)
    assert (same["only_a"], same["only_b"], same["p_value"]) == (0, 0, 1.0)
    c = paired_comparison(a, b)
    sizes = final_simulation(a).data.test_sizes
    correct_a = int(round(float((a.client_acc / 100 * sizes).sum())))  # client_acc in percent
    correct_b = int(round(float((b.client_acc / 100 * sizes).sum())))
    assert c["samples"] == int(sizes.sum())
    assert c["only_a"] - c["only_b"] == correct_a - correct_b  # the concordant samples cancel
    assert c["acc_a"] == pytest.approx(a.summary["acc_weighted"]) and c["acc_b"] == pytest.approx(b.summary["acc_weighted"])
    assert c["only_a"] + c["only_b"] > 0  # a global and a personal head disagree somewhere


def test_paired_comparison_refuses_runs_scored_on_different_samples(make_config):
    a = run(make_config(method="fedavg", rounds=2))
    b = run(make_config(method="fedavg", rounds=2, num_clients=3))
    with pytest.raises(ValueError, match="not scored on the same test samples"):
        paired_comparison(a, b)
