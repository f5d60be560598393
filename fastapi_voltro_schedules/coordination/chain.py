"""The in-process line of ``on_overlap="queue"`` on single-process stores.

Single-process deployments (memory, SQLite — coordination ``single``) keep the line in memory
and never write a ``queued`` row: there is no second replica to agree with. The seed's rule
holds all the same: a firing starts when no run of the schedule is in flight here and no
earlier firing (by ``scheduled_at``) still waits.

There is no lock to release, so no path can release from the wrong task: a firing that may
start is handed the line synchronously (a *reservation* under its run id), and whoever ends a
run of the schedule — any task — only calls :meth:`Chain.wake`, which hands the line to the
head waiter. A reservation ends when the run's row is in flight (or its insert failed, or its
waiter was cancelled).
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

import anyio

from .base import Step

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ..store import RunRecord
    from ..watchdog import Watchdog, Watched
    from .inflight import InFlight


@dataclass(order=True, slots=True)
class _Waiter:
    slot: datetime
    seq: int
    run_id: str = field(compare=False)
    queued: RunRecord | None = field(compare=False, default=None)
    handed: anyio.Event = field(compare=False, default_factory=anyio.Event)


class Chain:
    def __init__(self, inflight: InFlight, watchdog: Watchdog | None = None) -> None:
        self._inflight = inflight
        self._watchdog = watchdog
        """Beats the waiters whose ``queued`` row is written (``enqueue(beat=True)``)."""
        self._waiting: dict[str, list[_Waiter]] = {}
        self._reserved: dict[str, str] = {}
        """Per schedule: the run id the line was handed to, until its run is in flight."""
        self._handed: dict[str, _Waiter] = {}
        """Per schedule: the waiter the line was handed to, until its run is in flight — its
        turn may be held a while (a paused schedule), and it still waits meanwhile."""
        self._seq = itertools.count()
        self._withdrawn: set[str] = set()
        """Run ids of waiters taken out of the line (their schedule deleted): never started."""
        inflight.on_end.append(self.wake)

    def _free(self, name: str) -> bool:
        return name not in self._reserved and not self._inflight.runs[name]

    def try_start(self, name: str, run_id: str) -> bool:
        """Take the line now if it is free and nobody waits; else the caller must wait."""
        if self._free(name) and not self._waiting.get(name):
            self._reserved[name] = run_id
            return True
        return False

    def behind(self, name: str) -> RunRecord | datetime | None:
        """What a new firing would wait behind: the last waiter's slot, else the run in
        flight."""
        waiting = self._waiting.get(name)
        if waiting:
            return waiting[-1].slot
        return self._inflight.held(name)

    def pending(self) -> list[RunRecord]:
        """The firings waiting here, as the (unwritten) ``queued`` rows whose ids their runs
        will carry — what the run routes answer for them meanwhile."""
        waiters = [*self._handed.values(), *(w for ws in self._waiting.values() for w in ws)]
        return [w.queued for w in waiters if w.queued is not None]

    def enqueue(
        self,
        queued: RunRecord,
        start: Callable[[RunRecord], Awaitable[RunRecord | None]],
        *,
        beat: bool = False,
    ) -> ChainTurn:
        """Join the line with ``queued`` (an unwritten row); ``start`` writes the ``running``
        row once the turn comes. ``beat``: the row is written — it beats while it waits, so
        a waiter here is never taken for a stopped replica's (SQLite ``--workers``)."""
        waiter = _Waiter(queued.scheduled_at, next(self._seq), queued.id, None if beat else queued)
        bisect.insort(self._waiting.setdefault(queued.name, []), waiter)
        watched = None
        if beat and self._watchdog is not None:
            watched = self._watchdog.keep_alive(queued.id)
        return ChainTurn(self, queued, waiter, start, watched)

    def started(self, name: str, run_id: str) -> None:
        """The reserved run is in flight (its row written): the reservation ends."""
        if self._reserved.get(name) == run_id:
            del self._reserved[name]
            self._handed.pop(name, None)

    def give_up(self, name: str, run_id: str) -> None:
        """The reserved run will not start (insert failed, cancelled): hand the line on."""
        if self._reserved.get(name) == run_id:
            del self._reserved[name]
            self._handed.pop(name, None)
            self.wake(name)

    def leave(self, name: str, waiter: _Waiter) -> None:
        waiting = self._waiting.get(name, [])
        if waiter in waiting:
            waiting.remove(waiter)
        self.give_up(name, waiter.run_id)

    def withdraw(self, name: str) -> list[RunRecord]:
        """``name`` was deleted: every firing waiting in its line leaves it and never starts
        (a firing already handed the line is starting: it runs, like one in flight). Returns
        the ``queued`` rows of those that wrote none (the caller records them); a written
        one's row is the ledger's to write off."""
        withdrawn: list[RunRecord] = []
        for waiter in self._waiting.pop(name, []):
            self._withdrawn.add(waiter.run_id)
            waiter.handed.set()
            if waiter.queued is not None:
                withdrawn.append(waiter.queued)
        return withdrawn

    def is_withdrawn(self, run_id: str) -> bool:
        """Whether the waiter ``run_id`` was taken out of the line (and forget it)."""
        if run_id in self._withdrawn:
            self._withdrawn.discard(run_id)
            return True
        return False

    def wake(self, name: str) -> None:
        """A run of ``name`` ended here (or a reservation was given up): hand the line to the
        earliest waiter if nothing holds it."""
        waiting = self._waiting.get(name)
        if not waiting or not self._free(name):
            return
        head = waiting.pop(0)
        self._reserved[name] = head.run_id
        self._handed[name] = head
        head.handed.set()


class ChainTurn:
    """One firing in the in-process line."""

    def __init__(
        self,
        chain: Chain,
        queued: RunRecord,
        waiter: _Waiter,
        start: Callable[[RunRecord], Awaitable[RunRecord | None]],
        watched: Watched | None = None,
    ) -> None:
        self._chain = chain
        self._queued = queued
        self._waiter = waiter
        self._start = start
        self._done = False
        self._watched = watched

    def _unwatch(self) -> None:
        if self._watched is not None and self._chain._watchdog is not None:
            self._chain._watchdog.unwatch(self._watched)
            self._watched = None

    async def next(self) -> Step | None:
        if self._done:
            return None
        self._done = True
        name = self._queued.name
        try:
            await self._waiter.handed.wait()
            if self._chain.is_withdrawn(self._waiter.run_id):
                return None  # its schedule was deleted: written off, never started
            run = await self._start(self._queued)
        except BaseException:
            self._chain.leave(name, self._waiter)
            raise
        finally:
            self._unwatch()
        if run is None:
            self._chain.give_up(name, self._queued.id)
            return None
        self._chain.started(name, run.id)
        return Step(run)

    def close(self) -> None:
        self._unwatch()
        self._chain.leave(self._queued.name, self._waiter)
