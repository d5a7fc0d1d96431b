"""ResNet-18 and fastText (pflcore/models/resnet.py, pflcore/models/text.py)."""
from __future__ import annotations

import pytest
import torch

from pflcore.models import MODELS, SplitModel, build_model
from pflcore.models.resnet import resnet18
from pflcore.models.text import fasttext


def n_params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


# ------------------------------------------------------------------------------ ResNet-18


@pytest.mark.parametrize("classes,total", [
    (10, 11_181_642), (100, 11_227_812), (200, 11_279_112),  # 200: FedCP's 11.279M (section 6.3)
    (1000, 11_689_512),  # torchvision's resnet18
])
def test_resnet18_parameter_counts_match_torchvision(classes, total):
    model = build_model("resnet18", 3, classes, 64)
    assert isinstance(model, SplitModel) and model.feature_dim == 512
    assert n_params(model.body) == 11_176_512  # torchvision's resnet18 without fc
    assert n_params(model) == total == 11_176_512 + 513 * classes
    assert n_params(build_model("resnet18_gn", 3, classes, 64)) == total  # GN has BN's affine parameters


@pytest.mark.parametrize("name", ["resnet18", "resnet18_gn", "fedfa_resnet18"])
@pytest.mark.parametrize("size", [32, 64])
def test_resnet_shapes_and_split(name, size):
    model = build_model(name, 3, 7, size)
    x = torch.randn(2, 3, size, size)
    model.eval()  # two forward passes only: the machine running the tests may be busy
    with torch.no_grad():
        z, out = model.body(x), model(x)
    assert z.shape == (2, model.feature_dim) == (2, 256 if name == "fedfa_resnet18" else 512)
    assert out.shape == (2, 7) and torch.equal(out, model.head(z))
    assert {id(p) for p in model.head.parameters()}.isdisjoint(id(p) for p in model.body.parameters())
    assert name in MODELS


def test_resnet_norm_layers_and_init():
    bn = build_model("resnet18", 3, 10, 64)
    gn = build_model("resnet18_gn", 3, 10, 64)
    fa = build_model("fedfa_resnet18", 3, 100, 32)
    assert sum(isinstance(m, torch.nn.BatchNorm2d) for m in bn.modules()) == 20
    assert len(list(bn.buffers())) == 60  # running mean, var, batch count of each BatchNorm
    for model, groups in ((gn, 32), (fa, 2)):
        assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())
        assert len(list(model.buffers())) == 0 and set(model.state_dict()) == {n for n, _ in model.named_parameters()}
        norms = [m for m in model.modules() if isinstance(m, torch.nn.GroupNorm)]
        assert len(norms) == 20 and {m.num_groups for m in norms} == {groups}
    conv1 = bn.body.conv1
    assert (conv1.kernel_size, conv1.stride, conv1.bias) == ((7, 7), (2, 2), None)
    assert isinstance(bn.body.maxpool, torch.nn.MaxPool2d)
    assert fa.body[0].conv1.kernel_size == (3, 3) and isinstance(fa.body[0].maxpool, torch.nn.Identity)
    # FedFA's projector: fc(512->512) ReLU fc(512->256), no activation on the feature
    assert [type(m).__name__ for m in fa.body[1:]] == ["Linear", "ReLU", "Linear"]
    assert n_params(fa) == 11_168_832 + 262_656 + 131_328 + 25_700
    for model in (bn, gn):  # Kaiming-normal, fan_out, ReLU gain; norms weight 1, bias 0
        w = model.body.layer3[0].conv1.weight  # 256 x 128 x 3 x 3
        assert abs(float(w.detach().std()) - (2.0 / (256 * 9)) ** 0.5) < 0.002
        norm = model.body.layer3[0].bn1
        assert torch.all(norm.weight == 1) and torch.all(norm.bias == 0)


def test_resnet_takes_grey_images_and_rejects_unknown_options():
    model = build_model("resnet18", 1, 10, 28)
    assert model(torch.randn(2, 1, 28, 28)).shape == (2, 10)
    with pytest.raises(ValueError, match="norm"):
        resnet18(3, 10, 32, norm="layer")
    with pytest.raises(ValueError, match="stem"):
        resnet18(3, 10, 32, stem="tiny")


# ------------------------------------------------------------------------------ fastText


def test_fasttext_shapes_split_and_padding_invariance():
    torch.manual_seed(0)
    model = fasttext(vocab_size=50, num_classes=4)
    assert isinstance(model, SplitModel) and model.feature_dim == 32
    assert model.body.embedding.embedding_dim == 32 and model.body.fc1.out_features == 32
    assert n_params(model) == 50 * 32 + (32 * 32 + 32) + (32 * 4 + 4)
    tokens = torch.tensor([[5, 7, 9, 0, 0], [3, 0, 0, 0, 0]])
    z = model.body(tokens)
    assert z.shape == (2, 32) and model(tokens).shape == (2, 4)
    assert torch.equal(model(tokens), model.head(z))
    longer = torch.cat([tokens, torch.zeros(2, 7, dtype=torch.int64)], dim=1)
    assert torch.allclose(model(longer), model(tokens), atol=1e-6)
    # the feature is fc1 of the mean embedding of the real tokens, with no activation
    emb = model.body.embedding.weight
    assert torch.allclose(z[1], model.body.fc1(emb[3]), atol=1e-6)
    assert torch.allclose(z[0], model.body.fc1(emb[[5, 7, 9]].mean(0)), atol=1e-6)
    assert (z < 0).any()
    # an all-padding row is the fc1 bias; the upstream mean divides by the padded length
    assert torch.allclose(model.body(torch.zeros(1, 4, dtype=torch.int64))[0], model.body.fc1.bias)
    upstream = fasttext(vocab_size=50, mean="all")
    upstream.load_state_dict(model.state_dict())
    assert torch.allclose(upstream.body(tokens)[1], model.body.fc1(emb[3] / 5), atol=1e-6)
    with pytest.raises(ValueError, match="int64"):
        model(torch.zeros(2, 3))
