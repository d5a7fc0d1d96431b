"""Tiny-ImageNet (3x64x64, 200 classes; FedCP section 6.1, pFedFDA section 5): the official
``tiny-imagenet-200`` folder or its zip, read in memory.

Layout: ``wnids.txt`` (one WordNet id per line; its order gives the labels 0..199),
``train/<wnid>/images/*.JPEG`` (500 per class) and ``val/images/*.JPEG`` labelled by
``val/val_annotations.txt`` (tab-separated: file, wnid, bounding box). ``val`` is the test
split (10,000 images); the unlabelled ``test/`` folder is not used. Training images are in
class order, then file-name order; test images in the annotation file's order. Greyscale
JPEGs become RGB. Needs Pillow.
"""

from __future__ import annotations

import io
import os
import zipfile
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from .common import Dataset, DatasetCorruptError, DatasetSource, Download, Found, make_dataset, one_line, stamp

ZIP = "tiny-imagenet-200.zip"
SIZE = 64
_CHUNK = 2048  # images read per batch before decoding in threads


def _is_jpeg(name: str) -> bool:
    return name.lower().endswith((".jpeg", ".jpg"))


def _probe(name: str, d: Path) -> Found | None:
    wnids, train, annotations, val_images = d / "wnids.txt", d / "train", d / "val" / "val_annotations.txt", \
        d / "val" / "images"
    if wnids.is_file() and train.is_dir() and annotations.is_file() and val_images.is_dir():
        # Stamp the image folders too: adding or removing a JPEG changes their mtime.
        try:
            ids = wnids.read_text(encoding="utf-8", errors="replace").split()
        except OSError:
            ids = []
        watched = [wnids, annotations, train, val_images]
        watched += [train / w / "images" for w in ids if (train / w / "images").is_dir()]
        return Found(name, "tiny_dir", (str(d),), stamp(watched))
    z = d / ZIP
    if z.is_file():
        return Found(name, "tiny_zip", (str(z),), stamp([z]))
    return None


# ------------------------------------------------------------------------------ readers


class _DirReader:
    """Files of an extracted ``tiny-imagenet-200`` folder, by path relative to it."""

    def __init__(self, root: str):
        self.root = Path(root)

    def where(self, rel: str) -> str:
        return str(self.root / rel)

    def text(self, rel: str) -> str | None:
        path = self.root / rel
        if not path.is_file():
            return None
        try:
            return path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise DatasetCorruptError(f"{path}: cannot read the file ({one_line(exc)})") from None

    def images(self, rel_dir: str) -> list[str] | None:
        folder = self.root / rel_dir
        if not folder.is_dir():
            return None
        return sorted(e.name for e in os.scandir(folder) if e.is_file() and _is_jpeg(e.name))

    def exists(self, rel: str) -> bool:
        return (self.root / rel).is_file()

    def blobs(self, rels: list[str]) -> Iterator[list[tuple[str, bytes | None]]]:
        for i in range(0, len(rels), _CHUNK):  # read in the decoding threads
            yield [(self.where(r), None) for r in rels[i:i + _CHUNK]]

    def close(self) -> None:
        pass


class _ZipReader:
    """Members of ``tiny-imagenet-200.zip`` (under its top folder), read in memory."""

    def __init__(self, path: str):
        self.path = path
        try:
            self.zf = zipfile.ZipFile(path)
            names = self.zf.namelist()
        except (zipfile.BadZipFile, OSError, EOFError) as exc:
            raise DatasetCorruptError(f"{path}: damaged zip archive ({one_line(exc)})") from None
        tops = [n[: -len("wnids.txt")] for n in names if n == "wnids.txt" or n.endswith("/wnids.txt")]
        if not tops:
            raise DatasetCorruptError(f"{path}: the archive has no wnids.txt")
        self.prefix = min(tops, key=len)
        self.members = {n[len(self.prefix):]: n for n in names if n.startswith(self.prefix) and not n.endswith("/")}
        self._dirs: dict[str, list[str]] = {}
        for rel in self.members:
            head, _, base = rel.rpartition("/")
            if _is_jpeg(base):
                self._dirs.setdefault(head, []).append(base)

    def where(self, rel: str) -> str:
        return f"{self.path}:{self.prefix}{rel}"

    def _read(self, rel: str) -> bytes:
        try:
            return self.zf.read(self.members[rel])
        except (zipfile.BadZipFile, zlib.error, OSError, EOFError) as exc:
            raise DatasetCorruptError(f"{self.where(rel)}: damaged zip member ({one_line(exc)})") from None

    def text(self, rel: str) -> str | None:
        if rel not in self.members:
            return None
        try:
            return self._read(rel).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DatasetCorruptError(f"{self.where(rel)}: cannot read the file ({one_line(exc)})") from None

    def images(self, rel_dir: str) -> list[str] | None:
        names = self._dirs.get(rel_dir)
        return sorted(names) if names is not None else None

    def exists(self, rel: str) -> bool:
        return rel in self.members

    def blobs(self, rels: list[str]) -> Iterator[list[tuple[str, bytes | None]]]:
        for i in range(0, len(rels), _CHUNK):  # one archive handle: read here, decode in threads
            yield [(self.where(r), self._read(r)) for r in rels[i:i + _CHUNK]]

    def close(self) -> None:
        self.zf.close()


# ------------------------------------------------------------------------------ parsing


def _decode(item: tuple[str, bytes | None]) -> np.ndarray:
    """Decode one 64x64 JPEG (a path, or its bytes) to (64, 64, 3) uint8."""
    from PIL import Image

    where, data = item
    try:
        with Image.open(io.BytesIO(data) if data is not None else where) as im:
            size = im.size
            arr = np.asarray(im.convert("RGB")) if size == (SIZE, SIZE) else None
    except (OSError, SyntaxError, ValueError) as exc:  # includes truncated and unidentified images
        raise DatasetCorruptError(f"{where}: cannot decode image ({one_line(exc)})") from None
    if arr is None:
        raise DatasetCorruptError(f"{where}: image is {size[0]}x{size[1]}, expected {SIZE}x{SIZE}")
    return arr


def _read_images(reader: _DirReader | _ZipReader, rels: list[str]) -> np.ndarray:
    out = np.empty((len(rels), SIZE, SIZE, 3), dtype=np.uint8)
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:  # PIL releases the GIL
        i = 0
        for chunk in reader.blobs(rels):
            for arr in (pool.map(_decode, chunk) if len(chunk) > 64 else map(_decode, chunk)):
                out[i] = arr
                i += 1
    return np.ascontiguousarray(out.transpose(0, 3, 1, 2))


def _wnids(reader: _DirReader | _ZipReader) -> tuple[str, ...]:
    text = reader.text("wnids.txt")
    if text is None:
        raise DatasetCorruptError(f"{reader.where('wnids.txt')}: the file is missing")
    ids = tuple(line.strip() for line in text.splitlines() if line.strip())
    if not ids:
        raise DatasetCorruptError(f"{reader.where('wnids.txt')}: the file lists no class")
    if len(set(ids)) != len(ids):
        dup = next(w for w in ids if ids.count(w) > 1)
        raise DatasetCorruptError(f"{reader.where('wnids.txt')}: class {dup} is listed twice")
    return ids


def _train_files(reader: _DirReader | _ZipReader, wnids: tuple[str, ...]) -> tuple[list[str], np.ndarray]:
    rels: list[str] = []
    labels: list[int] = []
    for label, wnid in enumerate(wnids):
        folder = f"train/{wnid}/images"
        names = reader.images(folder)
        if not names:
            what = "missing class folder" if names is None else "class folder without JPEG images"
            raise DatasetCorruptError(f"{reader.where(folder)}: {what} for {wnid} (listed in wnids.txt)")
        rels.extend(f"{folder}/{n}" for n in names)
        labels.extend([label] * len(names))
    return rels, np.asarray(labels, dtype=np.int64)


def _val_files(reader: _DirReader | _ZipReader, wnids: tuple[str, ...]) -> tuple[list[str], np.ndarray]:
    rel = "val/val_annotations.txt"
    text = reader.text(rel)
    if text is None:
        raise DatasetCorruptError(f"{reader.where(rel)}: the file is missing")
    index = {w: i for i, w in enumerate(wnids)}
    rels: list[str] = []
    labels: list[int] = []
    seen: set[str] = set()
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.rstrip("\r\n").split("\t")
        if len(fields) < 2 or not fields[0].strip() or "/" in fields[0]:
            raise DatasetCorruptError(f"{reader.where(rel)}: line {lineno} is not 'file<TAB>wnid<TAB>box'")
        fname, wnid = fields[0].strip(), fields[1].strip()
        if wnid not in index:
            raise DatasetCorruptError(f"{reader.where(rel)}: line {lineno} names class {wnid!r}, not in wnids.txt")
        if fname in seen:
            raise DatasetCorruptError(f"{reader.where(rel)}: line {lineno} repeats the image {fname}")
        if not reader.exists(f"val/images/{fname}"):
            raise DatasetCorruptError(f"{reader.where(rel)}: line {lineno} names {fname}, which val/images/ lacks")
        seen.add(fname)
        rels.append(f"val/images/{fname}")
        labels.append(index[wnid])
    if not rels:
        raise DatasetCorruptError(f"{reader.where(rel)}: the file labels no image")
    return rels, np.asarray(labels, dtype=np.int64)


def _load(found: Found) -> Dataset:
    try:
        import PIL  # noqa: F401
    except ImportError:
        raise ImportError("Loading Tiny-ImageNet needs Pillow (pip install pillow)") from None
    reader: _DirReader | _ZipReader = _DirReader(found.paths[0]) if found.kind == "tiny_dir" \
        else _ZipReader(found.paths[0])
    try:
        wnids = _wnids(reader)
        train_rels, train_y = _train_files(reader, wnids)
        test_rels, test_y = _val_files(reader, wnids)
        train_x = _read_images(reader, train_rels)
        test_x = _read_images(reader, test_rels)
    finally:
        reader.close()
    return make_dataset(found.name, (train_x, train_y), (test_x, test_y), len(wnids), wnids)


TINYIMAGENET = DatasetSource(
    "tinyimagenet", shape=(3, SIZE, 200), aliases=("tinyimagenet200",), probe=_probe, load=_load,
    subdirs=("tiny-imagenet-200", "tinyimagenet", "tinyimagenet/tiny-imagenet-200", "tiny-imagenet",
             "tiny-imagenet/tiny-imagenet-200"),
    provide=f"{ZIP} or its extracted tiny-imagenet-200 folder (wnids.txt, train/, val/)",
    download=Download(files=((ZIP, "90528d7ca1a48142e341f4ef8d21d0de"),),
                      mirrors=("http://cs231n.stanford.edu/",)),
)
