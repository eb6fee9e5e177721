"""The perflsp language server (pygls 2.x): a thin LSP shell over the static engine.

It never re-implements rules, configuration or suppression; it translates LSP requests into calls
of `perflsp.rules` and engine findings into LSP types. Importing this package is cheap: the
engine (libcst and the rules) is imported on first use, in a worker thread.
"""
import functools
import gc
import logging
import sys
from typing import Callable, Optional


def main(tcp: Optional[str] = None) -> int:
    """Run the language server (`perflsp serve`, `python -m perflsp.server`).

    What start-up makes (the imports, lsprotocol's ~1,000 classes, libcst's node types, the rule
    table, the first file's tree) lives as long as the process: the collector's passes over it
    while it is being made are wasted work, 0.13 s of CPU of the ~0.7 s to the first diagnostics
    (measured). It stays off until the first analysis is published, or `START_UP_S` at most.
    """
    gc.disable()
    from perflsp.server.app import serve

    return serve(tcp=tcp)


START_UP_S = 10.0  # the longest the collector stays off (no document opened)


def end_start_up(freeze: bool) -> None:
    """Turn the collector back on after start-up (once; any thread). What start-up made lives as
    long as the process: frozen (`freeze`), the collector need not walk it in every full collection."""
    if gc.isenabled():
        return
    gc.collect()
    if freeze:
        gc.freeze()
    gc.enable()
    logging.getLogger("perflsp.server").debug("start-up over: the garbage collector is on (%d objects frozen)",
                                              gc.get_freeze_count())


def release_free_memory() -> None:
    """Give the C heap's free pages back to the system (glibc's `malloc_trim`).

    A whole parse (libcst's parser) and the summaries of a folder's files (`ast`) allocate through
    the C heap several times what they keep, and free the rest. glibc keeps what was freed for later
    allocations, in each thread's arena: opening a 50,000-line file left the server 470 MB larger,
    three quarters of it free, and reading it into its folder's project graph 110 MB
    (bench/README.md, 2026-12-02). Giving it back costs ~1 ms per 4 MB, a small part of the parse.
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.lru_cache(maxsize=None)
def _malloc_trim() -> Optional[Callable[[int], int]]:
    """glibc's `malloc_trim`, or None: other C libraries have none (macOS returns free pages itself)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    return getattr(ctypes.CDLL(None), "malloc_trim", None)
