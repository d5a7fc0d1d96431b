"""Fed-RoD (Chen & Chao, ICLR 2022): one shared body phi with two heads, a generic head g
trained for the balanced (class-prior-free) risk and a personal head p_i on top of it.

Client round (the paper's Fed-RoD method): from the received phi and g, for E epochs of
the run's batches and SGD, with z = phi(x),
- phi and g minimise the balanced-softmax loss CE(g(z) + log n_{i,c}, y), n_{i,c} the
  client's train count of class c (for a class the client lacks, log 0 is replaced by
  -1e9: its probability is exactly 0 without the NaNs that -inf invites);
- p_i minimises CE(g(z) + p_i(z), y) with z and g(z) detached (the personal head learns
  the residual of the generic one and trains nothing else).
Both losses are summed per batch (their gradients touch disjoint parameters). Only phi
and g are uploaded; the server averages them by n_i (FedAvg). p_i stays in the client's
state; it starts at zero, so before a client trains its personal prediction is the
generic one (``personal_init = "initial_head"``: a copy of the initial generic head,
as PFLlib does).

Prediction: ``predict = "sum"`` (the paper's personalised model) g(z) + p_i(z);
``"generic"`` g(z) (the paper's generic model); ``"personal"`` p_i(z) alone, as FL-bench
evaluates. PFLlib's FedRoD otherwise follows the paper (the losses and the sum at
evaluation).
"""
from __future__ import annotations

import copy
from typing import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from ..models import SplitModel
from .base import (TRAIN, Algorithm, Client, FederationInfo, Param, ServerContext, load, sample_weights, snapshot,
                   weighted_average)

#: The stand-in for log 0 in the balanced-softmax loss (a class the client has no sample of).
LOG_ZERO = -1e9


def log_class_counts(counts: torch.Tensor) -> torch.Tensor:
    """log n_c as float32, with :data:`LOG_ZERO` for n_c = 0."""
    counts = counts.to(torch.float32)
    return torch.where(counts > 0, counts.clamp_min(1).log(), torch.full_like(counts, LOG_ZERO))


def balanced_softmax_loss(logits: torch.Tensor, y: torch.Tensor, log_counts: torch.Tensor) -> torch.Tensor:
    """The balanced-softmax cross-entropy CE(logits + log n_c, y) (Ren et al. 2020), in float32."""
    return F.cross_entropy(logits.float() + log_counts, y)


class TwoHeads(nn.Module):
    """phi with the generic head g and the personal head p: ``forward`` gives the logits of
    ``mode`` ("sum": g(z) + p(z), "generic": g(z), "personal": p(z))."""

    def __init__(self, model: SplitModel, personal: nn.Module, mode: str = "sum"):
        super().__init__()
        self.body, self.head, self.personal, self.mode = model.body, model.head, personal, mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.body(x)
        if self.mode == "generic":
            return self.head(z)
        if self.mode == "personal":
            return self.personal(z)
        return self.head(z) + self.personal(z)


def rod_loss(log_counts: torch.Tensor):
    """The loss of one step (section 3): the generic model (phi, g) on the balanced softmax,
    the personal head on the rest, CE(g(z) + p(z), y) with z and g(z) detached; their sum
    (the two gradients touch disjoint parameters)."""

    def loss(net: TwoHeads, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        z = net.body(x)
        generic = net.head(z)
        own = net.personal(z.detach())
        return balanced_softmax_loss(generic, y, log_counts) + F.cross_entropy((generic.detach() + own).float(), y)

    return loss


class FedRoD(Algorithm):
    name = "fedrod"
    paper = "Chen & Chao, ICLR 2022"
    hyperparams = {
        "predict": Param("sum", choices=("sum", "generic", "personal"),
                         doc="the prediction: g(z) + p_i(z) (the paper), g(z) alone, or p_i(z) alone (FL-bench)"),
        "personal_init": Param("zero", choices=("zero", "initial_head"),
                               doc="p_i before training: zero, or the initial generic head (PFLlib)"),
    }

    def init(self, model: SplitModel, info: FederationInfo) -> dict:
        state = {"body": snapshot(model.body), "head": snapshot(model.head)}
        if self.personal_init == "initial_head":
            state["personal_init"] = snapshot(model.head)
        return state

    def payload(self, state: dict, client_id: int, purpose: str = TRAIN) -> dict:
        return dict(state)

    def client_modules(self, model: SplitModel) -> dict[str, nn.Module]:
        return {"personal_head": copy.deepcopy(model.head)}

    def personal_head(self, payload: dict, client: Client) -> nn.Module:
        """p_i from the client's state (zero or the initial head before its first round)."""
        head = client.modules["personal_head"]
        if "personal_head" in client.state:
            return load(head, client.state["personal_head"])
        if "personal_init" in payload:
            return load(head, payload["personal_init"])
        with torch.no_grad():
            for p in head.parameters():
                p.zero_()
        return head

    def local_update(self, payload: dict, client: Client) -> dict:
        model = client.model
        load(model.body, payload["body"])
        load(model.head, payload["head"])
        personal = self.personal_head(payload, client)
        log_counts = log_class_counts(client.class_counts()).to(client.x.device)
        both = TwoHeads(model, personal)
        loss = client.train(both.parameters(), model=both, loss_fn=rod_loss(log_counts))
        client.state["personal_head"] = snapshot(personal)
        return {"body": snapshot(model.body), "head": snapshot(model.head), "num_samples": client.num_samples,
                "loss": loss}

    def aggregate(self, state: dict, updates: Mapping[int, dict], ctx: ServerContext) -> dict:
        ids, weights = sample_weights(updates)
        return {**state, "body": weighted_average([updates[c]["body"] for c in ids], weights),
                "head": weighted_average([updates[c]["head"] for c in ids], weights)}

    def predictor(self, payload: dict, client: Client) -> nn.Module:
        model = client.model
        load(model.body, payload["body"])
        load(model.head, payload["head"])
        return TwoHeads(model, self.personal_head(payload, client), str(self.predict))

    def shared_predictor(self, state: dict, model: SplitModel) -> nn.Module | None:
        if self.predict != "generic":
            return None
        load(model.body, state["body"])
        load(model.head, state["head"])
        return model


__all__ = ["FedRoD", "TwoHeads", "balanced_softmax_loss", "log_class_counts", "rod_loss", "LOG_ZERO"]
