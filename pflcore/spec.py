"""One validation vocabulary for every field a user sets (issue 31).

The run config (:mod:`pflcore.config`), every partition kind's parameters
(:mod:`pflcore.data.partition`), every shift's parameters (:mod:`pflcore.data.shifts`) and
every method's parameters (:mod:`pflcore.algorithms.hyperparams`, whose ``Param`` is this
:class:`Field`) are declared as :class:`Field` specs: type, range with open or closed ends,
choices, whether null is allowed, a doc line and the default. From a spec come the check of a
value (:meth:`Field.problem`), the one-sentence refusal (:class:`Refusal`: the field, the value
and what is allowed) and the row of the documentation table (:func:`markdown_table`, which
``docs/config.md`` is built from). Rules between fields (one field constraining another) are
not specs: each owner keeps them as a short list of explicit checks after the fields pass.

This module imports nothing of pflcore but :mod:`pflcore.errors`, so every part of the library
can declare its fields with it.
"""
from __future__ import annotations

import difflib
import math
import sys
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, Mapping, Sequence

from .errors import shorten


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


#: The default of a field that has none: it must be given.
REQUIRED: Any = _Required()
#: "Not set" for :attr:`Field.fingerprint_default`.
UNSET: Any = _Unset()


def is_int(value: Any) -> bool:
    """A whole number: a Python ``int``, not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """A finite int or float (not a bool): NaN and infinity are never allowed, nor an integer
    too large to be a float (10**400: training would overflow)."""
    if is_int(value):
        return abs(value) <= sys.float_info.max
    return isinstance(value, float) and math.isfinite(value)


_TYPES: dict[type, tuple[Callable[[Any], bool], str, str]] = {
    # type: (test, "a ..." for one value, plural for the items of a list)
    bool: (lambda v: isinstance(v, bool), "true or false", "true/false values"),
    int: (lambda v: is_int(v) and is_number(v), "a whole number", "whole numbers"),
    float: (is_number, "a finite number", "finite numbers"),
    str: (lambda v: isinstance(v, str), "text", "names"),
    list: (lambda v: isinstance(v, (list, tuple)), "a list", "lists"),
    dict: (lambda v: isinstance(v, dict), "a mapping", "mappings"),
    object: (lambda v: True, "any value", "values"),
}


def did_you_mean(name: Any, options: Sequence[Any]) -> str:
    """`` (did you mean 'local_epochs'?)`` for a misspelt name close to one of ``options``
    (:func:`difflib.get_close_matches`), else ``""``: the end of a sentence refusing ``name``."""
    if not isinstance(name, str) or not name:
        return ""
    close = difflib.get_close_matches(name, [o for o in options if isinstance(o, str)], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close and close[0] != name else ""


def _number(x: float) -> str:
    """A bound as a person writes it: 100000, 0.5, 1e-08 (a whole number exactly)."""
    if is_int(x) or (float(x).is_integer() and abs(x) < 1e16):
        return str(int(x))
    return f"{x:g}"


def _among(value: Any, options: Sequence[Any]) -> bool:
    """``value`` is one of ``options``, of the same type (True is not 1, 1 is not 1.0)."""
    return any(type(value) is type(option) and value == option for option in options)


@dataclass(frozen=True)
class Field:
    """One user-facing field: its default (:data:`REQUIRED` if it has none) and what it allows.

    ``type``: ``bool``, ``int``, ``float`` (any finite number), ``str``, ``list``, ``dict``,
    ``object`` (anything; its owner checks it) or a tuple of them (either); by default the
    default's type (``str`` for choices without a default, ``object`` for a None default).
    ``low``/``high`` bound a number (``low_open``/``high_open`` make an end exclusive);
    ``choices`` lists the allowed values (a sequence, or a function returning one, for choices
    known only at run time, such as the registered methods); ``also`` lists literal values
    allowed besides the typed ones (``workers``: ``'auto'``); ``nullable`` allows null (always
    so when the default is None). A list's ``items`` is the :class:`Field` each item must pass,
    ``min_length``/``max_length`` bound its length and ``distinct`` forbids repeats. ``rule``
    is one further check of a value that passed all of that: it returns None, or the words of
    what is allowed. ``words`` names what is allowed where the rule decides it (``device``:
    "'cpu', 'cuda' or 'cuda:N'"), in place of the type's words. ``why`` is the reason for a
    bound, quoted in the refusal; ``doc`` says what the field means. ``fingerprint`` (config
    fields): the field enters the run's fingerprint; ``fingerprint_default``: at this value it
    is left out, so that runs from before the field existed keep their fingerprint.
    """

    default: Any = REQUIRED
    type: Any = None
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    choices: Sequence[Any] | Callable[[], Sequence[Any]] | None = None
    also: tuple = ()
    nullable: bool = False
    items: "Field | None" = None
    min_length: int = 0
    max_length: int | None = None
    distinct: bool = False
    rule: Callable[[Any], str | None] | None = None
    words: str = ""
    why: str = ""
    doc: str = ""
    fingerprint: bool = True
    fingerprint_default: Any = UNSET

    # ------------------------------------------------------------------ what it is
    @property
    def kind(self) -> Any:
        """The field's type (or tuple of types)."""
        if self.type is not None:
            return self.type
        if self.choices is not None and (self.default is REQUIRED or self.default is None):
            return str
        if self.default is REQUIRED or self.default is None:
            return object
        return type(self.default)

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    @property
    def allows_none(self) -> bool:
        return self.nullable or self.default is None

    def choice_list(self) -> list[Any]:
        """The allowed values (called now, for choices known only at run time)."""
        choices = self.choices() if callable(self.choices) else self.choices
        return list(choices or ())

    @cached_property
    def _kinds(self) -> tuple:
        return self.kind if isinstance(self.kind, tuple) else (self.kind,)

    def kinds(self) -> tuple:
        """The field's types, as a tuple."""
        return self._kinds

    # ------------------------------------------------------------------ checking
    def problem(self, value: Any) -> str | None:
        """None if ``value`` is allowed, else the words of what is allowed ("it must be ...")."""
        if value is None:
            return None if self.allows_none else self.allowed()
        if self.also and _among(value, self.also):
            return None
        if self.choices is not None:
            choices = self.choice_list()
            return None if _among(value, choices) else self.allowed() + did_you_mean(value, choices)
        for kind in self._kinds:
            if not _TYPES[kind][0](value):
                continue
            if kind in (int, float) and not self._in_range(value):
                return self.allowed()
            if kind is list:
                bad = self._list_problem(value)
                if bad:
                    return bad
            return self.rule(value) if self.rule else None
        return self.allowed()

    def accepts(self, value: Any) -> bool:
        return self.problem(value) is None

    def _in_range(self, value: float) -> bool:
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return not (self.high is not None and (value >= self.high if self.high_open else value > self.high))

    def _list_problem(self, value: Sequence[Any]) -> str | None:
        if len(value) < self.min_length or (self.max_length is not None and len(value) > self.max_length):
            return self.allowed()
        if self.items is not None:
            for item in value:
                if self.items.problem(item) is not None:
                    return f"{self.allowed()}, and its item {shorten(item)} is not"
        if self.distinct:
            seen: set[tuple[type, Any]] = set()
            for item in value:
                key = (type(item), item if not isinstance(item, list) else tuple(map(repr, item)))
                if key in seen:
                    return f"{self.allowed()}, and it repeats {shorten(item)}"
                seen.add(key)
        return None

    # ------------------------------------------------------------------ words
    def describe(self, plural: bool = False) -> str:
        """What the field allows, as a noun phrase ("a whole number in [1, 100000]")."""
        if self.words:
            text = self.words
        elif self.choices is not None:
            text = f"{_TYPES[str][2] if plural else 'one'} {'from' if plural else 'of'} {self.choice_list()}"
        else:
            text = " or ".join(self._describe_kind(kind, plural) for kind in self.kinds())
        if self.also:
            text += f", or one of {list(self.also)}"
        if self.allows_none and not plural:
            text += ", or null"
        return text

    def _describe_kind(self, kind: Any, plural: bool) -> str:
        text = _TYPES[kind][2 if plural else 1]
        if kind in (int, float):
            return text + self._range_words()
        if kind is list:
            return self._list_words(plural)
        return text

    def _range_words(self) -> str:
        if self.low is not None and self.high is not None:
            left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
            return f" in {left}{_number(self.low)}, {_number(self.high)}{right}"
        if self.low is not None:
            return f" {'>' if self.low_open else '>='} {_number(self.low)}"
        if self.high is not None:
            return f" {'<' if self.high_open else '<='} {_number(self.high)}"
        return ""

    def _list_words(self, plural: bool) -> str:
        low, high = self.min_length, self.max_length
        if high is not None:
            count = f"of {low} " if low == high else (f"of at most {high} " if low == 0 else f"of {low} to {high} ")
        else:
            count = "" if low <= 1 else f"of at least {low} "
        noun = f"{'' if plural else 'a '}{'non-empty ' if low == 1 and high is None else ''}"
        noun += f"{'lists' if plural else 'list'} {count}"
        if self.items is None:
            return noun.rstrip()
        what = self.items.describe(plural=True)
        return f"{noun}{'' if count else 'of '}{'distinct ' if self.distinct else ''}{what}"

    def allowed(self) -> str:
        """What the field allows, as the end of a refusal ("it must be ...")."""
        if self.choices is not None and not self.also:
            text = f"choose one of {self.choice_list()}" + (", or null" if self.allows_none else "")
        else:
            text = f"it must be {self.describe()}"
        return f"{text} ({self.why})" if self.why else text


@dataclass(frozen=True)
class Refusal:
    """What is wrong with one value: the field's ``name``, the ``value`` and the words of what
    is ``allowed``; :meth:`sentence` is the one sentence a user reads."""

    name: str
    value: Any
    allowed: str

    def sentence(self, subject: str = "config field", context: str = "") -> str:
        """``<subject> '<name>' = <value> is not allowed<context>: <allowed>.``"""
        return f"{subject} {self.name!r} = {shorten(self.value)} is not allowed{context}: {self.allowed}."

    def within(self, prefix: str) -> "Refusal":
        """The same refusal for a field nested in ``prefix`` (``partition.alpha``)."""
        return Refusal(f"{prefix}.{self.name}", self.value, self.allowed)


def first_refusal(fields: Mapping[str, Field], values: Mapping[str, Any]) -> Refusal | None:
    """The first value (in the fields' order) that its field refuses; missing values are not
    checked."""
    for name, spec in fields.items():
        if name in values:
            words = spec.problem(values[name])
            if words is not None:
                return Refusal(name, values[name], words)
    return None


def unknown_name(owner: str, name: Any, fields: Mapping[str, Field]) -> str:
    """The sentence for a parameter ``owner`` does not have."""
    return (f"{owner} has no parameter {shorten(name)}{did_you_mean(name, list(fields))}; its parameters are "
            f"{sorted(fields) or 'none'}.")


def missing_name(owner: str, name: str, spec: Field) -> str:
    """The sentence for a required parameter left out."""
    return f"{owner} needs the parameter {name!r}, {spec.describe()}."


# ------------------------------------------------------------------------ documentation
def default_words(spec: Field) -> str:
    """A field's default as a config file writes it (``0.01``, ``true``, ``null``, ``required``)."""
    if spec.required:
        return "required"
    if spec.default is None:
        return "null"
    if isinstance(spec.default, bool):
        return "true" if spec.default else "false"
    if isinstance(spec.default, float):
        return _number(spec.default) if spec.default.is_integer() else repr(spec.default)
    if isinstance(spec.default, (list, tuple)):
        return repr(list(spec.default))
    return repr(spec.default)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(fields: Mapping[str, Field]) -> str:
    """The documentation table of ``fields``: name, what is allowed, default, meaning."""
    rows = ["| name | allowed | default | meaning |", "| --- | --- | --- | --- |"]
    for name, spec in fields.items():
        allowed = spec.describe()
        if spec.why:
            allowed += f" ({spec.why})"
        rows.append(f"| `{name}` | {_cell(allowed)} | `{_cell(default_words(spec))}` | {_cell(spec.doc)} |")
    return "\n".join(rows) + "\n"


__all__ = ["REQUIRED", "UNSET", "Field", "Refusal", "default_words", "did_you_mean", "first_refusal", "is_int",
           "is_number",
           "markdown_table", "missing_name", "unknown_name"]
