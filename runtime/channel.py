"""Messages from the profiling process to its supervisor: JSON lines appended to a file.

A file (not a pipe) because the supervisor must keep reading it after killing a hung child, a
partly written last line is simply not consumed yet, and the same code works on every OS.
Progress is rate-limited so a fast timing loop does not spend its time reporting.
"""
from __future__ import annotations

import json
import os
import time
from typing import Any, Dict, IO, List, Optional

PROGRESS_INTERVAL_S = 0.1


class Reporter:
    """The child's side: `phase()` on each step, `progress()` inside loops."""

    def __init__(self, path: Optional[str]):
        self._handle: Optional[IO[str]] = open(path, "a", encoding="utf-8") if path else None
        self._last_progress = 0.0
        self.phase_name = "start"

    def _emit(self, message: Dict[str, Any]) -> None:
        if self._handle is None:
            return
        self._handle.write(json.dumps(message) + "\n")
        self._handle.flush()

    def phase(self, name: str, detail: str = "") -> None:
        self.phase_name = name
        self._emit({"event": "phase", "phase": name, "detail": detail, "t": time.time()})

    def progress(self, done: int, total: Optional[int], unit: str = "calls", force: bool = False,
                 fraction: Optional[float] = None) -> None:
        """`done` of `total` units; `fraction` (0..1) when the end is a time, not a count."""
        now = time.monotonic()
        if not force and now - self._last_progress < PROGRESS_INTERVAL_S:
            return
        self._last_progress = now
        if fraction is None and total:
            fraction = done / total
        self._emit({"event": "progress", "phase": self.phase_name, "done": done, "total": total, "unit": unit,
                    "fraction": fraction})

    def note(self, message: str) -> None:
        self._emit({"event": "note", "message": message})

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


class NullReporter(Reporter):
    """For in-process use (tests, the API): reports nothing."""

    def __init__(self) -> None:
        super().__init__(None)


class Tail:
    """The supervisor's side: the complete lines appended since the last read."""

    def __init__(self, path: str):
        self._path = path
        self._offset = 0
        self._pending = b""

    def read(self) -> List[Dict[str, Any]]:
        try:
            with open(self._path, "rb") as handle:
                handle.seek(self._offset)
                chunk = handle.read()
        except OSError:
            return []
        self._offset += len(chunk)
        data = self._pending + chunk
        *lines, self._pending = data.split(b"\n")
        messages = []
        for line in lines:
            try:
                messages.append(json.loads(line))
            except ValueError:
                continue  # not ours (cannot happen unless the file was tampered with)
        return messages


def ensure_file(path: str) -> None:
    with open(path, "a", encoding="utf-8"):
        pass
    os.chmod(path, 0o600)
