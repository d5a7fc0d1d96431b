"""SCAFFOLD (Karimireddy, Kale, Mohri, Reddi, Stich, Suresh, ICML 2020, Algorithm 1 with
option II): local steps corrected by control variates.

Server state: the global model x and the server control c (one tensor per trainable
parameter, zero at the start). Client state: the client control c_i (zero before the
client's first participation), STORED after every participation (FL-bench computes
c_i+ but never keeps it, so every round starts from c_i = 0 there).

Client round, from the received (x, c): y = x, then for each of the run's mini-batches
(E epochs; K = the steps actually taken)

    y <- y - eta * (g(y) + c - c_i)

where g is the mini-batch gradient of the cross-entropy; afterwards

    c_i+ = c_i - c + (x - y) / (K eta)                          (option II)

The client uploads y (Delta y = y - x is formed on the server, which knows x: the same
information) and Delta c = c_i+ - c_i, and keeps c_i+. Server:

    x <- x + eta_g * mean_S (y_i - x),    c <- c + (1/N) sum_S Delta c_i

(``weighting = "uniform"``, the paper: a plain mean over the participants, and c stays
the mean of all N clients' c_i). ``weighting = "samples"`` uses n_i / sum_S n_j for x and
n_i / n (n: all clients' train samples) for c, so that c stays the n_i-weighted mean of
the c_i, matching a global objective weighted by data size (the authors of FedDyn do this
in their SCAFFOLD code). Buffers (e.g. BatchNorm statistics) are averaged with the same
weights. ``global_lr`` is eta_g (default 1: the server takes the participants' mean model).

Momentum and weight decay. The run's SGD (momentum, weight decay) is applied to the
corrected gradient g(y) + c - c_i, i.e. to the step as if <c - c_i, y> were added to the
loss (as the public implementations do). Under momentum the displacement (x - y)/(K eta)
is no longer the mean gradient (it is inflated up to 1/(1 - momentum)), so option II taken
literally biases c_i. ``control_update = "mean_gradient"`` (default) therefore sets

    c_i+ = (1/K) sum_k [g(y_k) + wd * y_k],

the mean of the local objective's gradients (cross-entropy plus weight decay's wd * y) at
the points visited. Under plain SGD (momentum 0) it is option II exactly, with or without
weight decay: (x - y)/(K eta) = (1/K) sum_k [g(y_k) + wd y_k + c - c_i], so
c_i - c + (x - y)/(K eta) is that mean (only the rounding differs). ``control_update =
"option2"`` uses the paper's formula verbatim (what FL-bench, PFLlib and the FedDyn
authors' SCAFFOLD do, all with the bias under momentum). The authors of FedDyn also clip
the gradient norm at 10 in their SCAFFOLD; here nothing is clipped. A client that takes
no step (no data or no epochs) keeps c_i and sends Delta c = 0.

With c = c_i = 0 (every first round) the local steps are FedAvg's bit for bit; with
eta_g = 1 the first aggregation is the uniform mean of the client models.
"""
from __future__ import annotations

from typing import Mapping

import torch
from torch import nn

from ..models import SplitModel
from .base import (TRAIN, Algorithm, Client, FederationInfo, Param, ServerContext, load, sample_weights,
                   snapshot)


class SCAFFOLD(Algorithm):
    name = "scaffold"
    paper = "Karimireddy et al., ICML 2020"
    predicts_globally = True
    hyperparams = {
        "global_lr": Param(1.0, low=0, low_open=True, doc="eta_g, the server's step on the mean model update"),
        "weighting": Param("uniform", choices=("uniform", "samples"),
                           doc="participants' weights: uniform (the paper) or by train size n_i"),
        "control_update": Param("mean_gradient", choices=("mean_gradient", "option2"),
                                doc="c_i+: the mean local gradient (option II under plain SGD, unbiased by "
                                    "momentum) or option II's (x - y)/(K eta) formula verbatim"),
    }

    # -- server ------------------------------------------------------------------------
    def init(self, model: SplitModel, info: FederationInfo) -> dict:
        control = {name: torch.zeros_like(p.detach()) for name, p in model.named_parameters()}
        return {"model": snapshot(model), "control": control}

    def payload(self, state: dict, client_id: int, purpose: str = TRAIN) -> dict:
        if purpose == TRAIN:
            return {"model": state["model"], "control": state["control"]}
        return {"model": state["model"]}

    def aggregate(self, state: dict, updates: Mapping[int, dict], ctx: ServerContext) -> dict:
        ids, sizes = sample_weights(updates)
        if self.weighting == "samples":
            total = sum(sizes)
            model_w = [n / total for n in sizes]
            control_w = [n / float(sum(ctx.info.train_sizes)) for n in sizes]
        else:
            model_w = [1.0 / len(ids)] * len(ids)
            control_w = [1.0 / ctx.info.num_clients] * len(ids)
        x, c = state["model"], state["control"]
        eta_g = float(self.global_lr)
        model = {}
        for key, value in x.items():
            if key in c:  # a trainable parameter: x + eta_g * sum_i w_i (y_i - x)
                x64 = value.double()
                step = sum(w * (updates[i]["model"][key].double() - x64) for i, w in zip(ids, model_w))
                model[key] = (x64 + eta_g * step).to(value.dtype)
            else:  # a buffer: the weighted mean of the clients' values
                mean = sum(w * updates[i]["model"][key].double() for i, w in zip(ids, model_w))
                model[key] = mean.to(value.dtype)
        control = {key: (value.double() + sum(w * updates[i]["delta_control"][key].double()
                                              for i, w in zip(ids, control_w))).to(value.dtype)
                   for key, value in c.items()}
        return {**state, "model": model, "control": control}

    # -- client ------------------------------------------------------------------------
    def local_update(self, payload: dict, client: Client) -> dict:
        model = load(client.model, payload["model"])
        names = [name for name, _ in model.named_parameters()]
        params = [p for _, p in model.named_parameters()]
        c = [payload["control"][n] for n in names]
        own = client.state.get("control")
        c_i = [own[n] for n in names] if own is not None else [torch.zeros_like(p) for p in c]
        correction = torch._foreach_sub(c, c_i)
        any_correction = any(bool(t.any()) for t in correction)
        mean_gradient = self.control_update == "mean_gradient"
        wd = float(client.settings.weight_decay)
        grad_sum = [torch.zeros_like(p) for p in params] if mean_gradient else None

        def adjust(grads: list[torch.Tensor]) -> list[torch.Tensor]:
            if mean_gradient:
                torch._foreach_add_(grad_sum, grads)
                if wd:
                    torch._foreach_add_(grad_sum, params, alpha=wd)
            return torch._foreach_add(grads, correction) if any_correction else grads

        loss, steps = client.train_adjusted(model, params, adjust)
        with torch.no_grad():
            if steps == 0:
                new = [t.clone() for t in c_i]
            elif mean_gradient:
                new = torch._foreach_div(grad_sum, float(steps))
            else:  # c_i - c + (x - y) / (K eta)
                x0 = [payload["model"][n] for n in names]
                displacement = torch._foreach_sub(x0, [p.detach() for p in params])
                new = torch._foreach_add(torch._foreach_neg(correction),
                                         torch._foreach_div(displacement, steps * float(client.settings.lr)))
            delta = torch._foreach_sub(new, c_i)
        client.state["control"] = {n: t for n, t in zip(names, new)}
        return {"model": snapshot(model), "delta_control": {n: t for n, t in zip(names, delta)},
                "num_samples": client.num_samples, "steps": steps, "loss": loss}

    # -- prediction ----------------------------------------------------------------------
    def shared_predictor(self, state: dict, model: SplitModel) -> nn.Module:
        return load(model, state["model"])

    def predictor(self, payload: dict, client: Client) -> nn.Module:
        return load(client.model, payload["model"])


__all__ = ["SCAFFOLD"]
