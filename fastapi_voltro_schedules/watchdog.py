"""One task that watches every run in flight: deadlines (``max_runtime_ms``) and heartbeats.

A task group per run (a watchdog task and a heartbeat task each) costs more than the no-op
handlers it guards at 1,000 firings a second. Here a single loop sleeps until the nearest
deadline or beat, cancels overdue runs, and bumps ``heartbeat_at`` of every run older than one
interval in one statement — a run shorter than one interval writes no beat.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import anyio

from .clock import Clock
from .errors import StoreUnavailableError
from .logs import logger
from .store import Store

MAX_SLEEP_SECONDS = 30.0


@dataclass(eq=False, slots=True)
class Watched:
    """One run under watch; ``timed_out`` is set when the watchdog cancelled it."""

    run_id: str
    fired_at: datetime
    deadline: datetime
    cancel: Callable[[], object] | None
    """Stops the run: its cancel scope's or its task's ``cancel``."""
    timed_out: bool = False
    done: bool = field(default=False, repr=False)


class Watchdog:
    """Deadlines and heartbeats of this process's runs."""

    def __init__(self, clock: Clock, store: Store, replica_id: str, heartbeat_ms: int) -> None:
        self.clock = clock
        self.store = store
        self.replica_id = replica_id
        self.interval = timedelta(milliseconds=heartbeat_ms)
        self._runs: dict[str, Watched] = {}
        self._deadlines: list[tuple[datetime, int, Watched]] = []
        self._seq = itertools.count()
        self._sleep_scope: anyio.CancelScope | None = None
        self._wake_at: datetime | None = None
        self._next_beat: datetime | None = None

    def watch(
        self, run_id: str, fired_at: datetime, deadline: datetime, cancel: Callable[[], object]
    ) -> Watched:
        watched = Watched(run_id, fired_at, deadline, cancel)
        self._runs[run_id] = watched
        heapq.heappush(self._deadlines, (deadline, next(self._seq), watched))
        if self._wake_at is None or deadline < self._wake_at:
            self._wake()
        return watched

    def keep_alive(self, run_id: str, since: datetime) -> Watched:
        """Beat ``run_id`` (a ``queued`` row) like a running one, with no deadline, until
        :meth:`unwatch`: a waiter that stops beating is a corpse by the same rule."""
        watched = Watched(run_id, since, since, None)
        self._runs[run_id] = watched
        return watched

    def unwatch(self, watched: Watched) -> None:
        watched.done = True
        watched.cancel = None
        if self._runs.get(watched.run_id) is watched:
            del self._runs[watched.run_id]
        # A finished run's deadline entry would otherwise sit in the heap until its deadline
        # (30 minutes by default): at 1,000 firings a second, 1.8 million dead entries. Drop
        # them in bulk once they are the majority (every entry beyond the watched runs is a
        # finished one), so the heap stays about the live runs.
        finished = len(self._deadlines) - len(self._runs)
        if finished > 64 and finished * 2 > len(self._deadlines):
            self._deadlines = [entry for entry in self._deadlines if not entry[2].done]
            heapq.heapify(self._deadlines)

    def _wake(self) -> None:
        if self._sleep_scope is not None:
            self._sleep_scope.cancel()

    async def run(self) -> None:
        """The loop; runs until cancelled."""
        self._next_beat = self.clock.now() + self.interval
        while True:
            now = self.clock.now()
            self._expire(now)
            if now >= self._next_beat:
                await self._beat(now)
                self._next_beat = now + self.interval
            while self._deadlines and self._deadlines[0][2].done:
                heapq.heappop(self._deadlines)
            wake_at = self._next_beat
            if self._deadlines:
                wake_at = min(wake_at, self._deadlines[0][0])
            self._wake_at = wake_at
            seconds = min(max((wake_at - now).total_seconds(), 0.0), MAX_SLEEP_SECONDS)
            with anyio.CancelScope() as self._sleep_scope:
                await self.clock.sleep(seconds)
            self._sleep_scope = None

    def _expire(self, now: datetime) -> None:
        while self._deadlines and self._deadlines[0][0] <= now:
            _, _, watched = heapq.heappop(self._deadlines)
            if not watched.done and watched.cancel is not None:
                watched.timed_out = True
                watched.cancel()

    async def _beat(self, now: datetime) -> None:
        due = [w.run_id for w in self._runs.values() if now - w.fired_at >= self.interval]
        if not due:
            return
        try:
            await self.store.heartbeat(due, now, self.replica_id)
        except StoreUnavailableError as exc:
            logger.warning("schedule: heartbeat failed  runs=%d: %s", len(due), exc)
