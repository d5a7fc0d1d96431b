"""APFL (Deng, Kamani, Mahdavi, "Adaptive Personalized Federated Learning", arXiv 2003.13461,
2020): every client keeps a local model v_i beside its copy w_i of the global model, and its
personal model is their PARAMETER mixture vbar_i = alpha_i v_i + (1 - alpha_i) w_i.

Client round (the paper's Algorithm 1): from the received w, one step per mini-batch xi of
the run's E epochs of batches, both models on the SAME batch and both gradients taken at the
step's starting point (vbar_i mixes the w_i of before its step):

    w_i <- w_i - eta grad f_i(w_i; xi)
    v_i <- v_i - eta grad_v f_i(vbar_i; xi) = v_i - eta alpha_i grad f_i(vbar_i; xi)

Both steps are the run's SGD (``client.sgd``: its lr, momentum and weight decay, each
model with its own momentum buffers). w_i is uploaded and the server averages by n_i, as
FedAvg, so the global trajectory is FedAvg's bit for bit whatever alpha is. With
``adaptive_alpha`` each step also takes the paper's gradient step on the mixing weight,
d f_i(vbar_i) / d alpha = <v_i - w_i, grad f_i(vbar_i; xi)>:

    alpha_i <- clip(alpha_i - eta_alpha <v_i - w_i, grad f_i(vbar_i; xi)>, 0, 1)

with the step's starting v_i and w_i; alpha_i is kept per client in its state.

Choices:

- v_i starts, for every client, from the initial global model w^(0) (Algorithm 1 takes
  v_i^(0) as input and the authors' code copies the model the client starts with), sent in
  the payload beside w as Local-only does. Under full participation that is the w received
  at the first round; under partial participation it keeps alpha = 1 exactly Local-only.
- The personal model (``predictor``) is alpha_i v_i + (1 - alpha_i) w with the CURRENT
  global w of the payload: Algorithm 1 sets every w_i to the broadcast average at each
  synchronisation, so after a round the client's vbar_i mixes its v_i with the new global
  model. It needs nothing but the payload and the client's state, so it is the same wherever the client runs; alpha = 0
  gives FedAvg's predictor. (The authors' code scores a mixture of the two models' LOGITS
  with the pre-average w_i; we follow the paper's parameter mixture.)
- Floating-point buffers (BatchNorm running statistics) mix like parameters; v_i's buffers
  are the running statistics of the vbar_i forward passes. Integer
  buffers (BatchNorm's batch counter) come from the model with the larger weight.
- The authors' code steps v after w (its vbar mixes the updated w) and updates alpha once
  per round with an extra 0.02 alpha term; we take the paper's simultaneous steps and its
  per-step alpha update, eta_alpha defaulting to the run's lr (the paper's eta_t).
"""
from __future__ import annotations

import copy
from typing import Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..models import SplitModel
from ..training import Batch
from .base import (TRAIN, Client, FederationInfo, Param, ServerContext, Tensors, load, sample_weights,
                   snapshot)
from .fedavg import FedAvg

Alpha = float | torch.Tensor  # a Python float when fixed, a 0-dim tensor while it adapts


def mix(local: Sequence[torch.Tensor], shared: Sequence[torch.Tensor], alpha: Alpha) -> list[torch.Tensor]:
    """alpha * local + (1 - alpha) * shared, tensor by tensor: exactly ``local`` for alpha = 1
    and exactly ``shared`` for alpha = 0 (two products and a sum, no fused step)."""
    return torch._foreach_add(torch._foreach_mul(list(local), alpha), torch._foreach_mul(list(shared), 1 - alpha))


def mixed_state(local: Mapping[str, torch.Tensor], shared: Mapping[str, torch.Tensor], alpha: float) -> Tensors:
    """The state dict of the mixture: floating tensors mix as :func:`mix`, the others
    (integer counters) come from the side with the larger weight."""
    out = {}
    for key, value in local.items():
        if value.is_floating_point():
            out[key] = alpha * value + (1 - alpha) * shared[key]
        else:
            out[key] = (value if alpha >= 0.5 else shared[key]).clone()
    return out


class APFL(FedAvg):
    name = "apfl"
    paper = "Deng et al., arXiv 2020"
    predicts_globally = False
    hyperparams = {
        "alpha": Param(0.25, low=0, high=1, doc="alpha, the local model's weight in vbar = alpha v + (1 - alpha) w "
                                                "(the initial value when it adapts)"),
        "adaptive_alpha": Param(False, doc="each client adapts its alpha by gradient steps (the paper's update)"),
        "alpha_lr": Param(0.0, low=0, doc="eta_alpha, the step of the adaptive alpha (0: the run's lr)"),
    }

    def init(self, model: SplitModel, info: FederationInfo) -> dict:
        initial = snapshot(model)
        return {"model": initial, "init": initial}

    def payload(self, state: dict, client_id: int, purpose: str = TRAIN) -> dict:
        return {"model": state["model"], "init": state["init"]}

    def client_modules(self, model: SplitModel) -> dict[str, nn.Module]:
        return {"local": copy.deepcopy(model), "mixed": copy.deepcopy(model)}

    def client_alpha(self, client: Client) -> float:
        """The client's current alpha: its adapted value, else the fixed one."""
        if self.adaptive_alpha and "alpha" in client.state:
            return float(client.state["alpha"])
        return float(self.alpha)

    def local_update(self, payload: dict, client: Client) -> dict:
        stored = client.state.get("local", payload["init"])
        shared = load(client.model, payload["model"])         # w_i
        local = load(client.modules["local"], stored)         # v_i
        mixed = load(client.modules["mixed"], stored)         # vbar_i, set each step; its buffers are v_i's
        shared_params, local_params, mixed_params = (list(m.parameters()) for m in (shared, local, mixed))
        shared_step, local_step = client.sgd(shared_params), client.sgd(local_params)
        adaptive = bool(self.adaptive_alpha)
        alpha: Alpha = self.client_alpha(client)
        if adaptive:
            alpha = torch.tensor(alpha, dtype=torch.float64, device=client.x.device)
            alpha_lr = float(self.alpha_lr) or client.settings.lr

        def train_step(batch: Batch) -> torch.Tensor:
            """Both models on the same batch, both gradients at the step's start (section 3)."""
            nonlocal alpha
            with torch.no_grad():
                torch._foreach_copy_(mixed_params, mix(local_params, shared_params, alpha))
            with batch.precision():
                loss = F.cross_entropy(shared(batch.x), batch.y)
            shared_grads = list(torch.autograd.grad(loss, shared_params, allow_unused=True))
            with batch.precision():
                mixed_loss = F.cross_entropy(mixed(batch.x), batch.y)
            mixed_grads = torch.autograd.grad(mixed_loss, mixed_params, allow_unused=True)
            used = [i for i, g in enumerate(mixed_grads) if g is not None]
            local_grads: list[torch.Tensor | None] = [None] * len(local_params)
            if used:
                with torch.no_grad():  # the chain rule through vbar = alpha v + (1 - alpha) w
                    for i, g in zip(used, torch._foreach_mul([mixed_grads[i] for i in used], alpha)):
                        local_grads[i] = g
                    if adaptive:
                        slope = alpha_slope([local_params[i] for i in used], [shared_params[i] for i in used],
                                            [mixed_grads[i] for i in used])
            shared_step.update(shared_grads)
            local_step.update(local_grads)
            if adaptive and used:
                alpha = (alpha - alpha_lr * slope).clamp_(0.0, 1.0)
            return loss

        with client.trainable(shared, shared_params), client.trainable(mixed, mixed_params):
            loss = client.loop(train_step)
        with torch.no_grad():
            for name, buffer in mixed.named_buffers():
                local.get_buffer(name).copy_(buffer)
        client.state["local"] = snapshot(local)
        update = {"model": snapshot(shared), "num_samples": client.num_samples, "loss": loss}
        if adaptive:
            client.state["alpha"] = alpha.detach().to("cpu", copy=True)
            update["alpha"] = float(alpha)
        return update

    def aggregate(self, state: dict, updates: Mapping[int, dict], ctx: ServerContext) -> dict:
        state = super().aggregate(state, updates, ctx)
        if self.adaptive_alpha:
            ids, _ = sample_weights(updates)
            state["alpha_mean"] = sum(float(updates[c]["alpha"]) for c in ids) / len(ids)
        return state

    def report(self, state: dict) -> dict:
        return {"alpha_mean": state["alpha_mean"]} if "alpha_mean" in state else {}

    def shared_predictor(self, state: dict, model: SplitModel) -> None:
        return None  # every client predicts with its own vbar_i

    def predictor(self, payload: dict, client: Client) -> nn.Module:
        local = client.state.get("local", payload["init"])
        return load(client.modules["mixed"], mixed_state(local, payload["model"], self.client_alpha(client)))


def alpha_slope(local: list[torch.Tensor], shared: list[torch.Tensor], grads: Sequence[torch.Tensor]) -> torch.Tensor:
    """<v - w, grad f(vbar)>, the derivative of f(alpha v + (1 - alpha) w) in alpha (float64)."""
    products = torch._foreach_mul(torch._foreach_sub(local, shared), list(grads))
    return torch.stack([p.sum(dtype=torch.float64) for p in products]).sum()
