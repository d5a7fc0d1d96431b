"""Declared hyperparameters: each method lists its parameters once, with type, range and
choices, and every value is checked before any work starts.

A method declares ``hyperparams = {"lam": Param(1.0, low=0), "solver": Param("CLARABEL",
choices=...)}``; :class:`~pflcore.algorithms.base.Algorithm` derives ``defaults`` from it
and refuses a bad value with one sentence naming the parameter, the value and what is
allowed. ``Param`` is :class:`pflcore.spec.Field`, the one spec of every user-facing field
(config fields, partition and shift parameters alike): numbers must be finite; an integer
parameter takes whole numbers only (``1.5`` is refused, never truncated); a boolean takes
``true``/``false`` only.
"""
from __future__ import annotations

from typing import Any

from ..errors import ConfigError, shorten
from ..spec import Field, first_refusal, unknown_name

#: A method's parameter: the one field spec (default first: ``Param(1.0, low=0, doc=...)``).
Param = Field


def check_hyperparams(method: str, spec: dict[str, Field], values: Any) -> None:
    """Raise :class:`ConfigError` (one sentence) for the first unknown or bad value."""
    if not isinstance(values, dict):
        raise ConfigError(f"config field 'method_params' = {shorten(values)} is not allowed: it must be a mapping of "
                          f"{method!r}'s parameters {sorted(spec) or '(it has none)'}.")
    unknown = next((key for key in values if key not in spec), None)
    if unknown is not None:
        raise ConfigError(unknown_name(f"method {method!r}", unknown, spec))
    refusal = first_refusal(spec, values)
    if refusal:
        raise ConfigError(refusal.within("method_params").sentence("config field", f" for method {method!r}"))


__all__ = ["Param", "check_hyperparams"]
