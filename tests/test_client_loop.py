"""training.client_loop, the one client loop every method's step runs on, and the run hooks
(engine.hooks) that measure beside a method without changing its numbers."""
from __future__ import annotations

import torch

from conftest import strip
from pflcore.engine import run
from pflcore.engine import hooks as run_hooks
from pflcore.training import Batch, client_loop, shuffled_batches


def data(n: int = 23) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.arange(n * 3, dtype=torch.float32).reshape(n, 3)
    return x, torch.arange(n) % 4


def test_the_loop_visits_the_batches_of_shuffled_batches_with_their_sample_indices():
    x, y = data()
    seen: list[Batch] = []
    client_loop(x, y, lambda b: seen.append(b), epochs=3, batch_size=5, generator=torch.Generator().manual_seed(1))
    expected = list(shuffled_batches(x, y, 3, 5, torch.Generator().manual_seed(1)))
    assert len(seen) == len(expected) == 3 * 5
    for b, (xb, yb) in zip(seen, expected):
        assert torch.equal(b.x, xb) and torch.equal(b.y, yb)
        assert torch.equal(x[b.index], b.x) and torch.equal(y[b.index], b.y)
    assert [b.epoch for b in seen] == [e for e in range(3) for _ in range(5)]
    assert [b.start for b in seen[:5]] == [0, 5, 10, 15, 20] and [b.step for b in seen] == list(range(15))


def test_the_mean_loss_counts_only_the_steps_that_return_one():
    x, y = data(10)
    losses = iter([torch.tensor(1.0), None, torch.tensor(3.0), None])
    mean = client_loop(x, y, lambda b: next(losses), epochs=1, batch_size=3, generator=torch.Generator())
    assert mean == 2.0
    assert client_loop(x, y, lambda b: None, epochs=1, batch_size=3, generator=torch.Generator()) == 0.0


def test_end_of_epoch_hook_and_a_step_budget_that_draws_no_order_beyond_it():
    x, y = data(10)  # 4 batches of 3 per epoch
    ends: list[int] = []
    g = torch.Generator().manual_seed(5)
    client_loop(x, y, lambda b: None, epochs=3, batch_size=3, generator=g, on_epoch_end=ends.append, max_steps=4)
    assert ends == [0]  # the budget ends with epoch 0; epoch 1's order is never drawn
    reference = torch.Generator().manual_seed(5)
    for _ in zip(range(4), shuffled_batches(x, y, 3, 3, reference)):
        pass
    assert torch.equal(g.get_state(), reference.get_state())
    ends.clear()
    client_loop(x, y, lambda b: None, epochs=3, batch_size=3, generator=g, on_epoch_end=ends.append, max_steps=6)
    assert ends == [0]  # epoch 1 is cut short: no end-of-epoch call for it


class CountingHook(run_hooks.RunHook):
    """A hook that measures every trained model's first weight and counts its calls."""

    key = "_test_counting"

    def measure(self, update, client):
        return float(next(client.model.parameters()).detach().sum())

    def round_end(self, sim, round_index, record, measured):
        record["test_measured"] = len(measured)

    def evaluated(self, sim, round_index, record):
        record["test_evaluated"] = round_index + 1


def test_a_registered_hook_adds_its_numbers_and_changes_no_others(make_config):
    plain = run(make_config(method="fedavg", rounds=2, eval_every=1, name="plain"))
    run_hooks.register_hook("test_counting", lambda config, data: CountingHook())
    try:
        hooked = run(make_config(method="fedavg", rounds=2, eval_every=1, name="hooked"))
    finally:
        del run_hooks._FACTORIES["test_counting"]
    assert [h["test_measured"] for h in hooked.history] == [len(h["participants"]) for h in hooked.history]
    assert [h["test_evaluated"] for h in hooked.history] == [1, 2]
    keys = {"test_measured", "test_evaluated"}
    assert [{k: v for k, v in h.items() if k not in keys} for h in strip(hooked.history)] == strip(plain.history)
    assert (hooked.acc_history == plain.acc_history).all()
