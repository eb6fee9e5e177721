"""Editor settings and their merge with `[tool.perflsp]`.

Editor settings arrive as the `perflsp` section of `workspace/configuration` (per workspace
folder), in `didChangeConfiguration`, or in `initializationOptions`. Keys the server itself uses
are camelCase (`run`, `debounceMs`, ...); every other key is an engine setting and is handed to
`Settings.with_overrides` as the kebab-case key of `[tool.perflsp]` (`extendSelect` or
`extend-select`), so the config's own validation names a mistyped key.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Collection, Dict, List, Mapping, Optional, Tuple

EDITOR_ORIGIN = "editor settings"
RUN_MODES = ("onType", "onSave")
LOG_LEVELS = {"off": 100, "error": 40, "warning": 30, "info": 20, "debug": 10}


@dataclass(frozen=True)
class EditorSettings:
    run: str = "onType"  # lint while typing (debounced) or only on open and save
    debounce_ms: int = 150
    log_level: str = "info"
    workspace_diagnostics: bool = False  # check every file of the workspace, not only open ones
    interpreter: Tuple[str, ...] = ()  # the profiler's python (+ arguments); empty: venv, .venv, the server's
    profile_enabled: bool = True  # off in untrusted workspaces: profiling runs the user's code
    profile_timeout: Optional[float] = None  # seconds; None: the runtime's ([tool.perflsp] profile-timeout)
    profile_min_time: Optional[float] = None  # seconds of timing; None: the runtime's default (1 s)
    record_command: Optional[str] = None  # what "Record a run" runs; None: `[tool.perflsp] profile-command`
    record_steps: Optional[int] = None  # steps it records; None: `perflsp record`'s default
    overrides: Tuple[Tuple[str, Any], ...] = ()  # kebab-case `[tool.perflsp]` keys set in the editor
    problems: Tuple[str, ...] = field(default=(), compare=False)  # bad values found while reading

    @property
    def debounce_s(self) -> float:
        return self.debounce_ms / 1000.0

    def overrides_dict(self) -> Dict[str, Any]:
        return dict(self.overrides)


def _kebab(key: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", lambda m: "-" + m.group(1).lower(), key)


def section(raw: Any) -> Dict[str, Any]:
    """The `perflsp` settings out of whatever shape the client sent them in."""
    if not isinstance(raw, Mapping):
        return {}
    if isinstance(raw.get("perflsp"), Mapping):  # didChangeConfiguration: the whole settings tree
        raw = raw["perflsp"]
    if isinstance(raw.get("settings"), Mapping):  # initializationOptions = {settings = {...}}
        raw = raw["settings"]
    return dict(raw)


def parse(raw: Any) -> EditorSettings:
    """Editor settings from whatever the client sent; a bad value is reported and its default kept."""
    raw = section(raw)
    problems: List[str] = []
    values: Dict[str, Any] = {}
    overrides: Dict[str, Any] = {}
    for key, value in raw.items():
        if key == "run":
            if _one_of(value, RUN_MODES):
                values["run"] = value
            else:
                problems.append(f"{EDITOR_ORIGIN}: `run` must be one of {', '.join(RUN_MODES)}, got {value!r}")
        elif key == "debounceMs":
            if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 10_000:
                values["debounce_ms"] = int(value)
            else:
                problems.append(f"{EDITOR_ORIGIN}: `debounceMs` must be a number of milliseconds (0-10000), got {value!r}")
        elif key == "logLevel":
            if _one_of(value, LOG_LEVELS):
                values["log_level"] = value
            else:
                problems.append(f"{EDITOR_ORIGIN}: `logLevel` must be one of {', '.join(LOG_LEVELS)}, got {value!r}")
        elif key == "workspaceDiagnostics":
            if isinstance(value, bool):
                values["workspace_diagnostics"] = value
            else:
                problems.append(f"{EDITOR_ORIGIN}: `workspaceDiagnostics` must be true or false, got {value!r}")
        elif key == "interpreter":
            if isinstance(value, str) and value:
                values["interpreter"] = (value,)
            elif isinstance(value, list) and all(isinstance(v, str) for v in value):
                values["interpreter"] = tuple(value)
            elif value is not None:
                problems.append(f"{EDITOR_ORIGIN}: `interpreter` must be a list of strings "
                                f"(the python and its arguments), got {value!r}")
        elif key.split(".", 1)[0] in _TABLES:  # `profile` / `record`, whole or one key (`profile.timeout`)
            name, dot, inner = key.partition(".")
            parse_table, fields = _TABLES[name]
            table = {inner: value} if dot else value
            if isinstance(table, Mapping):
                parse_table(table, values, problems)
            elif table is not None:
                problems.append(f"{EDITOR_ORIGIN}: `{name}` must be a table ({fields}), got {value!r}")
        elif value is not None:  # VS Code sends null for settings the user left unset
            overrides[_kebab(key)] = value
    return EditorSettings(overrides=tuple(sorted(overrides.items(), key=lambda kv: kv[0])),
                          problems=tuple(problems), **values)


def _one_of(value: Any, names: Collection[str]) -> bool:
    # A list or an object is no name, and is unhashable: `[] in LOG_LEVELS` raised TypeError.
    return isinstance(value, str) and value in names


def _parse_profile(profile: Mapping[str, Any], values: Dict[str, Any], problems: List[str]) -> None:
    for key, value in profile.items():
        if value is None:
            continue
        if key == "enabled":
            if isinstance(value, bool):
                values["profile_enabled"] = value
            else:
                problems.append(f"{EDITOR_ORIGIN}: `profile.enabled` must be true or false, got {value!r}")
        elif key in ("timeout", "minTime"):
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
                values["profile_timeout" if key == "timeout" else "profile_min_time"] = float(value)
            else:
                problems.append(f"{EDITOR_ORIGIN}: `profile.{key}` must be a positive number of seconds, got {value!r}")
        else:
            problems.append(f"{EDITOR_ORIGIN}: unknown setting `profile.{key}` (known: enabled, timeout, minTime)")


def _parse_record(record: Mapping[str, Any], values: Dict[str, Any], problems: List[str]) -> None:
    for key, value in record.items():
        if value is None or value == "":
            continue
        if key == "command":
            if isinstance(value, str):
                values["record_command"] = value
            else:
                problems.append(f"{EDITOR_ORIGIN}: `record.command` must be a command line, got {value!r}")
        elif key == "steps":
            if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
                values["record_steps"] = value
            else:
                problems.append(f"{EDITOR_ORIGIN}: `record.steps` must be a whole number >= 1, got {value!r}")
        else:
            problems.append(f"{EDITOR_ORIGIN}: unknown setting `record.{key}` (known: command, steps)")


# Settings that are tables: their parser, and the keys named when the value is no table.
_TABLES: Dict[str, Tuple[Callable[[Mapping[str, Any], Dict[str, Any], List[str]], None], str]] = {
    "profile": (_parse_profile, "enabled, timeout, minTime"),
    "record": (_parse_record, "command, steps"),
}


@dataclass(frozen=True)
class Resolved:
    """The engine settings for one file, and the configuration error that forced a fallback."""

    settings: Any  # perflsp.config.Settings
    error: Optional[str] = None
    error_file: Optional[str] = None  # the config file the error is about (None: the editor settings)
    warnings: Tuple[str, ...] = ()  # about settings that work, but not as written (a removed rule's code)


def resolve(path: Path, editor: EditorSettings) -> Resolved:
    """`[tool.perflsp]` for `path` with the editor's overrides on top, validated against the rules.

    A bad configuration never stops linting: a bad config file is replaced by the defaults, bad
    editor overrides are left out, and the first error is returned to be shown once, with the
    warnings about the settings used.
    Runs in a worker thread (it stats and may read config files).
    """
    from dataclasses import replace

    from perflsp.config import ConfigError, Settings
    from perflsp.rules.registry import validate
    from perflsp.rules.removed import removed_warnings
    from perflsp.rules.runner import file_settings

    error: Optional[str] = None
    warnings: List[str] = []
    try:
        settings = file_settings(path)
        validate(settings)
        warnings += removed_warnings(settings)
    except ConfigError as exc:
        error = str(exc)
        settings = Settings(root=str(path.parent))
    overrides = editor.overrides_dict()
    if overrides:
        try:
            merged = settings.with_overrides(overrides, EDITOR_ORIGIN)
            # `validate` names `settings.source` as the origin: point it at the editor, since
            # the file alone was already checked.
            validate(replace(merged, source=EDITOR_ORIGIN))
            settings = merged
            # The editor's own codes: `merged` holds the file's too, which are the file's to answer for.
            warnings += removed_warnings(Settings(source=EDITOR_ORIGIN).with_overrides(overrides, EDITOR_ORIGIN))
        except ConfigError as exc:
            error = error or str(exc)
    return Resolved(settings, error, _error_file(error) if error else None, tuple(warnings))


def _error_file(message: str) -> Optional[str]:
    # ConfigError messages start with their origin ("/path/pyproject.toml: unknown key ..."),
    # which is a file unless the editor settings were at fault.
    origin = message.split(": ", 1)[0]
    return origin if origin.endswith(".toml") and Path(origin).is_file() else None


def key_line(config_text: str, message: str) -> int:
    """The 0-based line of the key a config error names (`` `hot-functionz` ``), or 0."""
    match = re.search(r"`([^`]+)`", message)
    if not match:
        return 0
    key = match.group(1).split(".")[0]
    pattern = re.compile(rf"^\s*[\"']?{re.escape(key)}[\"']?\s*=")
    for number, line in enumerate(config_text.splitlines()):
        if pattern.match(line):
            return number
    return 0
