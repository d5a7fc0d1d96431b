"""Tables, curves and plots for notebooks. The only part of pflcore that uses matplotlib
(imported inside the functions, so the core never needs it). Every figure takes its colours,
line styles and markers from :mod:`pflcore.analysis.palette`."""
from .curves import bar_value_limits, mark_axis_break, plot_bars, plot_curves, plot_sweep
from .feature_plots import plot_cosine_histograms, plot_tsne
from .features import (FeatureEmbedding, classifier_update_similarity, client_features, cosine_pairs,
                       feature_distance, held_classes, local_models, model_features, received_head,
                       round_feature_statistics, tsne_embedding, verification_set)
from .heatmaps import plot_matrix, plot_weight_heatmaps, weight_matrix
from .palette import PALETTE, PAPER_COLOUR, integer_ticks, setting_text, share_limits
from .partition_plot import plot_partition
from .policy import plot_client_rounds, plot_client_distributions
from .reconstructions import plot_reconstructions
from .statistics import mcnemar_exact, paired_comparison
from .tables import results_table, seeds_table, sweep_table

__all__ = ["PALETTE", "PAPER_COLOUR", "bar_value_limits", "mark_axis_break", "integer_ticks", "setting_text", "share_limits",
           "plot_client_rounds", "plot_client_distributions", "plot_reconstructions",
           "plot_bars", "plot_curves", "plot_partition", "plot_sweep", "plot_matrix", "plot_weight_heatmaps", "results_table",
           "seeds_table", "sweep_table", "weight_matrix",
           "FeatureEmbedding", "classifier_update_similarity", "client_features", "cosine_pairs", "feature_distance",
           "held_classes", "local_models", "model_features", "plot_cosine_histograms", "plot_tsne", "received_head",
           "round_feature_statistics", "tsne_embedding", "verification_set", "mcnemar_exact", "paired_comparison"]
