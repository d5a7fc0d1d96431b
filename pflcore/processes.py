"""Live processes on Linux, read from /proc: what a run started, so that all of it can be
stopped (a papermill kernel or a Flower node runs in a session of its own, so its process
group is not enough)."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence


def live_processes() -> list[tuple[int, int, int]]:
    """(pid, ppid, pgid) of every live, non-zombie process."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # state, ppid, pgrp, ...
        if fields[0] not in ("Z", "X"):
            out.append((int(entry.name), int(fields[1]), int(fields[2])))
    return out


def is_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (not a zombie)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rindex(")") + 2] not in ("Z", "X")


def process_tree(roots: Sequence[int]) -> list[int]:
    """``roots`` and all their live descendants, parents first."""
    children: dict[int, list[int]] = {}
    for pid, ppid, _pgid in live_processes():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], [r for r in roots if is_alive(r)]
    while todo:
        pid = todo.pop(0)
        if pid not in out:
            out.append(pid)
            todo.extend(children.get(pid, []))
    return out

