"""Loss terms shared by several methods."""
from __future__ import annotations

from typing import Sequence

import torch

#: The RBF bandwidths a of FedCP's feature-alignment MMD (section 3.2.3), also used by FedPHP.
MMD_BANDWIDTHS: tuple[float, ...] = (10.0, 15.0, 20.0, 50.0)


def rbf_mmd(x: torch.Tensor, y: torch.Tensor, bandwidths: Sequence[float] = MMD_BANDWIDTHS) -> torch.Tensor:
    """Squared maximum mean discrepancy between two batches of features (FedCP, section 3.2.3,
    eq. 7): the biased estimator mean(K_xx) + mean(K_yy) - 2 mean(K_xy), diagonals included,
    with K the sum over a of exp(-||u - v||^2 / (2a)). Zero for identical batches."""
    n = x.shape[0]
    z = torch.cat([x, y]).float()
    sq = (z * z).sum(1)
    dist = (sq[:, None] + sq[None, :] - 2.0 * (z @ z.t())).clamp_min(0.0)
    kernel = sum(torch.exp(dist * (-0.5 / a)) for a in bandwidths)
    return kernel[:n, :n].mean() + kernel[n:, n:].mean() - 2.0 * kernel[:n, n:].mean()
