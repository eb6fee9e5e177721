"""`[tool.perflsp]` configuration: discovery, validation and the resolved `Settings`.

Config lives in `pyproject.toml` under `[tool.perflsp]` or in `perflsp.toml` (top level), found
by walking up from each checked file. Unknown keys and bad values raise `ConfigError` naming the
key and the file, so a typo never silently disables a rule.
"""
from __future__ import annotations

import difflib
import fnmatch
import hashlib
import json
import os
import re
import sys
import urllib.parse
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python < 3.11 only
    import tomli as tomllib

from perflsp.findings import SEVERITIES

# Entry points come from the framework table (perflsp.rules.hot_table); `hot-functions` adds the
# project's own: a name (`train_step`) or `Class.method`, which covers subclasses too.
DEFAULT_HOT_FUNCTIONS: Tuple[str, ...] = ()
CODE_PATTERN = re.compile(r"^PFL(\d{0,3})$")


class ConfigError(Exception):
    """A configuration problem the user must fix; the message names the key and the file."""


@dataclass(frozen=True)
class Settings:
    select: Tuple[str, ...] = ("PFL",)
    extend_select: Tuple[str, ...] = ()
    ignore: Tuple[str, ...] = ()
    per_file_ignores: Tuple[Tuple[str, Tuple[str, ...]], ...] = ()
    exclude: Tuple[str, ...] = ()
    extend_exclude: Tuple[str, ...] = ()
    hot_functions: Tuple[str, ...] = DEFAULT_HOT_FUNCTIONS
    report_cold: Tuple[str, ...] = ()  # code prefixes reported outside hot code too
    severity: Tuple[Tuple[str, str], ...] = ()
    rule_options: Tuple[Tuple[str, Tuple[Tuple[str, Any], ...]], ...] = ()
    preview: bool = False  # run the preview rules too (Ruff's preview mode)
    profile_command: Optional[str] = None
    profile_timeout: float = 300.0
    rule_docs_url: Optional[str] = None  # "https://…/{code}.html": where findings link to (none by default)
    record_step_function: Optional[str] = None  # `perflsp record`: a step is a call of this (file.py:func)
    root: Optional[str] = None  # folder that relative globs are matched against
    source: Optional[str] = None  # the file these settings came from

    def fingerprint(self) -> str:
        """A stable digest of everything that changes findings (used as a cache key)."""
        payload = json.dumps(
            [self.select, self.extend_select, self.ignore, self.per_file_ignores, self.hot_functions,
             self.report_cold, self.severity, self.rule_options, self.preview, self.rule_docs_url],
            sort_keys=True, default=str,
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def is_enabled(self, code: str, path: Optional[str] = None) -> bool:
        selected = _best_prefix(code, self.select + self.extend_select)
        ignored = _best_prefix(code, self.ignore + self._file_ignores(path))
        return selected >= 0 and selected > ignored

    def reports_cold(self, code: str) -> bool:
        return _best_prefix(code, self.report_cold) >= 0

    def severity_of(self, code: str) -> Optional[str]:
        best, chosen = -1, None
        for prefix, level in self.severity:
            if code.startswith(prefix) and len(prefix) > best:
                best, chosen = len(prefix), level
        return chosen

    def options_for(self, code: str) -> Dict[str, Any]:
        return dict(dict(self.rule_options).get(code, ()))

    def named_codes(self) -> List[Tuple[str, str]]:
        """(key, code or prefix) for each rule code these settings name, `rules.<code>` tables included."""
        lists = {"select": self.select, "extend-select": self.extend_select, "ignore": self.ignore,
                 "report-cold": self.report_cold}
        lists.update({f"per-file-ignores.{glob}": codes for glob, codes in self.per_file_ignores})
        lists["severity"] = tuple(code for code, _ in self.severity)
        lists["rules"] = tuple(code for code, _ in self.rule_options)
        return [(f"rules.{code}" if key == "rules" else key, code) for key, codes in lists.items() for code in codes]

    def is_excluded(self, path: str) -> bool:
        patterns = self.exclude + self.extend_exclude
        return bool(patterns) and _matches_any(path, patterns, self.root)  # matching resolves the path

    def _file_ignores(self, path: Optional[str]) -> Tuple[str, ...]:
        if not path:
            return ()
        out: Tuple[str, ...] = ()
        for pattern, codes in self.per_file_ignores:
            if _matches_any(path, (pattern,), self.root):
                out += codes
        return out

    def with_overrides(self, overrides: Mapping[str, Any], origin: str) -> "Settings":
        """Settings with `overrides` (kebab-case keys, as in the file) applied on top."""
        return replace(self, **_validate(dict(overrides), origin))


def _best_prefix(code: str, prefixes: Iterable[str]) -> int:
    """Length of the longest prefix of `code` in `prefixes` (Ruff's specificity rule), or -1."""
    best = -1
    for prefix in prefixes:
        if code.startswith(prefix) and len(prefix) > best:
            best = len(prefix)
    return best


def _matches_any(path: str, patterns: Iterable[str], root: Optional[str]) -> bool:
    p = Path(path)
    candidates = {p.as_posix(), p.name}
    if root:
        try:
            candidates.add(p.resolve().relative_to(Path(root).resolve()).as_posix())
        except ValueError:
            pass
    for pattern in patterns:
        pat = pattern.rstrip("/")
        for cand in candidates:
            if fnmatch.fnmatch(cand, pat) or fnmatch.fnmatch(cand, pat + "/*"):
                return True
            parts = cand.split("/")
            if any(fnmatch.fnmatch("/".join(parts[: i + 1]), pat) for i in range(len(parts))):
                return True
    return False


# --- validation -------------------------------------------------------------------------------

def _codes(value: Any, key: str, origin: str) -> Tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{origin}: `{key}` must be a list of rule codes such as [\"PFL101\", \"PFL2\"]")
    for code in value:
        if not CODE_PATTERN.match(code):
            raise ConfigError(f"{origin}: `{key}` has {code!r}, which is not a rule code or prefix (PFL, PFL1, PFL101)")
    return tuple(value)


def _strings(value: Any, key: str, origin: str) -> Tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{origin}: `{key}` must be a list of strings")
    return tuple(value)


def _validate(raw: Dict[str, Any], origin: str) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for key, value in raw.items():
        if key not in _KEYS:
            hint = difflib.get_close_matches(key, list(_KEYS), n=1)
            extra = f" (did you mean `{hint[0]}`?)" if hint else ""
            raise ConfigError(f"{origin}: unknown key `{key}` in [tool.perflsp]{extra}; known keys: {', '.join(sorted(_KEYS))}")
        attr, check = _KEYS[key]
        out[attr] = check(value, key, origin)
    return out


def _per_file_ignores(value: Any, key: str, origin: str) -> Tuple[Tuple[str, Tuple[str, ...]], ...]:
    if not isinstance(value, dict):
        raise ConfigError(f"{origin}: `{key}` must be a table of glob = [codes]")
    return tuple((glob, _codes(codes, f"{key}.{glob}", origin)) for glob, codes in value.items())


def _report_cold(value: Any, key: str, origin: str) -> Tuple[str, ...]:
    if isinstance(value, bool):
        return ("PFL",) if value else ()
    return _codes(value, key, origin)


def _severity(value: Any, key: str, origin: str) -> Tuple[Tuple[str, str], ...]:
    if not isinstance(value, dict):
        raise ConfigError(f"{origin}: `{key}` must be a table of code = \"error\"|\"warning\"|\"info\"|\"hint\"")
    out = []
    for code, level in value.items():
        _codes([code], f"{key}.{code}", origin)
        if level not in SEVERITIES:
            raise ConfigError(f"{origin}: `{key}.{code}` is {level!r}; expected one of {', '.join(SEVERITIES)}")
        out.append((code, level))
    return tuple(out)


def _rule_options(value: Any, key: str, origin: str) -> Tuple[Tuple[str, Tuple[Tuple[str, Any], ...]], ...]:
    # Option names and types are checked against each rule's declaration by the engine, which
    # knows the rules; here only the shape is checked so the core stays free of the engine.
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
        raise ConfigError(f"{origin}: `{key}` must hold one table per rule, e.g. [tool.perflsp.rules.PFL501]")
    for code in value:
        if not re.match(r"^PFL\d{3}$", code):
            raise ConfigError(f"{origin}: `{key}.{code}` is not a rule code (expected e.g. PFL501)")
    return tuple((code, tuple(sorted(opts.items()))) for code, opts in sorted(value.items()))


def _bool(value: Any, key: str, origin: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{origin}: `{key}` must be true or false, got {value!r}")
    return value


def _optional_str(value: Any, key: str, origin: str) -> Optional[str]:
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"{origin}: `{key}` must be a string")
    return value


def _positive_number(value: Any, key: str, origin: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ConfigError(f"{origin}: `{key}` must be a positive number of seconds")
    return float(value)


def _url_template(value: Any, key: str, origin: str) -> str:
    # The address goes into SARIF's `helpUri` and the editor's diagnostics, which need absolute URIs.
    if not isinstance(value, str) or "{code}" not in value:
        raise ConfigError(f"{origin}: `{key}` must be a string with `{{code}}` where the rule code goes, "
                          "e.g. \"https://docs.example.org/perflsp/rules/{code}.html\"")
    try:
        address = urllib.parse.urlsplit(value.format(code="PFL101"))
    except (KeyError, IndexError, ValueError):  # other braces in it
        raise ConfigError(f"{origin}: `{key}` may hold no braces but `{{code}}`, got {value!r}") from None
    if not address.scheme or not (address.netloc or address.scheme == "file"):
        raise ConfigError(f"{origin}: `{key}` must be an absolute URL (https://… or file://…), got {value!r}")
    return value


_KEYS = {
    "select": ("select", _codes),
    "extend-select": ("extend_select", _codes),
    "ignore": ("ignore", _codes),
    "per-file-ignores": ("per_file_ignores", _per_file_ignores),
    "exclude": ("exclude", _strings),
    "extend-exclude": ("extend_exclude", _strings),
    "hot-functions": ("hot_functions", _strings),
    "report-cold": ("report_cold", _report_cold),
    "severity": ("severity", _severity),
    "rules": ("rule_options", _rule_options),
    "preview": ("preview", _bool),
    "profile-command": ("profile_command", _optional_str),
    "profile-timeout": ("profile_timeout", _positive_number),
    "rule-docs-url": ("rule_docs_url", _url_template),
    "record-step-function": ("record_step_function", _optional_str),
}


# --- discovery --------------------------------------------------------------------------------

def _read_toml(path: Path) -> Dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:  # tomllib reads each nested array or inline table by a call of its own
        raise ConfigError(f"{path}: not valid TOML: nested too deeply to read") from None
    except UnicodeDecodeError as exc:  # TOML is UTF-8
        raise ConfigError(f"{path}: not valid TOML: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def config_file_for(directory: Path) -> Optional[Path]:
    """The nearest `perflsp.toml` or `pyproject.toml` with a `[tool.perflsp]` table above `directory`."""
    for folder in (directory, *directory.parents):
        candidate = folder / "perflsp.toml"
        if candidate.is_file():
            return candidate
        candidate = folder / "pyproject.toml"
        if candidate.is_file() and "perflsp" in _read_toml(candidate).get("tool", {}):
            return candidate
    return None


def load_file(path: Path) -> Settings:
    data = _read_toml(path)
    table = data if path.name == "perflsp.toml" else data.get("tool", {}).get("perflsp", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.perflsp] must be a table")
    values = _validate(table, str(path))
    return Settings(root=str(path.parent), source=str(path), **values)


@lru_cache(maxsize=256)
def _settings_for_dir(directory: str, _mtime_key: Tuple[Tuple[str, int], ...]) -> Settings:
    found = config_file_for(Path(directory))
    return load_file(found) if found else Settings(root=os.getcwd())


def settings_for(path: Path) -> Settings:
    """Settings that apply to `path`, re-read whenever a config file above it changes."""
    directory = (path if path.is_dir() else path.parent).resolve()
    stamps = []
    for folder in (directory, *directory.parents):
        for name in ("perflsp.toml", "pyproject.toml"):
            try:
                stamps.append((str(folder / name), (folder / name).stat().st_mtime_ns))
            except OSError:
                pass
    return _settings_for_dir(str(directory), tuple(stamps))
