"""Figures that compare runs: curves over rounds (FedPAC appendix C.2), sweeps, and bars
with the paper's values marked, each drawn so that small differences stay visible."""
from __future__ import annotations

from typing import Mapping, Sequence

from ..engine.results import RunResult
from ..papers import display_name
from .palette import (LINE_STYLES, MARKERS, OURS_COLOUR, PAPER_COLOUR, colour, integer_ticks, places,
                      setting_text, wrapped_title)

__all__ = ["LINE_STYLES", "MARKERS", "bar_value_limits", "mark_axis_break", "plot_bars", "plot_curves", "plot_sweep"]

#: Markers that are drawn as outlines only (their face colour would be meaningless).
_LINE_MARKERS = {"x", "+", "|", "_", "1", "2", "3", "4"}


def _titled(ax, title: str | None, setting: str) -> None:
    """The panel's title, with the runs' shared setting on a second line; parts of the title
    the setting already says (comma-separated) are not repeated, and a long line wraps
    (:func:`~pflcore.analysis.palette.wrapped_title`)."""
    if title and setting:
        said = set(setting.split(", "))
        title = ", ".join(part for part in (p.strip() for p in title.split(",")) if part not in said)
    if title and setting:
        ax.set_title(wrapped_title(f"{title}\n{setting}"), fontsize="medium")
    elif title or setting:
        ax.set_title(wrapped_title(title or setting), fontsize="medium")


def _legend(ax, entries: int, **options) -> None:
    """A legend inside the axes for a few entries, beside it (right) for many."""
    if entries > 6:
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0,
                  ncol=2 if entries > 16 else 1, **options)
    else:
        ax.legend(fontsize="small", **options)


def plot_curves(results: Mapping[str, RunResult], key: str = "acc_mean", ax=None, title: str | None = None,
                paper: Mapping[str, float] | None = None, setting: bool | str = True, styles: Sequence[str] = ()):
    """One line per run of a per-round metric (``acc_mean``, ``train_loss``, ...), every run
    given (a run without the metric is still named in the legend), each with the method's
    display name and its own colour, line style and marker (markers every ~10th point).
    ``paper``: label -> the paper's final value, a star with a black edge in the method's
    colour just after the last round, named in the legend. ``setting``: True adds the
    setting the runs share (dataset, clients, partition, E, rounds) under the title; a
    string gives it. ``styles``: every method the figure may come to hold (a table's rows),
    so that each keeps its look whichever others have runs (:func:`~pflcore.analysis.palette.places`)."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.5))
    marked = False
    place = places(results, styles)
    for label, res in results.items():
        i = place[label]
        rounds, values = res.curve(key)
        name = display_name(label)
        if not len(rounds):
            name += " (no values recorded)"
        hollow = i % 2 == 1  # alternate filled and larger hollow markers: coinciding runs show
        line, = ax.plot(rounds, values, color=colour(i), linestyle=LINE_STYLES[i % len(LINE_STYLES)],
                        marker=MARKERS[i % len(MARKERS)], markevery=max(1, len(rounds) // 10),
                        markersize=7 if hollow else 5, markerfacecolor="none" if hollow else None, label=name)
        if paper and paper.get(label) is not None and len(rounds):
            step = (rounds[-1] - rounds[0]) / 40 if len(rounds) > 1 else 0.5
            ax.plot([rounds[-1] + step], [paper[label]], "*", color=line.get_color(), markersize=13,
                    markeredgecolor="k", markeredgewidth=0.8, clip_on=False, zorder=4)
            marked = True
    if marked:
        ax.plot([], [], "*", color="white", markeredgecolor="k", markersize=13,
                label="paper's final value\n(star in the method's colour)")
    integer_ticks(ax)
    ax.set_xlabel("round")
    ax.set_ylabel({"acc_mean": "mean client test accuracy (%)", "acc_weighted": "pooled test accuracy (%)",
                   "train_loss": "train loss"}.get(key, key))
    ax.grid(alpha=0.3)
    _legend(ax, len(results) + marked)
    _titled(ax, title, setting_text(results) if setting is True else (setting or ""))
    return ax


def plot_sweep(results: Mapping[str, Mapping[float, RunResult]], xlabel: str, ax=None, title: str | None = None,
               setting: bool | str = True):
    """Final mean accuracy against a swept value (FedPAC Figure 1, appendix C.3): one line
    per method, ``results[method][x]``, with the std over clients as error bars; the x ticks
    are the swept values. ``setting`` as in :func:`plot_curves` (the swept field differs
    between the runs, so it is left out)."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    swept: set = set()
    for i, (label, by_x) in enumerate(results.items()):
        xs = sorted(by_x)
        swept.update(xs)
        ax.errorbar(xs, [by_x[x].summary["acc_mean"] for x in xs], yerr=[by_x[x].summary["acc_std"] for x in xs],
                    color=colour(i), linestyle=LINE_STYLES[i % len(LINE_STYLES)], marker=MARKERS[i % len(MARKERS)],
                    capsize=3, label=display_name(label))
    if 0 < len(swept) <= 12:
        ax.set_xticks(sorted(swept), [f"{x:g}" for x in sorted(swept)])
    ax.set_xlabel(xlabel)
    ax.set_ylabel("mean client test accuracy (%)\n(error bars: std over clients)")
    ax.grid(alpha=0.3)
    _legend(ax, len(results))
    runs = [r for by_x in results.values() for r in by_x.values()]
    _titled(ax, title, setting_text(runs) if setting is True else (setting or ""))
    return ax


#: Where the value axis of bars may start above 0: never when 0 is within this share of the
#: data's top (the bars then simply start at 0).
_BREAK_ABOVE = 0.5


def bar_value_limits(values, zero_based: bool = False, headroom: float = 0.15) -> tuple[float, float]:
    """The value axis of a bar chart: from 0 when 0 is near the data (the lowest value at
    most half the highest), when ``zero_based`` or when a value is negative (0 kept in
    view); otherwise over the data with a margin, for a spread of a few points to show,
    and then the break must be marked (:func:`mark_axis_break`). ``headroom``: the share
    of the span left above the data (for a legend or value labels)."""
    import math

    values = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    if zero_based or low < 0 or low <= _BREAK_ABOVE * high:
        low, high = min(low, 0.0), max(high, 0.0)
        span = max(high - low, abs(high), abs(low), 1e-9)
        return low - (0.12 * span if low < 0 else 0.0), high + headroom * span
    span = max(high - low, 1e-9)
    return max(low - 0.35 * span - 0.5, 0.0), high + headroom * span + 0.5


def mark_axis_break(ax, positions, width: float = 0.7, horizontal: bool = False) -> None:
    """The sign of a value axis that does not start at 0: a double slash on the axis and a
    white gap across every bar (at ``positions``, ``width`` wide), just after the axis'
    start. ``horizontal``: bars drawn with ``barh`` (the value axis is x). Call it after
    the limits are set."""
    from matplotlib.patches import Rectangle

    at, size, d = 0.035, 0.03, 0.012
    transform = ax.get_yaxis_transform() if horizontal else ax.get_xaxis_transform()  # value axis in axes fraction
    for i in positions:
        corner = (at, i - width / 2 - 0.02) if horizontal else (i - width / 2 - 0.02, at)
        extent = (size, width + 0.04) if horizontal else (width + 0.04, size)
        ax.add_patch(Rectangle(corner, *extent, transform=transform, facecolor="white", edgecolor="none",
                               zorder=2.5, gid="axis-break"))
    for v in (at, at + size):
        xs, ys = ([v - d, v + d], [-d, d]) if horizontal else ([-d, d], [v - d, v + d])
        ax.plot(xs, ys, transform=ax.transAxes, color="k", lw=1, clip_on=False, gid="axis-break")


def plot_bars(values: Mapping[str, float | None], errors: Mapping[str, float] | None = None,
              paper: Mapping[str, float] | None = None, ax=None, ylabel: str = "accuracy (%)",
              title: str | None = None, zero_based: bool = False):
    """One bar per label (the method's display name) with its value written above it (and
    above its error bar), error bars from ``errors``, and the paper's values as a wide
    magenta line with a diamond across the bar (:data:`~pflcore.analysis.palette.PAPER_COLOUR`),
    named "paper" in the legend; a label whose value is None or NaN gets no bar (a row only
    the paper has, still named on the axis).

    The value axis is honest: it starts at 0 when 0 is near the data (or ``zero_based``, for
    quantities whose ratio matters: times, bytes; signed values keep 0 in view). Otherwise,
    so that a spread of a few points stays visible, it spans the data with a margin and the
    break is marked: a double slash on the axis and a gap across every bar."""
    import math

    import matplotlib.pyplot as plt

    labels = list(values)
    if ax is None:
        _, ax = plt.subplots(figsize=(max(4.0, 0.8 * len(labels) + 1.5), 3.5))
    heights = [float("nan") if values[k] is None else float(values[k]) for k in labels]
    err = [float((errors or {}).get(k, 0.0) or 0.0) for k in labels]
    drawn = [i for i, h in enumerate(heights) if not math.isnan(h)]
    width = 0.7
    bars = ax.bar(drawn, [heights[i] for i in drawn], width, yerr=[err[i] for i in drawn] if errors else None,
                  capsize=3, color=OURS_COLOUR, alpha=0.85, error_kw={"ecolor": "#333333", "lw": 1.2},
                  label="ours" + (" (error bars: std)" if errors else ""))
    ax.bar_label(bars, labels=[f"{heights[i]:.2f}" for i in drawn], padding=3, fontsize=8)
    marked = [(i, float(paper[k])) for i, k in enumerate(labels) if paper and paper.get(k) is not None]
    if marked:
        xs, ys = [i for i, _ in marked], [v for _, v in marked]
        ax.hlines(ys, [x - width / 2 for x in xs], [x + width / 2 for x in xs], colors=PAPER_COLOUR, lw=2.5,
                  zorder=4, label="paper")
        ax.plot(xs, ys, "D", color=PAPER_COLOUR, markeredgecolor="white", markersize=6, zorder=5)
    points = [heights[i] + s * err[i] for i in drawn for s in (-1, 0, 1)] + [v for _, v in marked]
    ax.set_ylim(*bar_value_limits(points, zero_based=zero_based, headroom=0.4 if errors or marked else 0.15))
    if ax.get_ylim()[0] > 0:
        mark_axis_break(ax, drawn, width)
    ax.set_xticks(range(len(labels)))
    names = [display_name(k) for k in labels]
    long = max(map(len, names), default=0) > 8
    ax.set_xticklabels(names, rotation=30 if long else 0, ha="right" if long else "center")
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)
    if marked or errors:
        ax.legend(fontsize="small", loc="upper center", ncol=2, framealpha=0.9)
    if title:
        ax.set_title(title, fontsize="medium")
    return ax
