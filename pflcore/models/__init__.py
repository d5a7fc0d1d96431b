"""Models: every model is ``body`` (feature extractor) + ``head`` (last linear layer)."""
from __future__ import annotations

from typing import Callable

from .cnn import SplitModel, fedcp_cnn, fedfa_cnn, fedpac_cnn, mlp
from .resnet import fedfa_resnet18, resnet18, resnet18_gn

MODELS: dict[str, Callable[..., SplitModel]] = {
    "fedpac_cnn": fedpac_cnn,
    "fedcp_cnn": fedcp_cnn,
    "fedfa_cnn": fedfa_cnn,
    "mlp": mlp,
    "resnet18": resnet18, "resnet18_gn": resnet18_gn, "fedfa_resnet18": fedfa_resnet18,
}


def build_model(name: str, in_channels: int, num_classes: int, image_size: int) -> SplitModel:
    """Instantiate a registered model for the given input shape and number of classes."""
    if name not in MODELS:
        raise ValueError(f"model must be one of {sorted(MODELS)}, got {name!r}.")
    return MODELS[name](in_channels=in_channels, num_classes=num_classes, image_size=image_size)


__all__ = ["MODELS", "SplitModel", "build_model", "fedcp_cnn", "fedfa_cnn", "fedpac_cnn", "mlp"]
