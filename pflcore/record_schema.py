"""What a run record is: its schema's constants and the checks a file passes before it counts.

A record is refused (:class:`RecordError`, one sentence naming the file and the field) unless
it is a regular file inside its project, small, plain JSON of a known schema version, named
after its own config and seed (:func:`record_name`), and consistent with itself: its
fingerprint is its config's, every summary number is what its per-client accuracies give, its
best round is the highest of its history. :mod:`pflcore.records` writes and reads records
through these checks; nothing here writes. The format is ``reproductions/SCHEMA.md``.
"""
from __future__ import annotations

import base64
import json
import math
import os
import re
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from . import numerics
from .project import project_root

SCHEMA = "pflcore-run-record"
SCHEMA_VERSION = 3  # 3: provenance names the numeric path; 2: per-client accuracies in percent (1: fractions)
READABLE_VERSIONS = (1, 2, 3)
RECORDS_FOLDER = "reproductions"
REPLICATIONS = "replications"  # <notebook>/replications/: records retrained on another numeric path
MAX_RECORD_BYTES = 8 * 2**20  # a record is small; a larger file is not one of ours
#: Fields every record has, with their JSON types (validated on read).
REQUIRED = {"schema": str, "schema_version": int, "notebook": (str, type(None)), "fingerprint": str,
            "seed": int, "config": dict, "provenance": dict, "summary": dict, "history": list,
            "clients": dict, "arrays": dict, "notes": list}
CLIENT_ARRAYS = ("final", "best", "history", "eval_rounds", "train_sizes", "test_sizes", "new_final")
#: The per-client arrays that hold accuracies (percent; fractions in version 1 and in results
#: folders written before pflcore kept them in percent).
ACCURACY_ARRAYS = ("final", "best", "history", "new_final")


class RecordError(ValueError):
    """A record cannot be used; the message is one sentence naming the file."""

    def _render_traceback_(self) -> list[str]:  # IPython (a notebook in Lab): the sentence, not a traceback
        return [f"RecordError: {self}"]


def record_name(record: dict) -> str:
    """A record's file name: ``<method>-<dataset>-seed<k>-<fingerprint>.json``
    (:func:`pflcore.records.find` looks records up by the fingerprint at its end)."""
    label = re.sub(r"[^A-Za-z0-9_.=-]+", "_", f"{record['config']['method']}-{record['config']['dataset']}")
    return f"{label}-seed{record['seed']}-{record['fingerprint']}.json"


def upgrade(record: dict) -> dict:
    """A valid record of an earlier schema version in the current one: the one place where
    version 1's per-client accuracies (fractions) become percent, 100 times each value
    (exactly the numbers a run of this pflcore gives), and where a version-1 or -2 record gets
    the numeric path of version 3 with every field unknown (never guessed from its CPU model
    string). ``upgraded_from`` keeps the file's version; a current record is returned as it is."""
    version = record["schema_version"]
    if version == SCHEMA_VERSION:
        return record
    clients = record["clients"]
    if version == 1:
        clients = {k: (percent(v) if k in ACCURACY_ARRAYS else v) for k, v in clients.items()}
    provenance = {"cpu_vendor": numerics.UNKNOWN, **record["provenance"], "numeric_path": numerics.unknown_path()}
    return {**record, "schema_version": SCHEMA_VERSION, "upgraded_from": version, "clients": clients,
            "provenance": provenance}


def percent(values: Any) -> Any:
    """Fractions (a number, None for NaN, or nested lists of them) as percent, 100 times each."""
    if isinstance(values, list):
        return [percent(v) for v in values]
    return None if values is None else 100 * float(values)


def shorten(text: Any, limit: int = 80) -> str:
    text = str(text)
    return text if len(text) <= limit else text[:limit] + "..."


def floats(values: Any) -> np.ndarray:
    """A recorded list (or list of lists) of numbers as float64, None read as NaN."""
    return np.asarray([[np.nan if v is None else v for v in row] if isinstance(row, list)
                       else (np.nan if row is None else row) for row in values], dtype=np.float64)



def validate(record: Any, path: Path, versions: tuple[int, ...] = (SCHEMA_VERSION,)) -> None:
    """Refuse (:class:`RecordError`, one sentence naming ``path`` and the field) a record that is
    not one of ``versions`` or is not consistent with itself (:func:`check_record`)."""
    if not isinstance(record, dict) or record.get("schema") != SCHEMA:
        raise RecordError(f"{path} is not a pflcore run record (no 'schema': {SCHEMA!r}).")
    version = record.get("schema_version")
    if isinstance(version, bool) or version not in versions:
        readable = " and ".join(str(v) for v in versions)
        raise RecordError(f"{path} is a run record of schema version {version!r}, and this pflcore reads "
                          f"version{'s' if len(versions) > 1 else ''} {readable}; rerun it or read it with the "
                          "pflcore that wrote it.")
    for key, kind in REQUIRED.items():
        if key not in record or not isinstance(record[key], kind) or isinstance(record[key], bool):
            raise RecordError(f"{path} is a damaged run record: field {key!r} is missing or not a "
                              f"{getattr(kind, '__name__', 'valid value')}.")
    for key in ("acc_mean", "acc_std", "acc_weighted", "best_acc_mean", "best_round", "rounds", "seconds"):
        if key not in record["summary"]:
            raise RecordError(f"{path} is a damaged run record: its summary has no {key!r}.")
    for key in ("final", "history", "eval_rounds"):
        if key not in record["clients"]:
            raise RecordError(f"{path} is a damaged run record: its clients have no {key!r}.")
    if not isinstance(record.get("preset_changes", {}), dict):  # optional: records before it have none
        raise RecordError(f"{path} is a damaged run record: its 'preset_changes' is not a mapping.")
    derived = record.get("derived_arrays", {})
    if not isinstance(derived, dict):
        raise RecordError(f"{path} is a damaged run record: its 'derived_arrays' is not a mapping.")
    for name, arrays in derived.items():  # optional: what figures derive from final models
        if not isinstance(arrays, dict) or not all(isinstance(a, dict) and {"dtype", "shape", "data"} <= set(a)
                                                   for a in arrays.values()):
            raise RecordError(f"{path} is a damaged run record: its derived arrays {name!r} are not "
                              "{dtype, shape, data} entries.")
    check_record(record, path)


# ---------------------------------------------------------------------- a record checked against itself
#: How far a mean, std or weighted mean recomputed from the per-client accuracies may lie from the
#: recorded one, in percentage points. The run computes it from correct counts (100 x the statistic of
#: the fractions), the check from the percentages: float64 rounding of either is below n x 2.3e-14 for
#: n clients (the shipped records differ by 6e-14 at most); a change a reader could see is 1e7 x larger.
TOLERANCE = 1e-9
MAX_DEPTH = 24  # a record nests 6 deep (arrays.<name>.<round>[client][value]); anything deeper is not one
MAX_INT = 2**53  # every integer a record holds (rounds, sizes, seeds, counts) is far smaller
_SAFE_FOLDER = re.compile(r"[A-Za-z0-9_.=-]+(/[A-Za-z0-9_.=-]+)*")


def read_regular(path: Path, root: str | Path | None = None) -> bytes:
    """The bytes of ``path`` once it is known to be a regular file inside ``root`` (default: its
    project, else its own folder); at most ``MAX_RECORD_BYTES + 1`` bytes are read, whatever size
    the system reports, and a pipe or device is never read at all."""
    import stat

    try:
        real = path.resolve(strict=True)
    except FileNotFoundError:
        raise RecordError(f"{path} does not exist, so it is no run record.") from None
    except (OSError, RuntimeError):
        raise RecordError(f"{path} cannot be resolved (a loop of symbolic links?), so it is not read as a run "
                          "record.") from None
    home = _record_home(path, root)
    if not real.is_relative_to(home):
        raise RecordError(f"{path} is a link to {real}, outside {home}; a run record is a file inside the project, "
                          "so it is not read.")
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    chunks: list[bytes] = []
    try:
        fd = os.open(real, flags)
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                kind = ("a folder" if stat.S_ISDIR(mode) else "a named pipe" if stat.S_ISFIFO(mode)
                        else "a socket" if stat.S_ISSOCK(mode)
                        else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a special file")
                raise RecordError(f"{path} is {kind}, not a regular file, so it is not read as a run record.")
            left = MAX_RECORD_BYTES + 1
            while left > 0:
                chunk = os.read(fd, min(left, 2**20))
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk)
        finally:
            os.close(fd)
    except OSError as exc:
        raise RecordError(f"{path} cannot be read ({(exc.strerror or type(exc).__name__).lower()}).") from None
    data = b"".join(chunks)
    if len(data) > MAX_RECORD_BYTES:
        raise RecordError(f"{path} is larger than any pflcore run record ({MAX_RECORD_BYTES} bytes at most); it is "
                          "not one.")
    return data


def _record_home(path: Path, root: str | Path | None) -> Path:
    """The folder a record must really lie in: ``root``, else the project holding it, else its folder."""
    if root is not None:
        return Path(root).resolve()
    try:
        return project_root(path.absolute().parent)
    except FileNotFoundError:
        return path.absolute().parent.resolve()


class _NotFinite:
    """NaN or Infinity in a file (not JSON, never written by pflcore), kept until the field is named."""

    def __init__(self, name: str):
        self.name = name


def parse(data: bytes, path: Path) -> Any:
    """JSON of a record file; one sentence naming the file for anything that is not plain JSON."""
    try:
        return json.loads(data.decode("utf-8"), parse_constant=_NotFinite)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise RecordError(f"{path} is not a pflcore run record (not valid JSON).") from None
    except RecursionError:
        raise RecordError(f"{path} is not a pflcore run record (its JSON nests deeper than any record does).") from None
    except (ValueError, OverflowError):  # an integer of thousands of digits
        raise RecordError(f"{path} is not a pflcore run record (it holds a number too long for one).") from None


def check_name(record: dict, path: Path) -> None:
    """The file's name and folder are those its content gives (:func:`record_name`, its notebook)."""
    expected = record_name(record)
    parent = path.absolute().parent
    if parent.name == REPLICATIONS:  # a replication record: <its record's name>.on-<numeric path>.json
        named = path.name.startswith(expected[:-len(".json")] + ".on-") and path.suffix == ".json"
        parent = parent.parent
    else:
        named = path.name == expected
    if not named:
        raise RecordError(f"{path} is a damaged run record: its file name does not match its content (its method, "
                          f"dataset, seed and fingerprint give {expected}).")
    folder = (record["notebook"] or "unfiled").split("/")
    if list(parent.parts[-len(folder):]) != folder:
        raise RecordError(f"{path} is a damaged run record: its field 'notebook' is {record['notebook']!r}, and the "
                          f"file lies outside that notebook's folder ({'/'.join(folder)}/).")


def _bad(path: Path, field: str, what: str) -> RecordError:
    return RecordError(f"{path} is a damaged run record: field {field!r} {what}.")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _walk(record: dict, path: Path) -> None:
    """Every number in the record finite and of a sane size, and nothing nested deeper than a record nests."""
    stack: list[tuple[Any, Any, Any, int]] = [(record, None, None, 0)]  # value, parent entry, key, depth
    while stack:
        entry = stack.pop()
        value, depth = entry[0], entry[3]
        if isinstance(value, (dict, list)):
            if depth >= MAX_DEPTH:
                raise _bad(path, _where(entry), f"nests deeper than any run record ({MAX_DEPTH} levels)")
            if isinstance(value, list) and len(value) > 4 and _plain_numbers(value, MAX_DEPTH - depth):
                continue  # an array of numbers and nulls (most of a record), checked at once
            items = value.items() if isinstance(value, dict) else enumerate(value)
            stack.extend((v, entry, k, depth + 1) for k, v in items
                         if isinstance(v, (dict, list, float, int, _NotFinite)))
        elif isinstance(value, _NotFinite):
            raise _bad(path, _where(entry), f"is {value.name}, which a record never holds (it writes a missing "
                                            "number as null)")
        elif isinstance(value, float) and not math.isfinite(value):
            raise _bad(path, _where(entry), f"is {value}, not a finite number")
        elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
            raise _bad(path, _where(entry), "is an integer larger than any a run record holds")


def _plain_numbers(value: list, depth_left: int) -> bool:
    """Whether ``value`` is a regular nested list of finite numbers of a sane size and nulls."""
    try:
        with np.errstate(all="ignore"):
            arr = np.array(value, dtype=np.float64)  # null -> NaN; a string, mapping or ragged list refuses
    except (ValueError, TypeError, OverflowError):
        return False
    known = arr[~np.isnan(arr)]
    return arr.ndim < depth_left and not np.isinf(known).any() and not (np.abs(known) > MAX_INT).any()


def _where(entry: tuple) -> str:
    """A walked value's place: ``summary.acc_mean``, ``clients.final[3]``."""
    parts = []
    while entry[1] is not None:
        key = entry[2]
        parts.append(f"[{key}]" if isinstance(key, int) else f".{key}")
        entry = entry[1]
    return "".join(reversed(parts)).lstrip(".") or "the record"


def check_record(record: dict, path: Path) -> None:
    """A record (of any readable version, its required fields present) checked against itself:
    its fingerprint recomputed from its config, its summary from its history and per-client
    arrays, every accuracy a finite number in [0, 100], best never below final, times positive.
    The first check that fails is one :class:`RecordError` sentence naming the file and field."""
    _walk(record, path)
    _check_fields(record, path)
    config = _check_fingerprint(record, path)
    for key in ACCURACY_ARRAYS:  # numbers before version 1's are made percent
        if key in record["clients"] and (not isinstance(record["clients"][key], list)
                                         or _regular(record["clients"][key]) is None):
            raise _bad(path, f"clients.{key}", "is not a list of per-client accuracies")
    current = upgrade(record)
    _check_clients(current, path)
    _check_summary(current, path, config)


def _check_fields(record: dict, path: Path) -> None:
    """The types of the fields the report, the notebooks and :func:`describe` use."""
    if not re.fullmatch(r"[0-9a-f]{6,64}", record["fingerprint"]):
        raise _bad(path, "fingerprint", f"is {shorten(record['fingerprint'])!r}, not a config's fingerprint")
    if record["seed"] < 0:
        raise _bad(path, "seed", f"is {record['seed']}, and a seed is a number 0 or above")
    notebook = record["notebook"]
    if notebook is not None and (not _SAFE_FOLDER.fullmatch(notebook) or ".." in notebook.split("/")):
        raise _bad(path, "notebook", f"is {shorten(notebook)!r}, not a notebook's name (paper/notebook)")
    for i, note in enumerate(record["notes"]):
        if not isinstance(note, str):
            raise _bad(path, f"notes[{i}]", "is not text")
    prov = record["provenance"]
    for key in ("git_commit", "started", "finished", "cpu_model", "device", "gpu", "cuda", "pflcore_version",
                "python", "torch", "numpy", "platform", "note"):
        if prov.get(key) is not None and not isinstance(prov[key], str):
            raise _bad(path, f"provenance.{key}", "is not text")
    if prov.get("git_dirty") is not None and not isinstance(prov["git_dirty"], bool):
        raise _bad(path, "provenance.git_dirty", "is not true, false or null")
    if prov.get("cpu_count") is not None and not (_is_int(prov["cpu_count"]) and prov["cpu_count"] > 0):
        raise _bad(path, "provenance.cpu_count", "is not a number of cores")
    if prov.get("workers") is not None and not isinstance(prov["workers"], (str, int)):
        raise _bad(path, "provenance.workers", "is not a workers setting")
    for key in ("seconds", "seconds_per_round"):
        if prov.get(key) is not None and not (_is_number(prov[key]) and prov[key] >= 0):
            raise _bad(path, f"provenance.{key}", "is not a number of seconds")
    stretches = prov.get("stretches", [])
    if not isinstance(stretches, list) or not all(isinstance(s, dict) for s in stretches):
        raise _bad(path, "provenance.stretches", "is not a list of stretches of rounds")
    for i, s in enumerate(stretches):
        for key in ("load_at_start", "load_at_end", "seconds"):
            if s.get(key) is not None and not _is_number(s[key]):
                raise _bad(path, f"provenance.stretches[{i}].{key}", "is not a number")
    for name, by_round in record["arrays"].items():
        if not isinstance(by_round, dict):
            raise _bad(path, f"arrays.{name}", "is not a mapping of rounds to arrays")
        for r, value in by_round.items():
            if not r.isdigit() or _regular(value) is None:
                raise _bad(path, f"arrays.{name}.{shorten(r)}", "is not a round's array of numbers")
    for name, arrays in record.get("derived_arrays", {}).items():
        for key, entry in arrays.items():
            if not _decodable(entry):
                raise _bad(path, f"derived_arrays.{name}.{key}", "is not an array pflcore encoded")
    if record["summary"].get("scored_from") is not None and not isinstance(record["summary"]["scored_from"], dict):
        raise _bad(path, "summary.scored_from", "is not a mapping")
    for key in ("method", "dataset", "status"):
        if record["summary"].get(key) is not None and not isinstance(record["summary"][key], str):
            raise _bad(path, f"summary.{key}", "is not text")
    if "accuracy_unit" in record["summary"] and record["summary"]["accuracy_unit"] != "percent":
        raise _bad(path, "summary.accuracy_unit", "is not 'percent', the unit of every accuracy in a record")
    for key in ("method", "dataset"):  # the record's name and every page use them
        if not isinstance(record["config"].get(key), str):
            raise _bad(path, f"config.{key}", "is missing or not text")


def _regular(value: Any) -> tuple | None:
    """The shape of ``value`` (a number, null, or a regular nested list of them), or None."""
    if not isinstance(value, list):
        return () if value is None or _is_number(value) else None
    shapes = {_regular(v) for v in value}
    if len(shapes) > 1 or None in shapes:
        return None
    return (len(value), *(shapes.pop() if shapes else ()))


def _decodable(entry: Any) -> bool:
    """Whether ``entry`` is a derived array :func:`decode_array` reads: a known dtype, a shape,
    and data that decompresses to exactly that many bytes (read no further than that)."""
    import binascii

    if not (isinstance(entry, dict) and entry.get("dtype") in ("float32", "int32")
            and isinstance(entry.get("shape"), list) and all(_is_int(n) and n >= 0 for n in entry["shape"])
            and isinstance(entry.get("data"), str)):
        return False
    size = 4 * math.prod(entry["shape"])
    if size > MAX_RECORD_BYTES * 64:
        return False
    try:
        inflate = zlib.decompressobj()
        raw = inflate.decompress(base64.b64decode(entry["data"], validate=True), size + 1)
    except (binascii.Error, ValueError, zlib.error):
        return False
    return len(raw) == size and inflate.eof


_VALID_CONFIGS: dict[str, str | None] = {}  # a config (without its seed) -> why it is refused, None: valid


def _check_fingerprint(record: dict, path: Path) -> Any:
    """The fingerprint and the seed are those of the config the record holds, a config this
    pflcore validates (where it ran is no part of that: it is checked as if on this machine's CPU)."""
    from .config import ExperimentConfig  # the config module builds on this one

    values = dict(record["config"], device="cpu", workers=0)  # neither enters the fingerprint
    data_root = values.get("data_root")
    if isinstance(data_root, str) and not Path(data_root).expanduser().is_absolute():
        project = next((p.parent for p in path.resolve().parents if p.name == RECORDS_FOLDER), None)
        if project is not None:  # written relative to the project (relative_path), read so wherever we run
            values["data_root"] = str(project / data_root)
    if isinstance(values.get("data_root"), str) and not Path(values["data_root"]).expanduser().is_dir():
        # The data the record was trained on is not on this machine (FedCP's MNIST partition lives
        # beside the project): its fingerprint hashes that folder's config.json, so it cannot be
        # recomputed here; every other check still holds, and the record is read as evidence.
        return _check_fields_only(record, values, path)
    try:
        key = json.dumps({k: v for k, v in values.items() if k != "seed"}, sort_keys=True)
    except (TypeError, ValueError):
        raise _bad(path, "config", "is not a config this pflcore runs") from None
    if key not in _VALID_CONFIGS:  # validating builds the model on the meta device: once per setting
        try:
            config = ExperimentConfig(**values)
            config.validate(machine=False)  # a record made on a bigger machine is still evidence here
            _VALID_CONFIGS[key] = None
        except ValueError as exc:  # ConfigError: a sentence naming the field
            _VALID_CONFIGS[key] = shorten(str(exc).rstrip("."), 300)
        except Exception:
            _VALID_CONFIGS[key] = "it cannot be built"
        if len(_VALID_CONFIGS) > 4096:
            _VALID_CONFIGS.pop(next(iter(_VALID_CONFIGS)))
    if _VALID_CONFIGS[key] is not None:
        raise _bad(path, "config", f"is not a config this pflcore runs ({_VALID_CONFIGS[key]})")
    try:
        config = ExperimentConfig(**values)
        fingerprint = config.fingerprint()
    except Exception:
        raise _bad(path, "config", "is not a config this pflcore runs") from None
    if fingerprint != record["fingerprint"]:
        raise _bad(path, "fingerprint", f"is {record['fingerprint']}, and the config it holds gives {fingerprint}, so "
                                        "the record is not of that config")
    if config.seed != record["seed"] or not _is_int(config.seed):
        raise _bad(path, "seed", f"is {record['seed']}, and its config's seed is {shorten(config.seed)}")
    return config


def _check_fields_only(record: dict, values: dict, path: Path) -> Any:
    """The checks of :func:`_check_fingerprint` that need no data: every field against its spec
    and the method's parameters against the method's, and the seed."""
    from .algorithms import ALGORITHMS
    from .config import FIELDS, ExperimentConfig
    from .spec import first_refusal

    values = dict(values, data_root=None)  # the one field that names this machine's folders
    try:
        refusal = first_refusal(FIELDS, values)
        if refusal is None:
            ALGORITHMS[values["method"]].check_params(values["method_params"])
        config = ExperimentConfig(**values)
    except (ValueError, KeyError, TypeError) as exc:
        raise _bad(path, "config", f"is not a config this pflcore runs ({shorten(str(exc).rstrip('.'), 300)})") from None
    if refusal is not None:
        raise _bad(path, "config", f"is not a config this pflcore runs ({refusal.sentence().rstrip('.')})")
    if config.seed != record["seed"] or not _is_int(config.seed):
        raise _bad(path, "seed", f"is {record['seed']}, and its config's seed is {shorten(config.seed)}")
    return config


def _accuracies(values: Any, field: str, path: Path, n: int | None = None) -> np.ndarray:
    """A per-client list of accuracies (percent, null for none) as float64, or one sentence."""
    if not isinstance(values, list) or not all(v is None or _is_number(v) for v in values):
        raise _bad(path, field, "is not a list of per-client accuracies")
    if n is not None and len(values) != n:
        raise _bad(path, field, f"has {len(values)} clients, and the record has {n}")
    arr = floats(values) if values else np.zeros(0)
    outside = np.flatnonzero((arr < 0) | (arr > 100))
    if outside.size:
        raise _bad(path, f"{field}[{outside[0]}]", f"is {arr[outside[0]]:g}, outside 0 to 100 percent")
    return arr


def _counts(values: Any, field: str, path: Path, n: int) -> np.ndarray:
    if not isinstance(values, list) or not all(_is_int(v) and v >= 0 for v in values):
        raise _bad(path, field, "is not a list of per-client sample counts")
    if len(values) != n:
        raise _bad(path, field, f"has {len(values)} clients, and the record has {n}")
    return np.asarray(values, dtype=np.int64)


def _check_clients(record: dict, path: Path) -> None:
    """The per-client arrays: types, lengths, ranges; final and best are rows of the history."""
    clients = record["clients"]
    for key in ("best", "test_sizes", "train_sizes"):  # every record pflcore writes has them
        if key not in clients:
            raise _bad(path, f"clients.{key}", "is missing")
    final = _accuracies(clients["final"], "clients.final", path)
    n = len(final)
    if n == 0:
        raise _bad(path, "clients.final", "holds no client")
    rows = clients["history"]
    if not isinstance(rows, list) or not rows:
        raise _bad(path, "clients.history", "is not a list of evaluated rounds")
    history = np.stack([_accuracies(row, f"clients.history[{i}]", path, n) for i, row in enumerate(rows)])
    rounds = clients["eval_rounds"]
    if not isinstance(rounds, list) or not all(_is_int(r) for r in rounds) or len(rounds) != len(rows):
        raise _bad(path, "clients.eval_rounds", f"is not a list of the {len(rows)} evaluated rounds")
    if any(b <= a for a, b in zip(rounds, rounds[1:])) or rounds[0] < 1:
        raise _bad(path, "clients.eval_rounds", "is not a rising list of round numbers")
    if not np.array_equal(history[-1], final, equal_nan=True):
        raise _bad(path, "clients.final", "is not the last evaluated round of clients.history")
    if "best" in clients:
        _accuracies(clients["best"], "clients.best", path, n)
    for key in ("train_sizes", "test_sizes"):
        if key in clients:
            _counts(clients[key], f"clients.{key}", path, n)
    if "new_final" in clients:
        _accuracies(clients["new_final"], "clients.new_final", path)
    if "correct" in clients:
        _check_correct(record, final, path)
    if record["summary"].get("num_clients") is not None and record["summary"]["num_clients"] != n:
        raise _bad(path, "summary.num_clients", f"is {shorten(record['summary']['num_clients'])}, and its clients "
                                                f"arrays hold {n}")


def _check_correct(record: dict, final: np.ndarray, path: Path) -> None:
    """The per-sample hits give each client's final accuracy."""
    import binascii

    clients = record["clients"]
    if not isinstance(clients["correct"], str) or "test_sizes" not in clients:
        raise _bad(path, "clients.correct", "is not the packed per-sample hits of clients with test sizes")
    try:
        packed = np.frombuffer(base64.b64decode(clients["correct"], validate=True), dtype=np.uint8)
    except (binascii.Error, ValueError):
        raise _bad(path, "clients.correct", "is not base64 text") from None
    sizes = np.asarray(clients["test_sizes"], dtype=np.int64)
    scored = ~np.isnan(final)
    total = int(sizes[scored].sum())
    if packed.size != (total + 7) // 8:
        raise _bad(path, "clients.correct", f"holds {8 * packed.size} bits, and the scored clients have {total} "
                                            "test samples")
    running = np.concatenate([[0], np.cumsum(np.unpackbits(packed)[:total], dtype=np.int64)])
    ends = np.cumsum(sizes[scored])
    counts = running[ends] - running[ends - sizes[scored]]
    with np.errstate(invalid="ignore", divide="ignore"):
        recomputed = 100 * (counts / sizes[scored])
    wrong = np.flatnonzero(~(np.abs(recomputed - final[scored]) <= TOLERANCE))
    if wrong.size:
        cid = int(np.flatnonzero(scored)[wrong[0]])
        raise _bad(path, f"clients.final[{cid}]", f"is {final[cid]:.6g}, and its per-sample hits give "
                                                  f"{recomputed[wrong[0]]:.6g}")


def _number(summary: dict, key: str, path: Path, low: float = 0.0, high: float = 100.0) -> float:
    value = summary.get(key)
    if not _is_number(value):
        raise _bad(path, f"summary.{key}", f"is {shorten(json.dumps(value))}, not a number")
    if not low <= value <= high:
        raise _bad(path, f"summary.{key}", f"is {value:g}, outside {low:g} to {high:g}")
    return float(value)


def _check_summary(record: dict, path: Path, config: Any) -> None:
    """The summary and the per-round history against each other and against the per-client arrays."""
    summary, history, clients = record["summary"], record["history"], record["clients"]
    rounds = summary["rounds"]
    if not _is_int(rounds) or rounds != config.rounds:
        raise _bad(path, "summary.rounds", f"is {shorten(json.dumps(rounds))}, and its config runs "
                                           f"{config.rounds} rounds")
    if len(history) != rounds:
        raise _bad(path, "history", f"holds {len(history)} rounds, and the run had {rounds}")
    for key in ("method", "dataset"):
        if summary.get(key) is not None and summary[key] != getattr(config, key):
            raise _bad(path, f"summary.{key}", f"is {shorten(summary[key])!r}, and its config's is "
                                               f"{getattr(config, key)!r}")
    n = len(clients["final"])
    evaluated = []
    for i, h in enumerate(history):
        if not isinstance(h, dict):
            raise _bad(path, f"history[{i}]", "is not a round's metrics")
        if h.get("round") != i + 1 or not _is_int(h.get("round")):
            raise _bad(path, f"history[{i}].round", f"is {shorten(json.dumps(h.get('round')))}, not {i + 1}")
        for key in ("train_loss", "seconds"):
            if h.get(key) is not None and not _is_number(h[key]):
                raise _bad(path, f"history[{i}].{key}", "is not a number")
        if _is_number(h.get("seconds")) and h["seconds"] <= 0:
            raise _bad(path, f"history[{i}].seconds", f"is {h['seconds']:g}, and a round takes some time")
        participants = h.get("participants", [])
        if not isinstance(participants, list) or not all(_is_int(c) and 0 <= c < n for c in participants):
            raise _bad(path, f"history[{i}].participants", f"is not a list of client ids below {n}")
        if "acc_mean" in h:
            for key in ("acc_mean", "acc_std", "acc_weighted"):
                if not (_is_number(h.get(key)) and 0 <= h[key] <= 100):
                    raise _bad(path, f"history[{i}].{key}", f"is {shorten(json.dumps(h.get(key)))}, not a number "
                                                            "from 0 to 100")
            evaluated.append(i)
    if [i + 1 for i in evaluated] != clients["eval_rounds"]:
        raise _bad(path, "clients.eval_rounds", "is not the list of rounds whose history holds an accuracy")
    if evaluated[-1] != rounds - 1:
        raise _bad(path, "history", "has no accuracy at the last round")
    per_client = floats(clients["history"])
    sizes = np.asarray(clients["test_sizes"], dtype=np.float64) if "test_sizes" in clients else None
    for row, i in zip(per_client, evaluated):
        ok = ~np.isnan(row)
        if not ok.any():
            raise _bad(path, f"clients.history[{evaluated.index(i)}]", "holds no client's accuracy")
        recomputed = {"acc_mean": row[ok].mean(), "acc_std": row[ok].std()}
        if sizes is not None and sizes[ok].sum() > 0:
            recomputed["acc_weighted"] = np.average(row[ok], weights=sizes[ok])
        for key, value in recomputed.items():
            if not abs(history[i][key] - value) <= TOLERANCE:
                raise _bad(path, f"history[{i}].{key}", f"is {history[i][key]:.10g}, and its clients' accuracies "
                                                        f"give {value:.10g}")
    last = history[-1]
    for key in ("best_acc_weighted", "best_weighted_round", "final_train_loss"):  # every record pflcore writes has them
        if key not in summary:
            raise _bad(path, f"summary.{key}", "is missing")
    for key in ("acc_mean", "acc_std", "acc_weighted"):
        if _number(summary, key, path) != last[key]:
            raise _bad(path, f"summary.{key}", f"is {summary[key]:.10g}, and the last round's is {last[key]:.10g}")
    if _number(summary, "best_acc_mean", path) < summary["acc_mean"]:
        raise _bad(path, "summary.best_acc_mean", f"is {summary['best_acc_mean']:.6g}, below the final "
                                                  f"{summary['acc_mean']:.6g}")
    _check_best(summary, history, evaluated, clients, "acc_mean", "best_acc_mean", "best_round", path)
    if "best" in clients and not np.array_equal(floats(clients["best"]),
                                                per_client[clients["eval_rounds"].index(summary["best_round"])],
                                                equal_nan=True):
        raise _bad(path, "clients.best", "is not the clients' accuracies at the best round")
    if "best_acc_weighted" in summary or "best_weighted_round" in summary:
        _check_best(summary, history, evaluated, clients, "acc_weighted", "best_acc_weighted", "best_weighted_round",
                    path)
    if "final_train_loss" in summary and summary["final_train_loss"] != last.get("train_loss"):
        raise _bad(path, "summary.final_train_loss", "is not the last round's train loss")
    seconds = summary["seconds"]
    if not (_is_number(seconds) and seconds > 0):
        raise _bad(path, "summary.seconds", f"is {shorten(json.dumps(seconds))}, not a positive number of seconds")
    for key in ("global_test_acc", "new_acc_mean", "new_acc_std", "new_acc_weighted"):
        if key in summary:
            _number(summary, key, path)
    if "new_final" in clients and "new_acc_mean" in summary:
        new = floats(clients["new_final"]) if clients["new_final"] else np.zeros(0)
        ok = ~np.isnan(new)
        for key, value in (("new_acc_mean", new[ok].mean() if ok.any() else None),
                           ("new_acc_std", new[ok].std() if ok.any() else None)):
            if key in summary and (value is None or not abs(summary[key] - value) <= TOLERANCE):
                raise _bad(path, f"summary.{key}", "is not what the new clients' accuracies give")


def _check_best(summary: dict, history: list, evaluated: list[int], clients: dict, metric: str, best: str,
                at: str, path: Path) -> None:
    """``summary[best]`` is the highest ``metric`` over the evaluated rounds, first reached at ``summary[at]``."""
    values = [history[i][metric] for i in evaluated]
    top = int(np.argmax(values))
    if _number(summary, best, path) != values[top]:
        raise _bad(path, f"summary.{best}", f"is {summary[best]:.10g}, and the highest over the evaluated rounds "
                                            f"is {values[top]:.10g}")
    if summary.get(at) != clients["eval_rounds"][top] or not _is_int(summary.get(at)):
        raise _bad(path, f"summary.{at}", f"is {shorten(json.dumps(summary.get(at)))}, and the round of "
                                          f"{summary[best]:.6g} is {clients['eval_rounds'][top]}")
