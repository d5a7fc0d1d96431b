"""FedEM (Marfoq, Neglia, Bellet, Kameni, Vidal, "Federated Multi-Task Learning under a
Mixture of Distributions", NeurIPS 2021, section 3, Algorithm 1) and FedEM-FT (FedPAC,
Xu et al., ICLR 2023, appendix C.4: FedEM with local fine-tuning before evaluation).

The server keeps M shared components h_1..h_M; client i keeps mixture weights pi_i
(uniform before its first participation) in its personal state, and they PERSIST across
rounds (FL-bench re-initialises them every round; the paper and its authors' code do not).
A participant's round, as in the authors' code (one E-step and one M-step per round, then
the local epochs with the responsibilities fixed):

1. E-step: l_jm = CE(h_m(x_j), y_j) for every train sample j and component m (evaluation
   mode, no gradients), q_jm = pi_im exp(-l_jm) / sum_m' pi_im' exp(-l_jm'), with the pi_i
   of the previous round;
2. M-step: pi_im = mean_j q_jm;
3. each component m trains for the run's E epochs on the weighted loss
   sum_{j in B} q_jm l_jm / |B| (normalised by the batch size, not by the batch's
   responsibility mass, as the authors' code), with its own SGD state (momentum buffers
   are not shared between components) and its own batch order (the components draw their
   epochs one after the other from the client's stream, as the authors' components each
   iterate their own data loader; component 0 sees FedAvg's batches).

All M components are uploaded; the server averages each component over the participants
weighted by n_i (the authors' code and the paper's Algorithm 1 weight by n_i, not by the
responsibility mass n_i pi_im). Personal prediction: sum_m pi_im softmax(h_m(x)); the
predictor returns its log (computed as a log-sum-exp of log pi_im + log_softmax(h_m(x)),
the same argmax as the authors' clamped log). A client's reported loss is the sum over
components of their mean weighted training loss.

Component 0 is the run's initial model and component m >= 1 an independent draw of the
same architecture seeded from the run seed (:func:`~pflcore.algorithms.hypcluster.independent_init`,
the same draws as HypCluster's clusters). With M = 1, q = 1 and the weighted loss is the
plain cross-entropy: FedEM is then FedAvg bit for bit (that case trains with the plain
loss and predicts with the one component, which has the same argmax).

FedEM-FT: FedEM's training; before evaluation each component is fine-tuned on the client's
train data for ``ft_epochs`` epochs (as FedAvg-FT), pi_i kept. ``ft_loss = "plain"`` (the
default, as FedAvg-FT) fine-tunes on the cross-entropy; ``"weighted"`` on the
q-weighted loss with q from an E-step under the current components and the kept pi_i, as
the authors' local tuning option (``locally_tune_clients``) fine-tunes each component with
the client's last responsibilities.
"""
from __future__ import annotations

import copy
from typing import Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..models import SplitModel
from ..training import INFERENCE_BATCH, Batch
from .base import (TRAIN, Algorithm, Client, FederationInfo, Param, ServerContext, load, sample_weights, snapshot,
                   weighted_average)
from .hypcluster import independent_inits


def responsibilities(losses: torch.Tensor, pi: torch.Tensor) -> torch.Tensor:
    """The E-step: q[m, j] = pi_m exp(-losses[m, j]) / sum_m' pi_m' exp(-losses[m', j])
    for losses of shape (M, n) and pi of shape (M,), in float64."""
    logits = torch.log(pi.to(torch.float64)).unsqueeze(1) - losses.to(torch.float64)
    return torch.softmax(logits, dim=0)


def mixture_weights(q: torch.Tensor) -> torch.Tensor:
    """The M-step: pi_m = mean_j q[m, j]."""
    return q.mean(dim=1)


@torch.no_grad()
def sample_losses(models: Sequence[nn.Module], x: torch.Tensor, y: torch.Tensor,
                  batch_size: int = INFERENCE_BATCH) -> torch.Tensor:
    """Per-sample cross-entropy of every model, shape (M, n), evaluation mode."""
    rows = []
    for model in models:
        was_training = model.training
        model.eval()
        rows.append(torch.cat([F.cross_entropy(model(x[i:i + batch_size]).float(), y[i:i + batch_size],
                                               reduction="none") for i in range(0, x.shape[0], batch_size)])
                    if x.shape[0] else torch.zeros(0, device=x.device))
        model.train(was_training)
    return torch.stack(rows)


class Mixture(nn.Module):
    """log sum_m pi_m softmax(h_m(x)): the personal prediction of FedEM (its argmax is the
    class of highest mixture probability)."""

    def __init__(self, components: Sequence[nn.Module], pi: torch.Tensor):
        super().__init__()
        self.components = nn.ModuleList(components)
        self.register_buffer("log_pi", torch.log(pi.to(torch.float32)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = [lp + F.log_softmax(h(x).float(), dim=1) for lp, h in zip(self.log_pi, self.components)]
        return torch.logsumexp(torch.stack(parts), dim=0)


class FedEM(Algorithm):
    name = "fedem"
    paper = "Marfoq, Neglia, Bellet, Kameni, Vidal, NeurIPS 2021"
    hyperparams = {"M": Param(3, low=1, high=100, doc="the number of shared components")}

    # -- server -----------------------------------------------------------------------
    def init(self, model: SplitModel, info: FederationInfo) -> dict:
        return {"components": independent_inits(model, info.seed, int(self.M))}

    def payload(self, state: dict, client_id: int, purpose: str = TRAIN) -> dict:
        return {"components": state["components"]}

    def aggregate(self, state: dict, updates: Mapping[int, dict], ctx: ServerContext) -> dict:
        ids, weights = sample_weights(updates)
        if sum(weights) <= 0:
            return state
        components = [weighted_average([updates[c]["components"][m] for c in ids], weights)
                      for m in range(len(state["components"]))]
        return {**state, "components": components}

    def shared_predictor(self, state: dict, model: SplitModel) -> nn.Module | None:
        # One component: pi = 1 and the mixture's argmax is the component's.
        return load(model, state["components"][0]) if len(state["components"]) == 1 else None

    # -- client -----------------------------------------------------------------------
    def client_modules(self, model: SplitModel) -> dict[str, nn.Module]:
        return {"components": nn.ModuleList(copy.deepcopy(model) for _ in range(int(self.M) - 1))}

    def components(self, payload: dict, client: Client) -> list[nn.Module]:
        """The M components loaded with the payload's weights (client.model is the first)."""
        modules = [client.model, *client.modules["components"]]
        return [load(h, w) for h, w in zip(modules, payload["components"])]

    def pi(self, client: Client, count: int) -> torch.Tensor:
        """The client's mixture weights (uniform before its first participation)."""
        if "pi" in client.state:
            return client.state["pi"].to(client.x.device)
        return torch.full((count,), 1.0 / count, dtype=torch.float64, device=client.x.device)

    def local_update(self, payload: dict, client: Client) -> dict:
        models = self.components(payload, client)
        M, n = len(models), client.num_samples
        if M == 1 or n == 0:  # q = 1: the plain loss (and no E-step to take)
            q = None
            pi = self.pi(client, M)
        else:
            q = responsibilities(sample_losses(models, client.x, client.y), self.pi(client, M))
            pi = mixture_weights(q)
            q = q.to(torch.float32)
        client.state["pi"] = pi.clone()
        loss = sum(self.train_component(h, None if q is None else q[m], client, client.settings.epochs)
                   for m, h in enumerate(models))
        return {"components": [snapshot(h) for h in models], "num_samples": n, "loss": float(loss)}

    def train_component(self, model: nn.Module, q: torch.Tensor | None, client: Client, epochs: int) -> float:
        """``epochs`` of SGD on sum_{j in B} q_j l_j / |B| (``q`` None: the cross-entropy)
        on the client's batches, with its own SGD state. Returns the mean loss over steps."""
        n = client.num_samples
        if epochs == 0 or n == 0:
            return 0.0
        if q is None:
            return client.train(model.parameters(), model=model, epochs=epochs)
        params = list(model.parameters())
        step = client.sgd(params)

        def train_step(batch: Batch) -> torch.Tensor:
            with batch.precision():
                out = model(batch.x)
            losses = F.cross_entropy(out.float(), batch.y, reduction="none")
            loss = (losses * q[batch.index]).sum() / batch.index.shape[0]
            step(loss)
            return loss

        with client.trainable(model, params):
            return client.loop(train_step, epochs=epochs)

    def predictor(self, payload: dict, client: Client) -> nn.Module:
        models = self.components(payload, client)
        return Mixture(models, self.pi(client, len(models))) if len(models) > 1 else models[0]


class FedEMFT(FedEM):
    name = "fedem_ft"
    paper = "FedEM + local fine-tuning (Xu et al., ICLR 2023, appendix C.4)"
    hyperparams = {
        **FedEM.hyperparams,
        "ft_epochs": Param(5, low=0, high=10000,
                           doc="epochs of local fine-tuning of every component before evaluation"),
        "ft_loss": Param("plain", choices=("plain", "weighted"),
                         doc="fine-tuning loss: cross-entropy (as FedAvg-FT) or q-weighted (the authors' "
                             "local tuning)"),
    }

    def shared_predictor(self, state: dict, model: SplitModel) -> None:
        return None

    def predictor(self, payload: dict, client: Client) -> nn.Module:
        models = self.components(payload, client)
        pi = self.pi(client, len(models))
        q = None
        if self.ft_loss == "weighted" and len(models) > 1 and client.num_samples:
            q = responsibilities(sample_losses(models, client.x, client.y), pi).to(torch.float32)
        for m, h in enumerate(models):
            self.train_component(h, None if q is None else q[m], client, int(self.ft_epochs))
        return Mixture(models, pi) if len(models) > 1 else models[0]


__all__ = ["FedEM", "FedEMFT", "Mixture", "mixture_weights", "responsibilities", "sample_losses"]
