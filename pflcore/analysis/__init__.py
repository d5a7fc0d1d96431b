"""Tables, curves and plots for notebooks. The only part of pflcore that uses matplotlib
(imported inside the functions, so the core never needs it)."""
from .curves import plot_curves
from .partition_plot import plot_partition
from .tables import results_table

__all__ = ["plot_curves", "plot_partition", "results_table"]
