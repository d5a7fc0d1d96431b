"""pflcore: a small, reproducible core for personalised federated learning with feature
alignment (FedPAC, FedCP, FedFA, pFedFDA and their baselines).

    >>> import pflcore
    >>> result = pflcore.run({"method": "fedavg", "rounds": 5})  # doctest: +SKIP
"""
from __future__ import annotations

__version__ = "0.1.0"

from .config import ExperimentConfig
from .errors import ConfigError
from .engine import RunResult, run, sweep
from . import analysis as _analysis  # noqa: F401,E402  (registers the analyses' run hooks: FedFA's feature probe)

__all__ = ["ConfigError", "ExperimentConfig", "RunResult", "__version__", "run", "sweep"]
