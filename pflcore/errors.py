"""The error a user's bad input raises, and the one way its sentence quotes a value. This
module imports nothing else of pflcore, so every part of the library can raise it without
import cycles."""
from __future__ import annotations

import reprlib
from typing import Any


class ConfigError(ValueError):
    """A configuration value is not allowed; the message is one sentence naming the field,
    the value and what is allowed."""


_REPR = reprlib.Repr()
_REPR.maxstring = 80
_REPR.maxother = 80
_REPR.maxlong = 40
_REPR.maxlist = _REPR.maxtuple = _REPR.maxset = _REPR.maxfrozenset = _REPR.maxdeque = _REPR.maxarray = 6
_REPR.maxdict = 4
_REPR.maxlevel = 3


def shorten(value: Any) -> str:
    """``repr(value)`` cut to a readable size for an error sentence (``reprlib``: long
    strings, numbers and containers are elided with ``...``), so that quoting an enormous
    value costs no time or memory and the sentence stays one line."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        # repr of a huge int is quadratic (and Python refuses past 4300 digits)
        return f"<an integer of about {int(value.bit_length() * 0.30103) + 1} digits>"
    if isinstance(value, str):
        text = _REPR.repr(value)
    else:
        try:
            text = _REPR.repr(value)
        except Exception:  # a value whose repr raises: name its type
            text = f"<{type(value).__name__}>"
    return " ".join(text.split()) if "\n" in text else text


__all__ = ["ConfigError", "shorten"]
