"""Exercise checking for the teaching walkthroughs in ``notebooks/teaching/``.

Every walkthrough ends with exercises whose answers a cell checks. An answer is accepted
either by a predicate (``lambda a: abs(a - truth) < 1e-6``, for answers the notebook can
compute) or by the hashes of the accepted answers (``answer_key``), so that a cell can
check a name or a word without printing it.
"""
from __future__ import annotations

import hashlib
from typing import Any, Callable, Collection


def answer_key(answer: Any) -> str:
    """The hash a written answer is checked by: lower case, letters and digits only
    ("w CC" -> "wcc", "FedAvg" -> "fedavg"), first 12 hex digits of its SHA-256."""
    normalised = "".join(ch for ch in str(answer).lower() if ch.isalnum())
    return hashlib.sha256(normalised.encode()).hexdigest()[:12]


def check(name: str | int, answer: Any, accepted: Callable[[Any], bool] | Collection[str], hint: str,
          log: Callable[[str], None] = print) -> bool | None:
    """Print whether ``answer`` is right: "not answered yet" for ``None`` or an empty string,
    "correct" or "not quite" with the hint otherwise. ``accepted`` is a predicate or a
    collection of ``answer_key`` hashes. Never raises (a predicate that fails on a malformed
    answer counts as wrong). Returns True, False, or None when unanswered."""
    label = f"exercise {name}" if isinstance(name, int) else str(name)
    if answer is None or (isinstance(answer, str) and not answer.strip()):
        log(f"{label}: not answered yet")
        return None
    try:
        right = bool(accepted(answer)) if callable(accepted) else answer_key(answer) in set(accepted)
    except Exception:
        right = False
    log(f"{label}: correct" if right else f"{label}: not quite ({answer!r}). Hint: {hint}")
    return right
