"""FedProx (Li et al., MLSys 2020): FedAvg whose local objective adds the proximal term
(mu/2) * ||w - w_global||^2. With mu = 0 it is FedAvg exactly."""
from __future__ import annotations

from ..training import cross_entropy
from .base import Param
from .fedavg import FedAvg


class FedProx(FedAvg):
    name = "fedprox"
    paper = "Li et al., MLSys 2020"
    hyperparams = {"mu": Param(0.01, low=0, doc="weight of the proximal term mu/2 ||w - w_global||^2")}

    def loss_fn(self, payload: dict):
        if self.mu == 0:
            return cross_entropy
        anchor = payload["model"]
        mu = self.mu

        def proximal(model, x, y):
            prox = sum(((p - anchor[k]) ** 2).sum() for k, p in model.named_parameters() if p.requires_grad)
            return cross_entropy(model, x, y) + 0.5 * mu * prox

        return proximal
