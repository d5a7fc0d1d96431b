"""The data a lent GPU session reads, packed small enough to travel with the working tree.

    python benchmarks/device_data.py pack OUT [--fedcp DIR]      (here, by device_prepare.sh)
    python benchmarks/device_data.py unpack OUT DEST              (there, by device_run.sh)

The device tool sends the working tree and at most 8 carried paths, 64 MiB in all; the tree
alone is about 17 MB, the wheels 12 MB, and the two datasets as they lie here 49 MB
(Fashion-MNIST's four ``.gz`` files 31 MB, FedCP's MNIST partition 18 MB). So each is packed
losslessly and checked bit for bit:

- ``OUT/fmnist.tar.xz``: Fashion-MNIST's four IDX files uncompressed, then xz (26.5 MB).
  pflcore reads plain IDX files and checks the md5 of the uncompressed data itself.
- ``OUT/fedcp-mnist.tar.xz``: FedCP's partition (its ``config.json``, README and licence as
  they are). pflcore pins every client file's md5, so each ``.npz`` must come back byte for
  byte: the zip's bytes around its one deflate stream are kept as they are, the stream's
  content (``data.npy``) is kept instead of the stream, and the float images inside it (256
  values: ``(p / 255 - 0.5) / 0.5``) as one byte per pixel and the 256 float32 values, the
  bytes around them as they are. Unpacking deflates ``data.npy`` again with the parameters
  that gave the stored stream here (zlib level 6, memory level 8, checked when packing).

Every file's md5 is in the archive's ``MANIFEST.json``; ``pack`` unpacks into a temporary
folder and compares before it keeps anything, and ``unpack`` compares again and says in one
line which file differs (a zlib whose deflate differs would show there). ``unpack`` writes
``DEST/fmnist/`` (point ``PFL_DATA`` at ``DEST``) and ``DEST/mnist-fedcp-dir0.1/``.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import shutil
import struct
import sys
import tarfile
import tempfile
import zlib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
FMNIST_STEMS = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                "t10k-labels-idx1-ubyte")
FMNIST_ARCHIVE, FEDCP_ARCHIVE, FEDCP_NAME = "fmnist.tar.xz", "fedcp-mnist.tar.xz", "mnist-fedcp-dir0.1"
DEFLATE = {"level": 6, "mem_level": 8}


class PackError(RuntimeError):
    """One sentence: what could not be packed or unpacked."""


def _md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def _add(bundle: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    bundle.addfile(info, io.BytesIO(data))


def _deflate(raw: bytes) -> bytes:
    packer = zlib.compressobj(DEFLATE["level"], zlib.DEFLATED, -15, DEFLATE["mem_level"])
    return packer.compress(raw) + packer.flush()


# ---------------------------------------------------------------------- Fashion-MNIST
def find_fmnist() -> list[Path]:
    """The four Fashion-MNIST files where pflcore finds them (``PFL_DATA``, the cache, Debian's package)."""
    sys.path.insert(0, str(ROOT))
    from pflcore.data.sources import _locate, _search_bases

    found = _locate("fmnist", _search_bases("fmnist", None))
    if found is None:
        raise PackError("Fashion-MNIST is nowhere pflcore looks (PFL_DATA, the cache, /usr/share/datasets); "
                        "install Debian's dataset-fashion-mnist or set PFL_DATA.")
    return [Path(p) for p in found.paths]


def pack_fmnist(out: Path) -> dict:
    files = {}
    with tarfile.open(out / FMNIST_ARCHIVE, "w:xz", preset=9) as bundle:
        for path, stem in zip(find_fmnist(), FMNIST_STEMS):
            data = path.read_bytes()
            if path.suffix == ".gz":
                data = zlib.decompress(data, 16 + zlib.MAX_WBITS)
            files[stem] = {"md5": _md5(data), "bytes": len(data), "from": str(path)}
            _add(bundle, f"fmnist/{stem}", data)
        _add(bundle, "MANIFEST.json", json.dumps({"fmnist": files}, indent=1).encode())
    return files


# ---------------------------------------------------------------------- FedCP's partition
def _stream(data: bytes, where: str) -> tuple[int, int]:
    """Start and length of the one deflate stream of an ``.npz`` holding only ``data.npy``."""
    import zipfile

    with zipfile.ZipFile(io.BytesIO(data)) as z:
        [info] = z.infolist()
    if info.compress_type != zipfile.ZIP_DEFLATED or info.filename != "data.npy":
        raise PackError(f"{where} is not one deflated data.npy; pack it as a plain copy.")
    name_len, extra_len = struct.unpack("<HH", data[info.header_offset + 26:info.header_offset + 30])
    start = info.header_offset + 30 + name_len + extra_len
    return start, info.compress_size


def _npz_parts(data: bytes, where: str) -> dict[str, bytes]:
    """An ``.npz`` as parts that xz compresses well and that give its bytes back exactly."""
    sys.path.insert(0, str(ROOT))
    from pflcore.data.sources.pfllib import _read_client

    start, size = _stream(data, where)
    member = zlib.decompress(data[start:start + size], -15)
    if _deflate(member) != data[start:start + size]:
        raise PackError(f"{where}: zlib level {DEFLATE['level']} does not give its stream back here.")
    parts = {"head": data[:start], "tail": data[start + size:]}
    x, _ = _read_client(data, where)
    values, index = np.unique(x, return_inverse=True)
    at = member.find(x.tobytes()) if x.dtype == np.float32 and len(values) <= 256 else -1
    if at < 0:
        return {**parts, "member": member}
    return {**parts, "prefix": member[:at], "suffix": member[at + x.nbytes:],
            "values": values.astype(np.float32).tobytes(), "index": index.astype(np.uint8).tobytes()}


def _npz_bytes(parts: dict[str, bytes]) -> bytes:
    if "member" in parts:
        member = parts["member"]
    else:
        values = np.frombuffer(parts["values"], dtype=np.float32)
        index = np.frombuffer(parts["index"], dtype=np.uint8)
        member = parts["prefix"] + values[index].tobytes() + parts["suffix"]
    return parts["head"] + _deflate(member) + parts["tail"]


def pack_fedcp(source: Path, out: Path) -> dict:
    if not (source / "config.json").is_file():
        raise PackError(f"{source} holds no config.json: it is not FedCP's partition (give --fedcp DIR).")
    files = {}
    with tarfile.open(out / FEDCP_ARCHIVE, "w:xz", preset=9) as bundle:
        for path in sorted(p for p in source.rglob("*") if p.is_file()):
            rel = str(path.relative_to(source))
            data = path.read_bytes()
            files[rel] = {"md5": _md5(data), "bytes": len(data)}
            if path.suffix == ".npz":
                parts = _npz_parts(data, str(path))
                files[rel]["parts"] = sorted(parts)
                for name, part in parts.items():
                    _add(bundle, f"fedcp/{rel}.{name}", part)
            else:
                _add(bundle, f"fedcp/{rel}", data)
        _add(bundle, "MANIFEST.json", json.dumps({"fedcp": files, "deflate": DEFLATE}, indent=1).encode())
    return files


# ---------------------------------------------------------------------- unpacking
def _members(archive: Path) -> tuple[dict, dict[str, bytes]]:
    try:
        with tarfile.open(archive, "r:xz") as bundle:
            data = {m.name: bundle.extractfile(m).read() for m in bundle.getmembers() if m.isfile()}
        return json.loads(data.pop("MANIFEST.json")), data
    except (OSError, tarfile.TarError, KeyError, ValueError, EOFError) as err:
        raise PackError(f"{archive} cannot be read ({err}); run benchmarks/device_prepare.sh again.") from None


def unpack(out: Path, dest: Path) -> dict[str, Path]:
    """Both archives of ``out`` into ``dest``, every file checked against its md5."""
    written = {}
    for archive, kind, folder in ((FMNIST_ARCHIVE, "fmnist", "fmnist"), (FEDCP_ARCHIVE, "fedcp", FEDCP_NAME)):
        if not (out / archive).is_file():
            continue
        manifest, data = _members(out / archive)
        target = dest / folder
        shutil.rmtree(target, ignore_errors=True)
        for rel, info in manifest[kind].items():
            if "parts" in info:
                content = _npz_bytes({name: data[f"{kind}/{rel}.{name}"] for name in info["parts"]})
            else:
                content = data[f"{kind}/{rel}"]
            if _md5(content) != info["md5"]:
                raise PackError(f"{folder}/{rel} came back with md5 {_md5(content)}, not {info['md5']} (this "
                                f"machine's zlib {zlib.ZLIB_RUNTIME_VERSION} deflates otherwise?); nothing of it "
                                "is used.")
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            (target / rel).write_bytes(content)
        written[kind] = target
        print(f"device data: {folder}/ unpacked, {len(manifest[kind])} files, every md5 as packed", flush=True)
    return written


def pack(out: Path, fedcp: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    pack_fmnist(out)
    pack_fedcp(fedcp, out)
    with tempfile.TemporaryDirectory(prefix="pflcore-device-data-") as tmp:
        unpack(out, Path(tmp))  # every file back bit for bit, or PackError
    for archive in (FMNIST_ARCHIVE, FEDCP_ARCHIVE):
        print(f"device data: {out / archive}: {(out / archive).stat().st_size / 1e6:.1f} MB", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pack")
    p.add_argument("out", type=Path)
    p.add_argument("--fedcp", type=Path, default=ROOT.parent / "shared" / "data" / FEDCP_NAME)
    u = sub.add_parser("unpack")
    u.add_argument("out", type=Path)
    u.add_argument("dest", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "pack":
            pack(args.out, args.fedcp)
        else:
            unpack(args.out, args.dest)
    except PackError as err:
        print(f"device data: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
