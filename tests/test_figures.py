"""Figures a reviewer accepts: honest bar axes (from 0 or a marked break), the paper's values
in their own colour and named, display names, every run shown, the setting in the title,
readable ticks and markers, one scale for compared panels, integer rounds and clients."""
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from pflcore.analysis import plot_bars, plot_curves  # noqa: E402


def _paper_marks(ax):
    """The paper's values drawn on a bar chart: the collection labelled "paper"."""
    return [c for c in ax.collections if c.get_label() == "paper"]


def test_bars_are_honest_and_mark_the_paper_in_its_own_colour():
    from matplotlib.colors import to_hex

    from pflcore.analysis import PAPER_COLOUR

    values = {"None": 86.1, "w FA": 88.0, "w CC": 89.2, "Both": 90.1}  # a 4-point spread
    ax = plot_bars(values, errors={k: 0.5 for k in values}, paper={"Both": 91.3, "None": 85.0})
    low, high = ax.get_ylim()
    assert 75 < low < 85.0 - 0.5 and 91.3 < high < 97, (low, high)  # the spread fills most of the axis...
    breaks = [a for a in [*ax.patches, *ax.get_lines()] if a.get_gid() == "axis-break"]
    assert len([a for a in breaks if a in ax.patches]) == 4 and len([a for a in breaks if a in ax.get_lines()]) == 2
    marks = _paper_marks(ax)  # ...and the paper's values are in a colour no bar or error bar has, in the legend
    assert len(marks) == 1 and sorted(s[0][1] for s in marks[0].get_segments()) == [85.0, 91.3]
    assert to_hex(marks[0].get_colors()[0]) == PAPER_COLOUR.lower()
    assert "paper" in [t.get_text() for t in ax.get_legend().get_texts()]
    assert PAPER_COLOUR.lower() not in {to_hex(p.get_facecolor()) for p in ax.patches}
    assert [t.get_text() for t in ax.texts] == ["86.10", "88.00", "89.20", "90.10"]
    assert plot_bars({"a": 2.0, "b": 3.0}, zero_based=True).get_ylim()[0] == 0
    assert plot_bars({"a": 2.0, "b": -2.6}, zero_based=True).get_ylim()[0] < -2.6  # signed values stay in view
    near_zero = plot_bars({"a": 20.0, "b": 60.0})  # 0 is near the data: the bars start at 0, no break
    assert near_zero.get_ylim()[0] == 0 and not [a for a in near_zero.patches if a.get_gid() == "axis-break"]
    assert plot_bars({"a": 0.1, "b": 0.3}).get_ylim()[0] == 0  # accuracies never below 0
    only_paper = plot_bars({"ours": 80.0, "paper-only row": None}, paper={"paper-only row": 83.0})
    assert len([p for p in only_paper.patches if p.get_gid() != "axis-break"]) == 1
    assert only_paper.get_ylim()[1] > 83.0
    from pflcore.analysis import bar_value_limits, mark_axis_break

    assert bar_value_limits([10.0, 85.0])[0] == 0 and bar_value_limits([80.0, 85.0])[0] > 70
    fig, horizontal = plt.subplots()
    horizontal.barh([0, 1], [80.0, 85.0])
    horizontal.set_xlim(*bar_value_limits([80.0, 85.0]))
    mark_axis_break(horizontal, [0, 1], 0.8, horizontal=True)  # a notebook's own barh
    gaps = [p for p in horizontal.patches if p.get_gid() == "axis-break"]
    assert len(gaps) == 2 and all(p.get_width() < p.get_height() for p in gaps)  # across the bars, near the axis
    named = plot_bars({"fedavg_ft": 80.0, "hypcluster k=3": 81.0})
    assert [t.get_text() for t in named.get_xticklabels()] == ["FedAvg-FT", "HypCluster k=3"]
    plt.close("all")


class _Run:
    def __init__(self, values):
        self.values = values

    def curve(self, key):
        return np.arange(1, len(self.values) + 1), np.asarray(self.values)


def test_coinciding_curves_get_distinct_styles_and_paper_marks():
    same = [50.0, 60.0, 70.0]
    ax = plot_curves({"a": _Run(same), "b": _Run(same)}, paper={"a": 72.0})
    lines = [line for line in ax.get_lines() if line.get_label() in ("a", "b")]
    assert len({(line.get_linestyle(), line.get_marker(), line.get_color()) for line in lines}) == 2
    stars = [line for line in ax.get_lines() if line.get_marker() == "*" and list(line.get_ydata()) == [72.0]]
    assert len(stars) == 1 and stars[0].get_color() == lines[0].get_color()  # in the method's colour
    assert any(t.get_text().startswith("paper's final value") for t in ax.get_legend().get_texts())
    assert all(float(t).is_integer() for t in ax.get_xticks())  # rounds are whole numbers
    plt.close("all")


def test_curves_keep_each_method_s_look_when_other_methods_arrive():
    """A notebook's figure is redrawn from records as a table's rows arrive (the report hands
    it the recorded methods only): with ``styles`` a method's colour, dash and marker follow
    its row, not which other rows have records yet."""
    from pflcore.analysis.palette import places

    rows = ("fedpac", "local", "fedavg", "ditto")

    def looks(methods):
        ax = plot_curves({m: _Run([50.0, 60.0 + i]) for i, m in enumerate(methods)}, setting=False, styles=rows)
        return {line.get_label(): (line.get_color(), line.get_linestyle(), line.get_marker())
                for line in ax.get_lines()}

    before = looks(["local", "fedpac"])
    after = looks(["local", "fedavg", "ditto", "fedpac"])
    assert after["Local"] == before["Local"] and after["FedPAC"] == before["FedPAC"]
    assert len(set(after.values())) == 4
    assert places(["fedprox", "fedpac"], rows) == {"fedpac": 0, "local": 1, "fedavg": 2, "ditto": 3, "fedprox": 4}
    assert places(["b", "a", "b"]) == {"b": 0, "a": 1}  # without styles: the order given, each once
    plt.close("all")


def test_curves_show_every_run_by_its_display_name_and_the_setting():
    from types import SimpleNamespace

    from pflcore import ExperimentConfig
    from pflcore.analysis import PALETTE

    config = ExperimentConfig.from_dict({"num_clients": 20, "rounds": 200, "local_epochs": 5,
                                         "partition": {"kind": "dominant", "s": 0.2, "samples_per_client": 600}})
    methods = ["local", "fedavg", "fedavg_ft", "fedper", "lg_fedavg", "fedrep", "fedbabu", "knn_per", "ditto",
               "pfedme", "pfedhn", "fedpac"]
    runs = {m: SimpleNamespace(config=config, curve=_Run([50.0, 60.0 + i]).curve) for i, m in enumerate(methods)}
    runs["empty"] = SimpleNamespace(config=config, curve=lambda key: (np.zeros(0, int), np.zeros(0)))
    ax = plot_curves(runs, title="FedPAC Table 1")
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[:3] == ["Local", "FedAvg", "FedAvg-FT"] and "kNN-Per" in legend and "pFedHN" in legend
    assert legend[-1] == "empty (no values recorded)" and len(legend) == len(runs)  # none dropped
    colours = [line.get_color() for line in ax.get_lines() if not line.get_label().startswith("_")]
    assert len(set(colours)) == len(runs) and set(colours) <= set(PALETTE)
    assert ax.get_title() == ("FedPAC Table 1\nFashion-MNIST, 20 clients, dominant s=20%, 600 samples/client, E=5, "
                              "200 rounds")
    plt.close("all")


def test_a_long_setting_wraps_within_the_curves_figure():
    """FedPAC Table 1's 100-client setting (96 characters, with 30% of the clients per round) ran
    off the right edge of its accuracy curves: each title line wraps within the figure."""
    from types import SimpleNamespace

    from pflcore import ExperimentConfig

    config = ExperimentConfig.from_dict({"num_clients": 100, "rounds": 200, "local_epochs": 5, "participation": 0.3,
                                         "partition": {"kind": "dominant", "s": 0.2, "samples_per_client": 600}})
    fig, ax = plt.subplots(figsize=(7, 4.5))  # as the notebook draws it
    plot_curves({"fedfomo": SimpleNamespace(config=config, curve=_Run([50.0, 60.0]).curve)}, ax=ax,
                title="Fashion-MNIST, 100 clients")
    fig.tight_layout()
    box = ax.title.get_window_extent(fig.canvas.get_renderer())
    assert 0 <= box.x0 and box.x1 <= fig.bbox.width  # on the figure, not cut at its edge
    setting = "Fashion-MNIST, 100 clients, dominant s=20%, 600 samples/client, 30% per round, E=5, 200 rounds"
    assert " ".join(ax.get_title().split()) == setting and ax.get_title().count("\n") == 1  # every word, two lines
    plt.close("all")


def test_the_setting_in_words_says_fedfa_s_skews_as_the_paper_does():
    from types import SimpleNamespace

    from pflcore.analysis import setting_text
    from pflcore.papers.fedfa import fedfa_config

    def words(setting):
        return setting_text([SimpleNamespace(config=fedfa_config("fedavg", "fmnist", setting))])

    assert words("c2") == "Fashion-MNIST, 100 clients, #C=2, 10% per round, E=5, 200 rounds"
    assert words("dir0.1") == "Fashion-MNIST, 100 clients, Dir(0.1), 10% per round, E=5, 200 rounds"
    assert words("iid") == "Fashion-MNIST, 100 clients, IID, 10% per round, E=5, 200 rounds"


def test_weight_heatmaps_scale_to_the_data_draw_groups_and_readable_ticks():
    from types import SimpleNamespace

    from pflcore.analysis import plot_weight_heatmaps

    n, groups = 10, 5
    weights = np.full((n, n), 0.05)
    np.fill_diagonal(weights, 0.55)
    arrays = {"weights": {1: weights, 2: weights * 0.5}, "weight_clients": {1: np.arange(n), 2: np.arange(n)}}
    result = SimpleNamespace(summary={"num_clients": n, "rounds": 2}, arrays=lambda name: arrays[name])
    axes = plot_weight_heatmaps(result, rounds=(1, 2, 50), groups=groups)
    assert len(axes) == 2  # round 50 is past the run
    for ax in axes:
        assert ax.images[0].norm.vmin == 0 and ax.images[0].norm.vmax == 0.55  # the largest weight, not 1
        assert min(t.get_fontsize() for t in ax.get_xticklabels() + ax.get_yticklabels()) >= 8
        boundaries = [line for line in ax.get_lines() if line.get_color() == "white"]
        assert len(boundaries) == 2 * (groups - 1)
        assert [t.get_text() for t in ax.get_xticklabels()][:2] == ["0", "5"]  # ordered by group
    plt.close("all")


def test_tsne_markers_are_readable_and_the_legends_titled():
    from matplotlib.colors import to_hex

    from pflcore.analysis import FeatureEmbedding, plot_tsne
    from pflcore.analysis.palette import KEY_COLOUR

    rng = np.random.default_rng(0)
    classes, clients = np.repeat(np.arange(10), 6), np.tile(np.arange(6), 10)
    ax = plot_tsne(FeatureEmbedding(rng.normal(size=(60, 2)), classes, clients, np.arange(60)))
    sizes = np.concatenate([c.get_sizes() for c in ax.collections])
    assert sizes.min() >= 36  # at least 6 pt across
    class_legend, client_legend = ax.artists[0], ax.get_legend()
    assert class_legend.get_title().get_text() == "class" and client_legend.get_title().get_text() == "client"
    class_colours = {to_hex(h.get_facecolor()) for h in class_legend.legend_handles}
    assert len(class_colours) == 10 and to_hex(KEY_COLOUR) not in class_colours and "#000000" not in class_colours
    assert len({h.get_marker() for h in client_legend.legend_handles}) == 6
    assert all(h.get_markerfacecolor() == "white" for h in client_legend.legend_handles)  # shape keys are hollow
    plt.close("all")


def test_cosine_histograms_share_one_scale():
    from pflcore.analysis import plot_cosine_histograms, share_limits

    fig, axes = plt.subplots(1, 2)
    plot_cosine_histograms(np.full(50, 0.9), np.full(200, 0.3), ax=axes[0])
    plot_cosine_histograms(np.full(50, 0.95), np.full(100, 0.5), ax=axes[1])
    share_limits(axes)
    assert axes[0].get_ylim() == axes[1].get_ylim() and axes[0].get_xlim() == axes[1].get_xlim() == (0.0, 1.0)
    plt.close(fig)


def test_per_client_figures_tell_twenty_clients_apart_on_whole_number_ticks():
    from pflcore.analysis import plot_client_distributions, plot_client_rounds

    pir = np.linspace(0.4, 0.6, 3 * 20).reshape(3, 20)
    ax = plot_client_rounds(pir, ylabel="PIR")
    assert len({tuple(np.round(line.get_color(), 6)) if not isinstance(line.get_color(), str) else line.get_color()
                for line in ax.get_lines()}) == 20
    assert list(ax.get_xticks()) == [1, 2, 3]
    colour_bar = ax.figure.axes[-1]
    assert colour_bar is not ax and colour_bar.get_ylabel() == "client"
    assert all(float(t).is_integer() for t in colour_bar.get_yticks())
    few = plot_client_rounds(pir[:, :4])
    assert few.get_legend().get_title().get_text() == "client" and len(few.get_legend().texts) == 4
    ax = plot_client_distributions({c: np.linspace(0, 1, 5) + c for c in range(20)})
    assert [t.get_text() for t in ax.get_xticklabels()] == [str(c) for c in range(20)]
    plt.close("all")


def test_reconstructions_name_each_row():
    from types import SimpleNamespace

    import torch

    from pflcore.analysis import plot_reconstructions

    images = torch.rand(1, 3, 1, 8, 8)
    fig = plot_reconstructions({"fedavg": SimpleNamespace(reconstructions=images, targets=images, psnr=12.34)},
                               images=4)
    labels = [ax.get_ylabel() for ax in fig.axes if ax.get_ylabel()]
    assert labels == ["FedAvg\nreconstruction\n12.3 dB", "FedAvg\ntrue image"]
    plt.close(fig)


def test_matrix_writes_every_entry_and_keeps_small_entries_visible_on_a_log_scale():
    from pflcore.analysis import plot_matrix

    matrix = np.array([[1.0, 0.001], [0.02, 0.5]])
    ax = plot_matrix(matrix, ["a", "b"], fmt="{:.3f}", log_scale=True)
    assert [t.get_text() for t in ax.texts] == ["1.000", "0.001", "0.020", "0.500"]
    norm = ax.images[0].norm
    assert 0.5 < norm(0.001) < norm(0.02) < norm(0.5) < norm(1.0)  # all distinct, above the midpoint
    plt.close(ax.figure)


def test_record_curves_name_every_method(tmp_path, monkeypatch):
    from pflcore.analysis import record_figures

    drawn = {}
    monkeypatch.setattr(record_figures.plt, "close", lambda fig: drawn.setdefault("fig", fig))
    scored = [{"history": [{"round": 1}, {"round": 2}, {"round": 3, "acc_mean": 60.0 + s}]} for s in (0, 2)]
    records = {"fedavg_ft": [{"history": [{"round": r, "acc_mean": 50.0 + r} for r in (1, 2, 3)]}] * 2,
               "knn_per": scored, "fedpac": [{"history": []}]}
    assert record_figures.plot_seed_curves(records, tmp_path / "c.png").exists()
    ax = drawn["fig"].axes[0]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["FedAvg-FT (n=2)", "kNN-Per (n=2, final round only)",
                      "FedPAC (n=1, no round in common)"]  # none dropped, display names
    [point] = [c for c in ax.containers]  # the final-round-only method: a visible point with its seeds' spread
    assert point.lines[0].get_marker() not in (None, "None", "") and tuple(point.lines[0].get_ydata()) == (61.0,)
    plt.close(drawn["fig"])


def test_a_record_figure_s_long_title_wraps_within_the_figure(tmp_path, monkeypatch):
    """FedCP Table 2's title (92 characters) ran off both edges of its seed-curve figure."""
    from pflcore.analysis import record_figures
    from pflcore.report.catalogue import ALL_TABLES

    spec = next(s for s in ALL_TABLES if (s.paper, s.id) == ("fedcp", "T2"))
    title = f"{spec.title}\n{spec.column_title('practical mnist')}"
    drawn = {}
    monkeypatch.setattr(record_figures.plt, "close", lambda fig: drawn.setdefault("fig", fig))
    runs = {"fedavg": [{"history": [{"round": r, "acc_weighted": 90.0 + r} for r in (1, 2, 3)]}]}
    record_figures.plot_seed_curves(runs, tmp_path / "c.png", key="acc_weighted", title=title)
    fig = drawn["fig"]
    shown = fig.axes[0].title
    box = shown.get_window_extent(fig.canvas.get_renderer())
    assert 0 <= box.x0 and box.x1 <= fig.bbox.width  # on the figure, not cut at its edges
    assert " ".join(shown.get_text().split()) == " ".join(title.split())  # every word kept, in order
    assert len(shown.get_text().split("\n")) == 3
    plt.close(fig)


def test_the_palette_is_colour_blind_safe_and_can_be_matplotlibs_cycle():
    from matplotlib import rcParams

    from pflcore.analysis import PALETTE, PAPER_COLOUR
    from pflcore.analysis.palette import colours, install

    assert len(set(PALETTE)) == 16 and PAPER_COLOUR not in PALETTE and "#7F7F7F" not in PALETTE
    assert colours(5) == PALETTE[:5] and len({tuple(c) for c in colours(20)}) == 20  # a colour scale beyond 16
    before = rcParams["axes.prop_cycle"]
    try:
        install()
        assert rcParams["axes.prop_cycle"].by_key()["color"] == PALETTE
    finally:
        rcParams["axes.prop_cycle"] = before


def test_record_curves_keep_each_method_s_look_when_other_methods_arrive(tmp_path, monkeypatch):
    """A table's figure is redrawn as records arrive: with ``styles`` (the table's rows) a
    method's colour and dash depend on its row, not on which other rows have records yet."""
    from pflcore.analysis import record_figures

    drawn = []
    monkeypatch.setattr(record_figures.plt, "close", drawn.append)

    def run(offset):
        return [{"history": [{"round": r, "acc_mean": offset + r} for r in (1, 2, 3)]}]

    def looks(runs):
        record_figures.plot_seed_curves(runs, tmp_path / "c.png", styles=("fedpac", "local", "fedavg", "ditto"))
        return {line.get_label().split(" (")[0]: (line.get_color(), line.get_linestyle())
                for line in drawn[-1].axes[0].lines}

    before = looks({"local": run(50), "fedpac": run(70)})
    after = looks({"local": run(50), "fedavg": run(60), "ditto": run(65), "fedpac": run(70)})
    assert after["Local"] == before["Local"] and after["FedPAC"] == before["FedPAC"]
    assert len(set(after.values())) == 4
    assert looks({"fedprox": run(40), "fedpac": run(70)})["FedPAC"] == before["FedPAC"]  # unlisted ones follow
