"""Local-only: each client trains its own model on its own data; nothing is shared.
Every client starts from the same seeded initial model (FedPAC Table 1, "Local-only")."""
from __future__ import annotations

from typing import Mapping

from torch import nn

from ..models import SplitModel
from .base import TRAIN, Algorithm, Client, FederationInfo, ServerContext, load, snapshot


class Local(Algorithm):
    name = "local"
    paper = "Local-only baseline"

    def init(self, model: SplitModel, info: FederationInfo) -> dict:
        return {"init": snapshot(model)}

    def payload(self, state: dict, client_id: int, purpose: str = TRAIN) -> dict:
        return {"init": state["init"]}

    def local_update(self, payload: dict, client: Client) -> dict:
        model = load(client.model, client.state.get("model", payload["init"]))
        loss = client.train(model.parameters())
        client.state["model"] = snapshot(model)
        return {"num_samples": client.num_samples, "loss": loss}

    def aggregate(self, state: dict, updates: Mapping[int, dict], ctx: ServerContext) -> dict:
        return state

    def predictor(self, payload: dict, client: Client) -> nn.Module:
        return load(client.model, client.state.get("model", payload["init"]))
