"""Loss terms shared by several methods."""
from __future__ import annotations

import functools
from typing import Sequence

import torch

#: The RBF bandwidths a of FedCP's feature-alignment MMD (section 3.2.3), also used by FedPHP.
MMD_BANDWIDTHS: tuple[float, ...] = (10.0, 15.0, 20.0, 50.0)


def rbf_mmd(x: torch.Tensor, y: torch.Tensor, bandwidths: Sequence[float] = MMD_BANDWIDTHS) -> torch.Tensor:
    """Squared maximum mean discrepancy between two batches of features (FedCP, section 3.2.3,
    eq. 7): the biased estimator mean(K_xx) + mean(K_yy) - 2 mean(K_xy), diagonals included,
    with K the sum over a of exp(-||u - v||^2 / (2a)). Zero for identical batches.

    Computed in few operations, since it runs at every training step: one Gram matrix of
    the stacked batches, every bandwidth's kernel in one exp, and the three means as one
    weighted sum (weights 1/n^2 on the xx block, 1/m^2 on yy, -1/(nm) on xy and yx)."""
    n, m = x.shape[0], y.shape[0]
    z = torch.cat([x, y]).float()
    sq = (z * z).sum(1)
    dist = (sq[:, None] + sq[None, :] - 2.0 * (z @ z.t())).clamp_min(0.0)
    kernel = torch.exp(dist * _coefficients(tuple(bandwidths), z.device)).sum(0)
    return (kernel * _block_weights(n, m, z.device)).sum()


@functools.lru_cache(maxsize=16)
def _coefficients(bandwidths: tuple[float, ...], device: torch.device) -> torch.Tensor:
    """-1 / (2a) for each bandwidth a, shaped (k, 1, 1) to broadcast over a distance matrix
    (a normal tensor even if first asked for under inference mode: autograd may save it)."""
    with torch.inference_mode(False):
        return torch.tensor([-0.5 / a for a in bandwidths], device=device).view(-1, 1, 1)


@functools.lru_cache(maxsize=64)
def _block_weights(n: int, m: int, device: torch.device) -> torch.Tensor:
    """The (n + m) x (n + m) weights turning a stacked kernel matrix into the MMD estimate."""
    with torch.inference_mode(False):
        w = torch.empty(n + m, n + m, device=device)
        w[:n, :n] = 1.0 / (n * n)
        w[n:, n:] = 1.0 / (m * m)
        w[:n, n:] = w[n:, :n] = -1.0 / (n * m)
        return w
