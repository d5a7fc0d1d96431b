"""LG-FedAvg (Liang et al., 2020): local representation (the body is personal), global
head averaged over participants; the whole model trains jointly for E epochs."""
from __future__ import annotations

from .fedper import PartialSharing


class LGFedAvg(PartialSharing):
    name = "lg_fedavg"
    paper = "Liang et al., arXiv 2020"
    shared = "head"
