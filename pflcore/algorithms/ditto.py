"""Ditto (Li, Hu, Beirami, Smith, ICML 2021): FedAvg for a global model w, plus a personal
model v_i per client pulled towards the global model it received.

Client round (the paper's Algorithm 1): from the received w, E epochs of cross-entropy give
w_i, which is uploaded (the server averages by n_i, as FedAvg). The personal model takes
E_p epochs of v_i <- v_i - eta (grad l(v_i) + lambda (v_i - w)), the reference being the
RECEIVED w (the term lambda (v_i - w) added to the gradient: :class:`pflcore.training.Pull`).
v_i starts from the first global model the client receives (the initial model under full
participation) and stays with the client; clients not sampled keep theirs.
Each step has its own SGD state (momentum buffers are not shared between w and v).

Both steps visit the client's batches in the same order (``client.fresh_generator``), so
the global trajectory is FedAvg's bit for bit and lambda = 0 gives Local-only's models.
"""
from __future__ import annotations

import copy

from torch import nn

from ..models import SplitModel
from ..training import Pull
from .base import Client, Param, load, snapshot
from .fedavg import FedAvg


class Ditto(FedAvg):
    name = "ditto"
    paper = "Li, Hu, Beirami, Smith, ICML 2021"
    predicts_globally = False
    hyperparams = {
        "lam": Param(1.0, low=0, doc="lambda, the pull of v_i towards the received global model"),
        "personal_epochs": Param(0, low=0, high=10000,
                                 doc="E_p, epochs of the personal step (0: the run's local epochs)"),
    }

    def client_modules(self, model: SplitModel) -> dict[str, nn.Module]:
        return {"personal": copy.deepcopy(model)}

    def local_update(self, payload: dict, client: Client) -> dict:
        personal_batches = client.fresh_generator()  # before the global step draws from the stream
        update = super().local_update(payload, client)
        v = load(client.modules["personal"], client.state.get("personal", payload["model"]))
        reference = [payload["model"][name] for name, _ in v.named_parameters()]
        epochs = self.personal_epochs or client.settings.epochs
        client.train(v.parameters(), model=v, epochs=epochs, generator=personal_batches,
                     pull=Pull(reference, float(self.lam)) if self.lam else None)
        client.state["personal"] = snapshot(v)
        return update

    def shared_predictor(self, state: dict, model: SplitModel) -> None:
        return None  # every client predicts with its own v_i

    def predictor(self, payload: dict, client: Client) -> nn.Module:
        return load(client.modules["personal"], client.state.get("personal", payload["model"]))
