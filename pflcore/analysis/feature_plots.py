"""FedFA's feature figures (Zhou, Zhang, Tsang, ICLR 2023, Figures 2 and 6-9, appendix F.2):
the t-SNE of client features and the histograms of cosine similarities across clients,
computed by :mod:`pflcore.analysis.features`."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from .palette import KEY_COLOUR, MARKERS, PALETTE, colour

#: Class colours: the palette without black (a class never looks like the shape key).
CLASS_COLOURS = [c for c in PALETTE if c != "#000000"]

#: Client shapes, the most distinct first (filled outlines differ at a few pixels).
CLIENT_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "h", "<", ">", "p", "d", "8", "H")
assert set(CLIENT_MARKERS) <= set(MARKERS)


def plot_tsne(embedding, ax=None, class_names: Sequence[str] | None = None,
              client_names: Mapping[int, str] | None = None, title: str | None = None, size: float = 42):
    """FedFA Figures 2, 6-9: the t-SNE points, colour = class, shape = client, with two
    legends beside the axes: "class" (colour swatches, top) and "client" (bottom: hollow grey
    shapes, so that no key looks like a class). ``size``: marker area in points^2 (42: about 6.5 pt
    across, with a thin dark edge, readable at the saved size)."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 5))
    classes = sorted(set(embedding.classes.tolist()))
    clients = sorted(set(embedding.clients.tolist()))
    if len(classes) <= len(CLASS_COLOURS):
        colour_of = {c: CLASS_COLOURS[i] for i, c in enumerate(classes)}
    else:
        scale = plt.get_cmap("turbo")
        colour_of = {c: scale(i / max(len(classes) - 1, 1)) for i, c in enumerate(classes)}
    marker = {k: CLIENT_MARKERS[i % len(CLIENT_MARKERS)] for i, k in enumerate(clients)}
    for k in clients:
        mine = embedding.clients == k
        ax.scatter(embedding.points[mine, 0], embedding.points[mine, 1], s=size, marker=marker[k],
                   c=[colour_of[c] for c in embedding.classes[mine]], alpha=0.85, edgecolors="#222222",
                   linewidths=0.4)
    cname = (lambda c: class_names[c]) if class_names is not None else str
    kname = (lambda k: client_names.get(k, str(k))) if client_names else str
    by_class = ax.legend(handles=[Patch(facecolor=colour_of[c], edgecolor="#222222", label=cname(c)) for c in classes],
                         title="class", fontsize="small", title_fontsize="small", loc="upper left",
                         bbox_to_anchor=(1.02, 1.0), borderaxespad=0, ncol=1 if len(classes) <= 6 else 2,
                         columnspacing=0.8, handletextpad=0.4)
    ax.add_artist(by_class)
    ax.legend(handles=[Line2D([], [], ls="", marker=marker[k], markersize=7, markerfacecolor="white",
                              markeredgecolor=KEY_COLOUR, markeredgewidth=1.2, label=kname(k)) for k in clients],
              title="client", fontsize="small", title_fontsize="small", loc="lower left",
              bbox_to_anchor=(1.02, 0.0), borderaxespad=0, ncol=1 if len(clients) <= 6 else 2,
              columnspacing=0.8, handletextpad=0.4)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_xlabel("t-SNE 1")
    ax.set_ylabel("t-SNE 2")
    if title:
        ax.set_title(title, fontsize="medium")
    return ax


def plot_cosine_histograms(positive: np.ndarray, negative: np.ndarray, ax=None, bins: int = 50,
                           title: str | None = None, density: bool = False, low: float | None = None):
    """FedFA Figures 2, 6-9: histograms of the positive (same class, different clients) and
    the negative (different classes) pairs' cosine similarities on one axis, each with its
    mean as a dashed line. The bins run from ``low`` (default: 0, or the smallest value if
    below) to 1, so panels of several methods share their bins; give them one scale with
    :func:`pflcore.analysis.palette.share_limits`."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    if low is None:
        low = min([0.0] + [float(np.min(v)) for v in (positive, negative) if len(v)])
    edges = np.linspace(low, 1.0, bins + 1)
    for values, name, c in ((negative, "negative pairs (different classes)", colour(0)),
                            (positive, "positive pairs (same class)", colour(1))):
        ax.hist(values, bins=edges, alpha=0.55, color=c, density=density, label=f"{name}, n={len(values)}")
        ax.hist(values, bins=edges, histtype="step", color=c, lw=1.2, density=density)
        if len(values):
            ax.axvline(float(np.mean(values)), color=c, ls="--", lw=1.2)
    ax.plot([], [], ls="--", color="k", lw=1.2, label="means")
    ax.set_xlim(low, 1.0)
    ax.set_xlabel("cosine similarity of two clients' features")
    ax.set_ylabel("density" if density else "pairs")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", loc="upper left")
    if title:
        ax.set_title(title, fontsize="medium")
    return ax


__all__ = ["CLASS_COLOURS", "CLIENT_MARKERS", "plot_cosine_histograms", "plot_tsne"]
