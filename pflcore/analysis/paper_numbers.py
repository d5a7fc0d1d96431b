"""Numbers the papers report, for side-by-side tables. Keys are pflcore method names.

FEDPAC_TABLE1[dataset][num_clients][method]: final test accuracy (%), FedPAC (Xu et al.,
ICLR 2023) Table 1; 20 clients with full participation, 100 clients at rate 0.3.
"""
from __future__ import annotations

_T1_COLUMNS = [("emnist", 20), ("emnist", 100), ("fmnist", 20), ("fmnist", 100),
               ("cifar10", 20), ("cifar10", 100), ("cinic10", 20), ("cinic10", 100)]
_T1_ROWS = {
    "local": [73.85, 74.11, 85.68, 86.37, 65.43, 64.68, 63.19, 63.33],
    "fedavg": [71.85, 75.97, 85.28, 86.89, 70.05, 73.82, 58.38, 62.52],
    "fedavg_ft": [84.56, 87.37, 90.47, 91.53, 76.56, 79.34, 69.38, 74.44],
    "fedper": [75.91, 77.06, 87.43, 87.88, 68.37, 72.26, 63.47, 66.26],
    "lg_fedavg": [74.76, 75.81, 85.66, 86.28, 65.19, 65.38, 63.75, 63.93],
    "fedrep": [75.31, 75.60, 88.25, 88.54, 71.36, 72.58, 66.67, 66.96],
    "fedbabu": [83.52, 85.59, 89.68, 91.38, 76.46, 78.39, 70.58, 74.67],
    "fedrod": [81.94, 84.57, 90.11, 91.61, 77.16, 81.97, 71.82, 75.20],
    "knn_per": [80.21, 83.15, 90.02, 90.93, 76.73, 80.47, 69.98, 74.23],
    "apfl": [83.22, 84.95, 89.45, 90.88, 74.39, 77.32, 68.78, 73.45],
    "pfedme": [83.28, 84.89, 89.76, 89.85, 68.81, 69.85, 63.37, 65.31],
    "ditto": [84.21, 86.61, 90.43, 91.08, 77.02, 80.09, 70.14, 74.25],
    "fedfomo": [83.95, 85.63, 88.95, 90.19, 73.33, 76.21, 66.68, 70.22],
    "pfedhn": [80.35, 78.16, 88.36, 87.93, 76.95, 79.39, 71.59, 70.85],
    "fedpac": [86.46, 89.88, 91.83, 92.72, 81.13, 83.36, 74.96, 77.36],
}

FEDPAC_TABLE1: dict[str, dict[int, dict[str, float]]] = {}
for _col, (_dataset, _clients) in enumerate(_T1_COLUMNS):
    FEDPAC_TABLE1.setdefault(_dataset, {})[_clients] = {m: v[_col] for m, v in _T1_ROWS.items()}

FEDPAC_T1_METHODS = tuple(_T1_ROWS)
