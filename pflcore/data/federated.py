"""FederatedData: every client's train and test tensors, normalised once and kept in memory.

Each client's samples are gathered into contiguous float tensors at construction (the
pooled uint8 images are converted once), so local training slices batches out of a
tensor: no DataLoader, no per-sample Python. Per-client transforms (rotation, label
permutation; see :mod:`pflcore.data.shifts`) are applied here, once, to images in [0, 1].
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
    """One client's data: normalised float images and int64 labels."""

    x: torch.Tensor
    y: torch.Tensor

    def __len__(self) -> int:
        return int(self.y.shape[0])


class FederatedData:
    """Per-client views of a dataset under a partition.

    ``train[i]`` / ``test[i]`` are :class:`ClientSplit` s. Train and test of one client
    come from disjoint pooled indices (the partition guarantees it).
    """

    def __init__(self, dataset: Dataset, partition: Partition, *, device: str | torch.device = "cpu",
                 transforms: Sequence[ClientTransform] = ()):
        pooled_x = torch.cat([dataset.train_x, dataset.test_x])
        pooled_y = torch.cat([dataset.train_y, dataset.test_y])
        mean = torch.tensor(dataset.mean, dtype=torch.float32).view(1, -1, 1, 1)
        std = torch.tensor(dataset.std, dtype=torch.float32).view(1, -1, 1, 1)

        def gather(cid: int, idx: np.ndarray) -> ClientSplit:
            index = torch.from_numpy(np.array(idx, dtype=np.int64))
            x = pooled_x[index].float().div_(255.0)
            y = pooled_y[index].clone()
            for transform in transforms:  # on [0, 1] images, before normalisation
                x, y = transform(cid, x, y)
            x = (x - mean) / std
            # channels_last: the CPU convolutions and max-pooling are several times faster.
            return ClientSplit(x.to(device).contiguous(memory_format=torch.channels_last), y.to(device))

        self.dataset_name = dataset.name
        self.num_classes = dataset.num_classes
        self.in_channels = int(dataset.train_x.shape[1])
        self.image_size = int(dataset.train_x.shape[2])
        self.partition = partition
        self.device = torch.device(device)
        self.train = [gather(c, idx) for c, idx in enumerate(partition.train)]
        self.test = [gather(c, idx) for c, idx in enumerate(partition.test)]
        self._all_test: tuple[torch.Tensor, torch.Tensor] | None = None

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
        """All clients' test images concatenated in client order (cached)."""
        if self._all_test is None:
            self._all_test = (torch.cat([s.x for s in self.test]), torch.cat([s.y for s in self.test]))
        return self._all_test[0]

    def all_test_y(self) -> torch.Tensor:
        self.all_test_x()
        return self._all_test[1]

    def class_counts(self, split: str = "train") -> np.ndarray:
        """(num_clients, num_classes) label counts of the (transformed) client data."""
        splits = self.train if split == "train" else self.test
        return np.stack([torch.bincount(s.y.cpu(), minlength=self.num_classes).numpy() for s in splits])
