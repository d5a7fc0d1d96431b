"""Figures drawn from run records (the reproduction report): accuracy over rounds, the
mean over the recorded seeds with a band from the lowest to the highest seed."""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from ..papers import display_name  # noqa: E402
from .palette import LINE_STYLES, MARKERS, PALETTE, places, wrapped_title  # noqa: E402


def seed_curve(runs: Sequence[dict], key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(rounds, mean, lowest, highest) of a per-round metric over the records of one method."""
    by_round: dict[int, list[float]] = {}
    for record in runs:
        for h in record["history"]:
            value = h.get(key)
            if isinstance(value, (int, float)):
                by_round.setdefault(int(h["round"]), []).append(float(value))
    rounds = np.array(sorted(r for r, v in by_round.items() if len(v) == len(runs)))
    values = [by_round[r] for r in rounds]
    return (rounds, np.array([np.mean(v) for v in values]), np.array([min(v) for v in values]),
            np.array([max(v) for v in values]))


def plot_seed_curves(runs: Mapping[str, Sequence[dict]], path: str | Path, key: str = "acc_mean",
                     title: str = "", ylabel: str = "accuracy (%)", styles: Sequence[str] = ()) -> Path:
    """One line per method (display names, distinct colour and dash), saved to ``path``; a
    method scored at the final round only (FedAvg-FT from FedAvg's run) is a point with its
    spread over seeds; a method whose records share no round is still named in the legend,
    never dropped. ``styles``: every method the figure may come to hold (a table's rows), in
    the order that hands out colours and dashes, so that each keeps its look when records of
    other methods arrive; methods not named there follow them (:func:`~pflcore.analysis.palette.places`)."""
    place = places(runs, styles)
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    handles = []  # in the methods' order (matplotlib would list error-bar points after the lines)
    for method, recs in runs.items():
        i = place[method]
        rounds, mean, low, high = seed_curve(recs, key)
        colour = PALETTE[i % len(PALETTE)]
        if not len(rounds):
            handles += ax.plot([], [], color=colour, ls=LINE_STYLES[i % len(LINE_STYLES)],
                               label=f"{display_name(method)} (n={len(recs)}, no round in common)")
        elif len(rounds) == 1:  # scored at the final round only (from the run it trains as): a point
            handles.append(ax.errorbar(rounds, mean, yerr=[mean - low, high - mean], fmt=MARKERS[i % len(MARKERS)],
                                       color=colour, capsize=3, ms=6,
                                       label=f"{display_name(method)} (n={len(recs)}, final round only)"))
        else:
            handles += ax.plot(rounds, mean, color=colour, ls=LINE_STYLES[i % len(LINE_STYLES)], lw=1.6,
                               label=f"{display_name(method)} (n={len(recs)})")
            if len(recs) > 1:
                ax.fill_between(rounds, low, high, color=colour, alpha=0.15, lw=0)
    ax.set_xlabel("round")
    ax.set_ylabel(ylabel)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    # each line of the title within the figure's width (FedCP Table 2's runs to 92 characters)
    ax.set_title(wrapped_title(title), fontsize=11)
    ax.grid(alpha=0.3)
    ax.legend(handles=handles, fontsize=8, ncol=2 if len(runs) > 6 else 1, loc="lower right")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
