"""FedBABU (Oh et al., ICLR 2022): during federation only the body is trained and
averaged; the head stays at its random initialisation. For inference each client
fine-tunes the head on its train data (``ft_epochs`` = 5, pFedFDA C.2) or, with
``ft_body=True``, the whole model."""
from __future__ import annotations

from typing import Mapping

from torch import nn

from ..models import SplitModel
from .base import (TRAIN, Algorithm, Client, FederationInfo, Param, ServerContext,
                   load, sample_weights, snapshot, weighted_average)


class FedBABU(Algorithm):
    name = "fedbabu"
    paper = "Oh et al., ICLR 2022"
    adapts_in_predictor = True  # a new client fine-tunes there, like every client (pFedFDA C.3)
    hyperparams = {"ft_epochs": Param(5, low=0, high=10000, doc="epochs of fine-tuning before evaluation"),
                   "ft_body": Param(False, doc="fine-tune the whole model, not only the head")}

    def init(self, model: SplitModel, info: FederationInfo) -> dict:
        return {"body": snapshot(model.body), "head": snapshot(model.head)}

    def payload(self, state: dict, client_id: int, purpose: str = TRAIN) -> dict:
        return {"body": state["body"], "head": state["head"]}

    def global_model(self, state_or_payload: dict, client: Client) -> SplitModel:
        load(client.model.body, state_or_payload["body"])
        load(client.model.head, state_or_payload["head"])
        return client.model

    def local_update(self, payload: dict, client: Client) -> dict:
        model = self.global_model(payload, client)
        loss = client.train(model.body.parameters())
        return {"body": snapshot(model.body), "num_samples": client.num_samples, "loss": loss}

    def aggregate(self, state: dict, updates: Mapping[int, dict], ctx: ServerContext) -> dict:
        ids, weights = sample_weights(updates)
        return {**state, "body": weighted_average([updates[c]["body"] for c in ids], weights)}

    def predictor(self, payload: dict, client: Client) -> nn.Module:
        model = self.global_model(payload, client)
        if self.ft_body:
            client.train(model.parameters(), epochs=int(self.ft_epochs))
        else:
            client.train_head_on_features(model.head, client.features(model), epochs=int(self.ft_epochs))
        return model
