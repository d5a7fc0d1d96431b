"""The papers' models: shapes, feature dimensions, explicit body/head split."""
from __future__ import annotations

import pytest
import torch

from pflcore.models import MODELS, SplitModel, build_model


@pytest.mark.parametrize("name,channels,size,feature_dim,params", [
    ("fedpac_cnn", 1, 28, 128, 117_066),   # FedPAC appendix B.1 (117k)
    ("fedpac_cnn", 3, 32, 128, 107_690),   # (108k)
    ("fedcp_cnn", 1, 28, 512, None),
    ("fedcp_cnn", 3, 32, 512, None),
    ("fedfa_cnn", 1, 28, 192, None),
    ("fedfa_cnn", 3, 32, 192, None),
    ("mlp", 1, 8, 64, None),
])
def test_model_shapes_and_split(name, channels, size, feature_dim, params):
    model = build_model(name, channels, 10, size)
    assert isinstance(model, SplitModel) and model.feature_dim == feature_dim
    x = torch.randn(3, channels, size, size)
    z = model.body(x)
    assert z.shape == (3, feature_dim)
    assert torch.equal(model(x), model.head(z))
    assert isinstance(model.head, torch.nn.Linear) and model.head.out_features == 10
    head_ids = {id(p) for p in model.head.parameters()}
    assert head_ids.isdisjoint(id(p) for p in model.body.parameters())
    assert len(list(model.parameters())) == len(list(model.body.parameters())) + 2
    if params is not None:
        assert sum(p.numel() for p in model.parameters()) == params


def test_fedpac_cnn_matches_the_papers_layers():
    model = build_model("fedpac_cnn", 1, 10, 28)
    convs = [m for m in model.body if isinstance(m, torch.nn.Conv2d)]
    assert [(c.in_channels, c.out_channels, c.kernel_size, c.padding) for c in convs] == \
        [(1, 16, (5, 5), (0, 0)), (16, 32, (5, 5), (1, 1))]
    fc = [m for m in model.body if isinstance(m, torch.nn.Linear)]
    assert [(f.in_features, f.out_features) for f in fc] == [(800, 128)]


def test_unknown_model():
    with pytest.raises(ValueError, match="model must be one of"):
        build_model("resnet", 3, 10, 32)
    assert set(MODELS) >= {"fedpac_cnn", "fedcp_cnn", "fedfa_cnn"}
