"""Run any pflcore method on Flower (optional extra: ``pip install -e .[flower]``).

The methods know nothing about Flower: the engine's rounds, participation, evaluation,
checkpoints and results directory stay in :func:`pflcore.engine.simulation.run`, and only
the clients' work travels as Flower messages (:class:`~pflcore.flower.app.GridExecutor`).

- :func:`simulate`: one experiment on Flower's simulation engine, in this process; returns
  the same :class:`~pflcore.engine.results.RunResult` and results directory as ``pflcore.run``.
- :func:`make_server_app` / :func:`make_client_app`: the Flower apps for a config;
  ``pflcore.flower.apps`` holds module-level ones for ``flwr run`` and the deployment engine.
- ``python -m pflcore.flower.deploy``: a SuperLink and N SuperNodes on 127.0.0.1 running
  the same experiment (:mod:`pflcore.flower.deploy`).
- :func:`encode` / :func:`decode`: the codec between pflcore values and Flower records.

Importing this package switches off everything in Flower and Ray that would reach outside
the machine (telemetry, update checks, usage statistics, runtime dependency installation)
and points ``FLWR_HOME`` at a temporary folder unless it is set. ``import pflcore`` never
imports Flower.
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

#: Environment that keeps Flower and Ray on this machine (set before flwr is imported).
OFFLINE_ENV = {
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "RAY_USAGE_STATS_ENABLED": "0",
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
}


def _default_flwr_home() -> str:
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    return str(Path(tempfile.gettempdir()) / f"pflcore-flwr-home-{uid}")


os.environ.update(OFFLINE_ENV)
os.environ.setdefault("FLWR_HOME", _default_flwr_home())
if "flwr.supercore.telemetry" in sys.modules:  # flwr imported before us: it read the flag already
    sys.modules["flwr.supercore.telemetry"].FLWR_TELEMETRY_ENABLED = "0"

try:
    import flwr  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("pflcore.flower needs Flower: install the extra with `pip install -e .[flower]` "
                      f"(flwr[simulation]>=1.41,<1.43); importing flwr failed: {exc}") from exc

from .app import (ClientsFailed, GridExecutor, assign_clients, make_client_app, make_server_app,  # noqa: E402
                  serve, simulate)
from .codec import CodecError, decode, encode  # noqa: E402

__all__ = ["OFFLINE_ENV", "ClientsFailed", "CodecError", "GridExecutor", "assign_clients", "decode", "encode",
           "make_client_app", "make_server_app", "serve", "simulate"]
