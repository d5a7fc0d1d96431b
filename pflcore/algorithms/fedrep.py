"""FedRep (Collins et al., ICML 2021): shared body, personal head, trained alternately:
first the head for ``head_epochs`` with the body frozen, then the body for E epochs with
the head frozen. Only the body is averaged. ``head_epochs`` = 5 as in pFedFDA C.2
(FedRep's paper uses 10)."""
from __future__ import annotations

from .base import Client, Param
from .fedper import FedPer


class FedRep(FedPer):
    name = "fedrep"
    paper = "Collins et al., ICML 2021"
    hyperparams = {"head_epochs": Param(5, low=0, high=10000, doc="head epochs (body frozen) before the body epochs")}

    def local_update(self, payload: dict, client: Client) -> dict:
        model = self.personal_model(payload, client)
        # Head phase: with the body frozen, training on fixed features is exact and cheap.
        client.train_head_on_features(model.head, client.features(model), epochs=int(self.head_epochs))
        loss = client.train(model.body.parameters())
        return self.upload(model, client, loss)
