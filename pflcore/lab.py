"""``pflcore lab``: JupyterLab in the project, the way a user or a container runs it.

- JupyterLab is this environment's (``<venv>/bin/jupyter``), started in the project root, so
  the file browser shows ``notebooks/`` and the kernel is the project's ``.venv``; as root (a
  container, many cloud notebooks) it adds ``--allow-root``, which Jupyter otherwise demands.
- No news pop-up: the setting ``fetchNews: "false"`` of ``@jupyterlab/apputils-extension:notification``
  is written as a default into the environment (``<venv>/share/jupyter/lab/settings/overrides.json``,
  JupyterLab's documented place for defaults), never into the user's home; a user can still
  change it in Settings.
- Running a notebook never dirties the clone: nbstripout is installed as the git filter for
  ``*.ipynb`` (attributes in the committed ``.gitattributes``, the filter command in the clone's
  ``.git/config``). Git then sees a notebook through ``nbstripout --keep-id``, which strips
  outputs, execution counts and Lab's run metadata and gives back exactly the committed form
  (``pflcore notebooks --tidy``). Git's ``status`` trusts a file's size before it runs a filter,
  so a saved notebook with outputs would still be listed as modified; a post-save hook of
  Jupyter's server (:func:`refresh_git_index`, set in ``<venv>/etc/jupyter/jupyter_server_config.json``) refreshes
  the index entry of a notebook whose stripped content is the committed one. Run All and an
  autosave then leave ``git status`` empty, and a real edit still shows. A pre-save hook
  (:func:`keep_python_version`) keeps the Python version a notebook records, so a kernel of
  another Python does not change an unedited notebook either.

``.ci/setup`` calls :func:`configure` (``pflcore lab --setup``); ``pflcore lab`` calls it too,
so a clone set up before the filter existed gets it on its first ``pflcore lab``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

#: JupyterLab defaults written into the environment: no news feed and no pop-up asking for it.
LAB_OVERRIDES = {"@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False}}


#: Jupyter server settings written into the environment (``jupyter lab`` from it reads them too).
SERVER_CONFIG = {"FileContentsManager": {"pre_save_hook": "pflcore.lab.keep_python_version",
                                         "post_save_hook": "pflcore.lab.refresh_git_index"}}


def server_config_path(prefix: str | Path = sys.prefix) -> Path:
    """The environment's Jupyter server config file (its ``.d`` folder only enables extensions)."""
    return Path(prefix) / "etc" / "jupyter" / "jupyter_server_config.json"


def overrides_path(prefix: str | Path = sys.prefix) -> Path:
    """Where JupyterLab of the environment at ``prefix`` reads its default settings."""
    return Path(prefix) / "share" / "jupyter" / "lab" / "settings" / "overrides.json"


def write_lab_overrides(prefix: str | Path = sys.prefix) -> Path:
    """Merge :data:`LAB_OVERRIDES` into the environment's ``overrides.json`` (other plugins'
    defaults kept; rewritten only when something changes); returns its path."""
    return _merge_json(overrides_path(prefix), LAB_OVERRIDES)


def write_server_config(prefix: str | Path = sys.prefix) -> Path:
    """Merge :data:`SERVER_CONFIG` into the environment's server config (other settings kept)."""
    return _merge_json(server_config_path(prefix), SERVER_CONFIG)


def _merge_json(path: Path, sections: dict) -> Path:
    """Set ``sections`` (``{section: {key: value}}``) in the JSON file at ``path``, keeping every
    other entry; written atomically, and only when something changes."""
    try:
        current = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    except ValueError:
        raise ValueError(f"{path} is not valid JSON; fix or delete it and run `pflcore lab --setup` again.") from None
    merged = {**current, **{name: {**current.get(name, {}), **values} for name, values in sections.items()}}
    if merged != current:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(merged, indent=2) + "\n", encoding="utf-8")
        tmp.replace(path)
    return path


def keep_python_version(model=None, path=None, contents_manager=None, **_) -> None:
    """Jupyter's pre-save hook: a notebook saved over one on disk keeps the Python version that
    file records (``metadata.language_info.version``). Lab writes the running kernel's version,
    so on any Python but the one the notebooks were committed with (3.11.2), an unedited notebook
    would change on save and git would list it; the version says nothing about the notebook."""
    content = (model or {}).get("content")
    if (model or {}).get("type") != "notebook" or not isinstance(content, dict) or contents_manager is None:
        return
    info = content.get("metadata", {}).get("language_info")
    if not isinstance(info, dict) or "version" not in info:
        return
    try:
        saved = json.loads((Path(contents_manager.root_dir) / str(path).strip("/")).read_text(encoding="utf-8"))
        version = saved["metadata"]["language_info"]["version"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):  # a new notebook, or no version on disk
        return
    if isinstance(version, str):
        info["version"] = version


def refresh_git_index(model=None, os_path=None, contents_manager=None, **_) -> threading.Thread | None:
    """Jupyter's post-save hook: :func:`refresh_notebook_entry` for the saved notebook, in a
    thread of its own (git and nbstripout take a second or two; the save and the kernels' messages
    never wait for them). Returns the thread, or None for a file that is not a notebook."""
    if not os_path or not str(os_path).endswith(".ipynb"):
        return None
    log = getattr(contents_manager, "log", None)

    def refresh() -> None:
        if refresh_notebook_entry(os_path) and log is not None:
            log.info("git sees no change in %s (only its outputs changed)", os_path)

    thread = threading.Thread(target=refresh, name="pflcore-git-refresh", daemon=True)
    thread.start()
    return thread


def refresh_notebook_entry(os_path: str | Path) -> bool:
    """After a notebook is saved: if its content through the git filter (nbstripout) is exactly
    the index's, refresh its index entry, so ``git status`` stops listing it (git otherwise trusts
    the file's new size and calls it modified without running the filter). Stages nothing: the
    blob is the same. A notebook with a real edit, an untracked one or a folder outside git is
    left alone; returns whether it refreshed."""
    folder, name = Path(os_path).parent, Path(os_path).name
    try:
        staged = _git(folder, "ls-files", "--stage", "--", name).stdout.split()
        if len(staged) < 2 or _git(folder, "config", "--get", "filter.nbstripout.clean").returncode != 0:
            return False
        cleaned = _git(folder, "hash-object", f"--path={name}", "--", name).stdout.strip()
        return cleaned == staged[1] and _git(folder, "update-index", "-q", "--", name).returncode == 0
    except OSError:  # no git: nothing to refresh
        return False


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)


def is_git_clone(root: Path) -> bool:
    """Whether ``root`` is the top of a git work tree (not a folder inside another repository)."""
    try:
        done = _git(root, "rev-parse", "--show-toplevel")
    except FileNotFoundError:  # no git on this machine
        return False
    return done.returncode == 0 and Path(done.stdout.strip()).resolve() == Path(root).resolve()


def install_notebook_filter(root: str | Path, python: str | Path = sys.executable) -> bool:
    """Install nbstripout as the clone's git filter for notebooks (idempotent); returns False
    when ``root`` is not a git clone. ``nbstripout --install`` writes the filter into
    ``.git/config`` (``.gitattributes`` already names it); the clean command then gets
    ``--keep-id``, since nbstripout otherwise renumbers cell ids and every committed notebook
    would look changed."""
    root = Path(root)
    if not is_git_clone(root):
        return False
    command = f'"{Path(python).as_posix()}" -m nbstripout --keep-id'
    if _git(root, "config", "--get", "filter.nbstripout.clean").stdout.strip() == command:
        return True
    done = subprocess.run([str(python), "-m", "nbstripout", "--install", "--attributes", str(root / ".gitattributes")],
                          cwd=root, capture_output=True, text=True)
    if done.returncode != 0:
        raise OSError(f"nbstripout --install failed in {root}: {(done.stderr or done.stdout).strip()}")
    for key, value in (("filter.nbstripout.clean", command), ("diff.ipynb.textconv", command + " -t")):
        _git(root, "config", key, value).check_returncode()
    return True


#: The kernel's start-up file in the environment (IPython reads ``<sys.prefix>/etc/ipython``).
KERNEL_CONFIG = Path("etc") / "ipython" / "ipython_kernel_config.py"
_KERNEL_MARK = "# pflcore: drop ipykernel's plain-TCP notice"
_KERNEL_FILTER = f"""{_KERNEL_MARK} (written by `pflcore lab --setup`).
# A kernel started by a manager that provisions no CurveZMQ keys (the `papermill` command, Lab)
# listens on 127.0.0.1 over plain TCP and says so at every start; that one notice is dropped,
# every other message of the kernel still shows. pflcore's own runs encrypt the connection
# instead (pflcore.notebooks._kernel_manager).
import logging as _logging


class _PlainTcpNotice(_logging.Filter):
    def filter(self, record):
        return not str(record.msg).startswith("Kernel is running over TCP without encryption")


_logging.getLogger("IPKernelApp").addFilter(_PlainTcpNotice())
"""


def kernel_config_path(prefix: str | Path = sys.prefix) -> Path:
    return Path(prefix) / KERNEL_CONFIG


def write_kernel_config(prefix: str | Path = sys.prefix) -> Path | None:
    """Write the kernel start-up file that drops ipykernel's plain-TCP notice (and nothing else)
    into the environment; a start-up file of the user's own there is left alone (returns None)."""
    path = kernel_config_path(prefix)
    if path.exists() and _KERNEL_MARK not in path.read_text(encoding="utf-8", errors="replace"):
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_KERNEL_FILTER, encoding="utf-8")
    return path


def configure(root: str | Path, prefix: str | Path = sys.prefix, log=print) -> None:
    """What ``.ci/setup`` and ``pflcore lab`` do before Lab starts: the no-news default, the
    post-save hook and the kernel's start-up file in the environment, the notebook git filter
    in the clone."""
    write_lab_overrides(prefix)
    write_server_config(prefix)
    write_kernel_config(prefix)
    if not install_notebook_filter(root):
        log(f"pflcore lab: {root} is not a git clone, so no git filter was installed (nothing to keep clean).")


def lab_command(root: str | Path, extra: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The JupyterLab command line ``pflcore lab`` runs: this environment's ``jupyter lab`` in
    ``root``, with ``--allow-root`` when run as root, then the user's own options."""
    command = [str(Path(sys.executable).with_name("jupyter")), "lab", f"--ServerApp.root_dir={Path(root)}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0 and "--allow-root" not in extra:
        command.append("--allow-root")
    return command + list(extra)


def start_lab(root: str | Path, extra: list[str] | tuple[str, ...] = ()) -> None:
    """Configure (:func:`configure`), then replace this process by JupyterLab in ``root``
    (Ctrl-C and Lab's own shutdown question work as with ``jupyter lab``)."""
    configure(root)
    command = lab_command(root, extra)
    if not Path(command[0]).exists():
        raise FileNotFoundError(f"JupyterLab is not installed in {sys.prefix}: run `bash .ci/setup` "
                                "(it installs the notebooks extra).")
    os.chdir(root)
    sys.stdout.flush()
    os.execv(command[0], command)
