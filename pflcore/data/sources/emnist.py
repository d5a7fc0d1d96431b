"""EMNIST byclass (1x28x28, 62 classes: digits, A-Z, a-z): its IDX files, or straight from
the official ``gzip.zip``. EMNIST stores each image transposed; they are made upright."""

from __future__ import annotations

import zipfile
import zlib
from pathlib import Path

from . import idx
from .common import Dataset, DatasetCorruptError, DatasetSource, Download, Found, one_line, stamp

STEMS = tuple(
    f"emnist-byclass-{split}-{kind}-ubyte" for split in ("train", "test") for kind in ("images-idx3", "labels-idx1")
)
ZIPS = ("gzip.zip", "emnist.zip")
CLASSES = tuple("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


def _probe(name: str, d: Path) -> Found | None:
    found = idx.probe_files(name, d, STEMS)
    if found is not None:
        return found
    for zname in ZIPS:
        z = d / zname
        if z.is_file():
            return Found(name, "emnist_zip", (str(z),), stamp([z]))
    return None


def _read_zip(zpath: str) -> list[idx.Raw]:
    """The byclass IDX files from the official zip (members ``gzip/<stem>.gz``)."""
    raw: list[idx.Raw] = []
    try:
        with zipfile.ZipFile(zpath) as zf:
            by_base = {m.rsplit("/", 1)[-1]: m for m in zf.namelist()}
            for stem in STEMS:
                member = by_base.get(stem + ".gz") or by_base.get(stem)
                if member is None:
                    raise DatasetCorruptError(f"{zpath}: the archive has no {stem}.gz")
                raw.append((zf.read(member), f"{zpath}:{member}", stem))
    except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
        raise DatasetCorruptError(f"{zpath}: damaged zip archive ({one_line(exc)})") from None
    return raw


def _load(found: Found) -> Dataset:
    raw = idx.read_files(found, STEMS) if found.kind == "idx" else _read_zip(found.paths[0])
    return idx.to_dataset("emnist", raw, 62, CLASSES, transpose=True)


EMNIST = DatasetSource(
    "emnist", shape=(1, 28, 62), aliases=("emnistbyclass",), probe=_probe, load=_load,
    subdirs=("emnist", "emnist/gzip", "gzip", "EMNIST/raw"),
    provide="EMNIST's gzip.zip or the byclass IDX files from it (" + ", ".join(s + ".gz" for s in STEMS) + ")",
    download=Download(
        files=(("gzip.zip", "58c8d27c78d21e728a6bc7b3cc06412e"),),
        mirrors=("https://biometrics.nist.gov/cs_links/EMNIST/",),
    ),
)
