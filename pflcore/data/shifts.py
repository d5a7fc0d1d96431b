"""Per-client feature and concept shifts, applied once when FederatedData is built.

- ``label_permutation``: concept shift, each group of clients relabels its classes with
  its own permutation (FedPAC section 6.2, Table 3).
- ``rotation``: feature skew, each group's images are rotated by its own angle (FedPAC
  appendix C.10, Table 10).

Client ``i`` belongs to group ``i % groups`` (the grouping of FedPAC's dominant-class
partition). Transforms see images scaled to [0, 1] (before normalisation), so a rotation
fills the corners with black. A shift is described by a plain dict (``{"kind": ...,
...}``) so it lives in the experiment config.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F

ClientTransform = Callable[[int, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
SHIFT_KEY = 103


class ShiftError(ValueError):
    """A shift description is not valid; the message is one sentence."""


def label_permutations(num_groups: int, num_classes: int, seed: int) -> np.ndarray:
    """(num_groups, num_classes) array: row g is group g's label permutation, drawn from ``seed``."""
    rng = np.random.default_rng([seed, SHIFT_KEY])
    return np.stack([rng.permutation(num_classes) for _ in range(num_groups)])


def label_permutation(num_classes: int, groups: int = 5, seed: int = 0) -> ClientTransform:
    """Concept shift: client i's label y becomes perm[i % groups][y]."""
    perms = torch.as_tensor(label_permutations(groups, num_classes, seed))

    def transform(cid: int, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x, perms[cid % groups].to(y.device)[y]

    return transform


def rotate(x: torch.Tensor, degrees: float) -> torch.Tensor:
    """Rotate images (n, C, H, W) counter-clockwise about their centre, filling with 0.

    Multiples of 90 degrees are exact (``rot90``); other angles interpolate bilinearly."""
    if degrees % 90 == 0:
        return torch.rot90(x, k=int(degrees // 90) % 4, dims=(2, 3))
    theta = math.radians(degrees)
    c, s = math.cos(theta), math.sin(theta)
    matrix = torch.tensor([[c, s, 0.0], [-s, c, 0.0]], dtype=x.dtype, device=x.device)
    grid = F.affine_grid(matrix.expand(x.shape[0], 2, 3), list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


def rotation(angles: list[float] | None = None, groups: int = 5) -> ClientTransform:
    """Feature skew: client i's images are rotated by ``angles[i % groups]`` degrees
    (default: evenly spaced, 360 * g / groups; the paper does not give its angles)."""
    angles = [360.0 * g / groups for g in range(groups)] if angles is None else list(angles)

    def transform(cid: int, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return rotate(x, angles[cid % groups]), y

    return transform


SHIFTS = {"label_permutation", "rotation"}


def make_shift(spec: dict[str, Any], num_classes: int, seed: int) -> ClientTransform:
    """Build the transform a config's ``shift`` mapping describes."""
    check_shift(spec)
    params = {k: v for k, v in spec.items() if k != "kind"}
    if spec["kind"] == "label_permutation":
        return label_permutation(num_classes, seed=seed, **params)
    return rotation(**params)


def check_shift(spec: Any) -> None:
    """Raise ShiftError (one sentence) unless ``spec`` describes a known shift."""
    if not isinstance(spec, dict) or spec.get("kind") not in SHIFTS:
        raise ShiftError(f"shift {spec!r} is not allowed: use a mapping with 'kind' one of {sorted(SHIFTS)}.")
    allowed = {"label_permutation": {"groups"}, "rotation": {"groups", "angles"}}[spec["kind"]]
    extra = set(spec) - allowed - {"kind"}
    if extra:
        raise ShiftError(f"shift {spec['kind']!r} has no parameter {sorted(extra)[0]!r}; "
                         f"its parameters are {sorted(allowed)}.")
    groups = spec.get("groups", 5)
    if not isinstance(groups, int) or isinstance(groups, bool) or groups < 1:
        raise ShiftError(f"shift parameter 'groups' = {groups!r} is not allowed: it must be an integer >= 1.")
    angles = spec.get("angles")
    if angles is not None and (not isinstance(angles, (list, tuple)) or len(angles) != groups
                               or not all(isinstance(a, (int, float)) for a in angles)):
        raise ShiftError(f"shift parameter 'angles' = {angles!r} is not allowed: give one angle in degrees "
                         f"per group ({groups}).")
