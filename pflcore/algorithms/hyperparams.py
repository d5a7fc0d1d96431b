"""Declared hyperparameters: each method lists its parameters once, with type, range and
choices, and every value is checked before any work starts.

A method declares ``hyperparams = {"lam": Param(1.0, low=0), "solver": Param("CLARABEL",
choices=...)}``; :class:`~pflcore.algorithms.base.Algorithm` derives ``defaults`` from it
and refuses a bad value with one sentence naming the parameter, the value and what is
allowed. Numbers must be finite; an integer parameter takes whole numbers only (``1.5``
is refused, never truncated); a boolean takes ``true``/``false`` only.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..errors import ConfigError, shorten


@dataclass(frozen=True)
class Param:
    """One hyperparameter: its default (whose Python type is the parameter's type: bool,
    int, float, str, or dict for a mapping its method checks further), an optional range
    ``[low, high]`` (``low_open``/``high_open`` make an end exclusive), optional ``choices``
    (a sequence, or a function returning one, for choices known only at run time, such as
    the installed solvers) and a short ``doc``."""

    default: Any
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    choices: Sequence[Any] | Callable[[], Sequence[Any]] | None = None
    doc: str = ""

    @property
    def kind(self) -> type:
        return type(self.default)

    def allowed(self) -> str:
        """What this parameter accepts, as words for an error message."""
        if self.kind is bool:
            return "it must be true or false"
        if self.kind is dict:
            return "it must be a mapping"
        if self.choices is not None:
            return f"choose one of {list(self._choices())}"
        what = {int: "a whole number", float: "a finite number", str: "a string"}[self.kind]
        if self.low is not None and self.high is not None:
            left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
            return f"it must be {what} in {left}{self.low:g}, {self.high:g}{right}"
        if self.low is not None:
            return f"it must be {what} {'>' if self.low_open else '>='} {self.low:g}"
        if self.high is not None:
            return f"it must be {what} {'<' if self.high_open else '<='} {self.high:g}"
        return f"it must be {what}"

    def accepts(self, value: Any) -> bool:
        if self.kind is bool:
            return isinstance(value, bool)
        if self.kind is dict:
            return isinstance(value, dict)
        if self.choices is not None:
            return isinstance(value, str) and value in self._choices()
        if self.kind is str:
            return isinstance(value, str)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.kind is int and not isinstance(value, int):
            return False
        if not math.isfinite(value if isinstance(value, float) else 0.0) or abs(value) > 1.7e308:
            return False  # NaN, infinity, or an integer too large to be a float (math.isfinite raises)
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        if self.high is not None and (value >= self.high if self.high_open else value > self.high):
            return False
        return True

    def _choices(self) -> Sequence[Any]:
        return self.choices() if callable(self.choices) else self.choices


def check_hyperparams(method: str, spec: dict[str, Param], values: Any) -> None:
    """Raise :class:`ConfigError` (one sentence) for the first unknown or bad value."""
    if not isinstance(values, dict):
        raise ConfigError(f"config field 'method_params' = {shorten(values)} is not allowed: it must be a mapping of "
                          f"{method!r}'s parameters {sorted(spec) or '(it has none)'}.")
    for key, value in values.items():
        if key not in spec:
            raise ConfigError(f"method {method!r} has no parameter {shorten(key)}; its parameters are "
                              f"{sorted(spec) or 'none'}.")
        if not spec[key].accepts(value):
            raise ConfigError(f"config field 'method_params.{key}' = {shorten(value)} is not allowed for method "
                              f"{method!r}: {spec[key].allowed()}.")


__all__ = ["Param", "check_hyperparams"]
