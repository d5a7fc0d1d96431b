"""Data-distribution bubble chart of a partition (FedCP appendix figures 7-9, pFedFDA
appendix C.1.2 figure 3): x = client, y = class, bubble area proportional to the count.

matplotlib is imported inside :func:`plot_partition` only, so importing this module
(or anything in ``pflcore``) never requires it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from pflcore.data.partition import Partition, pool_labels

from .palette import OURS_COLOUR

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes

__all__ = ["plot_partition", "partition_title"]

# The parameters worth naming in a title, per kind (others are left out for brevity).
_KEY_PARAMS: dict[str, tuple[str, ...]] = {
    "dominant": ("s", "samples_per_client", "size_choices"),
    "pathological": ("classes_per_client", "class_sets", "samples_per_client", "on"),
    "dirichlet": ("alpha", "on", "min_size"),
    "iid": ("samples_per_client",),
    "quantity": ("size_choices",),
    "natural": (),
}


def partition_title(partition: Partition, split: str = "train") -> str:
    """One-line description: kind, number of clients, key parameters and the split."""
    base_kind = partition.kind.split("+")[0]
    parts = [f"N={partition.num_clients}"]
    for name in _KEY_PARAMS.get(base_kind, ()):
        value = partition.params.get(name)
        if value is not None:
            parts.append(f"{name}={value}")
    for step in partition.params.get("subsample", []):
        parts.append(f"subsample={step['fraction']:g}")
    return f"{partition.kind} ({', '.join(parts)}) - {split}"


def plot_partition(
    partition: Partition,
    train_labels: np.ndarray,
    test_labels: np.ndarray,
    num_classes: int,
    split: str = "train",
    ax: Axes | None = None,
    class_names: Sequence[str] | None = None,
    max_area: float = 300.0,
    **scatter_kwargs: Any,
) -> Axes:
    """Bubble chart of per-client class counts (one ``scatter`` call).

    ``split`` is "train", "test" or "all"; the largest count gets area ``max_area``
    (points^2) and the others proportionally.  Extra keyword arguments go to
    ``Axes.scatter``.  Returns the Axes (a new figure is created when ``ax`` is None).
    """
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    counts = partition.label_counts(pool_labels(train_labels, test_labels), num_classes, split)
    clients, classes = np.nonzero(counts)
    values = counts[clients, classes]
    area = values / max(int(values.max(initial=0)), 1) * max_area
    if ax is None:
        width = min(max(4.0, 0.3 * partition.num_clients + 2.0), 24.0)
        height = min(max(3.0, 0.25 * num_classes + 1.5), 16.0)
        _, ax = plt.subplots(figsize=(width, height))
    style = {"alpha": 0.7, "edgecolors": "none", "color": OURS_COLOUR}
    style.update(scatter_kwargs)
    ax.scatter(clients, classes, s=area, **style)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("client")
    ax.set_ylabel("class")
    ax.set_xlim(-0.75, partition.num_clients - 0.25)
    ax.set_ylim(-0.75, num_classes - 0.25)
    if class_names is not None:
        if len(class_names) != num_classes:
            raise ValueError(
                f"class_names has {len(class_names)} entries but num_classes={num_classes}."
            )
        ax.set_yticks(np.arange(num_classes))
        ax.set_yticklabels(list(class_names))
    ax.set_title(partition_title(partition, split))
    return ax
