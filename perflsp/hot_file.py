"""`.perflsp/hot.json`: which functions a profiled program run called on each step.

The contract between the runtime, which writes the file while `perflsp profile --run` runs the
program, and the static engine, which reads it (`perflsp.rules.measured`). Standard library only:
both sides import it. The format is documented in `docs/hot-json.md`.
"""
from __future__ import annotations

import os
from pathlib import Path

HOT_VERSION = 1
HOT_FILE = Path(".perflsp") / "hot.json"

# Fewer steps than this cannot tell per-step work from work done on the first step only (lazy
# initialisation): the writer prefers the source of steps that reached it, the reader judges
# nothing below it.
MIN_STEPS = 3

STEP_SOURCES = ("optimizer.step", "target")


def hot_path(workspace: os.PathLike | str) -> Path:
    return Path(workspace) / HOT_FILE
