"""Accuracy (or loss) curves over rounds for several runs (FedPAC appendix C.2)."""
from __future__ import annotations

from typing import Mapping

from ..engine.results import RunResult


def plot_curves(results: Mapping[str, RunResult], key: str = "acc_mean", ax=None, title: str | None = None):
    """One line per run of a per-round metric (``acc_mean``, ``train_loss``, ...)."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    for label, res in results.items():
        rounds, values = res.curve(key)
        ax.plot(rounds, values, marker="o" if len(rounds) < 15 else None, label=label)
    ax.set_xlabel("round")
    ax.set_ylabel({"acc_mean": "mean client test accuracy (%)", "train_loss": "train loss"}.get(key, key))
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    if title:
        ax.set_title(title)
    return ax
