"""A federated dataset in PFLlib's format: the split its authors shipped, client by client
(FedCP, Zhang et al., KDD 2023, section 4, the data of Table 2; PFLlib's generators).

The folder holds ``config.json`` and, for each client ``i = 0..N-1``,
``train/train{i}_.npz`` and ``test/test{i}_.npz`` (the FedCP authors' names) or
``train/{i}.npz`` and ``test/{i}.npz`` (the names PFLlib's generators write). Each ``.npz``
holds one array ``data``: a pickled 0-d object array wrapping ``{"x": ..., "y": int (n,)}``
where ``x`` is either float images ``(n, C, H, W)`` after ``Normalize(0.5, 0.5)``, or,
for text (AG News, FedCP section 6.1), an object array ``(n, 2)`` of rows
``(token ids padded to L, length)``. They are read without numpy's ``allow_pickle``: the
pickle goes through an unpickler that admits only numpy arrays, a dict and plain Python
lists and numbers, and anything else is refused before it can run.

Pixels are recovered exactly as ``uint8 = round((x * 0.5 + 0.5) * 255)``; the dataset's
``mean``/``std`` are ``0.5`` per channel, so models see the authors' very inputs.
``train_x`` is every client's train file in client order, ``test_x`` every test file,
and :attr:`Dataset.owners` says which client each sample came from (the partition kind
``given`` gives that split back). The image shape and class count are the folder's, read
by :func:`shape_of`.

Text folders become a token :class:`Dataset`: ``x`` the ``int64 (n, L)`` ids as stored
(0 is padding), the stored lengths checked but not used (PFLlib's fastText averages over
all L positions), and ``vocab_size`` one more than the largest id in the folder (PFLlib
does not store its vocabulary).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import io
import json
import pickle
import re
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .cifar import _numpy_global
from .common import Dataset, DatasetCorruptError, DatasetSource, Found, TextShape, one_line, stamp

CONFIG = "config.json"
STATS_KEY = "Size of samples for labels in clients"
_TRAIN = re.compile(r"train(\d+)_\.npz")
_TEST = re.compile(r"test(\d+)_\.npz")
_PLAIN = re.compile(r"(\d+)\.npz")  # PFLlib's generators: train/{i}.npz, test/{i}.npz

#: Largest distance of ``(x * 0.5 + 0.5) * 255`` from a whole number that still counts as
#: a PFLlib image (the FedCP MNIST files are within 4e-6).
TOLERANCE = 1e-3

#: Known folders, keyed on the sha256 of their per-client (class, count) lists as compact
#: JSON: a description and the md5 of each file. FedCP's MNIST Dir(0.1) partition (the
#: authors' TsingZ0/FedCP, dataset/mnist-0.1-npz, commit 7110e97).
KNOWN: dict[str, tuple[str, dict[str, str]]] = {
    "2dff5374c02315b5e07757c5938cc85614930fdefe52090c878ff5ae596795e5": (
        "FedCP's MNIST Dir(0.1) partition",
        {
            "train/train0_.npz": "e3e5074be72f081fa2a035da2230b38a",
            "train/train1_.npz": "bc12a994bdc068455cd224d0f6a009a3",
            "train/train2_.npz": "f96e9f70f7332043847a1607ad33ea7f",
            "train/train3_.npz": "8adaadb4c1e8b7f335c2fe4af1fbb0d3",
            "train/train4_.npz": "f125f29688b2e19c3c0dc6387396ff02",
            "train/train5_.npz": "49e1da4cca7e2c706c4d7d04b8624965",
            "train/train6_.npz": "52b0ec1c34521b4fc10e3e4b6d686d84",
            "train/train7_.npz": "add724a27946ce880578a3df546dd28f",
            "train/train8_.npz": "10adef736733227989bb7721a43c94fc",
            "train/train9_.npz": "0a83cce83b5017c895c22f5a8ee97c6f",
            "train/train10_.npz": "02f8d7fcb74f68c51e70628e90715d31",
            "train/train11_.npz": "4eac7526821398ef9c53ac69a1bf4f2e",
            "train/train12_.npz": "51ef4ca1c12e3f879fac7e7b302b24df",
            "train/train13_.npz": "8ac16287f4667cfbd88ece0f0bbf5ac4",
            "train/train14_.npz": "357a58325de907bcb1d4363a76b9c7ee",
            "train/train15_.npz": "90c848c07baa8d9978af7f7790e41149",
            "train/train16_.npz": "6a08c13f1b753bc56fc6b09652bf6276",
            "train/train17_.npz": "408218e26e80960fb43bff838a78a37b",
            "train/train18_.npz": "08fbeb97a283da2ab977e4bad8ce59e7",
            "train/train19_.npz": "f286f0b81b2850fc93b82e41df9989db",
            "test/test0_.npz": "6638ac6c5fdece3b51cb6a645931962c",
            "test/test1_.npz": "90b9f01a4a3fa79f72026a30f4a78e2e",
            "test/test2_.npz": "588f4e9818baee3c2ed2a59198c6ad96",
            "test/test3_.npz": "9ac7ae6177c2ceee4f515fb9b72bca0a",
            "test/test4_.npz": "d9fa58c665bf7f05e9fc7e4604099d3e",
            "test/test5_.npz": "91e0a360adf8ef8fafd932f087184c31",
            "test/test6_.npz": "f34a92d981bbf64536a2d1cc2947b961",
            "test/test7_.npz": "6b7b0ed3b3df31c19f4c489357dd9ce6",
            "test/test8_.npz": "60131aa36a69c59e33ba6f9917fba253",
            "test/test9_.npz": "ed2b89bbec93036cf019ce73b762fe6c",
            "test/test10_.npz": "b1abf61843a2824f49a381757cd7fde7",
            "test/test11_.npz": "bac1b3ea98bc8dc241424bd0b71eba90",
            "test/test12_.npz": "bd6477c4f5e7b2093528c5c61dd330d9",
            "test/test13_.npz": "5e2aa7a90b2ec49229556a960836b428",
            "test/test14_.npz": "05511b4f133f730ed94149d4e0ea6ec7",
            "test/test15_.npz": "32ce497304942586cb787d21863109e2",
            "test/test16_.npz": "66145607d342d214f822c8e56b01ce5a",
            "test/test17_.npz": "50ab0c2f4c8077eb221044a03195d9e9",
            "test/test18_.npz": "571291f6ea3188367836122be85ffd45",
            "test/test19_.npz": "42a0d49e8dfbfa10a29f8b71fb553e2f",
        },
    ),
}


def _corrupt(text: str) -> DatasetCorruptError:
    """The error for a damaged or foreign file: one sentence naming it."""
    return DatasetCorruptError(text.rstrip(".") + ".")


# --------------------------------------------------------------------------- locating


def _probe(name: str, d: Path) -> Found | None:
    """A PFLlib folder: ``config.json`` beside ``train/`` and ``test/`` (the files are
    checked against the config when loading, so a missing one gets its own message)."""
    if not ((d / CONFIG).is_file() and (d / "train").is_dir() and (d / "test").is_dir()):
        return None
    files = [d / CONFIG]
    for sub, pattern in (("train", _TRAIN), ("test", _TEST)):
        for pat in (pattern, _PLAIN):
            found = sorted((p for p in (d / sub).iterdir() if pat.fullmatch(p.name)),
                           key=lambda p: int(pat.fullmatch(p.name).group(1)))  # type: ignore[union-attr]
            files.extend(found)
    return Found(name, "pfllib", tuple(str(f) for f in files), stamp(files))


# --------------------------------------------------------------------------- config.json


def _config(path: Path) -> tuple[int, int, list[np.ndarray]]:
    """(num_clients, num_classes, per-client class counts) from ``config.json``."""
    try:
        cfg = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise _corrupt(f"{path}: not readable JSON ({one_line(exc)})") from None
    if not isinstance(cfg, dict):
        raise _corrupt(f"{path}: holds a {type(cfg).__name__}, not PFLlib's mapping of settings")
    for key in ("num_clients", "num_classes"):
        value = cfg.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise _corrupt(f"{path}: {key!r} is {value!r}, not a whole number >= 1")
    n, classes = int(cfg["num_clients"]), int(cfg["num_classes"])
    stats = cfg.get(STATS_KEY)
    if not isinstance(stats, list) or len(stats) != n:
        raise _corrupt(f"{path}: {STATS_KEY!r} must list the (class, count) pairs of each of the "
                       f"{n} clients")
    counts = []
    for i, pairs in enumerate(stats):
        row = np.zeros(classes, dtype=np.int64)
        ok = isinstance(pairs, list)
        for pair in pairs if ok else ():
            ok = (isinstance(pair, list) and len(pair) == 2
                  and all(isinstance(v, int) and not isinstance(v, bool) for v in pair)
                  and 0 <= pair[0] < classes and pair[1] >= 0)
            if not ok:
                break
            row[pair[0]] += pair[1]
        if not ok:
            raise _corrupt(f"{path}: client {i}'s entry of {STATS_KEY!r} is not a list of "
                           f"[class, count] pairs with classes in [0, {classes})")
        counts.append(row)
    return n, classes, counts


def _stats_digest(path: Path) -> str | None:
    try:
        stats = json.loads(path.read_bytes()).get(STATS_KEY)
    except (OSError, ValueError, AttributeError):
        return None
    return hashlib.sha256(json.dumps(stats, separators=(",", ":")).encode()).hexdigest()


# --------------------------------------------------------------------------- one file


class _Refused(pickle.UnpicklingError):
    """The pickle names something other than what numpy arrays and a dict need."""


class _ArrayUnpickler(pickle.Unpickler):
    """Admits only numpy's array reconstruction, ``ndarray`` and ``dtype`` (a dict needs no
    global at all); any other name is refused before anything is called."""

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),  # how bytes are written at pickle protocol 2
    }

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self._ALLOWED:
            raise _Refused(f"{module}.{name}")
        if module == "numpy":
            return getattr(np, name)
        if module == "_codecs":
            return super().find_class(module, name)
        return _numpy_global(module, name)

    def persistent_load(self, pid: Any) -> Any:
        raise _Refused("a persistent id")


def _npy_payload(raw: bytes, source: str) -> bytes:
    """The pickle inside an ``.npy`` whose header says: a 0-d object array."""
    if raw[:6] != b"\x93NUMPY" or len(raw) < 10:
        raise _corrupt(f"{source}: data.npy is not an .npy array (bad magic)")
    major = raw[6]
    if major == 1:
        hlen, start = int.from_bytes(raw[8:10], "little"), 10
    elif major in (2, 3):
        hlen, start = int.from_bytes(raw[8:12], "little"), 12
    else:
        raise _corrupt(f"{source}: data.npy has the unknown .npy version {major}")
    try:
        header = ast.literal_eval(raw[start:start + hlen].decode("utf-8" if major == 3 else "latin1"))
    except (ValueError, SyntaxError, UnicodeDecodeError, MemoryError, RecursionError) as exc:
        raise _corrupt(f"{source}: data.npy has an unreadable header ({one_line(exc)})") from None
    if not isinstance(header, dict) or header.get("descr") != "|O" or header.get("shape") != ():
        raise _corrupt(f"{source}: data.npy is not PFLlib's pickled dict (its header is {header!r})")
    return raw[start + hlen:]


def _read_client(data: bytes, source: str) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) of one client file, checked for form; ``x`` still the stored floats, or the
    ``int64 (n, L)`` token ids of a text file (:func:`_tokens`)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            names = z.namelist()
            if names != ["data.npy"]:
                raise _corrupt(f"{source}: holds {names}, not PFLlib's single array 'data'")
            raw = z.read("data.npy")
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError) as exc:
        if isinstance(exc, DatasetCorruptError):
            raise
        raise _corrupt(f"{source}: not a readable .npz archive ({one_line(exc)})") from None
    payload = _npy_payload(raw, source)
    try:
        obj = _ArrayUnpickler(io.BytesIO(payload)).load()
    except _Refused as exc:
        raise _corrupt(f"{source}: the pickle asks for {exc}, and pflcore refuses to run code from "
                       "the pickle (only numpy arrays and a dict are allowed)") from None
    except Exception as exc:  # any other unpickling failure: a damaged or foreign file
        raise _corrupt(f"{source}: not a readable pickle ({one_line(exc)})") from None
    item = obj[()] if isinstance(obj, np.ndarray) and obj.dtype == object and obj.shape == () else obj
    if not isinstance(item, dict) or set(item) != {"x", "y"}:
        raise _corrupt(f"{source}: the array holds {type(item).__name__}, not a dict of 'x' and 'y'")
    x, y = item["x"], item["y"]
    if isinstance(x, np.ndarray) and x.dtype == object:
        x = _tokens(x, source)
    elif not isinstance(x, np.ndarray) or x.dtype.kind != "f" or x.ndim != 4 or x.shape[2] != x.shape[3]:
        raise _corrupt(f"{source}: 'x' must be float images (n, C, H, H) or rows of (token ids, length), got "
                       f"{getattr(x, 'dtype', type(x).__name__)} {getattr(x, 'shape', '')}")
    if not isinstance(y, np.ndarray) or y.ndim != 1 or y.shape[0] != x.shape[0] \
            or (y.size and y.dtype.kind not in "iu"):
        raise _corrupt(f"{source}: 'y' must be {x.shape[0]} integer labels, got "
                       f"{getattr(y, 'dtype', type(y).__name__)} {getattr(y, 'shape', '')}")
    return x, y.astype(np.int64)


def _tokens(x: np.ndarray, source: str) -> np.ndarray:
    """``int64 (n, L)`` token ids from PFLlib's text rows ``(token ids padded to L, length)``
    (FedCP section 6.1's AG News), checked: one length L, whole ids >= 0, lengths in 0..L."""
    if x.ndim != 2 or x.shape[1] != 2:
        raise _corrupt(f"{source}: 'x' is an object array of shape {x.shape}, not PFLlib's rows of "
                       "(token ids, length)")
    if x.shape[0] == 0:
        return np.zeros((0, 0), dtype=np.int64)  # no rows: the length is the other files'
    try:
        ids, lengths = np.array(list(x[:, 0])), np.array(list(x[:, 1]))
    except (ValueError, TypeError) as exc:
        raise _corrupt(f"{source}: the token id lists are not all of one length ({one_line(exc)})") from None
    if ids.ndim != 2 or ids.dtype.kind not in "iu" or lengths.ndim != 1 or lengths.dtype.kind not in "iu":
        raise _corrupt(f"{source}: 'x' must hold rows of (whole token ids padded to one length, whole length), got "
                       f"ids {ids.dtype} {ids.shape} and lengths {lengths.dtype} {lengths.shape}")
    if ids.size and int(ids.min()) < 0:
        raise _corrupt(f"{source}: token id {int(ids.min())} is negative")
    if lengths.size and (int(lengths.min()) < 0 or int(lengths.max()) > ids.shape[1]):
        raise _corrupt(f"{source}: a stored length is outside 0..{ids.shape[1]} (the padded length)")
    return ids.astype(np.int64)


def _form(shape: tuple[int, ...]) -> str:
    """What a client's ``x`` holds, for messages: ``CxHxW images`` or ``token ids of length L``."""
    return f"token ids of length {shape[0]}" if len(shape) == 1 else f"{'x'.join(map(str, shape))} images"


def _pixels(x: np.ndarray, source: str) -> np.ndarray:
    """uint8 pixels from PFLlib's Normalize(0.5, 0.5) floats, checked to be exact."""
    if not np.isfinite(x).all():
        raise _corrupt(f"{source}: 'x' holds values that are not finite")
    v = (x.astype(np.float64) * 0.5 + 0.5) * 255.0
    u = np.rint(v)
    off = float(np.abs(v - u).max(initial=0.0))
    if off > TOLERANCE or (u.size and (u.min() < 0 or u.max() > 255)):
        raise _corrupt(
            f"{source}: the values are not PFLlib's Normalize(0.5, 0.5) images (pixel (x * 0.5 + 0.5) * 255 "
            f"is {off:.3g} from a whole number, or outside 0..255)")
    return u.astype(np.uint8)


# --------------------------------------------------------------------------- loading


def _client_files(found: Found) -> tuple[Path, int, int, list[np.ndarray], list[Path], list[Path]]:
    """config.json and the expected client files, checked to be exactly those present."""
    cfg = Path(found.paths[0])
    n, classes, counts = _config(cfg)
    root = cfg.parent
    present_names = {Path(p).name for p in found.paths[1:]}
    if any(_PLAIN.fullmatch(f) for f in present_names) and not any(_TRAIN.fullmatch(f) or _TEST.fullmatch(f)
                                                                  for f in present_names):
        train = [root / "train" / f"{i}.npz" for i in range(n)]  # PFLlib's generators' names
        test = [root / "test" / f"{i}.npz" for i in range(n)]
    else:
        train = [root / "train" / f"train{i}_.npz" for i in range(n)]
        test = [root / "test" / f"test{i}_.npz" for i in range(n)]
    present = {str(p) for p in found.paths[1:]}
    for p in (*train, *test):
        if str(p) not in present:
            raise _corrupt(f"{p}: missing, but {cfg} lists {n} clients (0 to {n - 1})")
    extra = sorted(present - {str(p) for p in (*train, *test)})
    if extra:
        raise _corrupt(f"{extra[0]}: a client file beyond the {n} clients that {cfg} lists")
    return root, n, classes, counts, train, test


def _load(found: Found) -> Dataset:
    root, n, classes, counts, train_files, test_files = _client_files(found)
    known = KNOWN.get(_stats_digest(root / CONFIG) or "")
    parts: dict[str, list[np.ndarray]] = {"train_x": [], "train_y": [], "test_x": [], "test_y": []}
    shape: tuple[int, ...] | None = None
    first = ""
    for i in range(n):
        held = np.zeros(classes, dtype=np.int64)
        for split, path in (("train", train_files[i]), ("test", test_files[i])):
            rel = f"{split}/{path.name}"
            source = str(path)
            data = path.read_bytes()
            if known is not None:
                digest, want = hashlib.md5(data).hexdigest(), known[1][rel]
                if digest != want:
                    raise _corrupt(f"{source}: md5 is {digest}, not the {want} pinned for {known[0]} "
                                   "(the file is damaged or was changed)")
            x, y = _read_client(data, source)
            if x.shape == (0, 0):  # a text file without rows: any length fits
                pass
            elif shape is None:
                shape, first = x.shape[1:], source
            elif x.shape[1:] != shape:
                raise _corrupt(f"{source}: 'x' holds {_form(x.shape[1:])} but {first} holds {_form(shape)}")
            if y.size and (int(y.min()) < 0 or int(y.max()) >= classes):
                bad = int(y.min()) if int(y.min()) < 0 else int(y.max())
                raise _corrupt(f"{source}: label {bad} is outside [0, {classes}) (num_classes in "
                               f"{CONFIG})")
            parts[f"{split}_x"].append(x if x.dtype == np.int64 else _pixels(x, source))
            parts[f"{split}_y"].append(y)
            held += np.bincount(y, minlength=classes)
        if not np.array_equal(held, counts[i]):
            k = int(np.flatnonzero(held != counts[i])[0])
            raise _corrupt(
                f"{root / CONFIG}: client {i} has {int(counts[i][k])} samples of class {k} in its (class, count) "
                f"pairs, but {train_files[i]} and {test_files[i]} hold {int(held[k])}")
    if shape is None:  # only text files without rows
        raise _corrupt(f"{root}: no client file holds a sample")
    owners = tuple(np.repeat(np.arange(n, dtype=np.int64), [y.size for y in parts[f"{s}_y"]])
                   for s in ("train", "test"))
    for o in owners:
        o.setflags(write=False)
    if len(shape) == 1:  # token ids (FedCP section 6.1's AG News): not normalised
        xs = {k: np.concatenate([x.reshape(-1, shape[0]) for x in parts[k]]) for k in ("train_x", "test_x")}
        vocab_size = max(2, 1 + max(int(x.max(initial=0)) for x in xs.values()))
        return Dataset(name="pfllib", train_x=torch.from_numpy(xs["train_x"]),
                       train_y=torch.from_numpy(np.concatenate(parts["train_y"])),
                       test_x=torch.from_numpy(xs["test_x"]), test_y=torch.from_numpy(np.concatenate(parts["test_y"])),
                       num_classes=classes, mean=(), std=(), owners=(owners[0], owners[1]), vocab_size=vocab_size)
    c = int(shape[0])
    return Dataset(
        name="pfllib",
        train_x=torch.from_numpy(np.concatenate(parts["train_x"])),
        train_y=torch.from_numpy(np.concatenate(parts["train_y"])),
        test_x=torch.from_numpy(np.concatenate(parts["test_x"])),
        test_y=torch.from_numpy(np.concatenate(parts["test_y"])),
        num_classes=classes,
        mean=(0.5,) * c,
        std=(0.5,) * c,
        owners=(owners[0], owners[1]),
    )


@functools.lru_cache(maxsize=8)
def shape_of(found: Found) -> tuple[int, int, int] | TextShape:
    """(channels, image size, classes) of a PFLlib image folder, or the :class:`TextShape`
    of a text one (its vocabulary size known only once loaded), read cheaply:
    ``config.json`` and the smallest client file with samples (cached on the files' stamps)."""
    cfg = Path(found.paths[0])
    _, classes, _ = _config(cfg)
    files = [Path(p) for p in found.paths[1:]]
    if not files:
        raise _corrupt(f"{cfg.parent}: has no train/train{{i}}_.npz or test/test{{i}}_.npz files")
    for path in sorted(files, key=lambda p: p.stat().st_size):
        x, _ = _read_client(path.read_bytes(), str(path))
        if x.ndim == 4:
            return int(x.shape[1]), int(x.shape[2]), classes
        if x.shape[0]:
            return TextShape(int(x.shape[1]), None, classes)
    raise _corrupt(f"{cfg.parent}: no client file holds a sample")


PFLLIB = DatasetSource(
    "pfllib", shape=None, probe=_probe, load=_load, subdirs=("pfllib",),
    provide="a PFLlib federated dataset folder (config.json, train/train{i}_.npz, test/test{i}_.npz, or "
            "train/{i}.npz, test/{i}.npz)",
    shape_of=shape_of, clear=shape_of.cache_clear,
)
