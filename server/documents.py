"""Scheduling analyses of open documents and notebooks: debounce, one run at a time, stale results dropped.

Each open document (or notebook) is a `Unit` with a generation that every content change bumps.
A change (re)starts the unit's debounce timer; when it fires, the analysis runs in a worker thread
(never on the event loop) while the unit's lock keeps a second analysis of the same unit from
competing for the CPU. A result whose generation is no longer current is dropped: it is never
published, stored or shown, whatever happened meanwhile.
"""
from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Dict, List, Optional, Set

from perflsp.server.analysis import Good, Result, analyse

if TYPE_CHECKING:
    from perflsp.server.app import PerflspServer

log = logging.getLogger("perflsp.server")


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
            self.schedule(unit, editor.debounce_s, "change")

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
                result = await loop.run_in_executor(self.pool, analyse, snap, editor, self.server.encoder, dict(unit.good),
                                                    self.server.projects.facts)
            except Exception:  # an engine bug costs this one analysis, never the server
                log.exception("perflsp: analysing %s failed", unit.key)
                self._release(unit)
                return None
            finally:
                self.in_flight -= 1
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

    def accept(self, unit: Unit, result: Result) -> None:
        unit.result = result
        if not result.degraded:  # only a program that parsed as a whole is the new baseline
            unit.good = {uri: (part.part.text, part.findings) for uri, part in result.parts.items()}
        if result.skipped:
            log.info("perflsp: %s not analysed: %s", unit.key, result.skipped)
        else:
            log.debug("analysed %s generation %d in %.0f ms", unit.key, result.generation, result.elapsed_s * 1000)
        self.server.report_config(result.resolved)
        waiting = [w for w in unit.waiters if not w.done()]
        unit.waiters = []
        for waiter in waiting:
            waiter.set_result(result)
        self.server.deliver(unit, result, pulled=bool(waiting))
        self.server.projects.analysed()

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
