"""Reading and writing files in a folder someone else may control (a cloned repository).

A workspace can hold a `zero.py` linked to `/dev/zero`, a FIFO named `pipe.py`, or a committed
`.perflsp_cache` linked to a folder outside it. Reads take regular files only, up to a size cap,
without ever opening a device or a FIFO (opening some devices has effects of its own). Writes of
perflsp's own files refuse a path that a symbolic link leads out of the folder it belongs in.
Standard library only: the runtime, inside the user's interpreter, writes with it too.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Optional

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"))


class NotRegularFile(ValueError):
    """The path names something other than a regular file, or one over the size cap."""


class LeavesFolder(OSError):
    """Writing here would go through a symbolic link to a place outside the folder it belongs in."""


def read_regular(path: os.PathLike | str, limit: int) -> bytes:
    """The bytes of the regular file at `path` (symbolic links followed), at most `limit` of them.

    Raises NotRegularFile (with the reason, starting "skipped:") for anything else or anything
    larger, and OSError when the file cannot be opened."""
    _require_regular(os.stat(path).st_mode, path)
    # O_NONBLOCK: should a FIFO replace the file between the two checks, opening it does not wait.
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        _require_regular(info.st_mode, path)
        if info.st_size > limit:
            raise NotRegularFile(_too_large(info.st_size, limit))
        data = handle.read(limit + 1)
    if len(data) > limit:  # grew since fstat
        raise NotRegularFile(_too_large(len(data), limit))
    return data


def _require_regular(mode: int, path: os.PathLike | str) -> None:
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
        raise NotRegularFile(f"skipped: {kind}, not a regular file")


def _too_large(size: int, limit: int) -> str:
    return f"skipped: {size / 1e6:.1f} MB is over perflsp's {limit / 2**20:g} MiB limit per file"


def ensure_inside(path: os.PathLike | str, folder: os.PathLike | str) -> None:
    """Raise LeavesFolder when `path` (which need not exist yet) resolves outside `folder`, through
    a symbolic link at any step, the last one included (a dangling link would be followed on write)."""
    real_folder = os.path.realpath(folder)
    real = os.path.realpath(path)
    if real != real_folder and not real.startswith(real_folder.rstrip(os.sep) + os.sep):
        raise LeavesFolder(f"a symbolic link leads {path} out of {folder}, to {real}")


def write_blocker(path: os.PathLike | str) -> Optional[str]:
    """What stands where a file is to be written at `path` (its folders made as needed), as far as
    can be told without writing: a folder in its place, a file in the place of one of its folders,
    a folder without write permission. None: nothing."""
    target = Path(path)
    if target.is_dir():
        return f"{target} is a folder"
    for folder in target.parents:
        if folder.is_dir():
            return None if os.access(folder, os.W_OK) else f"no permission to write in {folder}"
        if os.path.lexists(folder):
            return f"{folder} is not a folder"
    return None


def write_problem(path: os.PathLike | str, exc: OSError) -> str:
    """Why writing `path` failed, for a message: a symbolic link out of its folder says so itself;
    else what stands in the way (`write_blocker`), if anything does, else the error."""
    if isinstance(exc, LeavesFolder):
        return str(exc)
    return write_blocker(path) or exc.strerror or str(exc)


def create_exclusive(path: Path, text: str) -> None:
    """Create `path` with `text`, never through a symbolic link standing there (dangling or not)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    with os.fdopen(os.open(path, flags, 0o666), "w", encoding="utf-8") as handle:
        handle.write(text)
