"""The papers' experimental settings as configs, so notebooks and scripts share one source.

``fedpac_config`` encodes FedPAC section 6.1 and appendix B: 20 clients with full
participation or 100 clients at rate 0.3 with full participation in the last round;
600 training samples per client (EMNIST 1000, batch 100), s = 20%, E = 5, 200 rounds,
SGD momentum 0.5, weight decay 5e-4, lr 0.01 (FMNIST/EMNIST) or 0.02 (CIFAR/CINIC).
"""
from __future__ import annotations

from typing import Any

from .config import ExperimentConfig

FEDPAC_LR = {"fmnist": 0.01, "emnist": 0.01, "mnist": 0.01, "cifar10": 0.02, "cinic10": 0.02, "cifar100": 0.02}


def fedpac_config(method: str, dataset: str = "fmnist", num_clients: int = 20, **changes: Any) -> ExperimentConfig:
    """A run in FedPAC's setting for ``dataset`` and ``num_clients``; ``changes`` override
    any field (``partition`` entries are merged into the default partition)."""
    emnist = dataset == "emnist"
    values: dict[str, Any] = dict(
        method=method, dataset=dataset, model="fedpac_cnn", num_clients=num_clients, rounds=200,
        local_epochs=5, batch_size=100 if emnist else 50, lr=FEDPAC_LR.get(dataset, 0.01),
        momentum=0.5, weight_decay=5e-4, eval_every=10,
        participation=1.0 if num_clients <= 20 else 0.3, full_last_round=num_clients > 20,
        partition={"kind": "dominant", "s": 0.2, "samples_per_client": 1000 if emnist else 600},
    )
    partition = changes.pop("partition", None)
    if partition:
        values["partition"] = partition if "kind" in partition and partition["kind"] != "dominant" \
            else {**values["partition"], **partition}
    values.update(changes)
    return ExperimentConfig.from_dict(values)


#: FedPAC Table 2's ablation: method_params for each row ("Both" is FedPAC itself).
FEDPAC_ABLATION = {
    "None": {"feature_alignment": False, "classifier_collab": False},
    "w FA": {"feature_alignment": True, "classifier_collab": False},
    "w CC": {"feature_alignment": False, "classifier_collab": True},
    "Both": {},
}
