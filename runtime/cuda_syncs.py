"""On CUDA, every sync the recorded steps make, on the line of workspace code that made it.

`torch.cuda.set_sync_debug_mode("warn")` makes torch warn at each synchronizing call (blocking
copies, `.item()`, data-dependent shapes), also those made inside libraries where no host read
of ours is seen. The mode is process-global and warns on every call, so it is armed only after
the warm-up, and each warning is counted on the innermost workspace line of the stack that
raised it (the warning's own filename is wherever torch chose). A sync inside a read that
`host_reads` counts already (with its stall time) is not counted twice.
"""
from __future__ import annotations

import sys
import warnings
from typing import Any, Callable, Optional

SYNC_WARNING = r".*synchroniz"  # "called a synchronizing CUDA operation"


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _set_mode(level: str) -> None:
    import torch

    torch.cuda.set_sync_debug_mode(level)


class SyncWatch:
    """A context manager around the program; `arm()` after the warm-up."""

    def __init__(self, mode: Any, available: Callable[[], bool] = _cuda_available,
                 set_mode: Callable[[str], None] = _set_mode):
        self.mode = mode  # host_reads.HostReadMode: attribution and the tally
        self.available = available
        self.set_mode = set_mode
        self._caught: Optional[warnings.catch_warnings] = None
        self._show: Any = None

    def __enter__(self) -> "SyncWatch":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.disarm()

    def arm(self) -> None:
        if self._caught is not None or not self.available():
            return
        self._caught = warnings.catch_warnings()
        self._caught.__enter__()
        warnings.filterwarnings("always", message=SYNC_WARNING, category=UserWarning)
        self._show = warnings.showwarning
        warnings.showwarning = self._on_warning
        self.set_mode("warn")

    def disarm(self) -> None:
        if self._caught is None:
            return
        self.set_mode("default")
        self._caught.__exit__(None, None, None)
        self._caught = None

    def _on_warning(self, message: Any, category: Any, filename: str, lineno: int, file: Any = None,
                    line: Any = None) -> None:
        if not (issubclass(category, UserWarning) and "synchroniz" in str(message)):
            self._show(message, category, filename, lineno, file, line)
            return
        if self.mode.reading:
            return
        where = self.mode.where(sys._getframe(1))
        if where is not None:
            self.mode.tally.add(where, "sync")
