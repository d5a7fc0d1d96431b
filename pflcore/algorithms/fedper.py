"""FedPer (Arivazhagan et al., 2019): the body is shared and averaged, the head is
personal and never leaves the client; body and head train jointly for E epochs."""
from __future__ import annotations

from torch import nn

from ..models import SplitModel
from .base import Algorithm, Client, FederationInfo, load, sample_weights, snapshot, weighted_average


class FedPer(Algorithm):
    name = "fedper"
    paper = "Arivazhagan et al., arXiv 2019"

    def init(self, model: SplitModel, info: FederationInfo) -> dict:
        return {"body": snapshot(model.body), "init_head": snapshot(model.head)}

    def payload(self, state: dict, client_id: int) -> dict:
        return {"body": state["body"], "init_head": state["init_head"]}

    def personal_model(self, body: dict, head: dict, client: Client) -> SplitModel:
        """The scratch model holding the given body and the client's head (or ``head``
        before the client's first participation)."""
        model = client.model
        load(model.body, body)
        load(model.head, client.state.get("head", head))
        return model

    def local_update(self, payload: dict, client: Client) -> dict:
        model = self.personal_model(payload["body"], payload["init_head"], client)
        loss = client.train(model.parameters())
        client.state["head"] = snapshot(model.head)
        return {"body": snapshot(model.body), "num_samples": client.num_samples, "loss": loss}

    def aggregate(self, state: dict, updates: dict) -> dict:
        ids, weights = sample_weights(updates)
        return {**state, "body": weighted_average([updates[c]["body"] for c in ids], weights)}

    def predictor(self, state: dict, client: Client) -> nn.Module:
        return self.personal_model(state["body"], state["init_head"], client)
