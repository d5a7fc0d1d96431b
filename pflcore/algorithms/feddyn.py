"""FedDyn (Acar, Zhao, Matas, Mattina, Whatmough, Saligrama, ICLR 2021, Algorithm 1):
federated learning with dynamic regularisation.

Client k in round t, from the received server model theta^{t-1}, minimises

    l_k(theta) - <g_k, theta> + alpha/2 ||theta - theta^{t-1}||^2

with the run's mini-batch SGD (E epochs): each step follows
grad l_k(theta) - g_k + alpha (theta - theta^{t-1}), clipped to norm ``max_grad_norm``
(the authors' code clips at 10; 0 disables), then the run's weight decay and momentum.
Afterwards g_k <- g_k - alpha (theta_k - theta^{t-1}) is kept in the client's state (zero
before its first participation; the paper's first-order condition grad l_k(theta_k) =
g_k after the update). Server, with S the participants and N all clients:

    h <- h - (alpha/N) sum_S (theta_k - theta^{t-1}),    theta^t = mean_S theta_k - h/alpha

(h starts at zero; it covers the trainable parameters; buffers such as BatchNorm
statistics are the plain mean of the participants'). theta^t is both what clients receive
and the global model every client predicts with. The reported loss is the mean
cross-entropy of the local steps (the linear term alone can be any sign).

Defaults and deviations from public code:
- alpha = 0.1 (FedFA's setting; its appendix also writes it as mu/2 = 0.05).
- ``max_grad_norm = 10``, as the authors' code (``utils_general.py``, max_norm = 10) and
  FedFA's FedDyn both clip; it guards against the linear term -g_k growing large, and
  on small models the cross-entropy gradient rarely reaches it. Here the whole step
  direction above is clipped; the authors put the alpha * theta part into the
  optimiser's weight decay, which torch applies after clipping.
- ``alpha_scaling = "samples"`` uses alpha_k = alpha * mean_j n_j / n_k on client k (in
  its objective and its g_k update) as the authors' code does (``alpha_coef /
  weight_list[clnt]``) and FedFA's copy of it; the default ``"none"`` is the paper's
  single alpha. With equal-size clients the two coincide. The server update uses alpha.
- FedFA's FedDyn (``feddyn_optimizer`` in its ``utils/optimizer.py``) is not FedDyn: its
  linear term uses the client's previous local model instead of the accumulated g_k, it
  has no quadratic term other than a fixed weight decay 1e-3, and its server is plain
  n_i-weighted FedAvg with no h. ``variant = "fedfa_code"`` runs that algorithm, to put
  FedFA's Table 2 row beside a faithful FedDyn: each step follows
  grad l_k(theta) + alpha_k (theta_k^prev - theta^{t-1}) (theta_k^prev the client's model
  after its last participation, theta^{t-1} at its first, so that round is FedAvg's;
  alpha_k = alpha * mean n / n_k as in its code), clipped as above, with the run's weight
  decay and momentum; the server takes the n_i-weighted mean.
"""
from __future__ import annotations

from typing import Mapping

import torch
from torch import nn

from ..models import SplitModel
from .base import (TRAIN, Algorithm, Client, FederationInfo, Param, ServerContext, load, sample_weights,
                   snapshot, weighted_average)


def clip_(grads: list[torch.Tensor], max_norm: float) -> None:
    """Scale ``grads`` in place to total 2-norm at most ``max_norm``, as
    ``torch.nn.utils.clip_grad_norm_`` does (coefficient max_norm / (norm + 1e-6), capped
    at 1)."""
    norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    coef = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    torch._foreach_mul_(grads, coef)


class FedDyn(Algorithm):
    name = "feddyn"
    paper = "Acar et al., ICLR 2021"
    predicts_globally = True
    hyperparams = {
        "alpha": Param(0.1, low=0, low_open=True, doc="alpha, the weight of the dynamic regulariser"),
        "max_grad_norm": Param(10.0, low=0, doc="clip each local step's gradient to this norm (0: no clipping)"),
        "alpha_scaling": Param("none", choices=("none", "samples"),
                               doc="alpha on client k: alpha (the paper) or alpha * mean n / n_k (authors' code)"),
        "variant": Param("acar", choices=("acar", "fedfa_code"),
                         doc="acar: FedDyn as its paper; fedfa_code: the algorithm FedFA's code runs as FedDyn"),
    }

    # -- server ------------------------------------------------------------------------
    def init(self, model: SplitModel, info: FederationInfo) -> dict:
        h = {name: torch.zeros_like(p.detach()) for name, p in model.named_parameters()}
        sizes = info.train_sizes or (1,)
        return {"model": snapshot(model), "h": h, "mean_train_size": float(sum(sizes)) / len(sizes)}

    def payload(self, state: dict, client_id: int, purpose: str = TRAIN) -> dict:
        if purpose == TRAIN:
            return {"model": state["model"], "mean_train_size": state["mean_train_size"]}
        return {"model": state["model"]}

    def aggregate(self, state: dict, updates: Mapping[int, dict], ctx: ServerContext) -> dict:
        if self.variant == "fedfa_code":
            ids, weights = sample_weights(updates)
            return {**state, "model": weighted_average([updates[c]["model"] for c in ids], weights)}
        ids = sorted(updates)
        alpha, n_all = float(self.alpha), ctx.info.num_clients
        previous, h = state["model"], state["h"]
        model, new_h = {}, {}
        for key, value in previous.items():
            mean = sum(updates[i]["model"][key].double() for i in ids) / len(ids)
            if key in h:
                drift = sum(updates[i]["model"][key].double() - value.double() for i in ids)
                h64 = h[key].double() - (alpha / n_all) * drift
                new_h[key] = h64.to(h[key].dtype)
                model[key] = (mean - h64 / alpha).to(value.dtype)
            else:
                model[key] = mean.to(value.dtype)
        return {**state, "model": model, "h": new_h}

    # -- client ------------------------------------------------------------------------
    def local_alpha(self, payload: dict, client: Client) -> float:
        alpha = float(self.alpha)
        if (self.alpha_scaling == "samples" or self.variant == "fedfa_code") and client.num_samples:
            alpha *= float(payload["mean_train_size"]) / client.num_samples
        return alpha

    def local_update(self, payload: dict, client: Client) -> dict:
        if self.variant == "fedfa_code":
            return self.fedfa_code_update(payload, client)
        model = load(client.model, payload["model"])
        names = [name for name, _ in model.named_parameters()]
        params = [p for _, p in model.named_parameters()]
        anchor = [payload["model"][n] for n in names]
        own = client.state.get("gradient")
        g_k = [own[n] for n in names] if own is not None else [torch.zeros_like(p) for p in anchor]
        alpha = self.local_alpha(payload, client)
        max_norm = float(self.max_grad_norm)

        def adjust(grads: list[torch.Tensor]) -> list[torch.Tensor]:
            direction = torch._foreach_sub(grads, g_k)  # grad l_k - g_k + alpha (theta - theta^{t-1})
            torch._foreach_add_(direction, torch._foreach_sub(params, anchor), alpha=alpha)
            if max_norm > 0:
                clip_(direction, max_norm)
            return direction

        loss, _ = client.train_adjusted(model, params, adjust)
        with torch.no_grad():
            drift = torch._foreach_sub([p.detach() for p in params], anchor)
            new = torch._foreach_add(g_k, drift, alpha=-alpha)
        client.state["gradient"] = {n: t for n, t in zip(names, new)}
        return {"model": snapshot(model), "num_samples": client.num_samples, "loss": loss}

    def fedfa_code_update(self, payload: dict, client: Client) -> dict:
        """One round of FedFA's FedDyn (see the module docstring): a fixed linear term
        alpha_k <theta, theta_k^prev - theta^{t-1}>, no quadratic term, no g_k."""
        model = load(client.model, payload["model"])
        names = [name for name, _ in model.named_parameters()]
        params = [p for _, p in model.named_parameters()]
        received = [payload["model"][n] for n in names]
        previous = client.state.get("previous_model")
        pull = (torch._foreach_sub([previous[n] for n in names], received) if previous is not None
                else [torch.zeros_like(t) for t in received])
        torch._foreach_mul_(pull, self.local_alpha(payload, client))
        max_norm = float(self.max_grad_norm)

        def adjust(grads: list[torch.Tensor]) -> list[torch.Tensor]:
            direction = torch._foreach_add(grads, pull)
            if max_norm > 0:
                clip_(direction, max_norm)
            return direction

        loss, _ = client.train_adjusted(model, params, adjust)
        client.state["previous_model"] = {n: p.detach().clone() for n, p in zip(names, params)}
        return {"model": snapshot(model), "num_samples": client.num_samples, "loss": loss}

    # -- prediction ----------------------------------------------------------------------
    def shared_predictor(self, state: dict, model: SplitModel) -> nn.Module:
        return load(model, state["model"])

    def predictor(self, payload: dict, client: Client) -> nn.Module:
        return load(client.model, payload["model"])


__all__ = ["FedDyn", "clip_"]
