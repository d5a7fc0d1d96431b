"""Codec between pflcore's plain values (payloads, updates, personal states) and Flower records.

A value (any nesting of dicts keyed by ``str`` or ``int``, lists, tuples, tensors, NumPy
arrays and scalars, Python numbers, bools, strings, bytes and ``None``) becomes two records:

- an ``ArrayRecord`` ``<prefix>.arrays`` with every tensor / array / NumPy scalar, keyed by
  its path (``body/conv1.weight``), dtype and shape kept (also ``bool`` and ``int64``;
  dtypes NumPy lacks, e.g. ``bfloat16``, travel as raw bytes);
- a ``ConfigRecord`` ``<prefix>.values`` with every Python scalar, plus ``__schema__``: a JSON
  description of the structure (container kinds, key types, which leaf is where, its type).

:func:`decode` rebuilds exactly the value that was encoded (dtypes, shapes, key types, the
Python and NumPy scalar types); tensors come back on the CPU, contiguous, without grad.
"""
from __future__ import annotations

import json
from typing import Any

import numpy as np
import torch

SCHEMA_KEY = "__schema__"
_INT64 = (-(2 ** 63), 2 ** 63 - 1)


class CodecError(TypeError):
    """A value cannot be encoded, or records do not decode; the message names the path."""


def _flwr():
    from flwr.app import Array, ArrayRecord, ConfigRecord

    return Array, ArrayRecord, ConfigRecord


def encode(value: Any, prefix: str) -> dict:
    """``value`` as ``{"<prefix>.arrays": ArrayRecord, "<prefix>.values": ConfigRecord}``
    (put them into a ``RecordDict``; several prefixes can share one message)."""
    Array, ArrayRecord, ConfigRecord = _flwr()
    arrays: dict[str, Any] = {}
    values: dict[str, Any] = {}

    def slot(store: dict, path: str) -> str:
        key = path or "."
        if key in store or key == SCHEMA_KEY:
            key = f"{key}#{len(store)}"
        return key

    def walk(obj: Any, path: str) -> Any:
        if isinstance(obj, torch.Tensor):
            t = obj.detach().cpu().contiguous()
            key = slot(arrays, path)
            try:
                arrays[key] = Array(t.numpy())
                return ["t", key, str(t.dtype)]
            except TypeError:  # bfloat16 and other dtypes NumPy lacks: raw bytes plus shape
                arrays[key] = Array(t.reshape(-1).view(torch.uint8).numpy())
                return ["tb", key, str(t.dtype), list(t.shape)]
        if isinstance(obj, np.ndarray):
            if obj.dtype.hasobject:
                raise CodecError(f"cannot encode {path or 'the value'}: NumPy arrays of Python objects are not supported.")
            key = slot(arrays, path)
            arrays[key] = Array(np.ascontiguousarray(obj))
            return ["a", key]
        if isinstance(obj, np.generic):  # NumPy scalars keep their type (np.float32, np.bool_, ...)
            key = slot(arrays, path)
            arrays[key] = Array(np.asarray(obj))
            return ["n", key]
        if obj is None:
            return ["none"]
        if isinstance(obj, (bool, float, str, bytes)) or (isinstance(obj, int) and _INT64[0] <= obj <= _INT64[1]):
            key = slot(values, path)
            values[key] = obj
            return ["v", key, type(obj).__name__]
        if isinstance(obj, int):  # beyond int64: as its decimal string
            key = slot(values, path)
            values[key] = str(obj)
            return ["bigint", key]
        if isinstance(obj, dict):
            items = []
            for k, v in obj.items():
                if isinstance(k, str):
                    kind = "s"
                elif isinstance(k, int) and not isinstance(k, bool):
                    kind = "i"
                else:
                    raise CodecError(f"cannot encode {path or 'the value'}: dict keys must be str or int, "
                                     f"got {type(k).__name__} {k!r}.")
                items.append([kind, k, walk(v, f"{path}/{k}" if path else str(k))])
            return ["d", items]
        if isinstance(obj, (list, tuple)):
            children = [walk(v, f"{path}/{i}" if path else str(i)) for i, v in enumerate(obj)]
            return ["l" if isinstance(obj, list) else "u", children]
        raise CodecError(f"cannot encode {path or 'the value'}: unsupported type {type(obj).__name__}.")

    schema = walk(value, "")
    values[SCHEMA_KEY] = json.dumps(schema, separators=(",", ":"))
    return {f"{prefix}.arrays": ArrayRecord(array_dict=arrays), f"{prefix}.values": ConfigRecord(values)}


_SCALARS = {"bool": bool, "int": int, "float": float, "str": str, "bytes": bytes}


def decode(content: Any, prefix: str) -> Any:
    """The value :func:`encode` put under ``prefix`` in ``content`` (a ``RecordDict`` or a
    mapping of records)."""
    try:
        arrays = content[f"{prefix}.arrays"]
        values = content[f"{prefix}.values"]
        schema = json.loads(values[SCHEMA_KEY])
    except (KeyError, TypeError, ValueError) as exc:
        raise CodecError(f"the message holds no encoded value {prefix!r} ({exc}).") from None

    def build(node: list) -> Any:
        tag = node[0]
        if tag == "t":
            return _tensor(arrays[node[1]].numpy(), node[2])
        if tag == "tb":
            raw = torch.from_numpy(_writable(arrays[node[1]].numpy()))
            return raw.view(_torch_dtype(node[2])).reshape(node[3])
        if tag == "a":
            return _writable(arrays[node[1]].numpy())
        if tag == "n":
            return arrays[node[1]].numpy()[()]
        if tag == "none":
            return None
        if tag == "v":
            return _SCALARS[node[2]](values[node[1]])
        if tag == "bigint":
            return int(values[node[1]])
        if tag == "d":
            return {(int(k) if kind == "i" else k): build(child) for kind, k, child in node[1]}
        if tag == "l":
            return [build(child) for child in node[1]]
        if tag == "u":
            return tuple(build(child) for child in node[1])
        raise CodecError(f"unknown schema tag {tag!r} in {prefix!r}.")

    return build(schema)


def _writable(a: np.ndarray) -> np.ndarray:
    return a if a.flags.writeable else a.copy()


def _torch_dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise CodecError(f"unknown tensor dtype {name!r}.")
    return dtype


def _tensor(a: np.ndarray, dtype: str) -> torch.Tensor:
    t = torch.from_numpy(_writable(a))
    want = _torch_dtype(dtype)
    return t if t.dtype == want else t.to(want)


__all__ = ["CodecError", "decode", "encode"]
