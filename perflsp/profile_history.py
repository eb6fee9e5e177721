"""The last few results of each profiled function, kept beside its result file.

`<workspace>/.perflsp/profiles/history/<module>.<qualname>.json` holds `{"format": 1, "results":
[...]}`, oldest first, at most `LIMIT` successful results. It is what the re-measure loop compares
a new result with (`perflsp.comparison`), and a record a person can read back. Written atomically
like the result itself (`write_json_atomic`). A history file that cannot be used (not JSON, another
shape or format) is moved aside as `<name>.damaged-<time>` with one warning naming both paths, so
its content is never lost, and a new history starts. Standard library only.
"""
from __future__ import annotations

import datetime
import json
import os
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from perflsp.profile_result import MAX_RESULT_BYTES, write_json_atomic
from perflsp.safe_files import LeavesFolder, ensure_inside, read_regular

FORMAT = 1
LIMIT = 10
FOLDER = "history"


def history_path(result_file: os.PathLike | str) -> Path:
    """The history of the function whose result lives at `result_file`."""
    result_file = Path(result_file)
    return result_file.parent / FOLDER / result_file.name


@dataclass
class History:
    path: Path
    results: List[Dict[str, Any]] = field(default_factory=list)  # oldest first
    warning: Optional[str] = None
    writable: bool = True  # False: a damaged file could not be moved aside; never overwrite it
    inside: Optional[Path] = None  # the workspace the history must stay in

    @property
    def previous(self) -> Optional[Dict[str, Any]]:
        return self.results[-1] if self.results else None

    def append(self, result: Dict[str, Any]) -> Optional[Path]:
        """Write the history with `result` added, keeping the last LIMIT (None: not writable)."""
        if not self.writable:
            return None
        self.results = (self.results + [result])[-LIMIT:]
        return write_json_atomic(self.path, {"format": FORMAT, "results": self.results}, inside=self.inside)


def load(path: Path, inside: Path) -> History:
    """A missing file is an empty history; a damaged one is moved aside (see the module's
    docstring) and reads as empty, with a warning. A history that a symbolic link leads out of the
    workspace `inside` is neither read nor written."""
    try:
        ensure_inside(path, inside)
    except LeavesFolder as exc:
        return History(path, warning=f"no profile history is kept: {exc}", writable=False)
    history = _read(path)
    history.inside = inside
    return history


def _read(path: Path) -> History:
    try:
        text = read_regular(path, MAX_RESULT_BYTES).decode("utf-8")
    except (FileNotFoundError, NotADirectoryError):  # none yet, or a file where one of its folders goes
        return History(path)
    except (OSError, ValueError) as exc:  # NotRegularFile and UnicodeDecodeError included
        return _set_aside(path, f"cannot be read ({exc})")
    try:
        data = json.loads(text)
    except RecursionError:
        return _set_aside(path, "is nested too deeply")
    except ValueError as exc:
        return _set_aside(path, f"is not JSON ({exc})")
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        return _set_aside(path, f"is not a format-{FORMAT} history (found {found!r})")
    results = data.get("results")
    if not isinstance(results, list) or not all(isinstance(r, dict) for r in results):
        return _set_aside(path, "has no list of result objects under `results`")
    return History(path, results)


def _set_aside(path: Path, problem: str) -> History:
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S")
    aside = path.with_name(f"{path.name}.damaged-{stamp}")
    try:
        os.replace(path, aside)
    except OSError as exc:
        return History(path, warning=f"profile history {path} {problem}; it could not be moved aside ({exc}), so "
                                     "it is left as it is and no history is kept this time", writable=False)
    return History(path, warning=f"profile history {path} {problem}; kept as {aside.name}, a new history starts")
