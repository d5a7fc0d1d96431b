"""FedProc (Mu, Shen, Cheng, Geng, Fu, Zhang, Yu, Zhang, "FedProc: Prototypical
contrastive federated learning on non-IID data", Future Generation Computer Systems 2023;
arXiv 2109.12273): the local loss mixes cross-entropy with a prototypical contrastive loss
towards global class prototypes, shifting from the latter to the former over the run.

Client in round t = 1..T (T: the run's rounds), with z = phi(x) the body's features:

    loss = (t/T) CE(head(z), y) + (1 - t/T) l_pc,
    l_pc = -log softmax_c( cos(z, p_c) / tau )[y]          (averaged over the batch)

over the global prototypes p_1..p_C it received (the weighting as FedFA's appendix eq. 21
and its code: ``alpha = 1 - (global_round + 1) / r`` on the contrastive term with a
0-based round, so CE weighs 1/T in the first round and the last round, t = T, is plain
cross-entropy: FedAvg's local update exactly; past T the weight stays 1). After local
training the client computes its class-mean features of the trained model over its whole
train set (FedProc's "updated by the whole local dataset at the end of one communication
round", as FedFA's appendix describes it) and uploads them with its class counts. The
server averages the model by n_i (FedAvg) and, per class c held by some participant,
pools the means weighted by class counts (the class mean over the participants' data),
m_c, and updates

    p_c <- lambda p_c + (1 - lambda) m_c                  (``momentum`` = lambda = 0.5)

FedFA's paper says it "improves FedProc with momentum update (8)" because plain
replacement (lambda = 0, FedProc's own rule) diverged in its runs; its eq. 8 is a
momentum over local epochs inside FedFA's own anchor update (its code: per local epoch
e <- lambda e + (1 - lambda) m_epoch, starting from the received anchor, then an
n_i-weighted server mean); here the momentum acts once per round on the server, as above.
Classes no participant holds keep their prototype.

Classes with no prototype yet. Before a class has been seen by any participant (all
classes in round 1) its prototype is FedFA's initial anchor: rows of the identity at C
distinct feature coordinates drawn from the run's seed (normalised Gaussian rows if
C > d). The first pooled mean of a class REPLACES that initial anchor (no momentum
towards an arbitrary vector); later ones follow the momentum rule. So every class
always has a prototype and l_pc is defined from the first round.

What FedFA's code actually ran (``fedproc_optimizer``, ``utils/ContrastiveLoss.py``),
for the record: the scores are dot products z . p_c without normalisation or temperature;
the prototypes are never updated (the update is commented out and the anchors are not in
the optimiser), so its FedProc trained against fixed one-hot anchors throughout.
``variant = "fedfa_code"`` runs that algorithm, to put FedFA's FedProc rows beside this
one: l_pc = -log softmax_c(z . p_c)[y] against the initial anchors, which never change
(the same t/T weighting, no class means uploaded). FedProc has no public code. The
contrastive term here acts on the body's features (no separate projection head).
"""
from __future__ import annotations

from typing import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from ..models import SplitModel
from ..streams import FEDPROC_PROTOTYPE_KEY as _PROTOTYPE_KEY
from ..training import INIT_KEY, Batch, generator_for
from .base import (TRAIN, Algorithm, Client, FederationInfo, Param, ServerContext, load, sample_weights, snapshot,
                   weighted_average)



def initial_prototypes(num_classes: int, dim: int, generator: torch.Generator) -> torch.Tensor:
    """FedFA's anchor initialisation: C distinct rows of the d x d identity (C <= d), else
    C normalised Gaussian rows."""
    if num_classes <= dim:
        index = torch.randperm(dim, generator=generator)[:num_classes]
        return torch.eye(dim)[index]
    return F.normalize(torch.randn(num_classes, dim, generator=generator), dim=1)


def prototype_loss(z: torch.Tensor, y: torch.Tensor, prototypes: torch.Tensor, tau: float) -> torch.Tensor:
    """l_pc = -log softmax_c(cos(z, p_c) / tau)[y], averaged over the batch, in float32."""
    logits = F.normalize(z.float(), dim=1, eps=1e-8) @ F.normalize(prototypes.float(), dim=1, eps=1e-8).T
    return F.cross_entropy(logits / tau, y)


def class_means(z: torch.Tensor, y: torch.Tensor, num_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-class mean features (zero rows for absent classes) and class counts."""
    counts = torch.bincount(y, minlength=num_classes)
    sums = torch.zeros(num_classes, z.shape[1], dtype=torch.float64, device=z.device).index_add_(0, y, z.double())
    return (sums / counts.clamp(min=1)[:, None]).to(torch.float32), counts


def update_prototypes(prototypes: torch.Tensor, seen: torch.Tensor, means: list[torch.Tensor],
                      counts: list[torch.Tensor], momentum: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The server's prototype step: per class with a positive total count, the
    count-weighted mean m_c of the clients' class means; p_c <- m_c where the class was not
    seen before, else lambda p_c + (1 - lambda) m_c. Returns the new prototypes and seen
    mask (floats 0/1)."""
    total = torch.stack([c.double() for c in counts]).sum(0)
    pooled = sum(c.double()[:, None] * m.double() for m, c in zip(means, counts)) / total.clamp(min=1)[:, None]
    held, was_seen = total > 0, seen > 0
    mixed = torch.where(was_seen[:, None], momentum * prototypes.double() + (1 - momentum) * pooled, pooled)
    new = torch.where(held[:, None], mixed, prototypes.double()).to(prototypes.dtype)
    return new, (held | was_seen).to(seen.dtype)


class FedProc(Algorithm):
    name = "fedproc"
    paper = "Mu et al., Future Generation Computer Systems 2023"
    predicts_globally = True
    hyperparams = {
        "tau": Param(0.5, low=0, low_open=True, doc="tau, the temperature of the prototypical contrastive loss"),
        "momentum": Param(0.5, low=0, high=1,
                          doc="lambda in p <- lambda p + (1 - lambda) pooled mean (0: FedProc's replacement)"),
        "variant": Param("fedproc", choices=("fedproc", "fedfa_code"),
                         doc="fedproc: as its paper; fedfa_code: FedFA's code (fixed anchors, dot-product scores)"),
    }

    # -- server ------------------------------------------------------------------------
    def init(self, model: SplitModel, info: FederationInfo) -> dict:
        if info.rounds <= 0:
            raise ValueError("fedproc weighs its losses by t/T and needs the run's number of rounds T.")
        device = next(model.parameters()).device
        prototypes = initial_prototypes(info.num_classes, model.feature_dim,
                                        generator_for(info.seed, INIT_KEY, _PROTOTYPE_KEY))
        return {"model": snapshot(model), "prototypes": prototypes.to(device),
                "seen": torch.zeros(info.num_classes, device=device), "rounds": int(info.rounds)}

    def payload(self, state: dict, client_id: int, purpose: str = TRAIN) -> dict:
        if purpose == TRAIN:
            return {"model": state["model"], "prototypes": state["prototypes"], "rounds": state["rounds"]}
        return {"model": state["model"]}

    def aggregate(self, state: dict, updates: Mapping[int, dict], ctx: ServerContext) -> dict:
        ids, weights = sample_weights(updates)
        if self.variant == "fedfa_code":  # the anchors never move
            return {**state, "model": weighted_average([updates[c]["model"] for c in ids], weights)}
        prototypes, seen = update_prototypes(state["prototypes"], state["seen"],
                                             [updates[c]["class_means"] for c in ids],
                                             [updates[c]["class_counts"] for c in ids], float(self.momentum))
        return {**state, "model": weighted_average([updates[c]["model"] for c in ids], weights),
                "prototypes": prototypes, "seen": seen}

    # -- client ------------------------------------------------------------------------
    @staticmethod
    def ce_weight(round_index: int, rounds: int) -> float:
        """t/T with t = round_index + 1, capped at 1."""
        return min(1.0, (round_index + 1) / rounds)

    def local_update(self, payload: dict, client: Client) -> dict:
        model = load(client.model, payload["model"])
        w_ce = self.ce_weight(client.round, int(payload["rounds"]))
        prototypes, tau = payload["prototypes"], float(self.tau)
        fedfa_code = self.variant == "fedfa_code"
        params = list(model.parameters())
        step = client.sgd(params)

        def train_step(batch: Batch) -> torch.Tensor:
            with batch.precision():
                z = model.body(batch.x)
                loss = F.cross_entropy(model.head(z), batch.y)
            if w_ce < 1.0:
                contrastive = (F.cross_entropy(z.float() @ prototypes.float().T, batch.y) if fedfa_code
                               else prototype_loss(z, batch.y, prototypes, tau))
                loss = w_ce * loss + (1.0 - w_ce) * contrastive
            step(loss)
            return loss

        with client.trainable(model, params):
            loss = client.loop(train_step)
        update = {"model": snapshot(model), "num_samples": client.num_samples, "loss": loss}
        if fedfa_code:  # nothing to upload for anchors that never move
            return update
        features = client.features(model) if client.num_samples else torch.zeros(0, model.feature_dim,
                                                                                  device=client.x.device)
        update["class_means"], update["class_counts"] = class_means(features, client.y, client.num_classes)
        return update

    # -- prediction ----------------------------------------------------------------------
    def shared_predictor(self, state: dict, model: SplitModel) -> nn.Module:
        return load(model, state["model"])

    def predictor(self, payload: dict, client: Client) -> nn.Module:
        return load(client.model, payload["model"])


__all__ = ["FedProc", "class_means", "initial_prototypes", "prototype_loss", "update_prototypes"]
