"""FedAvg-FT: FedAvg training; before evaluation each client fine-tunes the global model
on its own train data (FedPAC section 5, pFedFDA appendix C.3: 5 local epochs)."""
from __future__ import annotations

from torch import nn

from ..models import SplitModel
from .base import Client, Param, load
from .fedavg import FedAvg


class FedAvgFT(FedAvg):
    name = "fedavg_ft"
    paper = "FedAvg + local fine-tuning (Xu et al. ICLR 2023, Table 1)"
    predicts_globally = False
    trains_as = "fedavg"  # FedAvg's training exactly; only the predictor differs
    adapts_in_predictor = True  # a new client fine-tunes there, like every client (pFedFDA C.3)
    hyperparams = {"ft_epochs": Param(5, low=0, high=10000, doc="epochs of local fine-tuning before evaluation")}

    def shared_predictor(self, state: dict, model: SplitModel) -> None:
        return None

    def predictor(self, payload: dict, client: Client) -> nn.Module:
        model = load(client.model, payload["model"])
        client.train(model.parameters(), epochs=int(self.ft_epochs))
        return model
