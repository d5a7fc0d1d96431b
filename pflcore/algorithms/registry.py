"""The registry of methods by name (filled by :mod:`pflcore.algorithms`): a method that
builds on another (CCVR's base method) looks it up here without importing the package.

A method defined outside the package joins the registry with :func:`register` (from a
notebook or a script) or :func:`load_plugin` (``pflcore run cfg.yaml --plugin mymethod.py``
or ``--plugin mypackage.mymethod``): the file or module is imported, and every
:class:`~pflcore.algorithms.base.Algorithm` subclass it defines that is not registered yet is
registered by its ``name``.
"""
from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..spec import did_you_mean

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
        raise ConfigError(f"method {name!r} is unknown{did_you_mean(name, sorted(ALGORITHMS))}; choose one of "
                          f"{sorted(ALGORITHMS)}.")
    return ALGORITHMS[name](**params)


def load_plugin(where: str | Path) -> list[str]:
    """Import a method defined outside pflcore and register it; returns the names of the
    methods the file or module defines (those it registered itself included).

    ``where`` is a Python file (``mymethod.py``: its folder goes on ``sys.path`` and it is
    imported by its stem, so worker processes, which import a method's class by module name,
    find it too) or an importable module path (``mypackage.mymethod``). A method whose
    ``name`` is already taken by another class is refused, as is a file or module that
    defines no method; each in one sentence."""
    from .base import Algorithm

    text = str(where)
    path = Path(text).expanduser()
    if text.endswith(".py") or path.is_file():
        if not path.is_file():
            raise ConfigError(f"plugin {text!r}: there is no such file (give a Python file defining a method, or "
                              f"an importable module path such as mypackage.mymethod).")
        module_name, folder = path.stem, str(path.resolve().parent)
        if not module_name.isidentifier():
            raise ConfigError(f"plugin {text!r}: {module_name!r} is not a Python module name; rename the file "
                              f"(letters, digits and '_', not starting with a digit).")
        loaded = sys.modules.get(module_name)
        if loaded is not None and Path(getattr(loaded, "__file__", "") or "").resolve() != path.resolve():
            raise ConfigError(f"plugin {text!r}: a module named {module_name!r} is already imported from "
                              f"{getattr(loaded, '__file__', 'elsewhere')}; rename the file.")
        if folder not in sys.path:
            sys.path.insert(0, folder)
    else:
        module_name = text
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise ConfigError(f"plugin {text!r}: no file of that name and no importable module {exc.name!r} "
                              f"(give a path ending in .py, or put the module's folder on PYTHONPATH).") from exc
        raise
    defined = [cls for _, cls in inspect.getmembers(module, inspect.isclass)
               if issubclass(cls, Algorithm) and cls is not Algorithm and cls.__module__ == module.__name__]
    if not defined:
        raise ConfigError(f"plugin {text!r} defines no method: it needs a subclass of "
                          f"pflcore.algorithms.Algorithm with a 'name' (see docs/your_method.md).")
    for cls in defined:
        taken = ALGORITHMS.get(cls.name)
        if taken is not None and taken is not cls and taken.__module__ != cls.__module__:
            raise ConfigError(f"plugin {text!r}: its method {cls.__name__} is called {cls.name!r}, which is "
                              f"{taken.__module__}.{taken.__name__}'s name already; give it another 'name'.")
        if cls.name == "base":
            raise ConfigError(f"plugin {text!r}: its method {cls.__name__} needs a 'name' of its own "
                              f"(name = \"{cls.__name__.lower()}\").")
        register(cls)
    return [cls.name for cls in defined]


__all__ = ["ALGORITHMS", "load_plugin", "make_algorithm", "register"]
