"""Measured hotness: what a profiled program run saw of each function (`.perflsp/hot.json`).

`perflsp profile --run CMD` (or with `[tool.perflsp] profile-command`) records, while the
program runs, how often each function of the workspace was called and in how many of the
program's steps (a step: one `optimizer.step()`, or one call of the profiled function when the
program steps no optimizer). This is the strongest evidence of hotness there is, because it was
observed. The format is in `docs/hot-json.md`.

    measured = load_measured(workspace_root)        # None: no file, or an unusable one
    measured.counts("train.py", "Trainer.step")      # (calls, steps it ran in), or None
    measured.is_hot("train.py", "Trainer.step")      # True / False / None
    measured.reason("train.py", "Trainer.step")      # "measured: 40 calls in 40 steps"

Semantics:
- **hot**: the function ran in at least half of the recorded steps (`HOT_SHARE`): per-step code.
  The hot reason is `reason()`: "measured: 40 calls in 40 steps", or "measured: 20 calls, in
  20 of 40 steps" when it skipped some.
- **cold**: the run called it, but in fewer than half of the steps: one-off work (setup, model
  construction, checkpoint loading: 0 steps) or periodic work (logging every N steps).
- **unknown** (`is_hot` is None): the run never reached the function, or recorded fewer than
  `MIN_STEPS` steps (too few to tell per-step work from first-step initialisation). Static
  inference decides these.

Functions are named by their path relative to the workspace root (`/`-separated, as written in
the file) and Python's qualified name (`Class.method`); a nested function may be named either
`outer.<locals>.inner` (as Python does) or `outer.inner`. Reading never raises: a missing file is
None, a malformed one or one of another version is None with a warning in the log.
"""
from __future__ import annotations

import json
import logging
import posixpath
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any, Callable, Dict, Iterable, Mapping, Optional, Tuple, TypeVar, Union

from perflsp.hot_file import HOT_VERSION, MIN_STEPS, STEP_SOURCES, hot_path
from perflsp.safe_files import read_regular

log = logging.getLogger("perflsp")

MAX_HOT_BYTES = 64 * 1024 * 1024  # a recorded run of a large project is a few MB

HOT_SHARE = 0.5  # ran in at least this share of the recorded steps: per-step code

Key = Tuple[str, str]


@dataclass(frozen=True)
class Measured:
    """One recorded run: its step count and, per function, (calls, steps it ran in)."""

    steps: int
    step_source: str  # "optimizer.step" or "target" (calls of the profiled function)
    command: Optional[str]
    measured_at: Optional[str]
    functions: Mapping[Key, Tuple[int, int]] = field(repr=False)

    def counts(self, path: Union[str, PurePath], qualname: str) -> Optional[Tuple[int, int]]:
        """(calls, steps it ran in) for a function the run called, else None."""
        return self.functions.get(_key(path, qualname))

    def is_hot(self, path: Union[str, PurePath], qualname: str) -> Optional[bool]:
        """True: per-step code; False: the run called it, but not per step; None: no evidence."""
        found = self.counts(path, qualname)
        if found is None or self.steps < MIN_STEPS:
            return None
        return found[1] >= HOT_SHARE * self.steps

    def reason(self, path: Union[str, PurePath], qualname: str) -> Optional[str]:
        """'measured: 40 calls in 40 steps' for a hot function, else None."""
        if not self.is_hot(path, qualname):
            return None
        calls, steps = self.counts(path, qualname)  # type: ignore[misc]
        if steps == self.steps:
            return f"measured: {calls} calls in {steps} steps"
        return f"measured: {calls} calls, in {steps} of {self.steps} steps"


def load_measured(workspace_root: Path) -> Optional[Measured]:
    """The workspace's recorded run, or None (no file; a bad one is also logged as a warning)."""
    return read_record(hot_path(workspace_root), MAX_HOT_BYTES, _parse)


Parsed = TypeVar("Parsed")


def read_record(path: Path, limit: int, parse: Callable[[Any], Parsed]) -> Optional[Parsed]:
    """A record a run wrote under `.perflsp/` (hot.json, evidence.json), parsed; None when there
    is none, and when it cannot be read or parsed (logged as a warning: a bad record never fails a check)."""
    try:
        text = read_regular(path, limit).decode("utf-8")
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:  # NotRegularFile and UnicodeDecodeError included
        log.warning("perflsp: cannot read %s: %s", path, exc)
        return None
    try:
        return parse(json.loads(text))
    # json.JSONDecodeError is a ValueError; absurdly deep nesting; a field of the wrong type or missing
    except (ValueError, RecursionError, TypeError, KeyError) as exc:
        log.warning("perflsp: ignoring %s: %s", path, exc)
        return None


def record_steps(data: Any, version: int, step_sources: Tuple[str, ...], again: str) -> int:
    """The step count of a record's JSON, once its shape, version and step source are checked.
    `again`: how to write the record anew, which the warning about another version says."""
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    if data.get("version") != version:
        raise ValueError(f"version {data.get('version')!r}; this perflsp reads version {version}: {again}")
    steps = count(data, "steps")
    if data.get("step_source") not in step_sources:
        raise ValueError(f"step_source {data.get('step_source')!r}")
    return steps


def _parse(data: Any) -> Measured:
    steps = record_steps(data, HOT_VERSION, STEP_SOURCES, "profile the program again (`perflsp profile --run`)")
    entries = data.get("functions")
    if not isinstance(entries, list):
        raise ValueError("`functions` is not a list")
    functions: Dict[Key, Tuple[int, int]] = {}
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("file"), str) or not entry["file"] \
                or not isinstance(entry.get("qualname"), str) or not entry["qualname"]:
            raise ValueError(f"functions[{index}] needs a `file` and a `qualname`")
        calls, ran_in = count(entry, "calls"), count(entry, "steps")
        if ran_in > steps:
            raise ValueError(f"functions[{index}] ran in {ran_in} steps of {steps}")
        functions[_key(entry["file"], entry["qualname"])] = (calls, ran_in)
    return Measured(steps=steps, step_source=data["step_source"], command=text_field(data, "command"),
                    measured_at=text_field(data, "measured_at"), functions=functions)


def count(block: Dict[str, Any], name: str) -> int:
    value = block.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"`{name}` must be a non-negative integer, got {value!r}")
    return value


def text_field(block: Dict[str, Any], name: str) -> Optional[str]:
    value = block.get(name)
    return value if isinstance(value, str) else None


def _key(path: Union[str, PurePath], qualname: str) -> Key:
    relative = posixpath.normpath(PurePath(path).as_posix())
    return relative, qualname.replace(".<locals>", "")


Verdict = Tuple[bool, Optional[str]]  # (per step?, the hot reason when it is)


def verdicts_for(roots: Iterable[Path]) -> Optional[Callable[[str, str], Optional[Verdict]]]:
    """The recorded runs of these workspace roots as one lookup: for a file (any path under one of
    the roots) and a qualified name, the run's verdict, or None where no run says anything."""
    runs = [(root.resolve(), found) for root in {Path(r) for r in roots} if (found := load_measured(root)) is not None]
    if not runs:
        return None

    def verdict(path: str, qualname: str) -> Optional[Verdict]:
        resolved = Path(path).resolve()
        for root, run in runs:
            if root in resolved.parents:
                hot = run.is_hot(resolved.relative_to(root), qualname)
                return None if hot is None else (hot, run.reason(resolved.relative_to(root), qualname))
        return None

    return verdict
