"""Exercise checking and generated solutions for the teaching walkthroughs in ``notebooks/teaching/``.

**Checks.** Every exercise has its own cell ``check(n, answer_n, key, hint)``, which prints exactly one
line ("correct", "not quite ... Hint: ...", or "not answered yet") and returns nothing. ``key`` is

* a *sealed* key (:func:`seal`), for answers that do not depend on the run: a word, a choice, or a
  number with a tolerance. It holds a random salt of its own (so two exercises with the same answer
  show different keys) and PBKDF2-SHA256 digests with :data:`ITERATIONS` iterations (so every guess
  costs as much as a check, about a fifth of a second: a dictionary of plausible answers is not
  free, and nothing cheaper than answering recovers one);
* :func:`from_run`, for answers the student computes from the run in front of them: the truth is
  computed here, from the notebook's objects, so that the check cell does not show how.

**Solutions.** ``notebooks/teaching/solutions/<name>.md`` is generated, never typed: its template
``solutions/templates/<name>.md`` marks every number that comes from the notebook as
``{{ expression | format }}``, an expression evaluated in the executed walkthrough (at its classroom
values: the parameters cell as shipped). :func:`write_solutions` executes the walkthrough with papermill,
evaluates the expressions in its kernel and writes the solution and the values it used
(``solutions/values/<name>.json``); :func:`render_solution` re-renders from those values (the tests check
that the committed files agree, and, when asked, that a fresh execution gives the same values).
Run ``python -m pflcore.teaching [name ...]`` to regenerate (``--render``: only re-render the stored values,
after an edit of a template's prose).
"""
from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
import re
import secrets
import sys
import time
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable

#: PBKDF2-SHA256 iterations of a sealed key (OWASP's 2023 advice for PBKDF2-SHA256 is 600,000).
ITERATIONS = 600_000
_PREFIX = "pbkdf2-sha256"
_DIGEST_BYTES = 12


class TeachingError(ValueError):
    """A key that is not one :func:`seal` made; one sentence."""


def normalise_word(answer: Any) -> str:
    """How a written answer is compared: lower case, letters and digits only ("w CC" -> "wcc")."""
    return "".join(ch for ch in str(answer).lower() if ch.isalnum())


def as_number(answer: Any) -> float | None:
    """A numeric answer as a float: ints, floats, numeric strings ("0.75", " 3/4 ", "1e-3"); None otherwise."""
    if isinstance(answer, bool):
        return None
    if isinstance(answer, (int, float)):
        value = float(answer)
    else:
        try:
            value = float(Fraction(str(answer).strip().replace(" ", "")))
        except (ValueError, ZeroDivisionError):
            return None
    return value if math.isfinite(value) else None


def _digest(token: str, salt: bytes, iterations: int) -> str:
    return hashlib.pbkdf2_hmac("sha256", token.encode(), salt, iterations)[:_DIGEST_BYTES].hex()


def _number_tokens(value: float, tol: float) -> list[str]:
    k = round(value / tol)
    return [f"n{k + d}" for d in (-1, 0, 1)]


def seal(*accepted: Any, tol: float | None = None, iterations: int = ITERATIONS) -> str:
    """A key that accepts any of ``accepted`` and shows none of them; paste it into a check cell.

    Words are compared by :func:`normalise_word`. With ``tol``, the accepted values are numbers: an
    answer within tol/2 of one is accepted, one further than 2 tol away is refused (answers are compared
    on a grid of step tol). The key is ``pbkdf2-sha256$iterations$salt$kind$digests``, with a fresh
    random salt, so two keys for the same answer differ."""
    if not accepted:
        raise ValueError("seal needs at least one accepted answer.")
    salt = secrets.token_bytes(16)
    if tol is None:
        kind, tokens = "word", {normalise_word(a) for a in accepted}
        if "" in tokens:
            raise ValueError("an accepted answer has no letters or digits.")
    else:
        if not (isinstance(tol, (int, float)) and tol > 0 and math.isfinite(tol)):
            raise ValueError(f"tol must be a positive number, not {tol!r}.")
        values = [as_number(a) for a in accepted]
        if any(v is None for v in values):
            raise ValueError("with tol, every accepted answer must be a number.")
        kind, tokens = f"number:{float(tol)!r}", {t for v in values for t in _number_tokens(v, tol)}
    digests = sorted(_digest(t, salt, iterations) for t in tokens)  # sorted: their order says nothing
    return "$".join([_PREFIX, str(iterations), salt.hex(), kind, ",".join(digests)])


def parse_key(key: str) -> dict:
    """A sealed key's parts (iterations, salt, kind, tol, digests); :class:`TeachingError` for anything else."""
    parts = key.split("$") if isinstance(key, str) else []
    if len(parts) != 5 or parts[0] != _PREFIX:
        raise TeachingError(f"{key!r} is not a key made by pflcore.teaching.seal.")
    _, iterations, salt, kind, digests = parts
    tol = None
    if kind.startswith("number:"):
        tol = float(kind.split(":", 1)[1])
    elif kind != "word":
        raise TeachingError(f"{key!r} is not a key made by pflcore.teaching.seal (kind {kind!r}).")
    return {"iterations": int(iterations), "salt": bytes.fromhex(salt), "kind": "word" if tol is None else "number",
            "tol": tol, "digests": digests.split(",")}


def accepts(key: str, answer: Any) -> bool:
    """Whether the sealed ``key`` accepts ``answer`` (one key derivation)."""
    parts = parse_key(key)
    if parts["kind"] == "word":
        token = normalise_word(answer)
    else:
        value = as_number(answer)
        if value is None:
            return False
        token = f"n{round(value / parts['tol'])}"
    digest = _digest(token, parts["salt"], parts["iterations"])
    return any(hmac.compare_digest(digest, d) for d in parts["digests"])


class FromRun:
    """An answer computed from the run in front of the student (see :func:`from_run`)."""

    def __init__(self, truth: Any, tol: float | None):
        self._truth, self._tol = truth, tol

    def __repr__(self) -> str:  # never the truth
        return "<an answer computed from this run>"

    def __call__(self, answer: Any) -> bool:
        if self._tol is not None:
            value = as_number(answer)
            return value is not None and abs(value - float(self._truth)) <= self._tol
        if isinstance(self._truth, frozenset):
            try:
                given = {int(a) for a in (answer if not isinstance(answer, str) else re.findall(r"-?\d+", answer))}
            except (TypeError, ValueError):
                return False
            return given == set(self._truth)
        return normalise_word(answer) == normalise_word(self._truth)


# --- answers that depend on the run: one function per exercise, (walkthrough, exercise) -> (function, tol) ---

def _fine_tuning_gain(results) -> float:
    """00, exercise 4: FedAvg-FT's acc_mean minus FedAvg's, in points."""
    return float(results["fedavg_ft"].summary["acc_mean"] - results["fedavg"].summary["acc_mean"])


def _two_client_weight(P, v) -> float:
    """01, exercise 4: client trio[0]'s weight on trio[1] from P's top-left 2 x 2 block, with v of trio[1]
    halved (P_11 lowered by v_1 / 2): a = (P_00 - P_01) / (P_00 + P_11 - 2 P_01)."""
    p00, p01, p11 = float(P[0][0]), float(P[0][1]), float(P[1][1]) - float(v[1]) / 2
    return (p00 - p01) / (p00 + p11 - 2 * p01)


def _changed_anchor_rows(data, client: int = 1) -> frozenset:
    """03, exercise 2: the classes a client holds (the rows of a_bar its local round updates)."""
    counts = data.class_counts("train")[int(client)]
    return frozenset(int(c) for c, n in enumerate(counts) if n > 0)


RUN_ANSWERS: dict[tuple[str, int], tuple[Callable[..., Any], float | None]] = {
    ("pfl_in_one_hour", 4): (_fine_tuning_gain, 0.1),
    ("fedpac_step_by_step", 4): (_two_client_weight, 0.02),
    ("fedfa_step_by_step", 2): (_changed_anchor_rows, None),
}


def from_run(walkthrough: str, exercise: int, *objects: Any) -> FromRun:
    """The key of an exercise whose answer the student computes from this run: the truth is computed
    here from the notebook's ``objects`` (see :data:`RUN_ANSWERS`), so the check cell does not show it."""
    try:
        function, tol = RUN_ANSWERS[(walkthrough, int(exercise))]
    except KeyError:
        raise TeachingError(f"walkthrough {walkthrough!r} has no exercise {exercise} computed from the run.") from None
    return FromRun(function(*objects), tol)


def _expects_number(key: Any) -> bool:
    if isinstance(key, FromRun):
        return key._tol is not None
    if isinstance(key, str):
        return parse_key(key)["kind"] == "number"
    return False


def _either(choices: list[str]) -> str:
    quoted = [repr(c) for c in choices]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


def check(exercise: int | str, answer: Any, key: str | FromRun | Callable[[Any], bool], hint: str,
          log: Callable[[str], None] = print, choices: Any = None) -> None:
    """Print one line: whether ``answer`` is right ("correct"), wrong ("not quite", with ``hint``), or
    missing ("not answered yet": None or an empty string). ``key`` is a :func:`seal` key, a
    :func:`from_run` answer, or a predicate. ``choices`` (an exercise that asks for one of a few
    words): an answer that is none of them gets the list of choices instead of a verdict, as does a
    non-number where a number is expected; neither says anything about the right answer. Never
    raises for an answer; returns nothing, so a check cell shows only its line."""
    label = f"exercise {exercise}" if isinstance(exercise, int) else str(exercise)
    if answer is None or (isinstance(answer, str) and not answer.strip()):
        log(f"{label}: not answered yet")
        return
    shown = " ".join(repr(answer).split())
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    if choices is not None:
        allowed = [str(c) for c in choices]
        if normalise_word(answer) not in {normalise_word(c) for c in allowed}:
            log(f"{label}: {shown} is not one of the choices; answer {_either(allowed)}")
            return
    elif _expects_number(key) and as_number(answer) is None:
        log(f"{label}: {shown} is not a number; answer with a number (e.g. 0.25, 1/4 or 12)")
        return
    if isinstance(key, str):
        parse_key(key)  # a broken key is the author's mistake: say so, in one sentence
        right = accepts(key, answer)
    else:
        try:
            right = bool(key(answer))
        except Exception:  # a predicate that fails on a malformed answer: wrong, not a traceback
            right = False
    hint = " ".join(str(hint).split())
    log(f"{label}: correct" if right else f"{label}: not quite ({shown}). Hint: {hint}")


# --- generated solutions ---

TEACHING = Path("notebooks") / "teaching"
_PLACEHOLDER = re.compile(r"\{\{(.+?)\}\}", re.S)
_MARKER = "PFLCORE-SOLUTION-VALUES "
_SETUP = re.compile(r"<!--\s*values:\n(.*?)-->\n?", re.S)


def walkthroughs(root: Path) -> dict[str, Path]:
    """name -> notebook: ``00_pfl_in_one_hour.ipynb`` is ``pfl_in_one_hour``."""
    return {re.sub(r"^\d+_", "", nb.stem): nb for nb in sorted((root / TEACHING).glob("[0-9]*_*.ipynb"))}


def placeholders(template: str) -> list[tuple[str, str, str]]:
    """Every ``{{ expression | format }}`` of a template as (text, expression, format), in order."""
    found = []
    for m in _PLACEHOLDER.finditer(template):
        body = m.group(1)
        expression, _, fmt = body.rpartition("|") if "|" in body else (body, "", "")
        found.append((m.group(0), expression.strip(), fmt.strip()))
    return found


def _header(name: str) -> str:
    return (f"<!-- Generated by `python -m pflcore.teaching {name}` from templates/{name}.md and an execution of "
            f"the walkthrough at its classroom values; edit the template, not this file. -->\n")


def render_solution(name: str, template: str, values: dict[str, str]) -> str:
    """The solution text: the template without its setup blocks, every placeholder replaced by its value."""
    def value(m: re.Match) -> str:
        if m.group(0) not in values:
            raise TeachingError(f"solution {name!r}: no value for {m.group(0)}; regenerate it with "
                                f"`python -m pflcore.teaching {name}`.")
        return values[m.group(0)]
    text = _SETUP.sub("", template)
    return _header(name) + _PLACEHOLDER.sub(value, re.sub(r"\n{3,}", "\n\n", text))


def values_cell(template: str) -> str:
    """The code appended to an executed copy of a walkthrough: runs the template's setup blocks
    (``<!-- values: code -->``, for a number the walkthrough itself does not compute, e.g. a run at
    another s) and prints the placeholders' values as JSON."""
    setup = "\n".join(m.group(1).strip("\n") for m in _SETUP.finditer(template))
    items = {text: (expression, fmt) for text, expression, fmt in placeholders(_SETUP.sub("", template))}
    return ("import json as _json\n"
            f"_items = {items!r}\n"
            "_values = {}\n"
            "try:\n"
            f"    exec({setup!r}, globals())\n"
            "except Exception as _exc:\n"
            "    _values['setup'] = f'ERROR {type(_exc).__name__}: {_exc}'\n"
            "for _text, (_expression, _format) in _items.items():\n"
            "    try:\n"
            "        _values[_text] = format(eval(_expression, globals()), _format)\n"
            "    except Exception as _exc:\n"
            "        _values[_text] = f'ERROR {type(_exc).__name__}: {_exc}'\n"
            f"print({_MARKER!r} + _json.dumps(_values))\n")


def execute_values(notebook: Path, template: str, root: Path, parameters: dict | None = None,
                   kernel: str = "python3", keep: Path | None = None) -> dict[str, str]:
    """Execute ``notebook`` (papermill, working directory ``root``) with the values cell appended and
    return the placeholders' values; ``keep``: where to write the executed copy."""
    import nbformat

    from .notebooks import execute

    nb = nbformat.read(notebook, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(values_cell(template)))
    work = Path(keep) if keep else root / "outputs" / "teaching" / notebook.name
    work.parent.mkdir(parents=True, exist_ok=True)
    source = work.with_suffix(".source.ipynb")
    nbformat.write(nb, source)
    try:
        execute(source, work, parameters or {}, root, kernel)
    finally:
        source.unlink(missing_ok=True)
    executed = nbformat.read(work, as_version=4)
    for output in executed.cells[-1].get("outputs", []):
        for line in output.get("text", "").splitlines():
            if line.startswith(_MARKER):
                return json.loads(line[len(_MARKER):])
    raise RuntimeError(f"{notebook.name}: the values cell printed nothing; see {work}.")


def solution_paths(root: Path, name: str) -> tuple[Path, Path, Path]:
    """(template, solution, values) of a walkthrough."""
    folder = root / TEACHING / "solutions"
    return folder / "templates" / f"{name}.md", folder / f"{name}.md", folder / "values" / f"{name}.json"


def write_solutions(names: list[str] | None = None, root: str | Path | None = None, log=print) -> None:
    """Execute each walkthrough at its classroom values and write its solution and values (see module doc)."""
    from pflcore.project import project_root

    root = Path(root) if root else project_root()
    known = walkthroughs(root)
    for name in names or list(known):
        if name not in known:
            raise TeachingError(f"there is no walkthrough {name!r}; the walkthroughs are: {', '.join(known)}.")
    failed = []
    for name in names or list(known):
        template_path, solution_path, values_path = solution_paths(root, name)
        template = template_path.read_text()
        t0 = time.perf_counter()
        try:
            values = execute_values(known[name], template, root) if placeholders(_SETUP.sub("", template)) else {}
        except Exception as exc:  # papermill's error names the cell; go on with the other walkthroughs
            failed.append(name)
            log(f"{name}: the execution failed ({str(exc).strip().splitlines()[-1] if str(exc).strip() else exc!r})")
            continue
        seconds = time.perf_counter() - t0
        values_path.parent.mkdir(parents=True, exist_ok=True)
        values_path.write_text(json.dumps(values, indent=1, sort_keys=True) + "\n")
        errors = {k: v for k, v in values.items() if v.startswith("ERROR ")}
        if errors:
            failed.append(name)
            log(f"{name}: {len(errors)} value(s) failed, e.g. {next(iter(errors.items()))}; {solution_path.name} kept")
            continue
        solution_path.write_text(render_solution(name, template, values))
        log(f"{name}: " + (f"{len(values)} values from an execution of {seconds:.0f} s" if values else
                           "no number of the run, nothing executed") + f" -> {solution_path.relative_to(root)}")
    if failed:
        raise TeachingError(f"no solution was written for {', '.join(failed)} (see above).")


def render_solutions(names: list[str] | None = None, root: str | Path | None = None, log=print) -> None:
    """Re-render solutions from their stored values, without executing anything: after an edit of a
    template's prose (a new or changed placeholder needs :func:`write_solutions`)."""
    from pflcore.project import project_root

    root = Path(root) if root else project_root()
    known = walkthroughs(root)
    for name in names or list(known):
        if name not in known:
            raise TeachingError(f"there is no walkthrough {name!r}; the walkthroughs are: {', '.join(known)}.")
        template_path, solution_path, values_path = solution_paths(root, name)
        values = json.loads(values_path.read_text()) if values_path.exists() else {}
        solution_path.write_text(render_solution(name, template_path.read_text(), values))
        log(f"{name}: rendered from {values_path.relative_to(root)} -> {solution_path.relative_to(root)}")


if __name__ == "__main__":  # python -m pflcore.teaching [--render] [name ...]
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    arguments = sys.argv[1:]
    try:
        if arguments[:1] == ["--render"]:
            render_solutions(arguments[1:] or None)
        else:
            write_solutions(arguments or None)
    except TeachingError as exc:
        sys.exit(str(exc))
