"""Methods that share one part of the model and keep the other part personal.

- FedPer (Arivazhagan et al., 2019): the body is shared and averaged, the head is
  personal and never leaves the client; body and head train jointly for E epochs.
- LG-FedAvg (``lg_fedavg.py``) is the mirror image on the same base class.

The personal part lives in the client's state; before a client's first participation it
starts from the initial model's weights.
"""
from __future__ import annotations

from typing import ClassVar, Mapping

from torch import nn

from ..models import SplitModel
from .base import (TRAIN, Algorithm, Client, FederationInfo, ServerContext,
                   load, sample_weights, snapshot, weighted_average)


class PartialSharing(Algorithm):
    """Share ``shared`` ("body" or "head"), keep the other part personal; train both jointly."""

    shared: ClassVar[str] = "body"

    @property
    def personal(self) -> str:
        return "head" if self.shared == "body" else "body"

    def init(self, model: SplitModel, info: FederationInfo) -> dict:
        return {self.shared: snapshot(getattr(model, self.shared)),
                f"init_{self.personal}": snapshot(getattr(model, self.personal))}

    def payload(self, state: dict, client_id: int, purpose: str = TRAIN) -> dict:
        return dict(state)

    def personal_model(self, state_or_payload: dict, client: Client) -> SplitModel:
        """The scratch model holding the shared part and the client's personal part (the
        initial one before its first participation)."""
        model = client.model
        load(getattr(model, self.shared), state_or_payload[self.shared])
        load(getattr(model, self.personal), client.state.get(self.personal, state_or_payload[f"init_{self.personal}"]))
        return model

    def local_update(self, payload: dict, client: Client) -> dict:
        model = self.personal_model(payload, client)
        loss = client.train(model.parameters())
        return self.upload(model, client, loss)

    def upload(self, model: SplitModel, client: Client, loss: float) -> dict:
        """Keep the personal part in the client's state; send the shared part."""
        client.state[self.personal] = snapshot(getattr(model, self.personal))
        return {self.shared: snapshot(getattr(model, self.shared)), "num_samples": client.num_samples, "loss": loss}

    def aggregate(self, state: dict, updates: Mapping[int, dict], ctx: ServerContext) -> dict:
        ids, weights = sample_weights(updates)
        return {**state, self.shared: weighted_average([updates[c][self.shared] for c in ids], weights)}

    def predictor(self, payload: dict, client: Client) -> nn.Module:
        return self.personal_model(payload, client)


class FedPer(PartialSharing):
    name = "fedper"
    paper = "Arivazhagan et al., arXiv 2019"
    shared = "body"

