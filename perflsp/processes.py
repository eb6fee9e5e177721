"""The process tree below a process, read from Linux's /proc (standard library only).

The runtime's reaper and the language server both need every process a profile started,
including those that left the process group (`start_new_session=True`): a tree walk finds them
where a group kill does not.
"""
from __future__ import annotations

import os
from typing import Dict, List


def descendants(pid: int) -> List[int]:
    """Every live process below `pid`, parents before their children; [] where there is no /proc."""
    children: Dict[int, List[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="utf-8", errors="replace") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z":  # a zombie has exited: only its parent's wait is missing
            children.setdefault(int(fields[1]), []).append(int(name))
    found: List[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(0), []):
            found.append(child)
            todo.append(child)
    return found
