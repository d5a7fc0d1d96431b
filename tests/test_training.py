"""The local-training primitives: the SGD step must be torch's SGD, bit for bit."""
import copy

import pytest
import torch
import torch.nn.functional as F

from pflcore.models import fedpac_cnn
from pflcore.training import Pull, TrainSettings, sgd_train


def reference_sgd_train(model, params, x, y, settings, generator, loss_fn):
    """The plain loop: torch.optim.SGD(foreach=True), zero_grad, backward, step."""
    params = list(params)
    trainable = {id(p) for p in params}
    for p in model.parameters():
        p.requires_grad_(id(p) in trainable)
    optimizer = torch.optim.SGD(params, lr=settings.lr, momentum=settings.momentum,
                                weight_decay=settings.weight_decay, foreach=True)
    losses = []
    for _ in range(settings.epochs):
        order = torch.randperm(len(y), generator=generator)
        xs, ys = x[order], y[order]
        for start in range(0, len(y), settings.batch_size):
            loss = loss_fn(model, xs[start:start + settings.batch_size], ys[start:start + settings.batch_size])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    for p in model.parameters():
        p.requires_grad_(True)
    return sum(losses) / len(losses)


@pytest.mark.parametrize("momentum, weight_decay", [(0.5, 5e-4), (0.0, 5e-4), (0.9, 0.0), (0.0, 0.0)])
@pytest.mark.parametrize("part", ["all", "body"])
def test_sgd_step_is_torch_sgd_bit_for_bit(momentum, weight_decay, part):
    torch.manual_seed(0)
    model = fedpac_cnn(1, 10, 28).to(memory_format=torch.channels_last)
    x = torch.randn(70, 1, 28, 28).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (70,))
    settings = TrainSettings(epochs=2, batch_size=32, lr=0.05, momentum=momentum, weight_decay=weight_decay)
    ours, ref = copy.deepcopy(model), copy.deepcopy(model)
    pick = (lambda m: m.parameters()) if part == "all" else (lambda m: m.body.parameters())

    def ce(m, xb, yb):
        return F.cross_entropy(m(xb), yb)

    loss = sgd_train(ours, pick(ours), x, y, settings, torch.Generator().manual_seed(5), ce)
    ref_loss = reference_sgd_train(ref, pick(ref), x, y, settings, torch.Generator().manual_seed(5), ce)
    for (name, a), b in zip(ours.named_parameters(), ref.parameters()):
        assert torch.equal(a, b), name
    assert loss == pytest.approx(ref_loss, rel=1e-6)
    assert all(p.requires_grad for p in ours.parameters())  # frozen parts are restored


def test_a_parameter_the_loss_does_not_use_is_left_alone():
    torch.manual_seed(1)
    model = fedpac_cnn(1, 10, 28)
    before = copy.deepcopy(model.head.state_dict())
    x, y = torch.randn(20, 1, 28, 28), torch.randint(0, 10, (20,))
    # the loss reads only the body's features: the head gets no gradient, and no decay either
    sgd_train(model, model.parameters(), x, y, TrainSettings(epochs=1, batch_size=10, lr=0.1),
              torch.Generator().manual_seed(0), lambda m, xb, yb: m.body(xb).pow(2).mean())
    for key, value in model.head.state_dict().items():
        assert torch.equal(value, before[key])


@pytest.mark.parametrize("weight", [1.0, 0.01, 5.0, 0.3])
@pytest.mark.parametrize("momentum, weight_decay", [(0.0, 0.0), (0.9, 5e-4)])
def test_a_pull_is_autograds_proximal_term_bit_for_bit(weight, momentum, weight_decay):
    """Ditto's personal objective CE + weight/2 ||v - w||^2: the pull applied as its gradient
    trains exactly the weights autograd's gradient of the whole objective does."""
    torch.manual_seed(2)
    model = fedpac_cnn(1, 10, 28)
    reference = [p.detach() + 0.05 * torch.randn_like(p) for p in model.parameters()]
    x, y = torch.randn(45, 1, 28, 28), torch.randint(0, 10, (45,))
    settings = TrainSettings(epochs=2, batch_size=10, lr=0.05, momentum=momentum, weight_decay=weight_decay)
    pulled, ref = copy.deepcopy(model), copy.deepcopy(model)

    def proximal(m, xb, yb):
        return F.cross_entropy(m(xb), yb) + 0.5 * weight * sum(((p - r) ** 2).sum()
                                                               for p, r in zip(m.parameters(), reference))

    sgd_train(pulled, pulled.parameters(), x, y, settings, torch.Generator().manual_seed(3),
              lambda m, xb, yb: F.cross_entropy(m(xb), yb), Pull(reference, weight))
    sgd_train(ref, ref.parameters(), x, y, settings, torch.Generator().manual_seed(3), proximal)
    moved = False
    for (name, a), b, start in zip(pulled.named_parameters(), ref.parameters(), model.parameters()):
        assert torch.equal(a, b), name
        moved |= not torch.equal(a, start)
    assert moved
