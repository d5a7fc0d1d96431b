"""FedAvg (McMahan et al., 2017): every participant trains the whole global model for E
epochs; the server averages the models weighted by train size n_i."""
from __future__ import annotations

from typing import Mapping

from torch import nn

from ..models import SplitModel
from ..training import cross_entropy
from .base import (TRAIN, Algorithm, Client, FederationInfo, ServerContext,
                   load, sample_weights, snapshot, weighted_average)


class FedAvg(Algorithm):
    name = "fedavg"
    paper = "McMahan et al., AISTATS 2017"
    predicts_globally = True

    def init(self, model: SplitModel, info: FederationInfo) -> dict:
        return {"model": snapshot(model)}

    def payload(self, state: dict, client_id: int, purpose: str = TRAIN) -> dict:
        return {"model": state["model"]}

    def local_update(self, payload: dict, client: Client) -> dict:
        model = load(client.model, payload["model"])
        loss = client.train(model.parameters(), loss_fn=self.loss_fn(payload))
        return {"model": snapshot(model), "num_samples": client.num_samples, "loss": loss}

    def loss_fn(self, payload: dict):
        """The local objective; FedProx adds its proximal term here."""
        return cross_entropy

    def aggregate(self, state: dict, updates: Mapping[int, dict], ctx: ServerContext) -> dict:
        ids, weights = sample_weights(updates)
        return {**state, "model": weighted_average([updates[c]["model"] for c in ids], weights)}

    def shared_predictor(self, state: dict, model: SplitModel) -> nn.Module:
        return load(model, state["model"])

    def predictor(self, payload: dict, client: Client) -> nn.Module:
        return load(client.model, payload["model"])
