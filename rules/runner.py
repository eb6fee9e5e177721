"""Checking many files: discovery (`.gitignore`, `exclude`), notebooks, the cache and a process pool.

Shared by `perflsp check` and the language server's workspace diagnostics, so both read and
write the same cache. The engine (and libcst) is imported only when a file misses the cache, so
re-checking an unchanged tree costs little more than starting Python.
"""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import perflsp
from perflsp.config import Settings, settings_for
from perflsp.findings import Finding

SUFFIXES = (".py", ".pyi", ".ipynb")
MAX_FILE_BYTES = 5 * 1024 * 1024  # larger files are generated code: parsing one would take ~minutes
_ALWAYS_SKIPPED = {".git", ".hg", ".svn", ".venv", "venv", "__pycache__", "node_modules", ".perflsp_cache",
                   ".perflsp", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".tox", ".nox", "build", "dist",
                   "site-packages", ".eggs", ".ipynb_checkpoints"}


@dataclass
class FileResult:
    path: str
    findings: List[Finding] = field(default_factory=list)
    error: Optional[str] = None  # the file could not be read or was skipped, and why
    cached: bool = False


# --- discovery -----------------------------------------------------------------------------------

def discover(paths: Sequence[str], overrides: Mapping[str, Any] = {}, force_exclude: bool = False) -> List[Path]:
    """Python files and notebooks under `paths`; explicit file arguments are kept unless
    `force_exclude` (what pre-commit wants: it passes every changed file by name)."""
    found: List[Path] = []
    seen = set()
    settings = _SettingsByFolder(overrides)
    for raw in paths:
        path = Path(raw)
        if path.is_file():
            candidates: Iterable[Path] = [] if force_exclude and settings(path).is_excluded(str(path)) else [path]
        elif path.is_dir():
            candidates = (p for p in _walk(path) if p.suffix in SUFFIXES
                          and not settings(p).is_excluded(str(p)))
        else:
            raise FileNotFoundError(f"{raw}: no such file or directory")
        for candidate in candidates:
            key = candidate.resolve()
            if key not in seen:
                seen.add(key)
                found.append(candidate)
    return found


def _walk(root: Path) -> Iterable[Path]:
    listed = _git_files(root)
    if listed is not None:
        return (p for p in listed if not any(part in _ALWAYS_SKIPPED for part in p.relative_to(root).parts[:-1]))
    return _plain_walk(root)


def _git_files(root: Path) -> Optional[List[Path]]:
    """Tracked and untracked-but-not-ignored files, when `root` is inside a git work tree."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "."],
            cwd=root, capture_output=True, timeout=30, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    files = [root / name for name in out.decode("utf-8", "surrogateescape").split("\0") if name]
    return sorted(p for p in files if p.is_file())


def _plain_walk(root: Path) -> Iterable[Path]:
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _ALWAYS_SKIPPED and not d.endswith(".egg-info"))
        for name in sorted(files):
            yield Path(folder) / name


def file_settings(path: Path, overrides: Mapping[str, Any] = {}) -> Settings:
    """The settings for `path`: its config file, then command-line or editor overrides."""
    settings = settings_for(path)
    return settings.with_overrides(overrides, "command line") if overrides else settings


class _SettingsByFolder:
    """`file_settings` memoised per folder for one run, which need not watch config files change."""

    def __init__(self, overrides: Mapping[str, Any]):
        self.overrides = overrides
        self.memo: Dict[Path, Settings] = {}

    def __call__(self, path: Path) -> Settings:
        folder = path.parent
        found = self.memo.get(folder)
        if found is None:
            found = self.memo[folder] = file_settings(path, self.overrides)
        return found


# --- one file -----------------------------------------------------------------------------------

def check_text(text: str, path: str, settings: Settings) -> List[Finding]:
    """Findings for a file's text, notebooks included (a bad notebook raises NotebookError)."""
    if path.endswith(".ipynb"):
        from perflsp.rules.notebook import check_cells, read_cells

        return check_cells(read_cells(text), path, settings)
    from perflsp.rules.engine import check_source

    return check_source(text, path, settings)


def read_text(path: Path) -> str:
    data = path.read_bytes()
    if len(data) > MAX_FILE_BYTES:
        raise ValueError(f"skipped: {len(data) / 1e6:.1f} MB is over perflsp's {MAX_FILE_BYTES // 2**20} MiB limit per file")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(f"skipped: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _check_one(path: str, overrides: Mapping[str, Any]) -> Tuple[str, List[Dict[str, Any]], Optional[str], int, int]:
    """Worker: (path, findings as dicts, error, mtime_ns, size); dicts pickle faster than objects."""
    p = Path(path)
    try:
        stat = p.stat()
        findings = check_text(read_text(p), path, file_settings(p, overrides))
    except (OSError, ValueError) as exc:  # NotebookError is a ValueError
        return path, [], str(exc), 0, 0
    return path, [f.to_dict() for f in findings], None, stat.st_mtime_ns, stat.st_size


# --- cache ----------------------------------------------------------------------------------------

class Cache:
    """Findings per file, valid while the file's mtime and size, the settings and perflsp's version match."""

    def __init__(self, directory: Path):
        self.file = directory / perflsp.__version__ / "findings.json"
        try:
            self.entries: Dict[str, Any] = json.loads(self.file.read_text())
        except (OSError, ValueError):
            self.entries = {}
        self.dirty = False

    def get(self, path: Path, fingerprint: str) -> Optional[List[Finding]]:
        entry = self.entries.get(str(path.resolve()))
        if entry is None or entry["settings"] != fingerprint:
            return None
        try:
            stat = path.stat()
        except OSError:
            return None
        if entry["mtime_ns"] != stat.st_mtime_ns or entry["size"] != stat.st_size:
            return None
        return [Finding.from_dict({**d, "filename": str(path)}) for d in entry["findings"]]

    def put(self, path: Path, fingerprint: str, mtime_ns: int, size: int, findings: List[Dict[str, Any]]) -> None:
        self.entries[str(path.resolve())] = {"settings": fingerprint, "mtime_ns": mtime_ns, "size": size, "findings": findings}
        self.dirty = True

    def save(self) -> None:
        if not self.dirty:
            return
        self.file.parent.mkdir(parents=True, exist_ok=True)
        gitignore = self.file.parent.parent / ".gitignore"
        if not gitignore.exists():
            gitignore.write_text("# Automatically created by perflsp.\n*\n")
        fd, tmp = tempfile.mkstemp(dir=self.file.parent, prefix=".findings-", suffix=".json")
        with os.fdopen(fd, "w") as fh:
            json.dump(self.entries, fh)
        os.replace(tmp, self.file)


# --- many files ------------------------------------------------------------------------------------

def check_paths(files: Sequence[Path], overrides: Mapping[str, Any] = {}, jobs: int = 0,
                cache: Optional[Cache] = None) -> List[FileResult]:
    """Check `files` (cache first, then `jobs` worker processes; 0 = one per core)."""
    results: Dict[str, FileResult] = {}
    todo: List[str] = []
    settings = _SettingsByFolder(overrides)
    for path in files:
        hit = cache.get(path, settings(path).fingerprint()) if cache is not None else None
        if hit is not None:
            results[str(path)] = FileResult(str(path), hit, cached=True)
        else:
            todo.append(str(path))
    if todo:
        from perflsp.rules.registry import validate

        for distinct in {settings(Path(p)) for p in todo}:
            validate(distinct)  # a config error stops the run before any work, with its message
    jobs = jobs or os.cpu_count() or 1
    if jobs == 1 or len(todo) < 2:
        outcomes = [_check_one(p, overrides) for p in todo]
    else:
        with ProcessPoolExecutor(max_workers=min(jobs, len(todo))) as pool:
            outcomes = list(pool.map(_check_one, todo, [overrides] * len(todo), chunksize=max(1, len(todo) // (jobs * 8))))
    for path, dicts, error, mtime_ns, size in outcomes:
        results[path] = FileResult(path, [Finding.from_dict(d) for d in dicts], error)
        if cache is not None and error is None:
            cache.put(Path(path), settings(Path(path)).fingerprint(), mtime_ns, size, dicts)
    if cache is not None:
        cache.save()
    return [results[str(p)] for p in files]
