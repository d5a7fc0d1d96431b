"""Reading YAML as a user means it: ``5e-4`` is a number, and a broken file is one sentence.

PyYAML follows YAML 1.1, where ``5e-4`` (no dot) and ``1e3`` are strings; YAML 1.2 and
every user read them as numbers. :func:`load_yaml` and :func:`read_yaml_file` resolve
them as floats; everything else is PyYAML's safe loader.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2's float syntax (``5e-4``, ``1E3``, ``.5``, ``-2.e+3``)."""


_Loader.yaml_implicit_resolvers = {k: list(v) for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?
                   |[-+]?\.(?:inf|Inf|INF)
                   |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."))


def load_yaml(text: str, source: str = "the YAML text") -> Any:
    """Parse ``text``; a syntax error (a tab, a bad indent) becomes one sentence naming
    ``source``, the line and the column."""
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        if "'\\t'" in problem:
            problem = "a tab character, which YAML does not allow for indentation (indent with spaces)"
        raise ConfigError(f"{source} is not valid YAML{where}: {problem}.") from None


def read_yaml_file(path: str | Path, what: str = "config file") -> Any:
    """Read and parse a YAML file; a missing path, a folder or an unreadable file is one
    sentence naming it."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{what} {str(path)!r} does not exist.")
    if path.is_dir():
        raise ConfigError(f"{what} {str(path)!r} is a folder, not a YAML file.")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{what} {str(path)!r} cannot be read ({exc.__class__.__name__}: {exc}).") from None
    return load_yaml(text, f"{what} {str(path)!r}")


__all__ = ["load_yaml", "read_yaml_file"]
