"""The error a user's bad input raises. This module imports nothing else of pflcore, so
every part of the library can raise it without import cycles."""
from __future__ import annotations


class ConfigError(ValueError):
    """A configuration value is not allowed; the message is one sentence naming the field,
    the value and what is allowed."""


__all__ = ["ConfigError"]
