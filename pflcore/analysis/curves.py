"""Figures that compare runs: curves over rounds (FedPAC appendix C.2), sweeps, and bars
with the paper's values marked, each drawn so that small differences stay visible."""
from __future__ import annotations

from itertools import cycle
from typing import Mapping

from ..engine.results import RunResult

#: Line styles and markers cycled per run, so that coinciding curves stay distinguishable.
LINE_STYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "v", "D", "P", "X", "*")


def plot_curves(results: Mapping[str, RunResult], key: str = "acc_mean", ax=None, title: str | None = None,
                paper: Mapping[str, float] | None = None):
    """One line per run of a per-round metric (``acc_mean``, ``train_loss``, ...), each with
    its own line style and marker (markers every ~10th point); ``paper``: label -> the
    paper's final value, drawn as a black cross at the last round."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    styles = zip(cycle(LINE_STYLES), cycle(MARKERS))
    for i, (label, res) in enumerate(results.items()):
        rounds, values = res.curve(key)
        style, marker = next(styles)
        hollow = i % 2 == 1  # alternate filled and larger hollow markers: coinciding runs show
        line, = ax.plot(rounds, values, linestyle=style, marker=marker, markevery=max(1, len(rounds) // 10),
                        markersize=7 if hollow else 4, markerfacecolor="none" if hollow else None, label=label)
        if paper and label in paper and len(rounds):
            ax.plot([rounds[-1]], [paper[label]], "x", color=line.get_color(), markersize=8, markeredgewidth=2)
    if paper and any(label in paper for label in results):
        ax.plot([], [], "x", color="k", markersize=8, markeredgewidth=2, label="paper (final)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
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


def plot_bars(values: Mapping[str, float | None], errors: Mapping[str, float] | None = None,
              paper: Mapping[str, float] | None = None, ax=None, ylabel: str = "accuracy (%)",
              title: str | None = None, zero_based: bool = False):
    """One bar per label with its value written above it (and above its error bar), error
    bars from ``errors``, and the paper's values as black crosses; a label whose value is
    None or NaN gets no bar (a row only the paper has). The value axis spans the data
    (values, errors and paper values) with a margin, not from 0, so a spread of a few
    points is visible, and never goes below 0 for non-negative data; ``zero_based=True``
    for quantities whose ratio matters (times, bytes; signed values keep 0 in view)."""
    import math

    import matplotlib.pyplot as plt

    labels = list(values)
    if ax is None:
        _, ax = plt.subplots(figsize=(max(4.0, 0.8 * len(labels) + 1.5), 3.5))
    heights = [float("nan") if values[k] is None else float(values[k]) for k in labels]
    err = [float((errors or {}).get(k, 0.0) or 0.0) for k in labels]
    drawn = [i for i, h in enumerate(heights) if not math.isnan(h)]
    bars = ax.bar(drawn, [heights[i] for i in drawn], yerr=[err[i] for i in drawn] if errors else None,
                  capsize=3, color="tab:blue", alpha=0.8)
    ax.bar_label(bars, labels=[f"{heights[i]:.2f}" for i in drawn], padding=3, fontsize=8)
    marked = [(i, float(paper[k])) for i, k in enumerate(labels) if paper and paper.get(k) is not None]
    if marked:
        ax.plot([i for i, _ in marked], [v for _, v in marked], "x", color="k", markersize=9, markeredgewidth=2,
                label="paper", zorder=3)
        ax.legend(fontsize="small", loc="best")
    points = [heights[i] + s * err[i] for i in drawn for s in (-1, 0, 1)] + [v for _, v in marked]
    low, high = (min(points), max(points)) if points else (0.0, 1.0)
    if zero_based:
        low, high = min(low, 0.0), max(high, 0.0)
        span = max(high - low, abs(high), abs(low), 1e-9)
        ax.set_ylim(low - (0.12 * span if low < 0 else 0.0), high + 0.15 * span)
    else:
        span = max(high - low, 1e-9)
        bottom = low - 0.25 * span - 0.5
        ax.set_ylim(max(bottom, 0.0) if low >= 0 else bottom, high + 0.2 * span + 0.5)
    ax.set_xticks(range(len(labels)))
    long = max(map(len, labels), default=0) > 8
    ax.set_xticklabels(labels, rotation=30 if long else 0, ha="right" if long else "center")
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)
    if title:
        ax.set_title(title)
    return ax
