"""FedAMP (Huang et al., AAAI 2021): federated attentive message passing; each client gets
its own cloud model u_i, a mixture of all clients' models weighted by their similarity.

Server (the paper's Algorithm 1, message passing step): it keeps every client's latest
model w_j (the initial model until the client first uploads) and, for client i,
    xi_ij = alpha_K A'(||w_i - w_j||^2)  (j != i),   xi_ii = 1 - sum_{j != i} xi_ij,
    u_i   = sum_j xi_ij w_j,
with the attention-inducing function A(x) = 1 - exp(-x / sigma), A'(x) = exp(-x / sigma) / sigma.
The weights are recomputed after every aggregation (over all N stored models, not only
the round's participants) and kept as the N x N matrix ``xi``; xi_ii can turn negative
when alpha_K / sigma is large against 1 / (N - 1): ``report`` gives the smallest xi_ii.

Client (local step): from its own w_i it minimises
    CE(w) + lambda / (2 alpha_K) ||w - u_i||^2
for E epochs with the run's SGD and uploads w, which is also its personal model. The
server holds w_i, so it is sent in the payload and clients keep no state. Distances and
the penalty cover the parameters; u_i mixes every floating-point entry of the state dict
(BatchNorm statistics too), integer buffers are w_i's own.

``penalty = "norm"`` uses lambda / (2 alpha_K) ||w - u_i|| (not squared), the form of PFLlib's
penalty; PFLlib computes it on detached parameters, so there it passes no gradient and each
client trains alone from its own model, which ``lam = 0`` reproduces.
Defaults alpha_K = 1e3, lambda = 1, sigma = 0.1: the FedCP paper gives no FedAMP setting
(section 4) and these are the values of the example scripts for MNIST with 20 clients in PFLlib,
where the FedCP authors ran their baselines.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import torch
from torch import nn

from ..models import SplitModel
from ..training import cross_entropy
from .base import TRAIN, Algorithm, Client, FederationInfo, Param, ServerContext, Tensors, load, snapshot


def squared_distances(models: Sequence[Mapping[str, torch.Tensor]], keys: Sequence[str],
                      chunk: int = 1 << 22) -> torch.Tensor:
    """The N x N matrix ||w_i - w_j||^2 over ``keys``, in float64 from the differences
    themselves (exact zeros for identical models), in column blocks of about ``chunk``
    numbers at a time."""
    n = len(models)
    out = torch.zeros(n, n, dtype=torch.float64, device=models[0][keys[0]].device)
    width = max(1, chunk // max(n, 1))
    for key in keys:
        flat = [m[key].reshape(-1) for m in models]
        for start in range(0, flat[0].numel(), width):
            block = torch.stack([f[start:start + width] for f in flat]).to(torch.float64)
            for i in range(n):
                out[i] += ((block - block[i]) ** 2).sum(1)
    return out


def attention_weights(distances: torch.Tensor, alpha_k: float, sigma: float) -> torch.Tensor:
    """xi (rows sum to 1): xi_ij = alpha_K exp(-d_ij / sigma) / sigma off the diagonal,
    xi_ii = 1 - sum_{j != i} xi_ij."""
    xi = alpha_k * torch.exp(-distances / sigma) / sigma
    xi.fill_diagonal_(0.0)
    xi += torch.diag(1.0 - xi.sum(1))
    return xi


def combine(models: Sequence[Mapping[str, torch.Tensor]], weights: torch.Tensor, own: int) -> Tensors:
    """u = sum_j weights[j] models[j] for floating-point entries (in float64); integer
    entries are models[own]'s."""
    out = {}
    for key, ref in models[own].items():
        if not ref.is_floating_point():
            out[key] = ref.clone()
            continue
        acc = torch.zeros(ref.shape, dtype=torch.float64, device=ref.device)
        for w, m in zip(weights.tolist(), models):
            if w:
                acc.add_(m[key].to(torch.float64), alpha=w)
        out[key] = acc.to(ref.dtype)
    return out


class FedAMP(Algorithm):
    name = "fedamp"
    paper = "Huang et al., AAAI 2021"
    hyperparams = {
        "alpha_k": Param(1e3, low=0, low_open=True,
                         doc="alpha_K, the message-passing step (the weights' scale; the penalty is 1/alpha_K)"),
        "lam": Param(1.0, low=0, doc="lambda, the penalty weight: lambda / (2 alpha_K) ||w - u_i||^2"),
        "sigma": Param(0.1, low=0, low_open=True, doc="sigma, the scale of A(x) = 1 - exp(-x / sigma)"),
        "penalty": Param("squared", choices=("squared", "norm"),
                         doc="'squared' (the paper) or 'norm' (PFLlib: ||w - u_i|| not squared)"),
    }

    def init(self, model: SplitModel, info: FederationInfo) -> dict:
        start = snapshot(model)
        state = {"models": {cid: {k: v.clone() for k, v in start.items()} for cid in range(info.num_clients)}}
        return self._with_weights(state, model)

    def _with_weights(self, state: dict, model: nn.Module) -> dict:
        """The state with ``xi`` recomputed from the stored models (distances over ``model``'s parameters)."""
        models = [state["models"][c] for c in sorted(state["models"])]
        keys = [name for name, _ in model.named_parameters()]
        xi = attention_weights(squared_distances(models, keys), float(self.alpha_k), float(self.sigma))
        return {**state, "xi": xi}

    def payload(self, state: dict, client_id: int, purpose: str = TRAIN) -> dict:
        own = state["models"][client_id]
        if purpose != TRAIN:
            return {"model": own}
        ids = sorted(state["models"])
        cloud = combine([state["models"][c] for c in ids], state["xi"][ids.index(client_id)], ids.index(client_id))
        return {"model": own, "cloud": cloud}

    def local_update(self, payload: dict, client: Client) -> dict:
        model = load(client.model, payload["model"])
        cloud = [payload["cloud"][name] for name, _ in model.named_parameters()]
        loss = client.train(model.parameters(), loss_fn=self._pulled_towards(cloud))
        return {"model": snapshot(model), "num_samples": client.num_samples, "loss": loss}

    def _pulled_towards(self, cloud: list[torch.Tensor]):
        """CE + lambda / (2 alpha_K) ||w - u_i||^2 (or the plain norm with ``penalty = "norm"``)."""
        coef = float(self.lam) / (2.0 * float(self.alpha_k))
        squared = self.penalty == "squared"

        def loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            value = cross_entropy(model, x, y)
            if coef:
                sq = sum(((p - u) ** 2).sum() for p, u in zip(model.parameters(), cloud))
                value = value + coef * (sq if squared else torch.sqrt(sq + 1e-30))  # zero gradient at w = u_i
            return value

        return loss

    def aggregate(self, state: dict, updates: Mapping[int, dict], ctx: ServerContext) -> dict:
        models = dict(state["models"])
        for cid, update in updates.items():
            models[cid] = update["model"]
        return self._with_weights({**state, "models": models}, ctx.model)

    def predictor(self, payload: dict, client: Client) -> nn.Module:
        return load(client.model, payload["model"])

    def report(self, state: dict) -> dict:
        xi = state["xi"]
        return {"xi_self_min": float(xi.diagonal().min())} if xi.numel() else {}


__all__ = ["FedAMP", "attention_weights", "combine", "squared_distances"]
