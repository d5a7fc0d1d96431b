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

Text is not an image :class:`~pflcore.data.sources.common.Dataset`, so AG News is not in
the image registry: :func:`load_agnews` is standalone. There is no pinned download (no
official checksum): provide the two CSVs by hand.
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

from .common import DatasetCorruptError, DatasetNotFoundError, one_line

CLASSES = ("World", "Sports", "Business", "Sci/Tech")
FILES = ("train.csv", "test.csv")
SUBDIRS = ("ag_news_csv", "ag_news", "agnews", "AG_NEWS", "ag_news/ag_news_csv", "agnews/ag_news_csv")
PAD, UNK = 0, 1
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


def load_agnews(root: str | os.PathLike[str], max_len: int = 200, min_freq: int = 1) -> TextData:
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
    train_texts, train_labels = read_csv(folder / FILES[0])
    test_texts, test_labels = read_csv(folder / FILES[1])
    train_tok = [tokenize(t) for t in train_texts]
    test_tok = [tokenize(t) for t in test_texts]
    vocab = build_vocab(train_tok, min_freq)
    return TextData(
        encode(train_tok, vocab, max_len), torch.tensor(train_labels, dtype=torch.int64),
        encode(test_tok, vocab, max_len), torch.tensor(test_labels, dtype=torch.int64), vocab,
    )
