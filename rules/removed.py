"""The rules that were removed: the one place that knows them.

Configuration that names one keeps working, as in Ruff: it draws a warning, not an error, so
upgrading perflsp breaks no project's configuration. A `# noqa` that names one needs nothing: it
names a code no finding has. The codes are never given to a new rule (the registry refuses).
This module imports no rule, so that `perflsp check` can warn without loading the engine.
"""
from __future__ import annotations

from typing import List, NamedTuple, Optional

from perflsp.config import Settings


class Removed(NamedTuple):
    code: str
    name: str
    why: str
    removed_in: str  # the version it went in, and the date


REMOVED = (
    Removed("PFL303", "contiguous-then-view",
            "its advice, `x.reshape(shape)` for `x.contiguous().view(shape)`, saved no copy on real code: "
            "after a permute `.reshape()` must copy too, and on a contiguous tensor neither copies (all 46 "
            "of its findings judged by hand in real repositories, bench/realworld/, were false)",
            "0.1.0 (2026-12-02)"),
)


def removed_rule(code: str) -> Optional[Removed]:
    return next((r for r in REMOVED if r.code == code.upper()), None)


def removed_warnings(settings: Settings) -> List[str]:
    """A warning for each code of a removed rule that `settings` name, from `settings.source` (a
    config file, or what the caller put there: the command line, the editor)."""
    origin = settings.source or "settings"
    warnings = []
    for key, code in settings.named_codes():
        removed = removed_rule(code)
        if removed is not None:
            warnings.append(f"{origin}: `{key}` names {removed.code} ({removed.name}), which was removed in "
                            f"{removed.removed_in} because {removed.why}. Naming it has no effect: remove it")
    return warnings
