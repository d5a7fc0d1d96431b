"""pFedMe (Dinh, Tran, Nguyen, NeurIPS 2020): personalised models as Moreau envelopes.

Client round (the paper's Algorithm 1): w_i starts from the received w and theta from w;
for each local iteration (one mini-batch D; the run's E epochs of batches), K inner steps
theta <- theta - eta_p (grad l(theta; D) + lambda (theta - w_i)) approximate the
personalised model, then w_i <- w_i - eta lambda (w_i - theta). w_i is uploaded; theta
carries over between iterations and is the client's personal model (a detached copy in
its state). Server: w <- (1 - beta) w + beta * sum_i n_i w_i / sum_i n_i.

The inner steps are plain SGD (the paper's update, no momentum or weight decay); the outer
update of w_i is exact. Both use the run's device and the client's batches in the order
the standard loop would visit them. Two options give the schedule of pFedMe's authors'
code instead: ``local_iterations`` R single mini-batches per round in place of the run's
epochs (Algorithm 1's R local rounds), and ``inner_weight_decay`` mu, each inner step's
gradient plus mu theta; both are off by default.
"""
from __future__ import annotations

import copy
from typing import Callable, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from ..models import SplitModel
from ..training import Batch, SGDStep
from .base import Client, Param, ServerContext, load, sample_weights, snapshot, weighted_average
from .fedavg import FedAvg


def moreau_steps(params: list[torch.Tensor], local: list[torch.Tensor], loss_of: Callable[[], torch.Tensor],
                 steps: int, step: SGDStep, lam: float) -> torch.Tensor:
    """``steps`` steps theta <- theta - eta_p (grad l(theta) + lambda (theta - w_i)) on the
    parameters ``params`` (theta) towards ``local`` (w_i); returns the last loss."""
    for _ in range(steps):
        loss = loss_of()
        grads = list(torch.autograd.grad(loss, params))
        if lam:
            torch._foreach_add_(grads, torch._foreach_sub([p.detach() for p in params], local), alpha=lam)
        step.update(grads)
    return loss


class PFedMe(FedAvg):
    name = "pfedme"
    paper = "Dinh, Tran, Nguyen, NeurIPS 2020"
    predicts_globally = False
    rebuilt_client_state = ("personal",)  # theta starts from the received w in every round it trains
    hyperparams = {
        "lam": Param(15.0, low=0, doc="lambda, the Moreau-envelope pull between theta and w_i"),
        "inner_steps": Param(5, low=1, high=10000, doc="K, steps on theta per mini-batch"),
        "personal_lr": Param(0.1, low=0, low_open=True, doc="eta_p, the inner steps' learning rate"),
        "beta": Param(1.0, low=0, high=2, doc="the server's step: w <- (1 - beta) w + beta avg(w_i)"),
        "local_iterations": Param(0, low=0, high=10000, fingerprint_default=0,
                                  doc="R, mini-batch iterations per round (0: the run's local epochs)"),
        "inner_weight_decay": Param(0.0, low=0, fingerprint_default=0.0,
                                    doc="mu, weight decay of the inner steps on theta (pFedMe's code: 0.001)"),
    }

    def client_modules(self, model: SplitModel) -> dict[str, nn.Module]:
        return {"personal": copy.deepcopy(model)}

    def local_update(self, payload: dict, client: Client) -> dict:
        theta = load(client.modules["personal"], payload["model"])
        params = list(theta.parameters())
        local = [p.detach().clone() for p in params]  # w_i
        inner = client.sgd(params, lr=float(self.personal_lr), momentum=0.0,
                           weight_decay=float(self.inner_weight_decay))
        lam, eta = float(self.lam), client.settings.lr

        def train_step(batch: Batch) -> torch.Tensor:
            """theta_i by K steps on the Moreau envelope's inner problem, then the local model's
            step towards it (Algorithm 1), both on the same batch."""
            def batch_loss() -> torch.Tensor:
                with batch.precision():
                    return F.cross_entropy(theta(batch.x), batch.y)

            loss = moreau_steps(params, local, batch_loss, int(self.inner_steps), inner, lam)
            with torch.no_grad():  # w_i <- w_i - eta lambda (w_i - theta)
                torch._foreach_lerp_(local, [p.detach() for p in params], eta * lam)
            return loss

        iterations = int(self.local_iterations)
        per_epoch = max(1, -(-client.num_samples // client.settings.batch_size))
        with client.trainable(theta, params):
            if iterations:
                loss = client.loop(train_step, epochs=-(-iterations // per_epoch), max_steps=iterations)
            else:
                loss = client.loop(train_step)
        client.state["personal"] = snapshot(theta)
        model = load(client.model, payload["model"])
        with torch.no_grad():
            for p, w in zip(model.parameters(), local):
                p.copy_(w)
        return {"model": snapshot(model), "num_samples": client.num_samples, "loss": loss}

    def aggregate(self, state: dict, updates: Mapping[int, dict], ctx: ServerContext) -> dict:
        ids, weights = sample_weights(updates)
        average = weighted_average([updates[c]["model"] for c in ids], weights)
        beta = float(self.beta)
        if beta == 1.0:
            return {**state, "model": average}
        return {**state, "model": {k: ((1 - beta) * state["model"][k].double() + beta * average[k].double())
                                   .to(average[k].dtype) for k in average}}

    def shared_predictor(self, state: dict, model: SplitModel) -> None:
        return None  # every client predicts with its own theta_i

    def predictor(self, payload: dict, client: Client) -> nn.Module:
        return load(client.modules["personal"], client.state.get("personal", payload["model"]))
