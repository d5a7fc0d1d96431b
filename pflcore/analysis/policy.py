"""Per-client figures with many clients, such as FedCP's policy (Zhang et al., KDD 2023,
section 8, Figure 5): a value per client and round as one line per client, and a
distribution per client as one violin per client. Every client is told apart by a colour
(the palette up to 16 clients, a colour scale with a client colour bar beyond), rounds and
clients get whole-number ticks."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from .palette import LINE_STYLES, colours, integer_ticks


def plot_client_rounds(values, rounds: Sequence[int] | None = None, ax=None, ylabel: str = "value",
                       title: str | None = None, clients: Sequence[int] | None = None):
    """One line per client of a (rounds, clients) array, e.g. FedCP's PIR (Figure 5a); NaN
    (a round before the client first took part) leaves a gap. ``rounds``: the x values
    (default 1, 2, ...); ``clients``: the column ids (default 0, 1, ...). Up to 16 clients
    get the palette and a legend, more a colour scale with a colour bar of client ids."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import BoundaryNorm, ListedColormap

    values = np.asarray(values, dtype=float)
    if values.ndim != 2:
        raise ValueError(f"give a (rounds, clients) array, not one of shape {values.shape}.")
    n_rounds, n_clients = values.shape
    rounds = np.arange(1, n_rounds + 1) if rounds is None else np.asarray(rounds)
    ids = list(range(n_clients)) if clients is None else [int(c) for c in clients]
    if ax is None:
        _, ax = plt.subplots(figsize=(7.5, 4.2))
    palette = colours(n_clients)
    marker = "o" if n_rounds <= 30 else None
    for j, cid in enumerate(ids):
        ax.plot(rounds, values[:, j], color=palette[j], lw=1.2, marker=marker, ms=3,
                ls=LINE_STYLES[j % len(LINE_STYLES)] if n_clients <= 16 else "-", label=f"{cid}")
    if n_clients <= 16:
        ax.legend(title="client", fontsize="small", title_fontsize="small", loc="upper left",
                  bbox_to_anchor=(1.01, 1.0), borderaxespad=0, ncol=1 if n_clients <= 8 else 2)
    else:
        cmap = ListedColormap(palette)
        norm = BoundaryNorm(np.arange(n_clients + 1) - 0.5, n_clients)
        bar = ax.figure.colorbar(plt.cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, pad=0.02)
        step = max(1, n_clients // 10)
        bar.set_ticks(np.arange(0, n_clients, step), labels=[str(ids[t]) for t in range(0, n_clients, step)])
        bar.set_label("client")
    integer_ticks(ax)
    if n_rounds <= 12:
        ax.set_xticks(rounds)
    ax.set_xlabel("round")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if title:
        ax.set_title(title, fontsize="medium")
    return ax


def plot_client_distributions(samples: Mapping[int, np.ndarray], ax=None, ylabel: str = "value",
                              title: str | None = None):
    """One violin per client (its median marked) of per-sample values, e.g. the personal
    share s of every test sample under FedCP's policy (Figure 5b); x = client id, one tick
    per client. A client without samples is named on the axis with no violin."""
    import matplotlib.pyplot as plt

    ids = sorted(int(c) for c in samples)
    if ax is None:
        _, ax = plt.subplots(figsize=(max(6.0, 0.4 * len(ids) + 2.0), 4.2))
    shown = [c for c in ids if np.asarray(samples[c]).size]
    palette = colours(len(ids))
    if shown:
        parts = ax.violinplot([np.asarray(samples[c], dtype=float) for c in shown], positions=shown,
                              showmedians=True, widths=0.8)
        for body, c in zip(parts["bodies"], shown):
            body.set_facecolor(palette[ids.index(c)])
            body.set_edgecolor("#333333")
            body.set_alpha(0.75)
        for name in ("cmedians", "cmins", "cmaxes", "cbars"):
            if name in parts:
                parts[name].set_color("#333333")
                parts[name].set_linewidth(1.0)
    ax.set_xticks(ids, [str(c) for c in ids], fontsize=8)
    ax.set_xlim(min(ids, default=0) - 0.7, max(ids, default=0) + 0.7)
    ax.set_xlabel("client")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3, axis="y")
    if title:
        ax.set_title(title, fontsize="medium")
    return ax


__all__ = ["plot_client_distributions", "plot_client_rounds"]
