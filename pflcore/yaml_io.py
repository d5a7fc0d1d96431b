"""Reading YAML as a user means it: ``5e-4`` is a number, a repeated key is an error, and a
broken, endless or enormous file is one sentence.

PyYAML follows YAML 1.1, where ``5e-4`` (no dot) and ``1e3`` are strings; YAML 1.2 and
every user read them as numbers. :func:`load_yaml` and :func:`read_yaml_file` resolve
them as floats; everything else is PyYAML's safe loader, except that a mapping repeating a
key (which PyYAML silently resolves to the last value) is refused naming the key and both
lines. Files are read only if they are regular files, and only up to :data:`MAX_YAML_BYTES`;
a document whose anchors and aliases would expand past :data:`MAX_YAML_NODES` values is
refused too (it would take as long to process as it were written out).
"""
from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError, shorten

#: The largest YAML file read (config files and presets are a few hundred bytes).
MAX_YAML_BYTES = 1 << 20
#: The most values (scalars, lists, mappings) a document may expand to through aliases.
MAX_YAML_NODES = 1_000_000


class _DuplicateKey(yaml.YAMLError):
    """A mapping that repeats a key (carries the key and both 1-based lines)."""

    def __init__(self, key: Any, first: int, second: int):
        super().__init__(f"the key {key!r} appears twice")
        self.key, self.first, self.second = key, first, second


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2's float syntax (``5e-4``, ``1E3``, ``.5``, ``-2.e+3``) that
    refuses a mapping repeating a key (keys brought in by a ``<<`` merge may be overridden,
    as YAML intends)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key, line = self.construct_object(key_node, deep=True), key_node.start_mark.line + 1
                try:
                    if key in seen:
                        raise _DuplicateKey(key, seen[key], line)
                    seen[key] = line
                except TypeError:  # an unhashable key: PyYAML's own error follows
                    continue
        return super().construct_mapping(node, deep=deep)


_Loader.yaml_implicit_resolvers = {k: list(v) for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?
                   |[-+]?\.(?:inf|Inf|INF)
                   |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."))


def load_yaml(text: str, source: str = "the YAML text") -> Any:
    """Parse ``text``; a syntax error (a tab, a bad indent) becomes one sentence naming
    ``source``, the line and the column; a repeated key names the key and both lines."""
    try:
        value = yaml.load(text, Loader=_Loader)
    except _DuplicateKey as exc:
        lines = f"line {exc.first}, twice" if exc.first == exc.second else f"lines {exc.first} and {exc.second}"
        raise ConfigError(f"{source} repeats the key {shorten(exc.key)} ({lines}); keep one of them.") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        if "'\\t'" in problem:
            problem = "a tab character, which YAML does not allow for indentation (indent with spaces)"
        raise ConfigError(f"{source} is not valid YAML{where}: {problem}.") from None
    except RecursionError:
        raise ConfigError(f"{source} nests its values too deeply to be a config.") from None
    if _expanded_size(value, {}, 0) > MAX_YAML_NODES:
        raise ConfigError(f"{source} expands through its aliases (*name) to more than {MAX_YAML_NODES} values, "
                          "which no config needs.")
    return value


def _expanded_size(value: Any, memo: dict[int, int], depth: int) -> int:
    """How many values ``value`` holds once every alias is written out (memoised by
    identity, so a document of shared references costs its own size to measure)."""
    if not isinstance(value, (list, dict)):
        return 1
    if id(value) in memo:
        return memo[id(value)]
    if depth > 200:  # a self-referential alias (or absurd nesting): as large as it gets
        return MAX_YAML_NODES + 1
    memo[id(value)] = MAX_YAML_NODES + 1  # a cycle through this value counts as too large
    items = list(value.keys()) + list(value.values()) if isinstance(value, dict) else value
    total = 1
    for item in items:
        total += _expanded_size(item, memo, depth + 1)
        if total > MAX_YAML_NODES:
            break
    memo[id(value)] = total
    return total


def read_yaml_file(path: str | Path, what: str = "config file", max_bytes: int = MAX_YAML_BYTES) -> Any:
    """Read and parse a YAML file; a missing path, a folder, something that is not a regular
    file (a FIFO, a device such as /dev/zero), a file larger than ``max_bytes`` or an
    unreadable file is one sentence naming it."""
    path = Path(path)
    name = shorten(str(path))
    try:
        exists = path.exists()
    except (OSError, ValueError):  # a path with a NUL byte, or too long for the system
        raise ConfigError(f"{what} {name} is not a path this system can open.") from None
    if not exists:
        raise ConfigError(f"{what} {name} does not exist.")
    if path.is_dir():
        raise ConfigError(f"{what} {name} is a folder, not a YAML file.")
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused just below
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise ConfigError(f"{what} {name} is not a regular file (a device, pipe or socket), so it is not "
                                  "read.")
            if info.st_size > max_bytes:
                raise ConfigError(f"{what} {name} is {info.st_size} bytes, more than the {max_bytes} a YAML file "
                                  "of settings may have.")
            with os.fdopen(fd, "rb", closefd=False) as stream:
                data = stream.read(max_bytes + 1)
        finally:
            os.close(fd)
        if len(data) > max_bytes:  # it grew while being read
            raise ConfigError(f"{what} {name} holds more than the {max_bytes} bytes a YAML file of settings may "
                              "have.")
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{what} {name} cannot be read ({exc.__class__.__name__}: "
                          f"{shorten(str(exc))[1:-1]}).") from None
    return load_yaml(text, f"{what} {name}")


__all__ = ["MAX_YAML_BYTES", "MAX_YAML_NODES", "load_yaml", "read_yaml_file"]
