"""Comparison figures keep small differences visible: bar axes span the data, the paper's
values are marked, coinciding curves differ in style."""
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from pflcore.analysis import plot_bars, plot_curves  # noqa: E402


def test_bars_span_the_data_and_mark_the_paper():
    values = {"None": 86.1, "w FA": 88.0, "w CC": 89.2, "Both": 90.1}  # a 4-point spread
    ax = plot_bars(values, errors={k: 0.5 for k in values}, paper={"Both": 91.3, "None": 85.0})
    low, high = ax.get_ylim()
    assert 80 < low < 85.0 - 0.5 and 91.3 < high < 95, (low, high)  # the spread fills most of the axis
    crosses = [line for line in ax.get_lines() if line.get_marker() == "x"]
    assert len(crosses) == 1 and sorted(crosses[0].get_ydata()) == [85.0, 91.3]
    assert [t.get_text() for t in ax.texts] == ["86.10", "88.00", "89.20", "90.10"]
    assert plot_bars({"a": 2.0, "b": 3.0}, zero_based=True).get_ylim()[0] == 0
    assert plot_bars({"a": 2.0, "b": -2.6}, zero_based=True).get_ylim()[0] < -2.6  # signed values stay in view
    assert plot_bars({"a": 0.1, "b": 0.3}).get_ylim()[0] == 0  # accuracies never below 0
    only_paper = plot_bars({"ours": 80.0, "paper-only row": None}, paper={"paper-only row": 83.0})
    assert len(only_paper.patches) == 1 and only_paper.get_ylim()[1] > 83.0
    plt.close("all")


class _Run:
    def __init__(self, values):
        self.values = values

    def curve(self, key):
        return np.arange(1, len(self.values) + 1), np.asarray(self.values)


def test_coinciding_curves_get_distinct_styles_and_paper_crosses():
    same = [50.0, 60.0, 70.0]
    ax = plot_curves({"a": _Run(same), "b": _Run(same)}, paper={"a": 72.0})
    lines = [line for line in ax.get_lines() if line.get_label() in ("a", "b")]
    assert len({(line.get_linestyle(), line.get_marker()) for line in lines}) == 2
    assert any(line.get_marker() == "x" and list(line.get_ydata()) == [72.0] for line in ax.get_lines())
    plt.close("all")


def test_matrix_writes_every_entry_and_keeps_small_entries_visible_on_a_log_scale():
    from pflcore.analysis import plot_matrix

    matrix = np.array([[1.0, 0.001], [0.02, 0.5]])
    ax = plot_matrix(matrix, ["a", "b"], fmt="{:.3f}", log_scale=True)
    assert [t.get_text() for t in ax.texts] == ["1.000", "0.001", "0.020", "0.500"]
    norm = ax.images[0].norm
    assert 0.5 < norm(0.001) < norm(0.02) < norm(0.5) < norm(1.0)  # all distinct, above the midpoint
    plt.close(ax.figure)
