"""One task that watches every run in flight: deadlines (``max_runtime_ms``) and heartbeats.

A task group per run (a watchdog task and a heartbeat task each) costs more than the no-op
handlers it guards at 1,000 firings a second. Here a single loop sleeps until the nearest
deadline or beat, cancels overdue runs, and bumps ``heartbeat_at`` of every run older than one
interval in one statement — a run shorter than one interval writes no beat.

Deadlines and the beat cadence are measured on the clock's ``monotonic()`` seconds, never on
the wall clock: a forward NTP step used to cancel every run in flight as overdue (and a
backward one let them overrun by the step). The wall clock only stamps ``heartbeat_at``.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

import anyio

from .clock import Clock
from .errors import StoreUnavailableError
from .logs import logger
from .store import Store

MAX_SLEEP_SECONDS = 30.0


class Stoppable(Protocol):
    """What stops a run: its cancel scope, or its asyncio task itself (not its bound
    ``cancel``: that would be one more object per firing for the collector)."""

    def cancel(self) -> object: ...


@dataclass(eq=False, slots=True)
class Watched:
    """A ``queued`` row this process beats like a running one, with no deadline
    (:meth:`Watchdog.keep_alive`): a waiter that stops beating is a corpse by the same rule."""

    run_id: str


class WatchedHerd:
    """Runs started together under one deadline (a herd's schedules that share a
    ``max_runtime``; a single firing is a herd of one): one deadline entry and one object for
    all of them — an object per run was one more per firing for the collector to promote.
    Run ``j`` is live while ``stops[j]`` is set; :meth:`Watchdog.end` says whether the deadline
    cut it short. Ordered by ``(expires, seq)``: it is its own entry in the deadline heap."""

    __slots__ = ("done", "expires", "live", "run_ids", "seq", "started", "stops", "timed_out")

    def __init__(self, started: float, expires: float, seq: int) -> None:
        self.run_ids: list[str] = []
        self.stops: list[Stoppable | None] = []
        self.started = started
        self.expires = expires
        self.seq = seq
        self.timed_out: set[int] = set()
        self.live = 0
        self.done = False

    def __lt__(self, other: WatchedHerd) -> bool:
        if self.expires != other.expires:
            return self.expires < other.expires
        return self.seq < other.seq

    def add(self, run_id: str, stop: Stoppable) -> int:
        """Watch one more run of the herd; returns its index (for :meth:`Watchdog.end`)."""
        self.run_ids.append(run_id)
        self.stops.append(stop)
        self.live += 1
        return len(self.stops) - 1

    def expire(self) -> None:
        for j, stop in enumerate(self.stops):
            if stop is not None:
                self.timed_out.add(j)
                stop.cancel()

    def beating(self) -> list[str]:
        """The ids of its runs still going."""
        stops = self.stops
        return [run_id for j, run_id in enumerate(self.run_ids) if stops[j] is not None]


class Watchdog:
    """Deadlines and heartbeats of this process's runs."""

    def __init__(self, clock: Clock, store: Store, replica_id: str, heartbeat_ms: int) -> None:
        self.clock = clock
        self.store = store
        self.replica_id = replica_id
        self.interval = timedelta(milliseconds=heartbeat_ms)
        self._interval_s = heartbeat_ms / 1000
        self._runs: dict[str, Watched] = {}
        self._herds: set[WatchedHerd] = set()
        self._deadlines: list[WatchedHerd] = []
        self._seq = itertools.count()
        self._sleep_scope: anyio.CancelScope | None = None
        self._wake_at: float | None = None
        self._next_beat: float | None = None

    def watch_herd(self, deadline: datetime, at: tuple[float, datetime]) -> WatchedHerd:
        """Watch runs started together (``at``: the clock's ``(monotonic(), now())`` read once
        for them) that must all be over by ``deadline``; add them with
        :meth:`WatchedHerd.add`, let each go with :meth:`end`."""
        started, now = at
        herd = WatchedHerd(started, started + (deadline - now).total_seconds(), next(self._seq))
        self._herds.add(herd)
        self._push(herd)
        return herd

    def _push(self, entry: WatchedHerd) -> None:
        """Into the deadline heap; the loop wakes if this deadline comes before its own."""
        heapq.heappush(self._deadlines, entry)
        if self._wake_at is None or entry.expires < self._wake_at:
            self._wake()

    def end(self, herd: WatchedHerd, j: int) -> bool:
        """Run ``j`` of ``herd`` is over; returns whether the deadline cancelled it."""
        herd.stops[j] = None
        herd.live -= 1
        if herd.live == 0:
            herd.done = True
            self._herds.discard(herd)
            self._compact()
        return j in herd.timed_out

    def keep_alive(self, run_id: str) -> Watched:
        """Beat ``run_id`` (a ``queued`` row) like a running one, with no deadline, until
        :meth:`unwatch`: a waiter that stops beating is a corpse by the same rule."""
        watched = Watched(run_id)
        self._runs[run_id] = watched
        return watched

    def beats(self, run_id: str) -> bool:
        """Whether this process beats ``run_id`` now (a run in flight, a waiter in line) —
        what this replica knows of its own rows better than their ``heartbeat_at`` tells: a
        beat held back by a loaded machine or a slow database leaves a run that is going here
        looking dead. A scan of the runs in flight: asked by the slow paths only (a queue's
        line, the takeovers of rows left behind), never per firing."""
        return run_id in self._runs or any(run_id in herd.beating() for herd in self._herds)

    def unwatch(self, watched: Watched) -> None:
        if self._runs.get(watched.run_id) is watched:
            del self._runs[watched.run_id]

    def _compact(self) -> None:
        # A finished run's deadline entry would otherwise sit in the heap until its deadline
        # (30 minutes by default): at 1,000 firings a second, 1.8 million dead entries. Drop
        # them in bulk once they are the majority (every entry beyond the watched herds is a
        # finished one), so the heap stays about the live runs.
        finished = len(self._deadlines) - len(self._herds)
        if finished > 64 and finished * 2 > len(self._deadlines):
            self._deadlines = [entry for entry in self._deadlines if not entry.done]
            heapq.heapify(self._deadlines)

    def _wake(self) -> None:
        if self._sleep_scope is not None:
            self._sleep_scope.cancel()

    async def run(self) -> None:
        """The loop; runs until cancelled."""
        self._next_beat = self.clock.monotonic() + self._interval_s
        while True:
            now = self.clock.monotonic()
            self._expire(now)
            if now >= self._next_beat:
                await self._beat(now)
                self._next_beat = now + self._interval_s
            while self._deadlines and self._deadlines[0].done:
                heapq.heappop(self._deadlines)
            wake_at = self._next_beat
            if self._deadlines:
                wake_at = min(wake_at, self._deadlines[0].expires)
            self._wake_at = wake_at
            # clock.sleep() waits on the wall clock and may wake early after a step: the loop
            # re-reads monotonic() and sleeps again
            seconds = min(max(wake_at - now, 0.0), MAX_SLEEP_SECONDS)
            with anyio.CancelScope() as self._sleep_scope:
                await self.clock.sleep(seconds)
            self._sleep_scope = None

    def _expire(self, now: float) -> None:
        """Cancel every run whose ``expires`` is at or before ``now`` (monotonic seconds)."""
        while self._deadlines and self._deadlines[0].expires <= now:
            entry = heapq.heappop(self._deadlines)
            if not entry.done:
                entry.expire()

    async def _beat(self, now: float) -> None:
        due = list(self._runs)  # waiters in line: beaten every interval from the first
        for herd in self._herds:
            if now - herd.started >= self._interval_s:
                due.extend(herd.beating())
        if not due:
            return
        try:
            await self.store.heartbeat(due, self.clock.now(), self.replica_id)
        except StoreUnavailableError as exc:
            logger.warning("schedule: heartbeat failed  runs=%d: %s", len(due), exc)
