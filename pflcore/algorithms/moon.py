"""MOON (Li, He, Song, CVPR 2021, section 3, its model-contrastive loss, and Algorithm 1):
model-contrastive federated learning.

A projection head P (a 2-layer MLP on the body's features z = phi(x): Linear(d, d), ReLU,
Linear(d, ``projection_dim`` = 256), as ``l1``/``l2`` of the authors' ``ModelFedCon``)
is part of the federated model: trained with it and averaged with it. The client's loss
per mini-batch is

    CE(head(phi(x)), y) + mu * l_con,
    l_con = -log[ e^{cos(p, p_g)/tau} / (e^{cos(p, p_g)/tau} + e^{cos(p, p_prev)/tau}) ],

averaged over the batch, with p = P(phi(x)) of the model being trained, p_g of the frozen
received global model (body + projection) and p_prev of the frozen previous local model
of that client (its model after its last local training, kept in the client's state; as
the authors' ``model_buffer_size = 1``). The frozen models run in evaluation mode without
gradients (as the authors' code). In a client's first participation there is no previous
model and l_con = 0 (the authors' code: an empty model pool leaves a single logit, whose
cross-entropy is 0), so the projection head is not trained in that round. The server
averages body, head and projection head by n_i (FedAvg); every client predicts with the
global body and classifier head, never the projection.

Deviations from public code:
- The authors' ``ModelFedCon`` puts the classifier ON the 256-d projection (l3 after l2);
  here the projection is a side branch and the classifier stays on phi's features, so
  the run's architecture (and what every other method trains) is unchanged. Hence CE
  never reaches the projection head, and a client's first round is FedAvg's bit for bit.
- ``projection = "none"`` contrasts the body's features directly (p = phi(x)), as FedFA's
  MOON does on its CNNs. FedFA's ``moon_optimizer`` also averages the two cosines over
  the batch before the exp/log (one loss per batch) and uses the global model as the
  "previous" model in a client's first round (l_con = log 2, zero gradient); here l_con is
  per sample as in the paper and the authors' code.
- Defaults mu = 1 (FedFA's setting; FedFA, like the MOON paper, uses 5 on CIFAR-10) and
  tau = 0.5 (both papers).
"""
from __future__ import annotations

import contextlib
import copy
from typing import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from ..models import SplitModel
from ..streams import MOON_PROJECTION_KEY as _PROJECTION_KEY
from ..training import INIT_KEY, Batch, derive_seed
from .base import (TRAIN, Algorithm, Client, FederationInfo, Param, ServerContext, load, sample_weights, snapshot,
                   weighted_average)



def projection_head(feature_dim: int, out_dim: int) -> nn.Sequential:
    """MOON's projection MLP: Linear(d, d), ReLU, Linear(d, out_dim)."""
    return nn.Sequential(nn.Linear(feature_dim, feature_dim), nn.ReLU(), nn.Linear(feature_dim, out_dim))


def model_contrastive_loss(p: torch.Tensor, p_global: torch.Tensor, p_previous: torch.Tensor,
                           tau: float) -> torch.Tensor:
    """l_con averaged over the batch: -log softmax([cos(p, p_g), cos(p, p_prev)] / tau)[0],
    in float32 (cosine eps 1e-8, as torch's CosineSimilarity in the authors' code)."""
    p, p_global, p_previous = p.float(), p_global.float(), p_previous.float()
    logits = torch.stack([F.cosine_similarity(p, p_global, dim=-1, eps=1e-8),
                          F.cosine_similarity(p, p_previous, dim=-1, eps=1e-8)], dim=1) / tau
    return F.cross_entropy(logits, torch.zeros(p.shape[0], dtype=torch.long, device=p.device))


def _part(tensors: Mapping[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """The entries of a state dict under ``prefix.`` with the prefix removed."""
    return {k[len(prefix) + 1:]: v for k, v in tensors.items() if k.startswith(prefix + ".")}


class MOON(Algorithm):
    name = "moon"
    paper = "Li, He, Song, CVPR 2021"
    predicts_globally = True
    hyperparams = {
        "mu": Param(1.0, low=0, doc="mu, the weight of the model-contrastive loss"),
        "tau": Param(0.5, low=0, low_open=True, doc="tau, the temperature of the contrastive loss"),
        "projection": Param("mlp", choices=("mlp", "none"),
                            doc="contrast the projection head's output (the paper) or the body's features (FedFA)"),
        "projection_dim": Param(256, low=1, high=65536, doc="the projection head's output dimension"),
    }

    @property
    def _projects(self) -> bool:
        return self.projection == "mlp"

    # -- server ------------------------------------------------------------------------
    def init(self, model: SplitModel, info: FederationInfo) -> dict:
        state = {"model": snapshot(model)}
        if self._projects:
            with torch.random.fork_rng(devices=[]):  # its own stream, not the model's
                torch.manual_seed(derive_seed(info.seed, INIT_KEY, _PROJECTION_KEY))
                head = projection_head(model.feature_dim, int(self.projection_dim))
            state["projection"] = snapshot(head.to(next(model.parameters()).device))
        return state

    def payload(self, state: dict, client_id: int, purpose: str = TRAIN) -> dict:
        if purpose == TRAIN:
            return dict(state)
        return {"model": state["model"]}

    def aggregate(self, state: dict, updates: Mapping[int, dict], ctx: ServerContext) -> dict:
        ids, weights = sample_weights(updates)
        new = {**state, "model": weighted_average([updates[c]["model"] for c in ids], weights)}
        if self._projects:
            new["projection"] = weighted_average([updates[c]["projection"] for c in ids], weights)
        return new

    # -- client ------------------------------------------------------------------------
    def client_modules(self, model: SplitModel) -> dict[str, nn.Module]:
        modules: dict[str, nn.Module] = {"global_body": copy.deepcopy(model.body),
                                         "previous_body": copy.deepcopy(model.body)}
        if self._projects:
            for key in ("projection", "global_projection", "previous_projection"):
                modules[key] = projection_head(model.feature_dim, int(self.projection_dim)).to(
                    next(model.parameters()).device)
        return modules

    def _frozen(self, client: Client, which: str, body: Mapping, projection: Mapping | None) -> nn.Module:
        """The frozen ``which`` ("global"/"previous") network x -> p, in evaluation mode."""
        net = load(client.modules[f"{which}_body"], body)
        if self._projects:
            net = nn.Sequential(net, load(client.modules[f"{which}_projection"], projection))
        return net.eval()

    def local_update(self, payload: dict, client: Client) -> dict:
        model = load(client.model, payload["model"])
        previous = client.state.get("previous")
        contrast = float(self.mu) > 0 and previous is not None
        projection = load(client.modules["projection"], payload["projection"]) if self._projects else None
        params = list(model.parameters())
        extra = list(projection.parameters()) if (contrast and projection is not None) else []
        if contrast:
            global_net = self._frozen(client, "global", _part(payload["model"], "body"), payload.get("projection"))
            previous_net = self._frozen(client, "previous", previous["body"], previous.get("projection"))
        mu, tau = float(self.mu), float(self.tau)
        step = client.sgd(params + extra)

        def train_step(batch: Batch) -> torch.Tensor:
            with batch.precision():
                z = model.body(batch.x)
                loss = F.cross_entropy(model.head(z), batch.y)
                if contrast:
                    p = projection(z) if projection is not None else z
                    with torch.no_grad():
                        p_global, p_previous = global_net(batch.x), previous_net(batch.x)
            if contrast:
                loss = loss + mu * model_contrastive_loss(p, p_global, p_previous, tau)
            step(loss)
            return loss

        with contextlib.ExitStack() as stack:
            stack.enter_context(client.trainable(model, params))
            if extra:
                stack.enter_context(client.trainable(projection, extra))
            loss = client.loop(train_step)
        mine = {"body": snapshot(model.body)}
        update = {"model": snapshot(model), "num_samples": client.num_samples, "loss": loss}
        if projection is not None:
            mine["projection"] = update["projection"] = snapshot(projection)
        client.state["previous"] = mine
        return update

    # -- prediction ----------------------------------------------------------------------
    def shared_predictor(self, state: dict, model: SplitModel) -> nn.Module:
        return load(model, state["model"])

    def predictor(self, payload: dict, client: Client) -> nn.Module:
        return load(client.model, payload["model"])


__all__ = ["MOON", "model_contrastive_loss", "projection_head"]
