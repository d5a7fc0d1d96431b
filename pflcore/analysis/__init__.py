"""Tables, curves and plots for notebooks. The only part of pflcore that uses matplotlib
(imported inside the functions, so the core never needs it)."""
from .curves import plot_bars, plot_curves, plot_sweep
from .features import (FeatureEmbedding, classifier_update_similarity, client_features, cosine_pairs,
                       feature_distance, held_classes, local_models, model_features, plot_cosine_histograms,
                       plot_tsne, received_head, round_feature_statistics, tsne_embedding, verification_set)
from .heatmaps import plot_matrix, plot_weight_heatmaps, weight_matrix
from .partition_plot import plot_partition
from .tables import results_table, seeds_table, sweep_table

__all__ = ["plot_bars", "plot_curves", "plot_partition", "plot_sweep", "plot_matrix", "plot_weight_heatmaps", "results_table",
           "seeds_table", "sweep_table", "weight_matrix",
           "FeatureEmbedding", "classifier_update_similarity", "client_features", "cosine_pairs", "feature_distance",
           "held_classes", "local_models", "model_features", "plot_cosine_histograms", "plot_tsne", "received_head",
           "round_feature_statistics", "tsne_embedding", "verification_set"]
