"""fastText (Joulin et al. 2017) for text classification, as a :class:`SplitModel`.

FedCP's text model on AG News (Zhang et al. 2023, section 6.1): embedding, mean over the
tokens, fc1 to d = 32 with no activation = feature; head fc(32->C). The embedding and
feature dimensions are 32.

Input: token ids ``int64 (B, L)``, padded with ``padding_idx`` (0). By default the mean is
over the real tokens only, so appending padding changes nothing; ``mean="all"`` divides
by the padded length L instead (the authors' code, where every sequence is padded to the
same length). Registered as ``fasttext`` in :data:`pflcore.models.MODELS`, built from a
vocabulary size (``build_model(..., vocab_size=V)``), not an image shape.
"""
from __future__ import annotations

import torch
from torch import nn

from .cnn import SplitModel


class FastTextBody(nn.Module):
    """Embedding -> mean over tokens -> fc1 (no activation): (B, L) -> (B, feature_dim)."""

    def __init__(self, vocab_size: int, embed_dim: int = 32, feature_dim: int = 32, padding_idx: int = 0,
                 mean: str = "tokens"):
        super().__init__()
        if mean not in ("tokens", "all"):
            raise ValueError(f"mean must be 'tokens' or 'all', got {mean!r}")
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=padding_idx)
        self.fc1 = nn.Linear(embed_dim, feature_dim)
        self.padding_idx = padding_idx
        self.mean = mean

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.dim() != 2 or tokens.dtype != torch.int64:
            raise ValueError(f"tokens must be an int64 (B, L) tensor, got {tokens.dtype} {tuple(tokens.shape)}")
        mask = (tokens != self.padding_idx).unsqueeze(-1)
        summed = (self.embedding(tokens) * mask).sum(1)
        if self.mean == "tokens":
            count = mask.sum(1).clamp_min(1)  # an all-padding row gives the zero vector
        else:
            count = torch.full_like(summed[:, :1], max(tokens.shape[1], 1))
        return self.fc1(summed / count)


def fasttext(vocab_size: int, num_classes: int = 4, embed_dim: int = 32, feature_dim: int = 32,
             padding_idx: int = 0, mean: str = "tokens") -> SplitModel:
    """FedCP's fastText (section 6.1): body = embedding + mean + fc1 (d = 32), head fc(d->C)."""
    return SplitModel(FastTextBody(vocab_size, embed_dim, feature_dim, padding_idx, mean), feature_dim, num_classes)
