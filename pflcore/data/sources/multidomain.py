"""Several digit datasets as one federated dataset, each sample tagged with the member
(domain) it came from: DIGIT-5 (pFedFDA, McLaughlin & Su, NeurIPS 2024, appendix D.1 and
Table 7: MNIST, SVHN, USPS, SynthDigits and MNIST-M; 20 clients, 4 per domain).

``load_dataset("digit5")`` loads each member exactly as ``load_dataset(member)`` does (the
same ``root``, ``PFL_DATA``, cache and system folders, and the same pinned downloads of
MNIST, SVHN and USPS; SynthDigits and MNIST-M must be provided by hand), gives every image
the common shape 3x32x32 with :func:`pflcore.data.sources.digit5.conform` (grey images
made RGB by repeating the channel, then resized bilinearly with antialiasing: MNIST and
MNIST-M 28 -> 32, USPS 16 -> 32; SVHN and SynthDigits are 32x32 already) and concatenates
the members' train splits, and their test splits, member after member in
:data:`MEMBERS` order. Each member keeps its own train/test split (FedBN's folders where
those are what the member loader finds). The paper gives no image size; 3x32x32 is that of
SVHN and SynthDigits and of FedPAC's / pFedFDA's CIFAR-sized CNNs.

Normalisation: ``mean``/``std`` are the exact per-channel statistics of the combined
training split, as for every other dataset, so one normalisation serves all clients
(pFedFDA section 5.1 scales inputs to [-1, 1] instead, i.e. mean = std = 0.5).

:attr:`MultiDomainDataset.domains` gives each sample's domain index; the partition kind
``domains`` (:mod:`pflcore.data.partition.domains`) gives each client one domain's samples.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .common import Dataset, DatasetNotFoundError, DatasetSource, Found, mean_std, package
from .digit5 import NUM_CLASSES, conform

#: The members of each multi-domain dataset, in domain order (domain ``d`` is member ``d``).
MEMBERS: dict[str, tuple[str, ...]] = {"digit5": ("mnist", "svhn", "usps", "synthdigits", "mnistm")}

#: The common image shape (channels, size) every member is conformed to.
CHANNELS, SIZE = 3, 32


@dataclass(frozen=True, eq=False)
class Domains:
    """The domain of every sample: ``train[i]`` / ``test[i]`` is the index into ``names``
    of the member that train / test sample ``i`` came from (read-only int64 arrays)."""

    names: tuple[str, ...]
    train: np.ndarray
    test: np.ndarray

    def __post_init__(self) -> None:
        for split in ("train", "test"):
            ids = np.array(getattr(self, split), dtype=np.int64)
            if ids.ndim != 1 or (ids.size and (ids.min() < 0 or ids.max() >= len(self.names))):
                raise ValueError(f"domains.{split} must be a 1-D array of domain indices in [0, {len(self.names)}).")
            ids.setflags(write=False)
            object.__setattr__(self, split, ids)


@dataclass(frozen=True, eq=False, repr=False)
class MultiDomainDataset(Dataset):
    """A :class:`Dataset` whose samples come from several domains (:attr:`domains`, required;
    its default only follows the optional fields of :class:`Dataset`)."""

    domains: Domains | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        d = self.domains
        if d is None or (d.train.size, d.test.size) != (self.num_train, self.num_test):
            raise ValueError("domains must give the domain of every train sample and of every test sample")

    def __repr__(self) -> str:
        assert self.domains is not None
        return f"{super().__repr__()[:-1]}, domains={self.domains.names})"


def combine(name: str, members: Sequence[Dataset]) -> MultiDomainDataset:
    """The members as one dataset (pFedFDA appendix D.1): images conformed to 3x32x32,
    train splits concatenated in member order and test splits likewise, each sample's
    member recorded in ``domains``, mean/std those of the combined training split."""
    if not members:
        raise ValueError(f"dataset {name!r} needs at least one member dataset.")
    classes = {m.num_classes for m in members}
    if len(classes) != 1:
        listed = ", ".join(f"{m.name} ({m.num_classes})" for m in members)
        raise ValueError(f"the members of {name!r} must share their classes, but they have {listed} classes.")
    conformed = [conform(m, CHANNELS, SIZE) for m in members]
    train_x = torch.cat([m.train_x for m in conformed])
    test_x = torch.cat([m.test_x for m in conformed])
    mean, std = mean_std(train_x.numpy())
    domains = Domains(
        names=tuple(m.name for m in members),
        train=np.repeat(np.arange(len(members)), [m.num_train for m in members]),
        test=np.repeat(np.arange(len(members)), [m.num_test for m in members]),
    )
    names = {m.classes for m in members}
    return MultiDomainDataset(
        name=name, train_x=train_x, train_y=torch.cat([m.train_y for m in members]), test_x=test_x,
        test_y=torch.cat([m.test_y for m in members]), num_classes=classes.pop(), mean=mean, std=std,
        classes=names.pop() if len(names) == 1 else None, domains=domains,
    )


# ------------------------------------------------------------------------------- loading

#: The last combined dataset, keyed on its members' located files (paths, sizes, mtimes).
_COMBINED: dict[tuple[str, tuple[Found | None, ...]], MultiDomainDataset] = {}


def _located(name: str, root: str | os.PathLike[str] | None) -> tuple[str, tuple[Found | None, ...]]:
    """The copy of each member that ``load_dataset(member, root)`` would read (None: none yet)."""
    sources = package()
    return name, tuple(sources._locate(m, sources._search_bases(m, root)) for m in MEMBERS[name])


def load(name: str, root: str | os.PathLike[str] | None, download: bool) -> MultiDomainDataset:
    """Load every member of ``name`` with ``load_dataset`` and :func:`combine` them; the
    result is kept until a member's files change or :func:`clear` is called."""
    if root is not None and not Path(root).expanduser().is_dir():
        raise DatasetNotFoundError(f"data root {str(root)!r} is not an existing folder; give the folder that holds "
                                   f"the files of {name}'s members, or no root to search the usual places.")
    key = _located(name, root)
    if None not in key[1] and key in _COMBINED:
        return _COMBINED[key]
    members = []
    for member in MEMBERS[name]:
        try:
            members.append(package().load_dataset(member, root=root, download=download))
        except DatasetNotFoundError as exc:
            reason = str(exc)
            raise DatasetNotFoundError(
                f"Dataset {name!r} combines {', '.join(MEMBERS[name])}, and its member {member!r} is missing: "
                f"{reason[:1].lower()}{reason[1:]}"
            ) from exc
    combined = combine(name, members)
    _COMBINED.clear()
    key = _located(name, root)  # downloads have put files in place
    if None not in key[1]:
        _COMBINED[key] = combined
    return combined


def clear() -> None:
    """Forget the combined dataset kept in memory."""
    _COMBINED.clear()


DIGIT5 = DatasetSource(
    "digit5", shape=(CHANNELS, SIZE, NUM_CLASSES), aliases=("mixeddigits",),
    provide="the files of each member (mnist, svhn, usps, synthdigits and mnistm), each where its own loader looks",
    clear=clear,
)
