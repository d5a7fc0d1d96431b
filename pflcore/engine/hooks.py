"""Run hooks: what a run measures beside the method, without the engine naming a paper.

A :class:`RunHook` is called by the engine at fixed points of a round; it may add numbers to
the round's record but never changes training (the numbers of a run with a hook are those
of the run without it). A hook has two halves:

- the client half, :meth:`RunHook.measure`, runs wherever the client's train job runs (in
  this process, a worker process, a Flower node), right after the method's
  ``local_update``, on the model the method trained; what it returns travels back inside
  the update under :attr:`RunHook.key` and is taken out before the method aggregates, so a
  hook must pickle;
- the server half (:meth:`round_start`, :meth:`round_end`, :meth:`evaluated`) runs in the
  engine's process with the simulation.

Hooks are made per run from its config by the factories registered with
:func:`register_hook` (a factory returns ``None`` when the config does not ask for its
hook). FedFA's feature probe (``config.feature_probe``) is registered by
:mod:`pflcore.analysis.features`; new-client scoring (``config.new_clients``) by
:mod:`pflcore.engine.evaluation`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from ..algorithms.base import Client
    from ..config import ExperimentConfig
    from ..data.federated import FederatedData
    from .simulation import Simulation


class RunHook:
    """Base class: override the calls the hook needs; each default does nothing."""

    #: where the client half's measurement travels in a train job's update
    key: str = ""

    def measure(self, update: dict, client: "Client") -> Any:
        """Client side, after ``local_update``: a measurement of ``client.model`` (the model
        the method trained), or ``None`` for nothing."""
        return None

    def round_start(self, sim: "Simulation", round_index: int) -> None:
        """Server side, before the round's payloads go out."""

    def round_end(self, sim: "Simulation", round_index: int, record: dict, measured: dict[int, Any]) -> None:
        """Server side, after the round's local updates and before aggregation: ``measured``
        holds each answering participant's :meth:`measure` result; add numbers to ``record``."""

    def evaluated(self, sim: "Simulation", round_index: int, record: dict) -> None:
        """Server side, after the round's evaluation was recorded (evaluated rounds only)."""


HookFactory = Callable[["ExperimentConfig", "FederatedData"], "RunHook | None"]

_FACTORIES: dict[str, HookFactory] = {}


def register_hook(name: str, factory: HookFactory) -> None:
    """Make ``factory(config, data)`` part of every run: it returns the run's hook, or None
    when the config does not ask for it. Registering a name again replaces its factory."""
    _FACTORIES[name] = factory


def hooks_for(config: "ExperimentConfig", data: "FederatedData") -> list[RunHook]:
    """The hooks of a run, in registration order."""
    return [hook for factory in _FACTORIES.values() if (hook := factory(config, data)) is not None]


def measure(hooks: list[RunHook], update: Any, client: "Client") -> None:
    """The client halves: each hook's measurement goes into ``update`` under its key."""
    if not isinstance(update, dict):
        return
    for hook in hooks:
        value = hook.measure(update, client)
        if value is not None:
            update[hook.key] = value


def take_measurements(hooks: list[RunHook], updates: dict[int, dict]) -> dict[str, dict[int, Any]]:
    """The hooks' measurements taken out of the updates (before the method sees them)."""
    return {hook.key: {cid: u.pop(hook.key) for cid, u in updates.items() if hook.key in u}
            for hook in hooks if hook.key}


__all__ = ["HookFactory", "RunHook", "hooks_for", "measure", "register_hook", "take_measurements"]
