"""The images a gradient-inversion attack recovers beside the true ones (DLG, Zhu et al.,
NeurIPS 2019; FedCP appendix B, Table 9): per attacked method a row "reconstruction" and a
row "true image", labelled on the left, with the attack's PSNR."""
from __future__ import annotations

from typing import Mapping

from ..papers import display_name


def _image(tensor):
    """(C, H, W) in [0, 1] -> what imshow takes (H, W) or (H, W, 3)."""
    array = tensor.detach().float().cpu().permute(1, 2, 0).numpy()
    return array[..., 0] if array.shape[-1] == 1 else array


def plot_reconstructions(reports: Mapping[str, object], images: int = 8, batch: int = 0, title: str | None = None):
    """``reports``: method -> a :class:`~pflcore.privacy.dlg.DLGReport`; shows the first
    ``images`` images of attacked batch ``batch``: for each method the reconstruction
    (top) and the client's true training image (bottom), each row named on the left with
    the method's display name and the PSNR (dB; higher: more leaked). Returns the figure."""
    import matplotlib.pyplot as plt

    rows = [(method, kind) for method in reports for kind in ("reconstruction", "true image")]
    fig, axes = plt.subplots(len(rows), images, figsize=(1.1 * images + 1.8, 1.25 * len(rows) + 0.6),
                             squeeze=False)
    for r, (method, kind) in enumerate(rows):
        report = reports[method]
        shown = (report.reconstructions if kind == "reconstruction" else report.targets)[batch]
        for k in range(images):
            ax = axes[r, k]
            ax.set_xticks([])
            ax.set_yticks([])
            for spine in ax.spines.values():
                spine.set_visible(False)
            if k < shown.shape[0]:
                ax.imshow(_image(shown[k]), cmap="gray", vmin=0, vmax=1)
        label = f"{display_name(method)}\n{kind}"
        if kind == "reconstruction":
            label += f"\n{report.psnr:.1f} dB"
        axes[r, 0].set_ylabel(label, rotation=0, ha="right", va="center", fontsize=8, labelpad=6)
    fig.suptitle(title or "DLG: reconstructed (top of each pair) and true training images", fontsize="medium")
    fig.tight_layout()
    return fig


__all__ = ["plot_reconstructions"]
