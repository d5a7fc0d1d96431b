"""AG News (Zhang, Zhao, LeCun 2015; 4 classes, 120,000 train / 7,600 test), the text
dataset of FedCP section 6.1: the standard ``train.csv`` / ``test.csv``, parsed to padded
token ids for fastText.

Each CSV row (no header) is ``"class", "title", "description"`` with class 1..4 (World,
Sports, Business, Sci/Tech), standard CSV quoting (commas inside quotes, ``""`` for a
quote). The text is title + " " + description, lowercased and split into runs of letters
and digits (an apostrophe inside a word is kept: ``don't``). The vocabulary comes from the
TRAIN split only: index 0 is padding, 1 unknown, then tokens seen at least ``min_freq``
times by decreasing count (ties alphabetical). Sequences are cut or padded (with 0, at the
end) to ``max_len`` tokens (200 as in FedCP's data); labels are 0..3.

:data:`AGNEWS` registers it as the token dataset ``agnews`` (a :class:`Dataset` of
``int64 (N, 200)`` ids, ``vocab_size`` = the vocabulary's size), found like the image
datasets; :func:`load_agnews` is the standalone parser. The pinned download is the copy
torchtext's ``AG_NEWS`` fetches (the one PFLlib's generator reads), with torchtext's MD5s.
"""

from __future__ import annotations

import csv
import io
import os
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from .common import (
    Dataset,
    DatasetCorruptError,
    DatasetNotFoundError,
    DatasetSource,
    Download,
    Found,
    TextShape,
    one_line,
    stamp,
)

CLASSES = ("World", "Sports", "Business", "Sci/Tech")
FILES = ("train.csv", "test.csv")
SUBDIRS = ("ag_news_csv", "ag_news", "agnews", "AG_NEWS", "ag_news/ag_news_csv", "agnews/ag_news_csv")
PAD, UNK = 0, 1
#: Padded sequence length of the registered dataset (FedCP's data: 200 tokens).
MAX_LEN = 200
_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z0-9]+)*")


class TextData(NamedTuple):
    """A tokenised text dataset: ``int64 (N, max_len)`` token ids and ``int64 (N,)`` labels."""

    train_tokens: torch.Tensor
    train_y: torch.Tensor
    test_tokens: torch.Tensor
    test_y: torch.Tensor
    vocab: dict[str, int]


def tokenize(text: str) -> list[str]:
    """Lowercase, then runs of letters/digits; inner apostrophes kept (``it's``), others dropped."""
    return _TOKEN.findall(text.lower().replace("\u2019", "'"))


def read_csv(path: str | os.PathLike[str]) -> tuple[list[str], list[int]]:
    """Texts (title + " " + description) and labels 0..3 of one AG News CSV."""
    path = Path(path)
    try:
        raw = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetCorruptError(f"{path}: cannot read the file as UTF-8 text ({one_line(exc)})") from None
    texts: list[str] = []
    labels: list[int] = []
    reader = csv.reader(io.StringIO(raw, newline=""), strict=True)
    try:
        for row in reader:
            line = reader.line_num
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            if len(row) < 3:
                raise DatasetCorruptError(f"{path}: line {line} has {len(row)} fields, expected class, title, "
                                          "description")
            label = row[0].strip()
            if label not in ("1", "2", "3", "4"):
                raise DatasetCorruptError(f"{path}: line {line} has class {label[:20]!r}, expected 1 to 4")
            texts.append(" ".join(row[1:]))
            labels.append(int(label) - 1)
    except csv.Error as exc:
        raise DatasetCorruptError(f"{path}: malformed CSV near line {reader.line_num} ({one_line(exc)})") from None
    if not texts:
        raise DatasetCorruptError(f"{path}: the file holds no rows")
    return texts, labels


def build_vocab(token_lists: Iterable[Sequence[str]], min_freq: int = 1) -> dict[str, int]:
    """``<pad>`` = 0, ``<unk>`` = 1, then tokens with count >= ``min_freq``, most frequent first."""
    if min_freq < 1:
        raise ValueError(f"min_freq must be at least 1, got {min_freq}")
    counts = Counter(t for tokens in token_lists for t in tokens)
    kept = sorted((t for t, c in counts.items() if c >= min_freq), key=lambda t: (-counts[t], t))
    vocab = {"<pad>": PAD, "<unk>": UNK}
    vocab.update((t, i) for i, t in enumerate(kept, start=2))
    return vocab


def encode(token_lists: Sequence[Sequence[str]], vocab: dict[str, int], max_len: int = 200) -> torch.Tensor:
    """Token ids ``int64 (N, max_len)``: unknown tokens -> 1, cut at ``max_len``, padded with 0."""
    if max_len < 1:
        raise ValueError(f"max_len must be at least 1, got {max_len}")
    out = np.zeros((len(token_lists), max_len), dtype=np.int64)
    for i, tokens in enumerate(token_lists):
        ids = [vocab.get(t, UNK) for t in tokens[:max_len]]
        out[i, : len(ids)] = ids
    return torch.from_numpy(out)


def probe_agnews(root: str | os.PathLike[str]) -> Path | None:
    """The folder holding ``train.csv`` and ``test.csv``: ``root`` itself or a usual subfolder."""
    base = Path(root).expanduser()
    for d in (base, *(base / s for s in SUBDIRS)):
        if all((d / f).is_file() for f in FILES):
            return d
    return None


def load_agnews(root: str | os.PathLike[str], max_len: int = MAX_LEN, min_freq: int = 1) -> TextData:
    """Load AG News from ``root`` (or a usual subfolder) as padded token ids (FedCP section 6.1).

    Returns ``(train_tokens, train_y, test_tokens, test_y, vocab)``; the vocabulary is built
    from the training split only. Raises :class:`DatasetNotFoundError` when the CSVs are
    missing and :class:`DatasetCorruptError` when one is malformed.
    """
    folder = probe_agnews(root)
    if folder is None:
        subs = ", ".join(s + "/" for s in SUBDIRS)
        raise DatasetNotFoundError(f"AG News was not found in {root} (searched directly and in the subfolders "
                                   f"{subs}); put its train.csv and test.csv there.")
    return _tokenised(folder / FILES[0], folder / FILES[1], max_len, min_freq)


def _tokenised(train: Path, test: Path, max_len: int, min_freq: int) -> TextData:
    train_texts, train_labels = read_csv(train)
    test_texts, test_labels = read_csv(test)
    train_tok = [tokenize(t) for t in train_texts]
    test_tok = [tokenize(t) for t in test_texts]
    vocab = build_vocab(train_tok, min_freq)
    return TextData(
        encode(train_tok, vocab, max_len), torch.tensor(train_labels, dtype=torch.int64),
        encode(test_tok, vocab, max_len), torch.tensor(test_labels, dtype=torch.int64), vocab,
    )


# ------------------------------------------------------------------------ the registry entry


def _probe(name: str, d: Path) -> Found | None:
    """Both CSVs directly in ``d``."""
    files = [d / f for f in FILES]
    if not all(f.is_file() for f in files):
        return None
    return Found(name, "csv", tuple(str(f) for f in files), stamp(files))


def _load(found: Found) -> Dataset:
    """The token dataset ``agnews`` (FedCP section 6.1): ids ``int64 (N, MAX_LEN)``, the
    vocabulary from the training split, no normalisation."""
    data = _tokenised(Path(found.paths[0]), Path(found.paths[1]), MAX_LEN, 1)
    return Dataset(name=found.name, train_x=data.train_tokens, train_y=data.train_y, test_x=data.test_tokens,
                   test_y=data.test_y, num_classes=len(CLASSES), mean=(), std=(), classes=CLASSES,
                   vocab_size=len(data.vocab))


AGNEWS = DatasetSource(
    "agnews", shape=TextShape(MAX_LEN, None, len(CLASSES)), probe=_probe, load=_load, subdirs=SUBDIRS,
    provide="AG News's train.csv and test.csv (the ag_news_csv files)",
    download=Download(
        files=(("train.csv", "b1a00f826fdfbd249f79597b59e1dc12"), ("test.csv", "d52ea96a97a2d943681189a97654912d")),
        mirrors=("https://raw.githubusercontent.com/mhjabreel/CharCnn_Keras/master/data/ag_news_csv/",),
    ),
)
