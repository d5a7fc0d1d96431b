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
import warnings
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F

from ..streams import CORRUPTION_KEY, SHIFT_KEY
from ..training import derive_seed
from .corruptions import CORRUPTIONS, SEVERITIES, cached_corrupt, data_digest
from ..errors import shorten
from ..spec import Field, Refusal, first_refusal, unknown_name

ClientTransform = Callable[[int, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


class ShiftError(ValueError):
    """A shift description is not valid; the message is one sentence. ``refusal``
    (:class:`~pflcore.spec.Refusal`) is set when a parameter's field refused its value."""

    def __init__(self, message: str, refusal: Refusal | None = None):
        super().__init__(message)
        self.refusal = refusal


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
    spec = check_shift({**spec, "kind": "corruption"})
    names = [c for c in CORRUPTIONS if c in spec["corruptions"]]
    corrupted = min(num_clients, math.ceil(round(spec["fraction"] * num_clients, 9)))
    forced = spec["severity"]
    upstream = spec["assignment"] == "upstream"
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


#: The most groups a shift may have: one client each at most (pflcore.config.MAX_CLIENTS).
MAX_GROUPS = 100_000
_GROUPS = Field(5, low=1, high=MAX_GROUPS, why="a group is a set of clients, and a run has at most that many",
                doc="groups of clients: client i is in group i % groups")

#: Each shift's parameters (:class:`~pflcore.spec.Field`: default, type, range, choices, doc).
PARAMETERS: dict[str, dict[str, Field]] = {
    "label_permutation": {"groups": _GROUPS},
    "rotation": {
        "groups": _GROUPS,
        "angles": Field(None, type=list, items=Field(type=float),
                        doc="each group's angle in degrees, one per group (null: 360 g / groups)"),
    },
    "corruption": {
        "fraction": Field(0.5, low=0, high=1, doc="the share of clients, from the first, that are corrupted"),
        "assignment": Field("unique", choices=ASSIGNMENTS,
                            doc="'unique': the paper's distinct (corruption, severity) pairs; 'upstream': the "
                                "authors' code, severity i % 5 + 1"),
        "severity": Field(None, type=int, low=min(SEVERITIES), high=max(SEVERITIES),
                          doc="every corrupted client at this severity (null: as the assignment says)"),
        "corruptions": Field(CORRUPTIONS, type=list, items=Field(type=str, choices=CORRUPTIONS), min_length=1,
                             distinct=True, doc="the corruptions used, kept in the default's order"),
    },
}
#: The shift kinds, each with one line for the documentation.
SHIFTS = {"label_permutation": "concept shift: each group of clients relabels its classes by its own permutation "
                               "(FedPAC section 6.2)",
          "rotation": "feature skew: each group's images are rotated by its own angle (FedPAC appendix C.10)",
          "corruption": "covariate shift: the first clients' images carry a common corruption (pFedFDA section 5)"}


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


def check_shift(spec: Any) -> dict[str, Any]:
    """Raise ShiftError (one sentence) unless ``spec`` describes a known shift; return its
    parameters with the defaults filled in. Each value is checked by its field, then the one
    rule between parameters: a rotation's angles, one per group."""
    if not isinstance(spec, dict) or not isinstance(spec.get("kind"), str) or spec["kind"] not in SHIFTS:
        raise ShiftError(f"shift {shorten(spec)} is not allowed: use a mapping with 'kind' one of {sorted(SHIFTS)}.")
    kind, fields = spec["kind"], PARAMETERS[spec["kind"]]
    params = {k: v for k, v in spec.items() if k != "kind"}
    unknown = next((k for k in params if k not in fields), None)
    if unknown is not None:
        raise ShiftError(unknown_name(f"shift {kind!r}", unknown, fields))
    refusal = first_refusal(fields, params)
    if refusal is not None:
        raise ShiftError(refusal.sentence("shift parameter", f" for shift {kind!r}"), refusal)
    bound = {name: params.get(name, field.default) for name, field in fields.items()}
    if kind == "rotation" and bound["angles"] is not None and len(bound["angles"]) != bound["groups"]:
        refusal = Refusal("angles", bound["angles"], f"give one angle in degrees per group ({bound['groups']})")
        raise ShiftError(refusal.sentence("shift parameter", f" for shift {kind!r}"), refusal)
    return bound
