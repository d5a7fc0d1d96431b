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


def plot_sweep(results: Mapping[str, Mapping[float, RunResult]], xlabel: str, ax=None, title: str | None = None):
    """Final mean accuracy against a swept value (FedPAC Figure 1, appendix C.3): one line
    per method, ``results[method][x]``, with the std over clients as error bars."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    for label, by_x in results.items():
        xs = sorted(by_x)
        ax.errorbar(xs, [by_x[x].summary["acc_mean"] for x in xs], yerr=[by_x[x].summary["acc_std"] for x in xs],
                    marker="o", capsize=3, label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("mean client test accuracy (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    if title:
        ax.set_title(title)
    return ax
