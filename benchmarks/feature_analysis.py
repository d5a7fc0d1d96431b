"""FedFA's feature analysis (section 3, appendix F.2) timed: features of 10 client models
on the verification set, t-SNE of about 2,000 points, and the cosine pairs.

    python benchmarks/feature_analysis.py [--per-class 20] [--repeats 3] [--out FILE]

Workload: Table 2's #C=2 Fashion-MNIST data (its pooled test data has every class), 10
``fedfa_cnn`` models (fresh: the cost does not depend on the weights), features on
``10 x per_class`` verification samples (10 per class: FedFA's set; 20: 2,000 t-SNE points
over 10 models, every class held). Prints medians of ``--repeats`` and writes a JSON record (default
``benchmarks/records/feature-analysis-<date>.json``). A benchmark, not a test: run it on a
quiet machine.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from pflcore.analysis import client_features, cosine_pairs, tsne_embedding, verification_set
from pflcore.engine import build_data
from pflcore.models import build_model
from pflcore.papers.fedfa import fedfa_config


def timed(fn, repeats: int) -> tuple[float, object]:
    """Median wall seconds of ``repeats`` calls of ``fn`` and its last result."""
    seconds, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        seconds.append(time.perf_counter() - t0)
    return statistics.median(seconds), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-class", type=int, default=20, help="verification samples per class")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    data = build_data(fedfa_config("fedavg", "fmnist", "c2", quiet=True))
    torch.manual_seed(0)
    models = {k: build_model("fedfa_cnn", data.in_channels, data.num_classes, data.image_size) for k in range(10)}
    record = {"when": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": platform.node(),
              "torch": torch.__version__, "threads": torch.get_num_threads(), "models": len(models), "steps": {}}
    for per_class in sorted({10, args.per_class}):
        x, y = verification_set(data, per_class=per_class, seed=0)
        t_feat, feats = timed(lambda: client_features(models, x), args.repeats)
        t_tsne, emb = timed(lambda: tsne_embedding(feats, y, random_state=0), args.repeats)
        t_cos, _ = timed(lambda: cosine_pairs(feats, y), args.repeats)
        record["steps"][f"per_class_{per_class}"] = {
            "samples": len(y), "tsne_points": len(emb.classes), "features_seconds": t_feat,
            "tsne_seconds": t_tsne, "cosine_seconds": t_cos}
        print(f"{len(y):5d} samples x {len(models)} models: features {t_feat:6.3f} s, t-SNE of "
              f"{len(emb.classes)} points {t_tsne:6.2f} s, cosine pairs {t_cos:6.3f} s")
    out = Path(args.out or f"benchmarks/records/feature-analysis-{datetime.now():%Y-%m-%dT%H%M}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"record: {out}")


if __name__ == "__main__":
    main()
