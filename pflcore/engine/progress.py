"""A run's round progress: a live bar while it runs, and, in notebooks, a line that reads
as finished work once the notebook is saved.

In a Jupyter kernel (JupyterLab, papermill) the bar is an ipywidgets progress bar whose
display also carries a plain-text line, rewritten every round. A saved notebook keeps no
widget state, so JupyterLab shows that line for an executed notebook ("fedavg fmnist:
200/200 rounds in 95 s, acc 88.20") instead of a bar frozen at "0% 0/3"; a live session
keeps the widget. Outside a kernel it is tqdm's text bar, cleared when the run ends, in a
terminal; into a file or a pipe (stderr not a terminal) it is one plain line per round, so a
log reads as lines rather than carriage-return frames.
"""
from __future__ import annotations

import time
from typing import Iterable, Iterator

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def in_notebook_kernel() -> bool:
    """Whether this process is a Jupyter kernel (ipykernel) that can display widgets."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None or type(shell).__name__ != "ZMQInteractiveShell":
        return False
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return True


def progress_line(desc: str, done: int, total: int, seconds: float, postfix: dict[str, str],
                  state: str = "") -> str:
    """The plain-text line of a run's progress: ``"<desc>: 12/200 rounds in 35 s, acc 81.20"``,
    with ``state`` ("interrupted") appended when the run stopped early."""
    extra = "".join(f", {k} {v}" for k, v in postfix.items())
    tail = f" ({state})" if state else ""
    return f"{desc}: {done}/{total} rounds in {seconds:.0f} s{extra}{tail}"


def _stderr_is_terminal() -> bool:
    import sys

    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced by an object without isatty, or closed
        return False


class RoundProgress:
    """Iterate over ``rounds`` (a run's remaining round indices) showing progress out of
    ``total``, starting at ``initial`` rounds done; ``set_postfix`` adds accuracy and loss."""

    def __init__(self, rounds: Iterable[int], total: int, initial: int, desc: str, disable: bool = False):
        self.rounds, self.total, self.done, self.desc = rounds, int(total), int(initial), desc
        self.disable = disable
        self.postfix: dict[str, str] = {}
        self._bar = self._handle = self._widgets = None
        self._start = time.perf_counter()

    def set_postfix(self, **values: str) -> None:
        self.postfix.update({k: str(v) for k, v in values.items()})
        if self._bar is not None:
            self._bar.set_postfix(values)

    def __iter__(self) -> Iterator[int]:
        if self.disable:
            yield from self.rounds
            return
        if in_notebook_kernel():
            yield from self._notebook()
        elif _stderr_is_terminal():
            yield from self._terminal()
        else:
            yield from self._lines()

    def _lines(self) -> Iterator[int]:
        """One :func:`progress_line` per round on stderr (a log file, a pipe)."""
        import sys

        for r in self.rounds:
            yield r
            self.done += 1
            print(progress_line(self.desc, self.done, self.total, time.perf_counter() - self._start, self.postfix),
                  file=sys.stderr, flush=True)

    def _terminal(self) -> Iterator[int]:
        from tqdm import tqdm

        with tqdm(total=self.total, initial=self.done, desc=self.desc, unit="round", leave=False) as bar:
            self._bar = bar
            for r in self.rounds:
                yield r
                self.done += 1
                bar.update(1)
        self._bar = None

    def _notebook(self) -> Iterator[int]:
        import ipywidgets as widgets
        from IPython.display import display

        bar = widgets.IntProgress(value=self.done, min=0, max=max(self.total, 1), bar_style="info")
        label = widgets.HTML()
        box = widgets.HBox([widgets.HTML(self.desc), bar, label])
        self._widgets = (bar, label, box)
        self._handle = display(self._bundle(), raw=True, display_id=True)
        state = "interrupted"
        try:
            for r in self.rounds:
                yield r
                self.done += 1
                self._refresh()
            state = ""
        finally:
            bar.bar_style = "" if not state else "warning"
            self._refresh(state)

    def _bundle(self, state: str = "") -> dict:
        line = progress_line(self.desc, self.done, self.total, time.perf_counter() - self._start, self.postfix,
                             state)
        return {"text/plain": line,
                WIDGET_MIME: {"version_major": 2, "version_minor": 0, "model_id": self._widgets[2].model_id}}

    def _refresh(self, state: str = "") -> None:
        bar, label, _ = self._widgets
        bar.value = min(self.done, bar.max)
        label.value = progress_line("", self.done, self.total, time.perf_counter() - self._start, self.postfix,
                                    state).lstrip(": ")
        self._handle.update(self._bundle(state), raw=True)
