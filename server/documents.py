"""Scheduling analyses of open documents and notebooks: debounce, one run at a time, stale results dropped.

Each open document (or notebook) is a `Unit` with a generation that every content change bumps.
A change (re)starts the unit's debounce timer, unless the unit's analyses are cheap (under
`CHEAP_S` of CPU time; an edit inside one statement of a file whose tree is kept re-parses that statement only,
see `perflsp.rules.reparse`, and is cheap at any file size): then waiting would cost more than
analysing, and the change is analysed at once, so diagnostics follow every keystroke; only
expensive whole analyses are coalesced over the configured debounce. When the timer fires, the
analysis runs in a worker thread (never on the event loop) while the unit's lock keeps a second
analysis of the same unit from competing for the CPU; it analyses the latest version when it
starts and stops between its steps once a newer one arrives. A result whose generation is no
longer current is dropped: it is never published, stored or shown, whatever happened meanwhile.
"""
from __future__ import annotations

import asyncio
import gc
import logging
import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Deque, Dict, List, Optional, Set

from perflsp.server import end_start_up, release_free_memory
from perflsp.server.analysis import Good, Result, Stale, analyse

if TYPE_CHECKING:
    from perflsp.rules.reparse import Reparser
    from perflsp.server.app import PerflspServer

log = logging.getLogger("perflsp.server")

# Analyses that take less than this (the median CPU time of a unit's last `COSTS` analyses: one
# slow analysis, or a machine busy with other work, does not make the next keystroke wait) are
# cheaper than the wait: the next change of that unit is analysed at once instead of after the
# debounce.
CHEAP_S = float(os.environ.get("PERFLSP_CHEAP_MS", "50")) / 1000  # the variable is a benchmark knob
COSTS = 3

# After an analysis the objects that stay (imports, the project graph, results) are moved out of
# the collector's sight (`gc.freeze`), so the next analysis' full collections do not walk them
# again: those pauses land in the keystroke latency. Cyclic garbage frozen with them would never
# be freed, so every `THAW_EVERY` freezes the heap is thawed and collected once (after publishing),
# sooner once trees of about `THAW_BYTES` were let go, and when a file closes. A tree and its walk
# (cycles of frames and functions) that a whole parse replaced, the cap dropped or a closed file
# left stayed frozen for up to 100 analyses: a 10,000-line file grew the server by 7 MB with every
# edit that spanned statements (bench/README.md, 2026-12-02). A full collection costs about a
# tenth of the whole parse that let such a tree go.
GC_FREEZE = os.environ.get("PERFLSP_GC_FREEZE", "1") != "0"  # the variable is a benchmark knob
THAW_EVERY = 100
THAW_BYTES = 16 * 2**20

# Each open file keeps the libcst tree of its last version that parsed, and the engine's walk of
# it, so that an edit re-parses and re-walks only the statement it changed (`perflsp.rules.reparse`).
# They take ~55 bytes per character of source (measured on timm's vision_transformer.py: 6 MB of
# tree and 5.5 MB of walk for 200 kB; ~40 on torch's own code, bench/README.md 2026-12-02); past
# this many bytes the trees of the files analysed longest ago are dropped (their next edit parses
# the whole file).
TREE_BYTES_PER_CHAR = 55
MAX_TREE_BYTES = int(float(os.environ.get("PERFLSP_MAX_TREE_MB", "256")) * 2**20)
# `PERFLSP_INCREMENTAL=0` parses (and summarises) every version whole: a benchmark knob.
INCREMENTAL = os.environ.get("PERFLSP_INCREMENTAL", "1") != "0"


class Unit:
    def __init__(self, key: str, notebook: bool):
        self.key = key
        self.notebook = notebook
        self.generation = 0
        self.timer: Optional[asyncio.TimerHandle] = None
        self.scheduled: Optional[int] = None  # the generation a timer or run is pending for
        self.lock = asyncio.Lock()
        self.result: Optional[Result] = None  # the latest accepted result (its generation may be older)
        self.good: Good = {}
        self.waiters: List[asyncio.Future] = []
        self.published: Set[str] = set()  # part uris that hold pushed diagnostics
        self.closed = False
        self.path: Optional[str] = None  # the resolved file path (None for notebooks and untitled documents)
        self.costs: Deque[float] = deque(maxlen=COSTS)  # CPU seconds of its last analyses (none yet: unknown)
        self.reparser: Optional["Reparser"] = None  # its last tree (files only), made in a worker
        self.analysed_at = 0  # when its last analysis was accepted (`Documents.accepted`), for the tree cap

    def current(self) -> bool:
        return self.result is not None and self.result.generation == self.generation


class Documents:
    def __init__(self, server: "PerflspServer", workers: int = 2):
        self.server = server
        self.units: Dict[str, Unit] = {}
        # Two workers: a slow check of a huge file must not hold back the file next to it.
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="perflsp-analysis")
        self.in_flight = 0  # analyses running now; the workspace scan yields to them
        self.tasks: Set[asyncio.Task] = set()
        self.freezes = 0
        self.accepted = 0
        self.let_go_bytes = 0  # trees let go since the heap was last thawed (estimated: TREE_BYTES_PER_CHAR)

    # --- events ----------------------------------------------------------------------------------

    def opened(self, key: str, notebook: bool = False) -> Unit:
        unit = self.units.get(key)
        if unit is None:
            unit = self.units[key] = Unit(key, notebook)
        unit.closed = False
        unit.generation += 1
        self.schedule(unit, 0.0, "open")
        return unit

    def changed(self, key: str) -> None:
        unit = self.units.get(key)
        if unit is None:
            return
        unit.generation += 1
        editor = self.server.editor_for_uri(key)
        if editor.run == "onType":
            self.schedule(unit, self.debounce_s(unit, editor.debounce_s), "change")

    @staticmethod
    def debounce_s(unit: Unit, configured_s: float) -> float:
        """The wait before analysing a change: none while the unit's analyses are cheap (an edit
        inside one statement of a file whose tree is kept is, at any file size) or before any was
        measured, else the configured debounce."""
        if not unit.costs or sorted(unit.costs)[len(unit.costs) // 2] < CHEAP_S:  # the median (`statistics` costs 20 ms of start-up)
            return 0.0
        return configured_s

    def saved(self, key: str) -> None:
        unit = self.units.get(key)
        if unit is not None and (self.server.editor_for_uri(key).run == "onSave" or not unit.current()):
            self.schedule(unit, 0.0, "save")

    def closed(self, key: str) -> Optional[Unit]:
        unit = self.units.pop(key, None)
        if unit is None:
            return None
        unit.closed = True
        unit.generation += 1
        if unit.timer is not None:
            unit.timer.cancel()
        for waiter in unit.waiters:
            if not waiter.done():
                waiter.cancel()
        if unit.result is not None:  # its tree, walk and results are garbage now, frozen with the rest
            self.let_go(_chars(unit.result))
            if self.freeze(thaw=True):
                release_free_memory()
        return unit

    def relint_all(self, reason: str) -> None:
        """Analyse every open unit again (settings or config files changed)."""
        for unit in list(self.units.values()):
            self.schedule(unit, 0.0, reason)

    # --- running ---------------------------------------------------------------------------------

    def schedule(self, unit: Unit, delay_s: float, reason: str) -> None:
        if unit.timer is not None:
            unit.timer.cancel()
        unit.scheduled = unit.generation
        loop = asyncio.get_running_loop()

        def fire() -> None:
            if unit.timer is handle:
                unit.timer = None
            task = loop.create_task(self._run(unit, reason))
            self.tasks.add(task)  # the loop keeps only weak references to tasks
            task.add_done_callback(self.tasks.discard)

        handle = unit.timer = loop.call_later(delay_s, fire)

    async def _run(self, unit: Unit, reason: str, publish: bool = True) -> Optional[Result]:
        if not self.server.config.ready.is_set():
            # A document opened right after `initialized`: its settings are still on their way.
            try:
                await asyncio.wait_for(self.server.config.ready.wait(), timeout=5.0)
            except asyncio.TimeoutError:
                pass
        async with unit.lock:
            generation = unit.generation
            if unit.closed or (publish and unit.current() and reason in ("change", "save")):
                return unit.result if not unit.closed else None
            snap = self.server.snapshot(unit, reason)
            if snap is None:
                self._release(unit)
                return None
            editor = self.server.editor_for_uri(unit.key)
            loop = asyncio.get_running_loop()
            log.debug("analysing %s generation %d (%s)", unit.key, generation, reason)
            self.in_flight += 1
            try:
                result = await loop.run_in_executor(self.pool, self._analyse, unit, snap, editor, dict(unit.good),
                                                    generation)
            except Stale:  # as a result dropped below: the newer version's run answers the waiting requests
                log.debug("stopped analysing %s generation %d: generation %d arrived", unit.key, generation,
                          unit.generation)
                return None
            except Exception:  # an engine bug costs this one analysis, never the server
                log.exception("perflsp: analysing %s failed", unit.key)
                self._release(unit)
                return None
            finally:
                self.in_flight -= 1
            # Measured even when the result turns out stale; an analysis that ran during the engine's
            # warm-up (imports) says nothing of what analyses cost.
            if not result.cold:
                unit.costs.append(result.cpu_s)
        if unit.closed or unit.generation != generation:
            # A newer edit arrived while this version was analysed: its result is irrelevant
            # and must never reach the client (the newer version's own run publishes).
            log.debug("dropped the result of %s generation %d: generation %d arrived meanwhile",
                      unit.key, generation, unit.generation)
            return None
        if not publish:
            return result
        self.accept(unit, result)
        return result

    def _analyse(self, unit: Unit, snap, editor, good: Good, generation: int) -> Result:
        """(worker, under the unit's lock) One analysis; it stops early once a newer version arrives."""
        if unit.reparser is None and not unit.notebook and INCREMENTAL:
            from perflsp.rules.reparse import Reparser  # imports libcst: never on the event loop

            unit.reparser = Reparser()
        return analyse(snap, editor, self.server.encoder, good, self.server.projects.facts, unit.reparser,
                       lambda: unit.closed or unit.generation != generation)

    def accept(self, unit: Unit, result: Result) -> None:
        self.accepted += 1
        unit.analysed_at = self.accepted
        self._cap_trees()
        # A whole parse lets go of a tree the size of the text: the one it replaced, or its own
        # where no tree is kept (notebooks); a file's first keeps its tree.
        if not result.incremental and (unit.result is not None or unit.reparser is None):
            self.let_go(_chars(result))
        unit.result = result
        if not result.degraded:  # only a program that parsed as a whole is the new baseline
            unit.good = {uri: (part.part.text, part.findings) for uri, part in result.parts.items()}
        if result.skipped:
            log.info("perflsp: %s not analysed: %s", unit.key, result.skipped)
        else:
            log.debug("analysed %s generation %d in %.0f ms%s", unit.key, result.generation, result.elapsed_s * 1000,
                      " (the statements edited parsed again)" if result.incremental else "")
        self.server.report_config(result.resolved)
        waiting = [w for w in unit.waiters if not w.done()]
        unit.waiters = []
        for waiter in waiting:
            waiter.set_result(result)
        self.server.deliver(unit, result, pulled=bool(waiting))
        self.server.projects.analysed()
        if not gc.isenabled():  # the first analysis after start-up is published
            end_start_up(GC_FREEZE)  # a full collection
            collected = True
        else:
            collected = self.freeze()
        if collected or not result.incremental:
            release_free_memory()

    def _cap_trees(self) -> None:
        """Drop the trees of the files analysed longest ago while they take more than the cap
        (never the tree of a file being analysed now)."""
        held = [u for u in self.units.values() if u.reparser is not None and u.reparser.text is not None]
        total = sum(len(u.reparser.text) for u in held) * TREE_BYTES_PER_CHAR  # type: ignore[union-attr, arg-type]
        for unit in sorted(held, key=lambda u: u.analysed_at):
            if total <= MAX_TREE_BYTES:
                break
            if not unit.lock.locked():
                total -= len(unit.reparser.text) * TREE_BYTES_PER_CHAR  # type: ignore[union-attr, arg-type]
                self.let_go(len(unit.reparser.text))  # type: ignore[union-attr, arg-type]
                unit.reparser = None

    def let_go(self, chars: int) -> None:
        """A tree of a text of `chars` characters (and its walk) became garbage, frozen maybe."""
        self.let_go_bytes += chars * TREE_BYTES_PER_CHAR

    def freeze(self, thaw: bool = False) -> bool:
        """Hide what survived the analysis from the collector (see `GC_FREEZE`); never while another
        runs. `thaw`: collect the whole heap first, whatever was let go. Whether it was collected."""
        if not GC_FREEZE or self.in_flight:
            return False
        self.freezes += 1
        thaw = thaw or self.freezes % THAW_EVERY == 0 or self.let_go_bytes > THAW_BYTES
        if thaw:
            gc.unfreeze()
            gc.collect()
            self.let_go_bytes = 0
        else:
            gc.collect(1)  # the young garbage of this analysis, not kept forever
        gc.freeze()
        return thaw

    def _release(self, unit: Unit) -> None:
        # Nothing new will come for this generation: answer the waiting requests with what the
        # client already has, so a pull never hangs on a failed analysis.
        unit.scheduled = None
        waiting, unit.waiters = unit.waiters, []
        fallback = unit.result or Result(unit.key, unit.generation, {})
        for waiter in waiting:
            if not waiter.done():
                waiter.set_result(fallback)

    # --- asking for results ----------------------------------------------------------------------

    async def latest(self, unit: Unit) -> Result:
        """The result the client should show now (pull): the current generation's while linting on
        type, the last one (from open or save) while linting on save."""
        onsave = self.server.editor_for_uri(unit.key).run == "onSave"
        if unit.result is not None and (onsave or unit.current()):
            return unit.result
        if unit.scheduled != unit.generation:
            self.schedule(unit, 0.0, "request")
        waiter = asyncio.get_running_loop().create_future()
        unit.waiters.append(waiter)
        return await waiter

    async def fresh(self, unit: Unit) -> Optional[Result]:
        """A result for exactly the current text (code actions, hover), computed now if need be."""
        if unit.current():
            return unit.result
        if self.server.editor_for_uri(unit.key).run == "onType":
            return await self.latest(unit)
        # Linting on save: analyse the unsaved text for this request without publishing it.
        result = await self._run(unit, "request", publish=False)
        return result if result is not None else unit.result

    def shutdown(self) -> None:
        for unit in self.units.values():
            if unit.timer is not None:
                unit.timer.cancel()
        self.pool.shutdown(wait=False, cancel_futures=True)


def _chars(result: Result) -> int:
    """The characters a result's tree was parsed from (none when nothing was parsed)."""
    return 0 if result.skipped else sum(len(part.part.text) for part in result.parts.values())
