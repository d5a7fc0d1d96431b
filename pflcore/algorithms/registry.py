"""The registry of methods by name (filled by :mod:`pflcore.algorithms`): a method that
builds on another (CCVR's base method) looks it up here without importing the package."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import ConfigError

if TYPE_CHECKING:
    from .base import Algorithm

ALGORITHMS: dict[str, type["Algorithm"]] = {}


def register(*classes: type["Algorithm"]) -> None:
    """Make methods known by their ``name``."""
    for cls in classes:
        ALGORITHMS[cls.name] = cls


def make_algorithm(name: str, **params: Any) -> "Algorithm":
    """Instantiate a registered method with its hyperparameters."""
    if name not in ALGORITHMS:
        raise ConfigError(f"method {name!r} is unknown; choose one of {sorted(ALGORITHMS)}.")
    return ALGORITHMS[name](**params)


__all__ = ["ALGORITHMS", "make_algorithm", "register"]
