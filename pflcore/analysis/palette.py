"""The one look of pflcore's figures: a colour-blind-safe palette, line styles and markers
shared by every plotting function, the colour that marks a paper's value, and small helpers
every figure needs (integer ticks for rounds and clients, one scale for panels that are
compared, the setting of a group of runs in words).

matplotlib is imported inside the functions only, so importing this module never needs it.
"""
from __future__ import annotations

import textwrap
from typing import Any, Iterable, Mapping, Sequence

#: Okabe & Ito's colour-blind-safe palette and Paul Tol's muted one, interleaved so that the
#: first colours contrast most (the pale yellow and black last): 16 colours that stay distinct
#: for the common colour-vision deficiencies.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#332288", "#999933",
           "#882255", "#44AA99", "#CC6677", "#117733", "#88CCEE", "#DDCC77", "#F0E442", "#000000"]

#: The paper's values: a bright magenta, the same in every figure, in no curve's or bar's colour
#: (not black, which error bars and text use).
PAPER_COLOUR = "#EE3377"

#: Our bars when a figure has one series (the palette's blue).
OURS_COLOUR = PALETTE[0]

#: The neutral colour of keys that stand for a shape, not a colour (hollow, with this edge).
KEY_COLOUR = "#4D4D4D"

#: The characters a title line holds on a figure 7 inches wide or more at its title's size
#: (10-11 pt); :func:`wrapped_title` wraps longer lines.
TITLE_WIDTH = 78


def wrapped_title(title: str, width: int = TITLE_WIDTH) -> str:
    """``title`` with each of its lines wrapped at spaces to ``width`` characters, so that no
    line runs off the figure's edges (a run's setting in words can be long)."""
    return "\n".join(textwrap.fill(line, width) for line in title.split("\n"))


#: Line styles and markers cycled per series, so that coinciding curves stay distinguishable.
LINE_STYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "h", "<", ">", "p", "d", "8", "H")


def colour(i: int) -> str:
    """The ``i``-th colour of :data:`PALETTE` (cycling after 16)."""
    return PALETTE[i % len(PALETTE)]


def colours(n: int, cmap: str = "viridis") -> list:
    """``n`` distinct colours: the palette's first ``n``, or ``n`` steps of a perceptually
    uniform colour map when there are more than 16 (then show a colour bar or a legend)."""
    if n <= len(PALETTE):
        return PALETTE[:n]
    import matplotlib

    scale = matplotlib.colormaps[cmap]
    return [scale(i / max(n - 1, 1)) for i in range(n)]


def places(methods: Iterable[str], styles: Sequence[str] = ()) -> dict[str, int]:
    """Each method's place in the colour, line-style and marker cycles (:func:`style`).
    ``styles``: every method the figure may come to hold (a table's rows), in the order that
    hands out the places, so that each keeps its look whichever of the others have results
    yet; methods not named there follow, in their own order."""
    place: dict[str, int] = {}
    for method in (*styles, *methods):
        place.setdefault(method, len(place))
    return place


def style(i: int) -> dict[str, Any]:
    """Colour, line style and marker of the ``i``-th series."""
    return {"color": colour(i), "linestyle": LINE_STYLES[i % len(LINE_STYLES)], "marker": MARKERS[i % len(MARKERS)]}


def install() -> None:
    """Make :data:`PALETTE` matplotlib's colour cycle (``C0``, ``C1``, ... and plots without a
    colour), for a notebook's own plots beside pflcore's."""
    import matplotlib
    from cycler import cycler

    matplotlib.rcParams["axes.prop_cycle"] = cycler(color=PALETTE)


def integer_ticks(ax, x: bool = True, y: bool = False) -> None:
    """Only whole numbers on the axes that count rounds or clients."""
    from matplotlib.ticker import MaxNLocator

    if x:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if y:
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))


def share_limits(axes: Iterable, x: bool = True, y: bool = True) -> None:
    """One scale for panels that are read against each other: every axis gets the union of
    their limits (after they are drawn)."""
    axes = [ax for ax in (getattr(axes, "flat", None) or axes)]
    if not axes:
        return
    for on, get, put in ((x, "get_xlim", "set_xlim"), (y, "get_ylim", "set_ylim")):
        if on:
            limits = [getattr(ax, get)() for ax in axes]
            low, high = min(lo for lo, _ in limits), max(hi for _, hi in limits)
            for ax in axes:
                getattr(ax, put)(low, high)


def _words(config) -> dict[str, str]:
    """The fields of a run's setting a reader needs, in words, keyed by field."""
    from ..papers import display_name  # the papers package draws with this module

    part = dict(config.partition or {})
    kind = part.pop("kind", "")
    # kind -> (parameter, its words, its default, the kind's name beside it)
    detail = {"dominant": ("s", "s={}", None, True), "dirichlet": ("alpha", "Dir({})", None, True),
              "pathological": ("classes_per_client", "{} classes/client", None, True),
              "fedfa_shards": ("shards_per_client", "#C={}", 2, False),
              "fedfa_dirichlet": ("alpha", "Dir({})", None, False),
              "pfllib_dirichlet": ("alpha", "Dir({})", 0.1, False)}.get(kind)
    partition = {"iid": "IID"}.get(kind, kind)  # as the papers write it
    if detail and part.get(detail[0], detail[2]) is not None:
        value = part.get(detail[0], detail[2])
        said = detail[1].format(f"{value:.0%}" if kind == "dominant" else value)
        partition = f"{kind} {said}" if detail[3] else said
    words = {"dataset": display_name(str(config.dataset)), "clients": f"{config.num_clients} clients",
             "partition": partition}
    if part.get("samples_per_client"):
        words["samples"] = f"{part['samples_per_client']} samples/client"
    if config.participation < 1:
        words["participation"] = f"{config.participation:.0%} per round"
    words["epochs"] = f"E={config.local_epochs}"
    words["rounds"] = f"{config.rounds} rounds"
    return {k: v for k, v in words.items() if v}


def setting_text(results: Mapping[str, Any] | Sequence[Any]) -> str:
    """The setting runs share, in words ("Fashion-MNIST, 20 clients, dominant s=20%, 600
    samples/client, E=5, 200 rounds"; FedFA's "#C=2" or "Dir(0.1)", "10% per round"); a
    field the runs differ in is left out. Empty when the runs carry no config."""
    runs = list(results.values()) if isinstance(results, Mapping) else list(results)
    configs = [getattr(r, "config", None) for r in runs]
    if not configs or any(c is None or not hasattr(c, "partition") for c in configs):
        return ""
    each = [_words(c) for c in configs]
    return ", ".join(v for k, v in each[0].items() if all(w.get(k) == v for w in each[1:]))


__all__ = ["KEY_COLOUR", "LINE_STYLES", "MARKERS", "OURS_COLOUR", "PALETTE", "PAPER_COLOUR", "colour", "colours",
           "install", "integer_ticks", "places", "setting_text", "share_limits", "style"]
