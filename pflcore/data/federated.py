"""FederatedData: every client's train and test tensors, normalised once and kept in memory.

Each client's samples are gathered into contiguous float tensors at construction (the
pooled uint8 images are converted once), so local training slices batches out of a
tensor: no DataLoader, no per-sample Python. Per-client transforms (rotation, label
permutation; see :mod:`pflcore.data.shifts`) are applied here, once, to images in [0, 1].
A token dataset (AG News, FedCP section 6.1) is gathered the same way, its ``int64``
token ids passed through as they are (no normalisation; only label transforms apply).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from .partition import Partition
from .shifts import ClientTransform
from .sources import Dataset


@dataclass
class ClientSplit:
    """One client's data: normalised float images (or int64 token ids) and int64 labels."""

    x: torch.Tensor
    y: torch.Tensor

    def __len__(self) -> int:
        return int(self.y.shape[0])


class FederatedData:
    """Per-client views of a dataset under a partition.

    ``train[i]`` / ``test[i]`` are :class:`ClientSplit` s, views of the rows of
    ``train_x``/``train_y`` (``test_x``/``test_y``) that hold all clients' samples, client
    after client. Train and test of one client come from disjoint pooled indices (the
    partition guarantees it).

    ``inputs`` is the dataset's: ``"images"`` (``in_channels``, ``image_size`` set) or
    ``"tokens"`` (``seq_len``, ``vocab_size`` set); the other pair is None.
    """

    def __init__(self, dataset: Dataset, partition: Partition, *, device: str | torch.device = "cpu",
                 transforms: Sequence[ClientTransform] = ()):
        pooled_x = torch.cat([dataset.train_x, dataset.test_x])
        pooled_y = torch.cat([dataset.train_y, dataset.test_y])
        tokens = dataset.inputs == "tokens"  # token ids pass through; images are normalised
        if not tokens:
            mean = torch.tensor(dataset.mean, dtype=torch.float32).view(1, -1, 1, 1)
            std = torch.tensor(dataset.std, dtype=torch.float32).view(1, -1, 1, 1)

        def prepare(cid: int, idx: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
            index = torch.from_numpy(np.array(idx, dtype=np.int64))
            x = pooled_x[index] if tokens else pooled_x[index].float().div_(255.0)
            y = pooled_y[index].clone()
            for transform in transforms:  # on [0, 1] images, before normalisation (or on token ids)
                x, y = transform(cid, x, y)
            return (x, y) if tokens else (self.normalise(x), y)

        def pack(indices: Sequence[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor, list[ClientSplit]]:
            """All clients' samples in one tensor (client after client), each client a view
            of its rows: worker processes share it as it is, and the test data of all
            clients is already one batch for evaluation."""
            sizes = [len(idx) for idx in indices]
            if tokens:
                xs = torch.empty((sum(sizes), self.seq_len), dtype=torch.int64, device=device)
            else:
                shape = (sum(sizes), self.in_channels, self.image_size, self.image_size)
                # channels_last: the CPU convolutions and max-pooling are several times faster.
                xs = torch.empty(shape, device=device, memory_format=torch.channels_last)
            ys = torch.empty(xs.shape[0], dtype=torch.long, device=device)
            splits, start = [], 0
            for cid, (idx, n) in enumerate(zip(indices, sizes)):
                x, y = prepare(cid, idx)
                xs[start:start + n] = x
                ys[start:start + n] = y
                splits.append(ClientSplit(xs[start:start + n], ys[start:start + n]))
                start += n
            return xs, ys, splits

        self.dataset_name = dataset.name
        self.mean, self.std = (None, None) if tokens else (mean, std)  # the normalisation (images)
        self.num_classes = dataset.num_classes
        self.inputs = dataset.inputs
        self.in_channels = dataset.in_channels
        self.image_size = dataset.image_size
        self.seq_len = dataset.seq_len
        self.vocab_size = dataset.vocab_size
        self.partition = partition
        self.device = torch.device(device)
        self.train_x, self.train_y, self.train = pack(partition.train)
        self.test_x, self.test_y, self.test = pack(partition.test)

    def normalise(self, x: torch.Tensor) -> torch.Tensor:
        """Images scaled to [0, 1], normalised as every client's data is (token ids pass through)."""
        return x if self.mean is None else (x - self.mean) / self.std

    @property
    def num_clients(self) -> int:
        return len(self.train)

    @property
    def train_sizes(self) -> np.ndarray:
        return np.array([len(s) for s in self.train], dtype=np.int64)

    @property
    def test_sizes(self) -> np.ndarray:
        return np.array([len(s) for s in self.test], dtype=np.int64)

    def all_test_x(self) -> torch.Tensor:
        """All clients' test inputs in client order (one tensor; each client's is a view of it)."""
        return self.test_x

    def all_test_y(self) -> torch.Tensor:
        return self.test_y

    def class_counts(self, split: str = "train") -> np.ndarray:
        """(num_clients, num_classes) label counts of the (transformed) client data."""
        splits = self.train if split == "train" else self.test
        return np.stack([torch.bincount(s.y.cpu(), minlength=self.num_classes).numpy() for s in splits])
