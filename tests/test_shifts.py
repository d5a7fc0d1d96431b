"""Concept shift (label permutation per group) and feature skew (rotation per group)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from pflcore.config import ConfigError
from pflcore.data.shifts import label_permutation, label_permutations, make_shift, rotate, rotation
from pflcore.engine import build_data


def test_label_permutations_are_permutations_fixed_by_seed():
    p = label_permutations(5, 10, seed=1)
    assert p.shape == (5, 10)
    assert all(sorted(row) == list(range(10)) for row in p)
    assert np.array_equal(p, label_permutations(5, 10, seed=1))
    assert not np.array_equal(p, label_permutations(5, 10, seed=2))
    assert len({tuple(r) for r in p}) == 5


def test_label_permutation_relabels_by_group():
    t = label_permutation(10, groups=5, seed=0)
    perms = label_permutations(5, 10, seed=0)
    y = torch.arange(10)
    x = torch.zeros(10, 1, 2, 2)
    for cid in (0, 3, 7):
        x2, y2 = t(cid, x, y)
        assert x2 is x
        assert y2.tolist() == perms[cid % 5].tolist()


def test_rotation_by_right_angles_is_exact():
    x = torch.arange(16.0).view(1, 1, 4, 4)
    assert torch.equal(rotate(x, 90), torch.rot90(x, 1, dims=(2, 3)))
    assert torch.equal(rotate(x, 360), x)
    assert torch.equal(rotate(rotate(x, 270), 90), x)


def test_small_rotation_keeps_the_centre_and_fills_black():
    x = torch.zeros(1, 1, 9, 9)
    x[0, 0, 4, 4] = 1.0
    r = rotate(x, 30)
    assert r[0, 0, 4, 4] == pytest.approx(1.0, abs=1e-5)
    corner = torch.ones(1, 1, 9, 9)
    assert rotate(corner, 45)[0, 0, 0, 0] < 0.5     # corners come from outside: filled with 0


def test_rotation_groups_and_default_angles():
    t = rotation(groups=4)
    x = torch.arange(16.0).view(1, 1, 4, 4)
    y = torch.tensor([3])
    for cid in range(8):
        x2, y2 = t(cid, x, y)
        assert torch.equal(x2, torch.rot90(x, cid % 4, dims=(2, 3))) and torch.equal(y2, y)


def test_shift_through_the_config(make_config):
    plain = build_data(make_config())
    shifted = build_data(make_config(shift={"kind": "label_permutation", "groups": 2}))
    perms = label_permutations(2, 10, seed=7)
    for cid in range(4):
        assert torch.equal(shifted.train[cid].x, plain.train[cid].x)
        assert shifted.train[cid].y.tolist() == perms[cid % 2][plain.train[cid].y.numpy()].tolist()
        assert shifted.test[cid].y.tolist() == perms[cid % 2][plain.test[cid].y.numpy()].tolist()
    rotated = build_data(make_config(shift={"kind": "rotation", "groups": 2, "angles": [0, 90]}))
    assert torch.equal(rotated.train[0].x, plain.train[0].x)
    assert not torch.equal(rotated.train[1].x, plain.train[1].x)


@pytest.mark.parametrize("shift", [{"kind": "blur"}, {"kind": "rotation", "angles": [1, 2]},
                                   {"kind": "label_permutation", "groups": 0}, {"kind": "rotation", "deg": 3}])
def test_bad_shift_is_rejected(make_config, shift):
    with pytest.raises(ConfigError, match="shift"):
        make_config(shift=shift)


def test_make_shift_uses_the_seed():
    a = make_shift({"kind": "label_permutation"}, 10, seed=0)
    b = make_shift({"kind": "label_permutation"}, 10, seed=1)
    y = torch.arange(10)
    x = torch.zeros(10, 1, 1, 1)
    assert not all(torch.equal(a(c, x, y)[1], b(c, x, y)[1]) for c in range(5))
