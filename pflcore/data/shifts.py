"""Per-client feature and concept shifts, applied once when FederatedData is built.

- ``label_permutation``: concept shift, each group of clients relabels its classes with
  its own permutation (FedPAC section 6.2, Table 3).
- ``rotation``: feature skew, each group's images are rotated by its own angle (FedPAC
  appendix C.10, Table 10).
- ``corruption``: covariate shift of pFedFDA's "-S" datasets (pFedFDA section 5 and
  appendix C.1.1): the first clients' images carry a common corruption at a severity
  (:mod:`pflcore.data.corruptions`), the rest are clean; see :func:`corruption_assignment`.

For the first two, client ``i`` belongs to group ``i % groups`` (the grouping of FedPAC's
dominant-class partition). Transforms see images scaled to [0, 1] (before
normalisation), so a rotation fills the corners with black. A shift is described by a
plain dict (``{"kind": ..., ...}``) so it lives in the experiment config.
"""
from __future__ import annotations

import math
import numbers
import warnings
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F

from ..streams import CORRUPTION_KEY, SHIFT_KEY
from ..training import derive_seed
from .corruptions import CORRUPTIONS, SEVERITIES, cached_corrupt, data_digest
from ..errors import shorten

ClientTransform = Callable[[int, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


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


ASSIGNMENTS = ("unique", "upstream")


def corruption_assignment(num_clients: int, spec: dict[str, Any]) -> list[tuple[str, int] | None]:
    """Each client's (corruption, severity), None for a clean one (pFedFDA appendix C.1.1).

    The first ceil(fraction * N) clients (``fraction``, default 0.5) are corrupted. Client
    i gets corruption ``names[i % K]`` (``names``: ``corruptions``, default all ten, kept in
    :data:`~pflcore.data.corruptions.CORRUPTIONS`'s order; K of them) at severity
    ``i // K + 1`` under ``assignment: unique`` (the paper's unique pairs, the default),
    clipped to 5 past 5K corrupted clients (then pairs repeat, with a warning), or
    ``i % 5 + 1`` under ``assignment: upstream`` (the authors' code: with K = 10 only 10
    distinct pairs). ``severity: k`` gives every corrupted client severity k."""
    check_shift({**spec, "kind": "corruption"})
    names = [c for c in CORRUPTIONS if c in spec.get("corruptions", CORRUPTIONS)]
    corrupted = min(num_clients, math.ceil(round(spec.get("fraction", 0.5) * num_clients, 9)))
    forced = spec.get("severity")
    upstream = spec.get("assignment", "unique") == "upstream"
    if forced is None and not upstream and corrupted > 5 * len(names):
        warnings.warn(f"{corrupted} corrupted clients but only {5 * len(names)} unique (corruption, severity) "
                      "pairs: the severities of the later clients are clipped to 5 and pairs repeat.",
                      stacklevel=2)
    pairs: list[tuple[str, int] | None] = []
    for i in range(num_clients):
        if i >= corrupted:
            pairs.append(None)
            continue
        level = forced or (i % 5 + 1 if upstream else min(i // len(names) + 1, 5))
        pairs.append((names[i % len(names)], level))
    return pairs


def corrupt_client(x: torch.Tensor, cid: int, name: str, severity: int, seed: int = 0) -> torch.Tensor:
    """Client ``cid``'s images (in [0, 1]) under corruption ``name`` at ``severity``, through
    the disk cache of :func:`~pflcore.data.corruptions.cached_corrupt`; the random draws are
    seeded by (run ``seed``, client, the images' digest)."""
    if not x.is_floating_point() or x.dim() != 4:
        raise ShiftError("the corruption shift changes images, and these inputs are not images "
                         f"(dtype {x.dtype}, shape {tuple(x.shape)}).")
    digest = data_digest(x)
    client_seed = derive_seed(seed, CORRUPTION_KEY, cid, int(digest[:15], 16))
    return cached_corrupt(x, name, severity, client_seed, digest=digest)


def corruption(num_clients: int, seed: int = 0, **spec: Any) -> ClientTransform:
    """Covariate shift (pFedFDA's CIFAR-S): client i's images are corrupted as
    :func:`corruption_assignment` says, train and test alike, through the disk cache of
    :func:`~pflcore.data.corruptions.cached_corrupt`. The random draws are seeded by (run
    seed, client, the images' digest): the same inputs give the same output, and a
    client's train and test images get independent noise."""
    pairs = corruption_assignment(num_clients, spec)

    def transform(cid: int, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        pair = pairs[cid] if cid < len(pairs) else None
        if pair is None:
            return x, y
        return corrupt_client(x, cid, pair[0], pair[1], seed), y

    return transform


SHIFTS = {"label_permutation", "rotation", "corruption"}
PARAMETERS = {"label_permutation": {"groups"}, "rotation": {"groups", "angles"},
              "corruption": {"fraction", "assignment", "severity", "corruptions"}}


def make_shift(spec: dict[str, Any], num_classes: int, seed: int, num_clients: int | None = None) -> ClientTransform:
    """Build the transform a config's ``shift`` mapping describes (``corruption`` needs
    ``num_clients``: which clients are corrupted depends on it)."""
    check_shift(spec)
    params = {k: v for k, v in spec.items() if k != "kind"}
    if spec["kind"] == "label_permutation":
        return label_permutation(num_classes, seed=seed, **params)
    if spec["kind"] == "corruption":
        if num_clients is None:
            raise ShiftError("the corruption shift needs the number of clients (make_shift(..., num_clients=N)).")
        return corruption(num_clients, seed=seed, **params)
    return rotation(**params)


#: The most groups a shift may have: one client each at most (pflcore.config.MAX_CLIENTS).
MAX_GROUPS = 100_000


def check_shift(spec: Any) -> None:
    """Raise ShiftError (one sentence) unless ``spec`` describes a known shift."""
    if not isinstance(spec, dict) or not isinstance(spec.get("kind"), str) or spec["kind"] not in SHIFTS:
        raise ShiftError(f"shift {shorten(spec)} is not allowed: use a mapping with 'kind' one of {sorted(SHIFTS)}.")
    allowed = PARAMETERS[spec["kind"]]
    extra = set(spec) - allowed - {"kind"}
    if extra:
        raise ShiftError(f"shift {shorten(spec['kind'])} has no parameter {shorten(sorted(extra)[0])}; "
                         f"its parameters are {sorted(allowed)}.")
    if spec["kind"] == "corruption":
        _check_corruption(spec)
        return
    groups = spec.get("groups", 5)
    if not isinstance(groups, int) or isinstance(groups, bool) or not 1 <= groups <= MAX_GROUPS:
        raise ShiftError(f"shift parameter 'groups' = {shorten(groups)} is not allowed: it must be an integer in "
                         f"[1, {MAX_GROUPS}] (a group is a set of clients, and a run has at most that many).")
    angles = spec.get("angles")
    if angles is not None and (not isinstance(angles, (list, tuple)) or len(angles) != groups
                               or not all(isinstance(a, (int, float)) for a in angles)):
        raise ShiftError(f"shift parameter 'angles' = {shorten(angles)} is not allowed: give one angle in degrees "
                         f"per group ({groups}).")


def _check_corruption(spec: dict[str, Any]) -> None:
    fraction = spec.get("fraction", 0.5)
    if isinstance(fraction, bool) or not isinstance(fraction, numbers.Real) or not 0 <= fraction <= 1:
        raise ShiftError(f"shift parameter 'fraction' = {shorten(fraction)} is not allowed: it must be a number in [0, 1] "
                         "(the share of clients, from the first, that are corrupted).")
    assignment = spec.get("assignment", "unique")
    if assignment not in ASSIGNMENTS:
        raise ShiftError(f"shift parameter 'assignment' = {shorten(assignment)} is not allowed: use one of "
                         f"{list(ASSIGNMENTS)}.")
    severity = spec.get("severity")
    if severity is not None and (isinstance(severity, bool) or not isinstance(severity, numbers.Integral)
                                 or severity not in SEVERITIES):
        raise ShiftError(f"shift parameter 'severity' = {shorten(severity)} is not allowed: it must be an integer 1..5.")
    names = spec.get("corruptions", CORRUPTIONS)
    if not isinstance(names, (list, tuple)) or not names or len(set(map(str, names))) != len(names):
        raise ShiftError(f"shift parameter 'corruptions' = {shorten(names)} is not allowed: give a list of distinct "
                         f"corruption names from {list(CORRUPTIONS)}.")
    unknown = [n for n in names if n not in CORRUPTIONS]
    if unknown:
        raise ShiftError(f"shift parameter 'corruptions' names an unknown corruption {shorten(unknown[0])}: use names from "
                         f"{list(CORRUPTIONS)}.")
