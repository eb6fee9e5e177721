"""Checking many files: discovery (`.gitignore`, `exclude`), notebooks, the cache and a process pool.

Shared by `perflsp check` and the language server's workspace diagnostics, so both read and
write the same cache. The engine (and libcst) is imported only when a file misses the cache, so
re-checking an unchanged tree costs little more than starting Python.
"""
from __future__ import annotations

import errno
import functools
import hashlib
import io
import json
import logging
import multiprocessing
import os
import shutil
import signal
import subprocess
import tempfile
import tokenize
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import perflsp
from perflsp.config import Settings, settings_for
from perflsp.findings import Finding
from perflsp.safe_files import create_exclusive, ensure_inside, read_regular, write_problem

if TYPE_CHECKING:
    from perflsp.rules.reparse import Reparser

log = logging.getLogger("perflsp")

SUFFIXES = (".py", ".pyi", ".ipynb")
_LOOPING_LINK = "skipped: a symbolic link that loops back on itself"
MAX_FILE_BYTES = 5 * 1024 * 1024  # larger files are generated code: parsing one would take ~minutes
MAX_CACHE_BYTES = 512 * 1024 * 1024  # a findings.json for ~100,000 files; anything larger is not perflsp's
_ALWAYS_SKIPPED = {".git", ".hg", ".svn", ".venv", "venv", "__pycache__", "node_modules", ".perflsp_cache",
                   ".perflsp", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".tox", ".nox", "build", "dist",
                   "site-packages", ".eggs", ".ipynb_checkpoints"}


@dataclass
class FileResult:
    path: str
    findings: List[Finding] = field(default_factory=list)
    error: Optional[str] = None  # the file could not be read or was skipped, and why
    cached: bool = False
    # The per-step facts the check judged this file by, for any text of it (None: judged alone).
    # `--fix` judges each round's text by them: a finding per step only because of a caller in
    # another file must be found, and fixed, as the check found it.
    facts_of: Optional[Callable[[str], Optional[Dict[str, Any]]]] = field(default=None, repr=False, compare=False)
    refuted: List[Finding] = field(default_factory=list)  # findings a recorded run refuted (`evidence`)


# --- discovery -----------------------------------------------------------------------------------

def discover(paths: Sequence[str], overrides: Mapping[str, Any] = {}, force_exclude: bool = False,
             skipped: Optional[List[FileResult]] = None) -> List[Path]:
    """Python files and notebooks under `paths`; explicit file arguments are kept unless
    `force_exclude` (what pre-commit wants: it passes every changed file by name). A symbolic link
    that loops has nothing to read and no real path: it is left out, and added to `skipped`."""
    found: List[Path] = []
    seen = set()
    settings = _SettingsByFolder(overrides)
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            candidates, excludable = [p for p in _walk(path) if p.suffix in SUFFIXES], True
        elif path.is_file() or _loops(path):
            candidates, excludable = [path], force_exclude
        else:
            raise FileNotFoundError(f"{raw}: no such file or directory")
        for candidate in candidates:
            if _loops(candidate):
                if skipped is not None:
                    skipped.append(FileResult(str(candidate), error=_LOOPING_LINK))
                continue
            if excludable and settings(candidate).is_excluded(str(candidate)):
                continue
            key = candidate.resolve()
            if key not in seen:
                seen.add(key)
                found.append(candidate)
    return found


def _loops(path: Path) -> bool:
    try:
        os.stat(path)
    except OSError as exc:
        return exc.errno == errno.ELOOP
    return False


def _walk(root: Path) -> Iterable[Path]:
    listed = _git_files(root)
    if listed is not None:
        return (p for p in listed if not any(part in _ALWAYS_SKIPPED for part in p.relative_to(root).parts[:-1]))
    return _plain_walk(root)


def _git_files(root: Path) -> Optional[List[Path]]:
    """Tracked and untracked-but-not-ignored files, when `root` is inside a git work tree."""
    try:
        out = subprocess.run(
            # A cloned folder's own .git/config can name a command for git to run (core.fsmonitor):
            # listing files must never run it.
            ["git", "-c", "core.fsmonitor=false", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "."],
            cwd=root, capture_output=True, timeout=30, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    files = [root / name for name in out.decode("utf-8", "surrogateescape").split("\0") if name]
    return sorted(p for p in files if p.is_file() or _loops(p))


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

def check_text(text: str, path: str, settings: Settings, facts: Optional[Dict[str, Any]] = None,
               reparser: "Optional[Reparser]" = None) -> List[Finding]:
    """Findings for a file's text, notebooks included (a bad notebook raises NotebookError).
    `facts` come from the project graph; notebooks and files checked alone are judged by themselves.
    `reparser` holds the tree of the file's previous version (the language server's open files)."""
    if path.endswith(".ipynb"):
        from perflsp.rules.notebook import check_cells, read_cells

        return check_cells(read_cells(text), path, settings)
    from perflsp.rules.engine import check_source

    return check_source(text, path, settings, facts=facts, reparser=reparser)


def read_text(path: Path) -> str:
    """A source file's text; ValueError ("skipped: ...") for what is not a regular file under the
    size cap (a link to /dev/zero, a FIFO, generated code) or not text Python can read."""
    try:
        return decode_source(read_regular(path, MAX_FILE_BYTES))[0]
    except NotText as exc:
        raise ValueError(f"skipped: {exc}") from None


def write_text(path: Path, text: str) -> None:
    """Write `text` over `path` with its line breaks as they are, in the encoding the file is in
    (`decode_source`): a latin-1 file stays latin-1, a byte order mark stays."""
    with path.open("rb") as fh:
        encoding = tokenize.detect_encoding(fh.readline)[0]
    path.write_bytes(text.encode(encoding))


class NotText(ValueError):
    """Bytes Python would not read as source: the message says why."""


def decode_source(data: bytes) -> Tuple[str, str]:
    """(text, encoding) of a source file's bytes, read as Python reads them: a UTF-8 byte order mark
    (left out of the text) or a PEP 263 declaration (`# -*- coding: latin-1 -*-`), else UTF-8.
    Raises NotText for bytes that are not text in that encoding, or an unknown declared one."""
    try:
        encoding = tokenize.detect_encoding(io.BytesIO(data).readline)[0]
    except SyntaxError as exc:  # an unknown codec, a BOM that contradicts the declaration, or no UTF-8 in the first rows
        _decode(data, "utf-8")  # names the first byte that is not UTF-8, when that is the problem
        raise NotText(exc.msg) from None
    return _decode(data, encoding), encoding


def _decode(data: bytes, encoding: str) -> str:
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        name = "UTF-8" if encoding.startswith("utf-8") else encoding
        raise NotText(f"not {name} text ({exc.reason} at byte {exc.start})") from None
    except LookupError:  # `# coding: hex`: a codec, but not of text
        raise NotText(f"declares {encoding}, which is not a text encoding") from None


def _summarize_one(path: str) -> Tuple[str, Optional[str], Optional[Dict[str, Any]], Optional[str]]:
    """Worker: (path, content digest, summary, error); notebooks get no summary (judged alone)."""
    from perflsp.rules.project import module_name
    from perflsp.rules.summary import summarize

    p = Path(path)
    try:
        text = read_text(p)
    except (OSError, ValueError) as exc:
        return path, None, None, str(exc)
    if p.suffix == ".ipynb":
        return path, content_digest(text), None, None
    module, is_package = module_name(p)
    return path, content_digest(text), summarize(text, module, is_package, path), None


def _check_one(path: str, settings: Settings, facts: Optional[Dict[str, Any]]
               ) -> Tuple[str, List[Dict[str, Any]], Optional[str]]:
    """Worker: (path, findings as dicts, error); dicts pickle faster than objects."""
    p = Path(path)
    try:
        findings = check_text(read_text(p), path, settings, facts)
    except (OSError, ValueError) as exc:  # NotebookError is a ValueError
        return path, [], str(exc)
    return path, [f.to_dict() for f in findings], None


def _crash_message(why: str) -> str:
    return f"skipped: analysing this file crashed perflsp's worker process ({why}); please report it"


def content_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


# --- cache ----------------------------------------------------------------------------------------

class Cache:
    """Per file, keyed by its content: the summary (valid for that content and module name) and
    the findings (valid for that content, the settings and what the project graph says of it).

    What lies inside the cache folder is perflsp's own: a file or an entry of the wrong shape
    (cut short, hand-edited, in the way) is discarded and rebuilt, with one warning naming the
    file. The folder's own path is the user's: when a file stands there, the run goes on uncached."""

    def __init__(self, directory: Path, warn: Callable[[str], None] = log.warning):
        self.directory = directory
        self.file = directory / perflsp.__version__ / "findings.json"
        self.warn = warn
        self.warned = False
        self.usable = True
        self.dirty = False
        self.entries = self._load()

    def _load(self) -> Dict[str, Dict[str, Any]]:
        if self.directory.exists() and not self.directory.is_dir():
            self.usable = False
            self._warn_once(f"{self.directory} is not a folder, so the cache is off; remove it to cache again")
            return {}
        try:
            data = json.loads(read_regular(self.file, MAX_CACHE_BYTES).decode("utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, RecursionError) as exc:  # a folder or device in its place, cut short, not text
            self._discard(f"unreadable ({exc.__class__.__name__})")
            return {}
        if not isinstance(data, dict):
            self._discard(f"a JSON {type(data).__name__}, not an object")
            return {}
        entries = {k: v for k, v in data.items() if isinstance(v, dict)}
        if len(entries) < len(data):
            self._discard("entries that are not objects")
        return entries

    def summary(self, path: Path, digest: str, module: str) -> Optional[Dict[str, Any]]:
        key = str(path.resolve())
        entry = self.entries.get(key, {})
        found = entry.get("summary")
        if entry.get("digest") != digest or found is None:
            return None
        template = _summary_template()
        if isinstance(found, dict) and found.get("version") != template["version"]:
            return None  # written by another version of `summarize`: out of date, not damaged
        if not (isinstance(found, dict) and all(_shaped(found.get(k), v, k) for k, v in template.items())):
            self._discard("a summary of the wrong shape", key)
            return None
        return found if found["module"] == module else None

    def findings(self, path: Path, digest: str, key: str, slot: str = "") -> Optional[List[Finding]]:
        """`slot`: "" for the findings of the file's own settings, "preview_" for those of every
        tier that a recorded run may confirm (`_apply_evidence`)."""
        entry = self.entries.get(str(path.resolve()), {})
        if entry.get("digest") != digest or entry.get(slot + "key") != key:
            return None
        try:
            return [Finding.from_dict({**d, "filename": str(path)}) for d in entry[slot + "findings"]]
        except (KeyError, TypeError, ValueError, AttributeError):
            self._discard("findings of the wrong shape", str(path.resolve()))
            return None

    def put(self, path: Path, digest: str, **values: Any) -> None:
        key = str(path.resolve())
        entry = self.entries.get(key, {})
        if entry.get("digest") != digest:
            entry = {"digest": digest}
        entry.update(values)
        self.entries[key] = entry
        self.dirty = True

    def save(self) -> None:
        if not self.dirty or not self.usable:
            return
        try:
            self._write()
        except OSError as exc:
            self._warn_once(f"{self.file}: the cache could not be written ({write_problem(self.file, exc)})")

    def _write(self) -> None:
        # A cache folder committed as a symbolic link must not make perflsp write outside the
        # folder the cache sits in (the workspace, by default).
        gitignore = self.directory / ".gitignore"
        for path in (self.file, gitignore):
            ensure_inside(path, self.directory.absolute().parent)
        folder = self.file.parent
        _make_way(folder, for_folder=True)
        folder.mkdir(parents=True, exist_ok=True)
        if not os.path.lexists(gitignore):
            create_exclusive(gitignore, "# Automatically created by perflsp.\n*\n")
        _make_way(self.file, for_folder=False)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".findings-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(self.entries, fh)
            os.replace(tmp, self.file)
        except BaseException:
            os.unlink(tmp)
            raise

    def _discard(self, problem: str, key: Optional[str] = None) -> None:
        """Forget one entry (`key`) or everything read, and say so once."""
        if key is None:
            self.entries = {}
        else:
            self.entries.pop(key, None)
        self.dirty = True  # rewritten even when no file changes, so the next run reads a good one
        self._warn_once(f"{self.file}: {problem}; discarded, and rebuilt as files are checked")

    def _warn_once(self, message: str) -> None:
        if not self.warned:
            self.warned = True
            self.warn(message)


# Summary fields that are None for a text Python's parser refused (or too deep to measure).
_UNKNOWN_UNLESS_PARSED = frozenset({"depth", "statement_rows"})


def _shaped(value: Any, template: Any, key: str) -> bool:
    return isinstance(value, type(template)) or (value is None and key in _UNKNOWN_UNLESS_PARSED)


@functools.lru_cache(maxsize=1)
def _summary_template() -> Dict[str, Any]:
    """A summary as this version of `summarize` writes it: the keys and value types a cached one must have."""
    from perflsp.rules.summary import summarize

    return summarize("", "template")


def _make_way(path: Path, for_folder: bool) -> None:
    """Remove what stands where the cache needs a folder (or a file): inside the cache, it is perflsp's."""
    if for_folder and path.exists() and not path.is_dir():
        path.unlink()
    elif not for_folder and path.is_dir():
        shutil.rmtree(path)


# --- many files ------------------------------------------------------------------------------------

FactsOf = Callable[[Path, str], Optional[Dict[str, Any]]]  # (path, its text) -> the project graph's facts


def check_paths(files: Sequence[Path], overrides: Mapping[str, Any] = {}, jobs: int = 0,
                cache: Optional[Cache] = None, facts_of: Optional[FactsOf] = None,
                recorded: bool = True) -> List[FileResult]:
    """Check `files` as one project: summaries (cached by content), the project graph, then the
    files whose content, settings or per-step facts changed (`jobs` worker processes; 0 = one per core).
    With `facts_of` the graph is one kept elsewhere (the language server's, of a whole folder), so a
    few files can be checked without losing the evidence in the rest of the project. `recorded`:
    apply a recorded run's evidence (`perflsp record`), which the static candidates of the next
    record must not see."""
    from perflsp.rules.project import facts_digest

    settings = _SettingsByFolder(overrides)
    jobs = jobs or os.cpu_count() or 1
    with _Pool(jobs) as pool:
        if facts_of is None:
            known, facts_of = _project_facts(files, overrides, pool, cache)
        else:
            known = _given_facts(files, facts_of)
        results: Dict[str, FileResult] = {}
        work: List[Tuple[str, Optional[Dict[str, Any]]]] = []
        keys: Dict[str, str] = {}
        for path in files:
            digest, facts, error = known[str(path)]
            if error is not None:
                results[str(path)] = FileResult(str(path), [], error)
                continue
            keys[str(path)] = f"{settings(path).fingerprint()}:{facts_digest(facts) if facts else '-'}"
            hit = cache.findings(path, digest, keys[str(path)]) if cache is not None and digest else None
            if hit is not None:
                results[str(path)] = FileResult(str(path), hit, cached=True)
            else:
                work.append((str(path), facts))
        if work:
            from perflsp.rules.registry import validate

            for distinct in {settings(Path(p)) for p, _ in work}:
                validate(distinct)  # a config error stops the run before any work, with its message
        outcomes = pool.map(_check_one, [(p, settings(Path(p)), f) for p, f in work],
                            crashed=lambda row, why: (row[0], [], _crash_message(why)))
        for path, dicts, error in outcomes:
            results[path] = FileResult(path, [Finding.from_dict(d) for d in dicts], error)
            digest = known[path][0]
            if cache is not None and error is None and digest is not None:
                cache.put(Path(path), digest, key=keys[path], findings=dicts)
        evidence = _recorded_runs(files, settings) if recorded else {}
        if evidence:
            _apply_evidence(results, evidence, known, settings, cache)
    if cache is not None:
        cache.save()
    for path in files:
        if known[str(path)][1] is not None:
            results[str(path)].facts_of = functools.partial(facts_of, path)
    return [results[str(p)] for p in files]


def _recorded_runs(files: Sequence[Path], settings: "_SettingsByFolder") -> Dict[str, Any]:
    """path -> that file's recorded evidence (`perflsp record`), for the files a record holds."""
    from perflsp.rules.evidence import Records

    records = Records()
    found = {str(path): records.for_file(path, settings(path)) for path in files if path.suffix != ".ipynb"}
    return {path: evidence for path, evidence in found.items() if evidence is not None}


def _apply_evidence(results: Dict[str, FileResult], recorded: Dict[str, Any], known: "Known",
                    settings: "_SettingsByFolder", cache: Optional[Cache]) -> None:
    """Confirm, refute or add findings from the record (`perflsp.rules.evidence`): a file with
    evidence is also checked in preview mode (cached), whose findings the record may confirm."""
    from perflsp.rules.evidence import apply
    from perflsp.rules.project import facts_digest

    for path, evidence in recorded.items():
        result = results[path]
        if result.error is not None:
            continue
        try:
            text = read_text(Path(path))
        except (OSError, ValueError):
            continue
        digest, facts = known[path][0], known[path][1]

        def every_tier(wider: Settings) -> List[Finding]:
            key = f"{wider.fingerprint()}:{facts_digest(facts) if facts else '-'}"
            hit = cache.findings(Path(path), digest, key, slot="preview_") if cache is not None and digest else None
            if hit is not None:
                return hit
            found = check_text(text, path, wider, facts)
            if cache is not None and digest:
                cache.put(Path(path), digest, preview_key=key, preview_findings=[f.to_dict() for f in found])
            return found

        result.findings, result.refuted = apply(path, text, settings(Path(path)), result.findings, evidence,
                                                every_tier)


Known = Dict[str, Tuple[Optional[str], Optional[Dict[str, Any]], Optional[str]]]  # path -> digest, facts, error


def _project_facts(files: Sequence[Path], overrides: Mapping[str, Any], pool: "_Pool",
                   cache: Optional[Cache]) -> Tuple[Known, FactsOf]:
    """`files` as a project of their own: their summaries (cached by content), then the graph;
    and the graph's facts for other texts of these files."""
    from perflsp.rules.project import Project, module_name

    summaries: Known = {}
    todo: List[str] = []
    for path in files:
        digest = None
        if cache is not None:
            try:
                digest = content_digest(read_text(path))
            except (OSError, ValueError):
                pass
        found = cache.summary(path, digest, module_name(path)[0]) if cache is not None and digest else None
        if found is not None:
            summaries[str(path)] = (digest, found, None)
        else:
            todo.append(str(path))
    for path, digest, summary, error in pool.map(_summarize_one, [(p,) for p in todo],
                                                 crashed=lambda row, why: (row[0], None, None, _crash_message(why))):
        summaries[path] = (digest, summary, error)
        if cache is not None and summary is not None and digest is not None:
            cache.put(Path(path), digest, summary=summary)
    project = Project(((p, s) for p, (_, s, _) in summaries.items() if s is not None),
                      project_hot_functions(files, overrides), project_measured(files, overrides))
    known = {p: (d, project.facts(s["module"], s) if s is not None else None, e) for p, (d, s, e) in summaries.items()}
    return known, _GraphFacts(project, summaries)


class _GraphFacts:
    """The facts one run's graph gives a text of one of its files: with the summary the graph was
    built from while the text is the one summarised, else with a summary of the new text. The
    graph is not built again (nor does the language server build it for an edit that only moves
    rows): fixes rewrite `torch` calls and tensor methods, not the calls between the project's
    functions that their status comes from."""

    def __init__(self, project: Any, summaries: Known):
        self.project = project
        self.summaries = summaries

    def __call__(self, path: Path, text: str) -> Optional[Dict[str, Any]]:
        digest, summary, _ = self.summaries[str(path)]
        if summary is None:
            return None
        if content_digest(text) != digest:
            from perflsp.rules.project import module_name
            from perflsp.rules.summary import summarize

            summary = summarize(text, summary["module"], module_name(path)[1], str(path))
        return self.project.facts(summary["module"], summary)


def _given_facts(files: Sequence[Path], facts_of: FactsOf) -> Known:
    known: Known = {}
    for path in files:
        try:
            text = read_text(path)
        except (OSError, ValueError) as exc:
            known[str(path)] = (None, None, str(exc))
            continue
        known[str(path)] = (content_digest(text), facts_of(path, text), None)
    return known


def project_hot_functions(files: Iterable[Path], overrides: Mapping[str, Any] = {}) -> List[str]:
    """The graph's `hot-functions`: those of every file's settings, so one config names them for all."""
    settings = _SettingsByFolder(overrides)
    return sorted({name for path in files for name in settings(path).hot_functions})


def project_measured(files: Iterable[Path], overrides: Mapping[str, Any] = {}):
    """What the recorded runs (`.perflsp/hot.json` next to each config file) say of functions."""
    from perflsp.rules.measured import verdicts_for

    settings = _SettingsByFolder(overrides)
    return verdicts_for({Path(root) for root in {settings(path).root for path in files} if root})


Row = Tuple[Any, ...]  # the arguments of one call of a worker function


class _Pool:
    """Worker processes when there is enough work for them, else the calling process.

    A worker that dies (a crash in native code: libcst's parser is Rust) costs only the file it was
    on: the rows it left unfinished run again one process each, and the row whose process dies
    too gets `crashed(row, why)` in place of its result."""

    def __init__(self, jobs: int):
        self.jobs = jobs
        self.executor: Optional[ProcessPoolExecutor] = None

    def __enter__(self) -> "_Pool":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.executor is not None:
            self.executor.shutdown()

    def map(self, fn: Callable[..., Any], rows: Sequence[Row], crashed: Callable[[Row, str], Any]) -> List[Any]:
        if self.jobs == 1 or len(rows) < 2:
            return [fn(*row) for row in rows]
        if self.executor is None:
            _load_worker_code()
            self.executor = ProcessPoolExecutor(max_workers=self.jobs)
        futures = [self._submit(fn, row) for row in rows]
        results = []
        for row, future in zip(rows, futures):
            try:
                results.append(future.result())
            except BrokenProcessPool:
                results.append(self._alone(fn, row, crashed))
        return results

    def _submit(self, fn: Callable[..., Any], row: Row) -> "Future[Any]":
        try:
            return self.executor.submit(fn, *row)  # type: ignore[union-attr]
        except BrokenProcessPool as exc:  # broke while the rest was being handed out
            failed: "Future[Any]" = Future()
            failed.set_exception(exc)
            return failed

    def _alone(self, fn: Callable[..., Any], row: Row, crashed: Callable[[Row, str], Any]) -> Any:
        if self.executor is not None:  # broken for good: the next map gets a fresh pool
            self.executor.shutdown()
            self.executor = None
        finished, outcome = _in_own_process(fn, row)
        if not finished:
            return crashed(row, outcome)
        return outcome


def _load_worker_code() -> None:
    """Import what the workers run before they fork (they start with it, as do the lone processes
    of `_alone`): libcst, the engine and every rule, ~0.15 s of CPU once, not again in each worker."""
    from perflsp.rules import engine, project, summary  # noqa: F401
    from perflsp.rules.registry import all_rules

    all_rules()  # imports the rule modules


def _in_own_process(fn: Callable[..., Any], row: Row) -> Tuple[bool, Any]:
    """`fn(*row)` in a process of its own: (True, its result), or (False, how the process died).
    An exception `fn` raises is raised here, as the pool would."""
    context = multiprocessing.get_context()
    receiving, sending = context.Pipe(duplex=False)
    process = context.Process(target=_send_outcome, args=(sending, fn, row), daemon=True)
    process.start()
    sending.close()
    try:
        raised, value = receiving.recv()
    except EOFError:  # it died before it could answer
        process.join()
        return False, _death(process.exitcode)
    finally:
        receiving.close()
    process.join()
    if raised:
        raise value
    return True, value


def _send_outcome(connection: Any, fn: Callable[..., Any], row: Row) -> None:
    try:
        outcome = (False, fn(*row))
    except Exception as exc:
        outcome = (True, exc)
    connection.send(outcome)
    connection.close()


def _death(exitcode: Optional[int]) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"
