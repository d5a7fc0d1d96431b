"""Federated-learning methods, one file each, all implementing :class:`Algorithm`."""
from __future__ import annotations

from .base import Algorithm, Client, FederationInfo, Param, ServerContext
from .apfl import APFL
from .ccvr import CCVR
from .ditto import Ditto
from .fedamp import FedAMP
from .fedavg import FedAvg
from .fedavg_ft import FedAvgFT
from .fedbabu import FedBABU
from .fedcp import FedCP
from .feddyn import FedDyn
from .fedem import FedEM, FedEMFT
from .fedfa import FedFA
from .fedfomo import FedFomo
from .fedpac import FedPAC
from .fedphp import FedPHP
from .fedper import FedPer
from .fedproto import FedProto
from .fedproc import FedProc
from .fedprox import FedProx
from .fedrep import FedRep
from .fedrod import FedRoD
from .hypcluster import HypCluster
from .knn_per import KNNPer
from .lg_fedavg import LGFedAvg
from .local import Local
from .moon import MOON
from .perfedavg import PerFedAvg
from .pfedfda import PFedFDA
from .pfedhn import PFedHN
from .pfedme import PFedMe
from .scaffold import SCAFFOLD
from .registry import ALGORITHMS, load_plugin, make_algorithm, register

register(Local, FedAvg, FedAvgFT, FedProx, FedPer, FedRep, LGFedAvg, FedBABU, FedPAC, Ditto, PFedMe, PFedHN, APFL, CCVR,
         FedCP, FedFomo, FedPHP, PerFedAvg, FedAMP, FedRoD, KNNPer, HypCluster, FedEM, FedEMFT, FedProto, FedFA,
         SCAFFOLD, FedDyn, MOON, FedProc, PFedFDA)


__all__ = ["ALGORITHMS", "Algorithm", "Client", "FederationInfo", "Param", "ServerContext", "load_plugin",
           "make_algorithm", "register",
           *[c.__name__ for c in ALGORITHMS.values()]]
