"""Models: every model is ``body`` (feature extractor) + ``head`` (last linear layer).

Image models take float images ``(B, C, H, W)`` and are built for ``(in_channels,
image_size)``; the text model ``fasttext`` (FedCP section 6.1, AG News) takes int64 token
ids ``(B, L)`` and is built for ``vocab_size``. :data:`INPUTS` says which a model takes.
"""
from __future__ import annotations

from typing import Callable

from .cnn import SplitModel, fedcp_cnn, fedfa_cnn, fedpac_cnn, mlp
from .resnet import fedfa_resnet18, resnet18, resnet18_gn
from .text import fasttext

MODELS: dict[str, Callable[..., SplitModel]] = {
    "fedpac_cnn": fedpac_cnn,
    "fedcp_cnn": fedcp_cnn,
    "fedfa_cnn": fedfa_cnn,
    "mlp": mlp,
    "resnet18": resnet18, "resnet18_gn": resnet18_gn, "fedfa_resnet18": fedfa_resnet18,
    "fasttext": fasttext,
}

#: What each model takes: ``"images"`` (float (B, C, H, W)) or ``"tokens"`` (int64 token
#: ids (B, L), a text dataset's :attr:`~pflcore.data.sources.Dataset.inputs`).
INPUTS: dict[str, str] = {name: "tokens" if name == "fasttext" else "images" for name in MODELS}


def build_model(name: str, in_channels: int | None, num_classes: int, image_size: int | None = None, *,
                vocab_size: int | None = None) -> SplitModel:
    """Instantiate a registered model: an image model for ``(in_channels, image_size)``, a
    token model (``fasttext``) for ``vocab_size`` (the other arguments may be None)."""
    if name not in MODELS:
        raise ValueError(f"model must be one of {sorted(MODELS)}, got {name!r}.")
    if INPUTS[name] == "tokens":
        if vocab_size is None:
            raise ValueError(f"model {name!r} takes token ids: give vocab_size, the size of the vocabulary.")
        return MODELS[name](vocab_size=vocab_size, num_classes=num_classes)
    if in_channels is None or image_size is None or vocab_size is not None:
        raise ValueError(f"model {name!r} takes images: give in_channels and image_size, not vocab_size.")
    return MODELS[name](in_channels=in_channels, num_classes=num_classes, image_size=image_size)


__all__ = ["INPUTS", "MODELS", "SplitModel", "build_model", "fasttext", "fedcp_cnn", "fedfa_cnn", "fedpac_cnn",
           "mlp"]
