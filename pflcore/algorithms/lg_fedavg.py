"""LG-FedAvg (Liang et al., 2020): local representation (the body is personal), global
head averaged over participants; the whole model trains jointly for E epochs."""
from __future__ import annotations

from torch import nn

from ..models import SplitModel
from .base import Algorithm, Client, FederationInfo, load, sample_weights, snapshot, weighted_average


class LGFedAvg(Algorithm):
    name = "lg_fedavg"
    paper = "Liang et al., arXiv 2020"

    def init(self, model: SplitModel, info: FederationInfo) -> dict:
        return {"head": snapshot(model.head), "init_body": snapshot(model.body)}

    def payload(self, state: dict, client_id: int) -> dict:
        return {"head": state["head"], "init_body": state["init_body"]}

    def personal_model(self, head: dict, init_body: dict, client: Client) -> SplitModel:
        load(client.model.body, client.state.get("body", init_body))
        load(client.model.head, head)
        return client.model

    def local_update(self, payload: dict, client: Client) -> dict:
        model = self.personal_model(payload["head"], payload["init_body"], client)
        loss = client.train(model.parameters())
        client.state["body"] = snapshot(model.body)
        return {"head": snapshot(model.head), "num_samples": client.num_samples, "loss": loss}

    def aggregate(self, state: dict, updates: dict) -> dict:
        ids, weights = sample_weights(updates)
        return {**state, "head": weighted_average([updates[c]["head"] for c in ids], weights)}

    def predictor(self, state: dict, client: Client) -> nn.Module:
        return self.personal_model(state["head"], state["init_body"], client)
