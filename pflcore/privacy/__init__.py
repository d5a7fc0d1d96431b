"""Privacy evaluation: the DLG attack scored in PSNR (FedCP appendix B, Table 9;
Zhu et al., NeurIPS 2019)."""
from .dlg import (DLGReport, DLGResult, body_tensors, body_update, dlg_psnr, dlg_reconstruct, psnr,
                  simulation_dlg_psnr)

__all__ = ["DLGReport", "DLGResult", "body_tensors", "body_update", "dlg_psnr", "dlg_reconstruct", "psnr",
           "simulation_dlg_psnr"]
