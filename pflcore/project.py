"""Where a pflcore project is: the folder holding ``notebooks/`` and ``params/``, and the
paths notebooks write to under it."""
from __future__ import annotations

from pathlib import Path


def is_project(folder: str | Path) -> bool:
    """Whether ``folder`` itself is a pflcore project (it holds ``notebooks/`` and ``params/``)."""
    return (Path(folder) / "notebooks").is_dir() and (Path(folder) / "params").is_dir()


def project_root(start: str | Path | None = None) -> Path:
    """The nearest folder at or above ``start`` (default: cwd) holding ``notebooks/`` and ``params/``."""
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if is_project(folder):
            return folder
    raise FileNotFoundError(f"no pflcore project (a folder with notebooks/ and params/) at or above {here}.")


def project_path(path: str | Path, start: str | Path | None = None) -> Path:
    """Where a notebook's relative output path (``results/...``, ``figures/...``) points,
    without changing the working directory: under the project root when the kernel runs
    inside a pflcore project (JupyterLab starts it in the notebook's folder,
    ``pflcore notebooks`` in the project), else under the working directory (a notebook
    copied elsewhere). Absolute paths are returned as they are."""
    path = Path(path).expanduser()
    if path.is_absolute():
        return path
    try:
        return project_root(start) / path
    except FileNotFoundError:
        return Path(start or Path.cwd()).resolve() / path
