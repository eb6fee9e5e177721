"""One workspace folder's project graph, kept current while files change: what the language server
judges a file with, so that the editor and `perflsp check <folder>` share one per-step model.

Every Python file of the folder, found as `perflsp check` finds them, has a summary: from the
`.perflsp_cache` when its content matches, else computed; an open buffer's text wins over the file
on disk. The `Project` is built from the summaries alone, and not after every keystroke. Measured
(Python 3.11, one core of a busy 2-core machine): building it takes 0.2 s for pytorch-lightning's
src and tests (600 files, 7,800 functions) and 1.1 s for diffusers' src, tests and examples (2,000
files, 27,000 functions), where summarising the file being typed in takes 1-100 ms. So:

- an edit that leaves the summary as it was (inside a line, most keystrokes) costs no build, and
  neither does one that changes only loop regions, which the graph does not read;
- an edit that changes what is defined, called or imported is built before the next answer, since
  a function may have changed status;
- an edit that only moves line numbers (a line inserted or deleted) cannot change a status: the
  answers keep the last graph, and `settle()`, called once typing pauses, rebuilds it so that the
  chains name the new lines ("called from `forward` (model.py:13)");
- a buffer that does not parse keeps its last summary: a half-typed line must not take its file's
  functions out of the graph.

Thread-safe: editor events land in a small inbox under a lock held for microseconds (the event
loop never waits for a build); answers, builds and disk reads happen under the main lock, in the
caller's worker thread.
"""
from __future__ import annotations

import ast
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Set, Tuple

from perflsp.hot_file import hot_path
from perflsp.rules.measured import verdicts_for
from perflsp.rules.project import Project, module_name
from perflsp.rules.runner import Cache, content_digest, discover, project_hot_functions, read_text
from perflsp.rules.summary import summarize

log = logging.getLogger("perflsp")

SUMMARISED = (".py", ".pyi")  # notebooks are judged alone, as `perflsp check` judges them
# A folder with more Python files than this (a home directory opened as a workspace) gets no graph:
# summarising it would cost minutes of background CPU. diffusers has 2,000, PyTorch itself 6,000.
MAX_FILES = 20_000
SHAPE, ROWS = "shape", "rows"  # what an edit changed for the graph
_ENGINE_ONLY = ("regions", "depth", "statement_rows")  # summary fields the graph does not read
_ROW_FIELDS = ("start", "end", "row")  # line numbers in a function's or a class's summary
_CALL_ROW = 2  # a call is [caller, reference, row, site]

Entry = Tuple[str, Dict[str, Any]]  # the content digest a summary stands for, the summary


class ProjectIndex:
    """Summaries of every Python file under `root` (open buffers first) and the graph built from them."""

    def __init__(self, root: Path, overrides: Optional[Mapping[str, Any]] = None,
                 cache_dir: Optional[Path] = None):
        self.root = Path(root).resolve()
        self.cache_dir = cache_dir
        self.builds = 0  # bumped by every build: a caller that saw another count looks again
        self._loading = threading.Lock()
        self._lock = threading.RLock()  # the state below, up to the inbox
        self._project: Optional[Project] = None  # None until loaded: callers judge files alone meanwhile
        self._members: Set[str] = set()
        self._hot_functions: List[str] = []
        self._files: Dict[str, Entry] = {}
        self._shape_changed = False  # a status may differ from the graph's: build before answering
        self._measured_stamp: Optional[Tuple[int, int]] = None  # `.perflsp/hot.json` when the graph was built
        self._rows_moved = False  # only line numbers differ: `settle` builds
        self._inbox = threading.Lock()  # what the editor reported, not applied yet
        self._overrides = dict(overrides or {})
        self._buffers: Dict[str, str] = {}  # every open buffer's latest text
        self._typed: Set[str] = set()  # buffers whose text is newer than their summary
        self._reread: Set[str] = set()  # files that changed on disk (or may have)
        self._rediscover = False

    # --- what the editor reports (any thread, never blocks on a build) -------------------------------

    def buffer_changed(self, path: str, text: str) -> None:
        """An open buffer's text: it stands for the file until the buffer closes."""
        key = _key(path)
        with self._inbox:
            self._buffers[key] = text
            self._typed.add(key)

    def buffer_closed(self, path: str) -> None:
        """Back to the disk: the unsaved edits may have been thrown away."""
        key = _key(path)
        with self._inbox:
            self._buffers.pop(key, None)
            self._typed.discard(key)
            self._reread.add(key)

    def files_changed(self, paths: Iterable[str]) -> None:
        """Files created, changed or deleted on disk."""
        with self._inbox:
            self._reread.update(_key(p) for p in paths)

    def reconfigure(self, overrides: Mapping[str, Any]) -> None:
        """Settings changed: `exclude` and `hot-functions` decide what the project is."""
        with self._inbox:
            self._overrides = dict(overrides)
            self._rediscover = True

    # --- answers (worker threads) ------------------------------------------------------------------

    def load(self) -> None:
        """Find and summarise every file, then build the graph: seconds on a big tree the first time,
        a read and a digest per file once the cache holds the summaries. Later calls return at once."""
        with self._loading:
            if self._project is not None:
                return
            started = time.perf_counter()
            with self._inbox:
                overrides = dict(self._overrides)
            members, hot_functions = self._discover(overrides)
            files = self._read_all(members)
            with self._lock:
                self._members, self._hot_functions = set(members), hot_functions
                self._files.update(files)
                self._shape_changed = True
                self._refresh(rows=True)
            log.info("perflsp: project graph of %s: %d files in %.1f s", self.root, len(files),
                     time.perf_counter() - started)

    def facts(self, path: str, text: Optional[str] = None) -> Optional[Dict[str, Any]]:
        """The engine's facts for the file at `path` holding `text` (by default what the index holds
        for it); None while loading and for files outside the project, which are judged alone."""
        if self._project is None:
            return None
        key = _key(path)
        with self._lock:
            self._refresh(rows=False)
            if key not in self._members:
                return None
            entry = self._files.get(key)
            if text is not None and (entry is None or entry[0] != content_digest(text)):
                if self._is_open(key):  # an older version of the buffer: its own facts only
                    entry = (content_digest(text), self._summarise(key, text))
                else:  # the file as it is on disk now: the graph learns it
                    self._store(key, self._entry(key, text))
                    self._refresh(rows=False)
                    entry = self._files[key]
            if entry is None or self._project is None:
                return None
            summary = entry[1]
            return self._project.facts(summary["module"], summary)

    def settle(self) -> bool:
        """Apply what changed and build for moved line numbers too; True when the graph was rebuilt."""
        if self._project is None:
            return False
        with self._lock:
            before = self.builds
            self._refresh(rows=True)
            return self.builds != before

    # --- keeping the state current (under the main lock) -----------------------------------------------

    def _is_open(self, key: str) -> bool:
        with self._inbox:
            return key in self._buffers

    def _refresh(self, rows: bool) -> None:
        """Apply the inbox; build when a status may have changed (with `rows`, when lines moved)."""
        with self._inbox:
            buffers = dict(self._buffers)
            typed, self._typed = self._typed, set()
            reread, self._reread = self._reread, set()
            rediscover, self._rediscover = self._rediscover, False
            overrides = dict(self._overrides)
        if any(key not in self._members and key.endswith(SUMMARISED) and _inside(key, self.root) for key in reread):
            rediscover = True  # a new file: whether it belongs to the project is discovery's call
        if rediscover:
            added = self._apply_discovery(overrides)
            reread |= added
            typed |= added & set(buffers)
        for key in sorted((reread & self._members) - set(buffers)):  # an open buffer wins over the disk
            entry = self._read(key)
            if entry is None:  # deleted, or no longer readable
                self._members.discard(key)
                self._drop(key)
            else:
                self._store(key, entry)
        for key in sorted(typed & self._members):
            self._store(key, self._buffer_entry(key, buffers[key]))
        if self._measured_stamp != _stamp(hot_path(self.root)):
            self._shape_changed = True  # a new recorded run (`perflsp profile --run`) outranks the graph
        if self._project is None or self._shape_changed or (rows and self._rows_moved):
            self._build()

    def _apply_discovery(self, overrides: Mapping[str, Any]) -> Set[str]:
        """Discover again; the members that are new."""
        members, hot_functions = self._discover(overrides)
        found = set(members)
        for gone in self._members - found:
            self._drop(gone)
        added = found - self._members
        self._members = found
        if hot_functions != self._hot_functions:
            self._hot_functions = hot_functions
            self._shape_changed = True
        return added

    def _discover(self, overrides: Mapping[str, Any]) -> Tuple[List[str], List[str]]:
        """The folder's Python files and `hot-functions`, as `perflsp check <folder>` finds them."""
        from perflsp.config import ConfigError

        try:
            try:
                files = discover([str(self.root)], overrides)
            except ConfigError:  # bad editor overrides: the files the project's own config lists
                overrides = {}
                files = discover([str(self.root)])
            files = [p for p in files if p.suffix in SUMMARISED]
            if len(files) > MAX_FILES:
                log.warning("perflsp: %s holds %d Python files, over %d: no project graph, its files are "
                            "judged alone", self.root, len(files), MAX_FILES)
                return [], []
            return [str(p.resolve()) for p in files], project_hot_functions(files, overrides)
        except (ConfigError, OSError) as exc:
            log.warning("perflsp: no project graph for %s (%s): its files are judged alone", self.root, exc)
            return [], []

    def _read_all(self, keys: Iterable[str]) -> Dict[str, Entry]:
        cache = Cache(self.cache_dir) if self.cache_dir is not None else None
        out = {}
        for key in keys:
            entry = self._read(key, cache)
            if entry is not None:
                out[key] = entry
        if cache is not None:
            try:
                cache.save()
            except OSError as exc:  # a read-only tree: the summaries are computed again next time
                log.debug("perflsp: could not save the cache in %s: %s", self.cache_dir, exc)
        return out

    def _read(self, key: str, cache: Optional[Cache] = None) -> Optional[Entry]:
        try:
            text = read_text(Path(key))
        except (OSError, ValueError):  # unreadable, too large, not UTF-8: left out, as `perflsp check` does
            return None
        return self._entry(key, text, cache)

    def _entry(self, key: str, text: str, cache: Optional[Cache] = None) -> Entry:
        digest = content_digest(text)
        known = self._files.get(key)
        if known is not None and known[0] == digest:
            return known
        summary = cache.summary(Path(key), digest, module_name(Path(key))[0]) if cache is not None else None
        if summary is None:
            summary = self._summarise(key, text)
            if cache is not None:
                cache.put(Path(key), digest, summary=summary)
        return digest, summary

    def _buffer_entry(self, key: str, text: str) -> Entry:
        digest, summary = self._entry(key, text)
        known = self._files.get(key)
        if known is not None and _is_empty(summary) and not _is_empty(known[1]) and not _parses(text):
            summary = known[1]  # half-typed: the last summary that parsed stands
        return digest, summary

    def _summarise(self, key: str, text: str) -> Dict[str, Any]:
        module, is_package = module_name(Path(key))
        # Test files are told by their path inside the project, as `perflsp check .` sees them:
        # a workspace that happens to live under a `tests/` folder is not all test code.
        return summarize(text, module, is_package, os.path.relpath(key, self.root))

    def _store(self, key: str, entry: Entry) -> None:
        known = self._files.get(key)
        self._files[key] = entry
        change = _change(known[1] if known is not None else None, entry[1])
        if change == SHAPE:
            self._shape_changed = True
        elif change == ROWS:
            self._rows_moved = True

    def _drop(self, key: str) -> None:
        if self._files.pop(key, None) is not None:
            self._shape_changed = True

    def _build(self) -> None:
        started = time.perf_counter()
        self._measured_stamp = _stamp(hot_path(self.root))
        self._project = Project(((key, self._files[key][1]) for key in sorted(self._files)), self._hot_functions,
                                verdicts_for([self.root]))
        self._shape_changed = self._rows_moved = False
        self.builds += 1
        log.debug("perflsp: project graph of %s built in %.0f ms (%d files)", self.root,
                  (time.perf_counter() - started) * 1000, len(self._files))


def _stamp(path: Path) -> Optional[Tuple[int, int]]:
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size


def _key(path: str) -> str:
    return str(Path(path).resolve())


def _inside(key: str, root: Path) -> bool:
    return key.startswith(str(root).rstrip(os.sep) + os.sep)


def _change(old: Optional[Dict[str, Any]], new: Dict[str, Any]) -> Optional[str]:
    """SHAPE when the graph may answer differently, ROWS when only line numbers moved, None when
    nothing the graph reads changed. A field this does not know counts as SHAPE: the safe side."""
    if old is None:
        return SHAPE
    if _graph_part(old) == _graph_part(new):
        return None
    return ROWS if _without_rows(old) == _without_rows(new) else SHAPE


def _graph_part(summary: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in summary.items() if k not in _ENGINE_ONLY}


def _without_rows(summary: Dict[str, Any]) -> Dict[str, Any]:
    out = _graph_part(summary)
    out["functions"] = [_no_rows(f) for f in summary["functions"]]
    out["classes"] = {k: _no_rows(v) for k, v in summary["classes"].items()}
    out["calls"] = [[*c[:_CALL_ROW], *c[_CALL_ROW + 1:]] for c in summary["calls"]]
    return out


def _no_rows(item: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in item.items() if k not in _ROW_FIELDS}


def _is_empty(summary: Dict[str, Any]) -> bool:
    return not (summary["functions"] or summary["classes"] or summary["imports"])


def _parses(text: str) -> bool:
    try:
        ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True
