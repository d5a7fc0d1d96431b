"""Combination-weight heatmaps (FedPAC appendix C.1): row i = the weights client i's
personal head gives to every participant's head, at chosen rounds."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..engine.results import RunResult


def weight_matrix(result: RunResult, round_number: int, num_clients: int | None = None) -> np.ndarray:
    """The full (clients x clients) weight matrix of a round; rows/columns of clients that
    did not take part are NaN."""
    weights = result.arrays("weights")
    if round_number not in weights:
        raise KeyError(f"round {round_number} has no recorded weights (recorded: {sorted(weights)[:5]}...).")
    ids = result.arrays("weight_clients")[round_number]
    n = num_clients or result.summary["num_clients"]
    full = np.full((n, n), np.nan)
    full[np.ix_(ids, ids)] = weights[round_number]
    return full


def plot_weight_heatmaps(result: RunResult, rounds: Sequence[int] = (1, 20, 50), groups: int = 5,
                         axes=None, title: str | None = None):
    """One heatmap per round; clients ordered by group (client i is in group i % groups) so
    that the clients of a group sit side by side, white lines between the groups, and
    collaboration shows as blocks. One colour scale for every round, from 0 to the largest
    weight shown (not to 1); grey: a client that did not take part in that round."""
    import matplotlib.pyplot as plt

    n = result.summary["num_clients"]
    order = np.argsort(np.arange(n) % groups, kind="stable")
    rounds = [r for r in rounds if r <= result.summary["rounds"]]
    if not rounds:
        raise ValueError(f"none of the rounds asked for is within the run's {result.summary['rounds']} rounds.")
    matrices = {r: weight_matrix(result, r, n)[np.ix_(order, order)] for r in rounds}
    top = max((float(np.nanmax(w)) for w in matrices.values() if np.isfinite(w).any()), default=1.0) or 1.0
    if axes is None:
        side = max(3.8, 0.19 * n + 1.2)  # room for a tick label per client at 8 pt
        _, axes = plt.subplots(1, len(rounds), figsize=(side * len(rounds) + 1.0, side), squeeze=False)
        axes = axes[0]
    cmap = plt.get_cmap("viridis").with_extremes(bad="#D9D9D9")
    edges = np.cumsum(np.bincount(np.arange(n) % groups, minlength=groups))[:-1] - 0.5
    ticks = np.arange(n) if n <= 30 else np.arange(0, n, max(1, n // 15))
    for ax, r in zip(axes, rounds):
        image = ax.imshow(matrices[r], vmin=0, vmax=top, cmap=cmap, interpolation="nearest")
        for edge in edges:
            ax.axhline(edge, color="white", lw=1.5)
            ax.axvline(edge, color="white", lw=1.5)
        ax.set_title(f"round {r}: weights a_ij")
        ax.set_xlabel(f"client j (ordered by group; {groups} groups)")
        ax.set_ylabel("client i (ordered by group)")
        ax.set_xticks(ticks, [str(order[t]) for t in ticks], fontsize=8, rotation=90 if n > 12 else 0)
        ax.set_yticks(ticks, [str(order[t]) for t in ticks], fontsize=8)
    axes[-1].figure.colorbar(image, ax=list(axes), shrink=0.8, label="combination weight a_ij")
    if title:
        axes[0].figure.suptitle(title)
    return axes


def plot_matrix(matrix, labels: Sequence[str] | None = None, ax=None, fmt: str = "{:.2f}", log_scale: bool = False,
                vmin: float | None = None, vmax: float | None = None, title: str | None = None,
                colorbar_label: str | None = None):
    """A small matrix as a heatmap with every entry written in its cell (FedPAC's matrix P
    and combination weights for a few clients, section 4.3). ``log_scale``: a symmetric log
    colour scale, so that entries spanning orders of magnitude all stay visible."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import Normalize, SymLogNorm

    matrix = np.asarray(matrix, dtype=float)
    if ax is None:
        _, ax = plt.subplots(figsize=(1.2 * matrix.shape[1] + 2.5, 1.0 * matrix.shape[0] + 1.5))
    top = float(np.nanmax(np.abs(matrix))) or 1.0
    if log_scale:
        linthresh = 10.0 ** (np.floor(np.log10(top)) - 2)  # a power of ten: two decades below the largest entry
        norm = SymLogNorm(linthresh=linthresh, vmin=-top if vmin is None else vmin, vmax=top if vmax is None else vmax)
    else:
        norm = Normalize(np.nanmin(matrix) if vmin is None else vmin, np.nanmax(matrix) if vmax is None else vmax)
    image = ax.imshow(matrix, cmap="viridis", norm=norm)
    for (row, col), value in np.ndenumerate(matrix):
        ax.text(col, row, fmt.format(value), ha="center", va="center",
                color="white" if norm(value) < 0.6 else "black")
    if labels is not None:
        ax.set_xticks(range(matrix.shape[1]), labels)
        ax.set_yticks(range(matrix.shape[0]), labels)
    if title:
        ax.set_title(title)
    ax.figure.colorbar(image, ax=ax, shrink=0.8, label=colorbar_label)
    return ax
