"""The perflsp language server (pygls 2.x): a thin LSP shell over the static engine.

It never re-implements rules, configuration or suppression; it translates LSP requests into calls
of `perflsp.rules` and engine findings into LSP types. Importing this package is cheap: the
engine (libcst and the rules) is imported on first use, in a worker thread.
"""
import gc
import logging
from typing import Optional


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
