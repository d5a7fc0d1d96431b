"""The papers' CNNs, each split explicitly into ``body`` (feature extractor) and ``head``.

Every model is a :class:`SplitModel`: ``forward(x) = head(body(x))``. Which parameters
are personal (head) and which are shared (body) is decided here, never by string
matching in an algorithm.

Max-pooling is applied *before* the (Leaky)ReLU: both are monotone, so the result is
identical to the papers' conv -> act -> pool order and cheaper (pooling first halves the
activation's work).
"""
from __future__ import annotations

import torch
from torch import nn


class SplitModel(nn.Module):
    """A classifier made of a feature extractor ``body`` and a linear ``head``."""

    def __init__(self, body: nn.Module, feature_dim: int, num_classes: int):
        super().__init__()
        self.body = body
        self.head = nn.Linear(feature_dim, num_classes)
        self.feature_dim = feature_dim
        self.num_classes = num_classes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The body's output z (dimension ``feature_dim``)."""
        return self.body(x)


def _conv_block(cin: int, cout: int, k: int, pad: int, act: nn.Module) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, k, padding=pad), nn.MaxPool2d(2), act]


def _flat_dim(body: nn.Module, in_channels: int, image_size: int) -> int:
    with torch.no_grad():
        return int(body(torch.zeros(1, in_channels, image_size, image_size)).flatten(1).shape[1])


def fedpac_cnn(in_channels: int = 1, num_classes: int = 10, image_size: int = 28) -> SplitModel:
    """FedPAC's CNNs (Xu et al. 2023, appendix B.1; upstream ``CNN_FMNIST`` / ``CifarCNN``).

    Grey 28x28: conv(1->16,k5) pool, conv(16->32,k5,pad1) pool, fc(800->128) = feature.
    RGB 32x32: conv(3->16,k5), conv(16->32,k5,pad1), conv(32->64,k3,pad1), each pooled,
    fc(576->128) = feature. LeakyReLU throughout; head fc(128->C). Also used by pFedFDA.
    """
    act = nn.LeakyReLU
    layers = _conv_block(in_channels, 16, 5, 0, act()) + _conv_block(16, 32, 5, 1, act())
    if in_channels == 3:
        layers += _conv_block(32, 64, 3, 1, act())
    convs = nn.Sequential(*layers, nn.Flatten())
    flat = _flat_dim(convs, in_channels, image_size)
    body = nn.Sequential(*convs, nn.Linear(flat, 128), act())
    return SplitModel(body, 128, num_classes)


def fedcp_cnn(in_channels: int = 1, num_classes: int = 10, image_size: int = 28) -> SplitModel:
    """FedCP's backbone, the FedAvg 4-layer CNN (Zhang et al. 2023, section 6.1).

    conv(in->32,k5) ReLU pool, conv(32->64,k5) ReLU pool, fc(->512) ReLU = feature (d=512);
    head fc(512->C).
    """
    act = nn.ReLU
    convs = nn.Sequential(*_conv_block(in_channels, 32, 5, 0, act()),
                          *_conv_block(32, 64, 5, 0, act()), nn.Flatten())
    flat = _flat_dim(convs, in_channels, image_size)
    body = nn.Sequential(*convs, nn.Linear(flat, 512), act())
    return SplitModel(body, 512, num_classes)


def fedfa_cnn(in_channels: int = 1, num_classes: int = 10, image_size: int = 28) -> SplitModel:
    """FedFA's CNNs (Zhou, Zhang, Tsang, appendix F.1).

    conv(in->w,k5) pool, conv(w->w,k5) pool, fc 384, fc 192 = feature (d=192), head 192->C,
    with w = 32 for grey images and 64 for RGB (CIFAR-10). ReLU activations.
    """
    act = nn.ReLU
    width = 64 if in_channels == 3 else 32
    convs = nn.Sequential(*_conv_block(in_channels, width, 5, 0, act()),
                          *_conv_block(width, width, 5, 0, act()), nn.Flatten())
    flat = _flat_dim(convs, in_channels, image_size)
    body = nn.Sequential(*convs, nn.Linear(flat, 384), act(), nn.Linear(384, 192), act())
    return SplitModel(body, 192, num_classes)


def mlp(in_channels: int = 1, num_classes: int = 10, image_size: int = 8, hidden: int = 64) -> SplitModel:
    """A small two-layer perceptron for tiny inputs (scikit-learn digits, tests)."""
    body = nn.Sequential(nn.Flatten(), nn.Linear(in_channels * image_size * image_size, hidden), nn.ReLU())
    return SplitModel(body, hidden, num_classes)
