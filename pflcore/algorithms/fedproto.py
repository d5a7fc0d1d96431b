"""FedProto (Tan, Long, Liu, Zhou, Lu, Jiang, Zhang, AAAI 2022, "FedProto: Federated
Prototype Learning across Heterogeneous Clients", Algorithm 1) in the two variants of
FedPAC's comparison (Xu et al., ICLR 2023, appendix C.5, Table 5): no model exchange, each
client trains its own model (body and classifier) with a prototype regulariser.

Every client starts from the same seeded initial model (as Local-only) and keeps its model
in its personal state. A client's round: E epochs of the run's batches and SGD on

    CE(h(z), y) + lam * MSE(z, p_y),   z = phi(x),

MSE being torch's mean over all B x D entries of the batch (``nn.MSELoss()`` as the
authors' code): a sample whose class has no prototype contributes zero to the sum but
still counts in B, as upstream substitutes the sample's own (detached) feature for the
missing target. With no prototypes at all (round 0) or ``lam = 0`` the loss is CE alone.

Prototypes are class means of z over the LAST local epoch's batches, taken during
training (each batch's features from the forward pass before that batch's step, the
model in training mode), as the authors' code accumulates them; a class the client holds
therefore always has a prototype. Deviation: the run's batches include the last, smaller
one (upstream's loader drops it).

- ``prototypes = "global"`` (FedProto-G): the client uploads its prototypes; the server's
  prototype of class c is the UNWEIGHTED mean of the participants' prototypes of c over
  the participants holding c (FedProto's aggregation), replacing the previous round's set
  as upstream does (a class no participant holds has no prototype next round). p_y is
  the server's prototype from the previous round.
- ``prototypes = "local"`` (FedProto-L): p_y is the client's own prototype from its
  previous participation, kept in its personal state; the server receives only the sample
  count and the loss.

Personal model (evaluation): the client's own model and classifier (FedPAC's variant;
FedProto itself also reports nearest-prototype prediction). lam = 1 (the authors' default).
"""
from __future__ import annotations

from typing import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from ..models import SplitModel
from ..training import Batch
from .base import TRAIN, Algorithm, Client, FederationInfo, Param, ServerContext, load, snapshot


def prototype_loss(z: torch.Tensor, y: torch.Tensor, prototypes: torch.Tensor, has: torch.Tensor) -> torch.Tensor:
    """MSE over all B x D entries between z and the prototype of each sample's class; rows
    whose class has no prototype have target z itself (detached), i.e. contribute zero."""
    target = torch.where(has[y][:, None], prototypes[y].to(z.dtype), z.detach())
    return F.mse_loss(z, target)


def average_prototypes(prototypes: torch.Tensor, has: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Unweighted mean over clients of their class prototypes, each class over the clients
    holding it: ``prototypes`` (m, C, D), ``has`` (m, C) -> (C, D), (C,)."""
    held = has.sum(0)
    total = (has[:, :, None].to(prototypes.dtype) * prototypes).sum(0)
    return total / held.clamp(min=1)[:, None].to(prototypes.dtype), held > 0


class FedProto(Algorithm):
    name = "fedproto"
    paper = "Tan et al., AAAI 2022"
    hyperparams = {
        "lam": Param(1.0, low=0, doc="lambda, the weight of the prototype term (0: Local-only)"),
        "prototypes": Param("global", choices=("global", "local"),
                            doc="FedProto-G: the server's averaged prototypes; FedProto-L: the client's own"),
    }

    @property
    def uses_global(self) -> bool:
        return self.prototypes == "global"

    def init(self, model: SplitModel, info: FederationInfo) -> dict:
        state = {"init": snapshot(model)}
        if self.uses_global:
            device = next(model.parameters()).device
            state["prototypes"] = torch.zeros(model.num_classes, model.feature_dim, device=device)
            state["has_prototype"] = torch.zeros(model.num_classes, dtype=torch.bool, device=device)
        return state

    def payload(self, state: dict, client_id: int, purpose: str = TRAIN) -> dict:
        if self.uses_global and purpose == TRAIN:
            return {"init": state["init"], "prototypes": state["prototypes"], "has_prototype": state["has_prototype"]}
        return {"init": state["init"]}

    def targets(self, payload: dict, client: Client) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(prototypes, has_prototype) the client aligns to, or None (no term this round)."""
        source = payload if self.uses_global else client.state
        if float(self.lam) == 0.0 or "prototypes" not in source or not bool(source["has_prototype"].any()):
            return None
        return source["prototypes"].to(client.x.device), source["has_prototype"].to(client.x.device)

    def local_update(self, payload: dict, client: Client) -> dict:
        model = load(client.model, client.state.get("model", payload["init"]))
        targets = self.targets(payload, client)
        lam = float(self.lam)
        params = list(model.parameters())
        step = client.sgd(params)
        epochs = client.settings.epochs
        sums = torch.zeros(client.num_classes, model.feature_dim, device=client.x.device)
        counts = torch.zeros(client.num_classes, dtype=torch.long, device=client.x.device)

        def train_step(batch: Batch) -> torch.Tensor:
            with batch.precision():
                z = model.body(batch.x)
                loss = F.cross_entropy(model.head(z), batch.y)
                if targets is not None:
                    loss = loss + lam * prototype_loss(z, batch.y, *targets)
            step(loss)
            if batch.epoch == epochs - 1:  # the prototypes: the last epoch's features
                sums.index_add_(0, batch.y, z.detach().flatten(1).float())
                counts.add_(torch.bincount(batch.y, minlength=client.num_classes))
            return loss

        loss = 0.0
        if client.num_samples > 0 and params:
            with client.trainable(model, params):
                loss = client.loop(train_step)
        client.state["model"] = snapshot(model)
        prototypes, has = sums / counts.clamp(min=1)[:, None], counts > 0
        update = {"num_samples": client.num_samples, "loss": loss}
        if self.uses_global:
            update.update(prototypes=prototypes, has_prototype=has)
        else:
            client.state["prototypes"], client.state["has_prototype"] = prototypes, has
        return update

    def aggregate(self, state: dict, updates: Mapping[int, dict], ctx: ServerContext) -> dict:
        if not self.uses_global or not updates:
            return state
        ids = sorted(updates)
        device = state["prototypes"].device
        prototypes, has = average_prototypes(torch.stack([updates[c]["prototypes"].to(device) for c in ids]),
                                             torch.stack([updates[c]["has_prototype"].to(device) for c in ids]))
        return {**state, "prototypes": prototypes, "has_prototype": has}

    def predictor(self, payload: dict, client: Client) -> nn.Module:
        return load(client.model, client.state.get("model", payload["init"]))


__all__ = ["FedProto", "average_prototypes", "prototype_loss"]
