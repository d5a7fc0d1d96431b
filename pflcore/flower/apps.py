"""Module-level Flower apps, for ``flwr run`` and the deployment engine.

A Flower App's ``pyproject.toml`` points at them::

    [tool.flwr.app.components]
    serverapp = "pflcore.flower.apps:server_app"
    clientapp = "pflcore.flower.apps:client_app"

    [tool.flwr.app.config]
    config = "experiment.yaml"   # an ExperimentConfig as a YAML/JSON file (absolute path) or JSON
    overwrite = false
    timeout = 0.0                # seconds per exchange; 0: wait for every reply
    min-nodes = 1                # wait for this many SuperNodes before the first round
    join-timeout = 120.0         # ... at most this long
    threads = 0                  # torch threads per client job; 0: the node's default
    report = ""                  # if set, a JSON file for the summary and who served whom

``pflcore.flower.deploy`` writes such an app and runs it on local processes.
"""
from __future__ import annotations

from pathlib import Path

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from ..engine.results import atomic_write_json
from .app import _as_config, make_client_app, serve

RUN_CONFIG_DEFAULTS = {"config": "", "overwrite": False, "timeout": 0.0, "min-nodes": 1,
                       "join-timeout": 120.0, "threads": 0, "report": ""}

server_app = ServerApp()
client_app = make_client_app()


@server_app.main()
def main(grid: Grid, context: Context) -> None:
    """Run the experiment named by the run config's ``config`` (results in its output_dir)."""
    rc = {**RUN_CONFIG_DEFAULTS, **dict(context.run_config)}
    if not rc["config"]:
        raise ValueError("the run config needs `config`: a path to an experiment YAML/JSON file, or its JSON.")
    timeout = float(rc["timeout"])
    result = serve(grid, _as_config(rc["config"]), overwrite=bool(rc["overwrite"]),
                   timeout=timeout if timeout > 0 else None, min_nodes=int(rc["min-nodes"]),
                   join_timeout=float(rc["join-timeout"]), threads=int(rc["threads"]))
    if rc["report"]:
        atomic_write_json(Path(str(rc["report"])), {"path": str(result.path), "summary": result.summary,
                                                    "flower": result.extras.get("flower", {})})
    print(f"pflcore: {result.config.method} finished, acc_mean {result.summary['acc_mean']:.2f}, "
          f"results in {result.path}", flush=True)


__all__ = ["RUN_CONFIG_DEFAULTS", "client_app", "server_app"]
