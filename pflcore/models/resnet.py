"""ResNet-18 (He et al. 2016) as a :class:`SplitModel`: the residual trunk is the body,
the last linear layer the head.

Layout of torchvision's ``resnet18``: BasicBlocks [2, 2, 2, 2] of widths 64-128-256-512,
the ImageNet stem (conv 7x7 stride 2, norm, ReLU, max-pool 3x3 stride 2), global average
pooling, feature d = 512. Convolutions have no bias; init as torchvision's (Kaiming-normal,
fan_out, ReLU gain, on every convolution; norm weight 1, bias 0; the head keeps PyTorch's
default Linear init). The norm layer is BatchNorm or GroupNorm, and a CIFAR stem (conv 3x3
stride 1, no max-pool) is an option.

Registered variants:

* ``resnet18``: BatchNorm, ImageNet stem: FedCP's ResNet-18 on Tiny-ImageNet (Zhang et al.
  2023, section 6.1; 11.279M parameters with 200 classes).
* ``resnet18_gn``: GroupNorm with 32 groups, ImageNet stem, Kaiming-normal init:
  pFedFDA's ResNet-18 on TinyImageNet (McLaughlin and Su 2024, section 5, appendix C.1).
* ``fedfa_resnet18``: CIFAR stem, GroupNorm with 2 groups, then the linear projector
  fc(512->512) ReLU, fc(512->256) without activation = feature (d = 256): FedFA's CIFAR-100
  model (Zhou, Zhang, Tsang, appendix F.1, Table 4).
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from .cnn import SplitModel

NormFactory = Callable[[int], nn.Module]


def norm_factory(norm: str = "batch", groups: int = 32) -> NormFactory:
    """``channels -> norm layer``: ``"batch"`` (BatchNorm2d) or ``"group"`` (GroupNorm with ``groups``)."""
    if norm == "batch":
        return nn.BatchNorm2d
    if norm == "group":
        return lambda channels: nn.GroupNorm(groups, channels)
    raise ValueError(f"norm must be 'batch' or 'group', got {norm!r}")


class BasicBlock(nn.Module):
    """conv3x3(stride) norm ReLU conv3x3 norm, plus the shortcut (1x1 conv + norm when the
    shape changes), then ReLU."""

    def __init__(self, cin: int, cout: int, stride: int, norm: NormFactory):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = norm(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, stride=1, padding=1, bias=False)
        self.bn2 = norm(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample: nn.Module | None = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), norm(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNetBody(nn.Module):
    """The ResNet-18 trunk up to the global average pool: (B, C, H, W) -> (B, 512)."""

    def __init__(self, in_channels: int = 3, norm: str = "batch", groups: int = 32, stem: str = "imagenet",
                 layers: tuple[int, ...] = (2, 2, 2, 2), widths: tuple[int, ...] = (64, 128, 256, 512)):
        super().__init__()
        make_norm = norm_factory(norm, groups)
        if stem == "imagenet":
            self.conv1 = nn.Conv2d(in_channels, widths[0], 7, stride=2, padding=3, bias=False)
            self.maxpool: nn.Module = nn.MaxPool2d(3, stride=2, padding=1)
        elif stem == "cifar":
            self.conv1 = nn.Conv2d(in_channels, widths[0], 3, stride=1, padding=1, bias=False)
            self.maxpool = nn.Identity()
        else:
            raise ValueError(f"stem must be 'imagenet' or 'cifar', got {stem!r}")
        self.bn1 = make_norm(widths[0])
        self.relu = nn.ReLU(inplace=True)
        stages: list[nn.Module] = []
        cin = widths[0]
        for i, (blocks, width) in enumerate(zip(layers, widths)):
            stride = 1 if i == 0 else 2
            stage = [BasicBlock(cin, width, stride, make_norm)]
            stage += [BasicBlock(width, width, 1, make_norm) for _ in range(blocks - 1)]
            stages.append(nn.Sequential(*stage))
            cin = width
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.out_dim = cin
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """ResNet's initialisation (He et al. 2016): Kaiming-normal convolutions (fan out),
        norm layers at weight 1, bias 0. It overrides the layers' own defaults, so a caller
        re-drawing a model resets the layers first and this body after them."""
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return torch.flatten(self.avgpool(x), 1)


def resnet18(in_channels: int = 3, num_classes: int = 200, image_size: int = 64, *, norm: str = "batch",
             groups: int = 32, stem: str = "imagenet") -> SplitModel:
    """ResNet-18, torchvision's layout (FedCP section 6.1): body = trunk (d = 512), head fc(512->C).

    ``image_size`` is accepted for the registry's signature; the global pool takes any size.
    """
    del image_size
    body = ResNetBody(in_channels, norm=norm, groups=groups, stem=stem)
    return SplitModel(body, body.out_dim, num_classes)


def resnet18_gn(in_channels: int = 3, num_classes: int = 200, image_size: int = 64) -> SplitModel:
    """pFedFDA's ResNet-18 (section 5, appendix C.1): GroupNorm(32 groups), 7x7 stem, d = 512."""
    return resnet18(in_channels, num_classes, image_size, norm="group", groups=32)


def fedfa_resnet18(in_channels: int = 3, num_classes: int = 100, image_size: int = 32,
                   feature_dim: int = 256) -> SplitModel:
    """FedFA's CIFAR-100 model (appendix F.1, Table 4): CIFAR-stem ResNet-18 with GroupNorm(2
    groups), fc(512->512) ReLU, fc(512->d) with no activation = feature; head fc(d->C)."""
    del image_size
    trunk = ResNetBody(in_channels, norm="group", groups=2, stem="cifar")
    body = nn.Sequential(trunk, nn.Linear(trunk.out_dim, 512), nn.ReLU(), nn.Linear(512, feature_dim))
    return SplitModel(body, feature_dim, num_classes)
