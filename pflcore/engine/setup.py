"""What a run builds from its config before any round: the initial model and the clients'
training settings (shared by the simulation and every client worker)."""
from __future__ import annotations

import torch

from ..config import ExperimentConfig
from ..data.federated import FederatedData
from ..models import SplitModel, build_model
from ..training import INIT_KEY, TrainSettings, derive_seed


def initial_model(config: ExperimentConfig, data: FederatedData) -> SplitModel:
    """The model architecture with weights drawn from the run's seed."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(config.seed, INIT_KEY))
        model = build_model(config.model, data.in_channels, data.num_classes, data.image_size,
                            vocab_size=data.vocab_size)  # vocab_size: a token dataset's (None for images)
    return model.to(config.device, memory_format=torch.channels_last)


def train_settings(config: ExperimentConfig) -> TrainSettings:
    """The clients' local-training settings of a run (round 0's: a client of round t
    trains with ``settings.for_round(t)``, the lr decayed by ``config.lr_decay ** t``)."""
    return TrainSettings(config.local_epochs, config.batch_size, config.lr, config.momentum,
                         config.weight_decay, precision=config.precision or "float32", lr_decay=config.lr_decay)


__all__ = ["initial_model", "train_settings"]
