"""The timer: one loop over a heap of next instants. It only knows instants; every firing it
finds due goes to the dispatcher.

10,000 schedules are one task and one heap, not 10,000 sleeping tasks. Each schedule keeps
``last_planned`` — the newest slot it has accounted for (fired, skipped or recorded missed).
On every wake the slots in ``(last_planned, now]`` are due; more than one means the process
fell behind (a busy loop, a suspended host or VM: time that really elapsed) and the backfill
policy decides. Because the next instant is always derived from ``last_planned`` and never
from a sleep's length, no slot fires twice and none is lost silently.

``now`` is the timer's own clock (:func:`~.clock.steady`): a slot is owed once it is due on
the wall clock carried forward on the monotonic one. A step of the host's wall clock is not
taken until it has held for :attr:`~.clock.SteadyClock.CONFIRM_SECONDS` — a step forward
records no slot ``missed`` and runs none early; a step back leaves the next slot due on time —
and then it is taken as a process started then would take it (see :class:`~.clock.SteadyClock`).
On server stores the timer reads the database's clock, which a local step does not move.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

import anyio

from .clock import steady
from .fire_requests import Due
from .logs import logger
from .pauses import NO_PAUSES, PauseView
from .planning import passed_slots, unplanned_after_edit

if TYPE_CHECKING:
    from .clock import Clock
    from .definition import Schedule
    from .dispatcher import Dispatcher

MAX_SLEEP_SECONDS = 30.0
"""Longest single sleep: every wait is re-evaluated against the clock at least this often."""
IDLE_SECONDS = 1.0
"""A wake that found nothing due and sleeps at least this long is a quiet moment (see
:attr:`Timer.quiet`)."""


@dataclass(slots=True)
class _Armed:
    schedule: Schedule
    last_planned: datetime
    slot: datetime
    """The first occurrence after ``last_planned``: schedules on one cron sharing it share
    their walk (see :meth:`Timer.dispatch_due`)."""
    due_at: datetime


class Timer:
    def __init__(self, clock: Clock, dispatcher: Dispatcher, pauses: PauseView = NO_PAUSES) -> None:
        self.clock = clock
        self.time = steady(clock)
        """What the timer judges due-ness by (see the module docstring)."""
        self.pauses = pauses
        self.dispatcher = dispatcher
        # A heap of distinct instants, each with the schedules due then. A herd of 10,000
        # schedules on one cron is one heap entry and a list, not 10,000 heap pushes.
        self._instants: list[datetime] = []
        self._due: dict[datetime, list[_Armed]] = {}
        self._armed: dict[str, _Armed] = {}
        self._nap: anyio.CancelScope | None = None
        """The loop's current sleep (``None`` while it works or before it runs)."""
        self.running = False
        """Inside :meth:`run`: firings found due can be handed to the dispatcher."""
        self.quiet: Callable[[], None] | None = None
        """Told when a wake found nothing due and the next instant is at least
        :data:`IDLE_SECONDS` away — after arming, and on the long sleeps between rare instants
        (the engine's garbage-collection pacing, :mod:`.gcpacing`: the work done since the last
        herd, a boot's or a takeover's, is collected before the next herd, not inside it)."""

    def arm(self, schedule: Schedule, last_planned: datetime) -> None:
        slot = schedule.next_occurrence(last_planned)
        armed = self._armed[schedule.name] = _Armed(
            schedule, last_planned, slot, schedule.fires_at(slot)
        )
        self._enqueue(armed)

    def rearm(self, schedule: Schedule, after: datetime) -> None:
        """Arm a schedule written at run time — new, or an edit of one armed here — from
        ``after`` (its version's ``effective_from``): its first slot is the first one after
        it. An edited schedule's slots already due are handed to the dispatcher first (they
        belong to the version they were due under), and nothing it accounted for fires again;
        the new cadence's slots it stepped over meanwhile (an edit read a beat late, see
        :func:`.planning.unplanned_after_edit`) are handed over as late ones.
        Wakes the loop: the new first slot may come before the instant it sleeps until."""
        old = self._armed.get(schedule.name)
        if old is not None:
            if self.running:
                self.dispatch_due(self.time.now())
                owed = unplanned_after_edit(
                    old.schedule.spec, schedule.spec, after, old.last_planned
                )
                if owed and not self.pauses.is_paused(schedule.name):
                    late = Due()
                    late.add(schedule, owed)  # planned by its backfill, like a timer behind
                    self.dispatcher.spawn(self.dispatcher.fire, late)
            after = max(after, old.last_planned)
        self.arm(schedule, after)
        self._wake()

    def disarm(self, name: str) -> bool:
        """Stop firing ``name`` (a run-time schedule deleted): its heap entries are left to be
        skipped (see :meth:`dispatch_due`). A run in flight is not touched."""
        return self._armed.pop(name, None) is not None

    def _wake(self) -> None:
        if self._nap is not None:
            self._nap.cancel()

    def _enqueue(self, armed: _Armed) -> None:
        bucket = self._due.get(armed.due_at)
        if bucket is None:
            bucket = self._due[armed.due_at] = []
            heapq.heappush(self._instants, armed.due_at)
        bucket.append(armed)

    def next_firing(self, name: str) -> datetime | None:
        armed = self._armed.get(name)
        return None if armed is None else armed.due_at

    def seconds_until_next(self, now: datetime | None = None) -> float:
        """How long nothing is due (at most :data:`MAX_SLEEP_SECONDS`; an entry re-armed since
        may make it shorter than it is, never longer). ``now`` defaults to the timer's time."""
        if now is None:
            now = self.time.now()
        if not self._instants:
            return MAX_SLEEP_SECONDS
        return min(MAX_SLEEP_SECONDS, (self._instants[0] - now).total_seconds())

    async def run(self) -> None:
        """Fire what is due, sleep until the next instant (at most 30 s); until cancelled."""
        clock = self.time
        self.running = True
        try:
            while True:
                now = clock.now()
                if self._instants and self._instants[0] <= now:
                    await self.pauses.current()  # a look at the table, if the copy's is old
                dispatched = self.dispatch_due(now)
                wait = MAX_SLEEP_SECONDS
                if self._instants:
                    wait = min(wait, (self._instants[0] - now).total_seconds())
                if not dispatched and wait >= IDLE_SECONDS and self.quiet is not None:
                    self.quiet()
                    # The quiet moment's work (a full collection: 0.3–0.9 s on a busy host)
                    # comes out of the wait: a sleep measured before it oversleeps the next
                    # instant by that much, and its herd starts late.
                    wait -= (clock.now() - now).total_seconds()
                # a schedule armed at run time (rearm) cuts the sleep short
                with anyio.CancelScope() as nap:
                    self._nap = nap
                    await clock.sleep(max(wait, 0.0))
                self._nap = None
        finally:
            self.running = False
            self._nap = None

    def dispatch_due(self, now: datetime) -> bool:
        """Hand every firing due at ``now`` to the dispatcher; whether there was any."""
        # Schedules sharing (cron, zone, first slot owed) share one walk: the herd at :00 costs
        # one cron computation per distinct expression, not one per schedule. The key is the
        # first slot after ``last_planned``, not ``last_planned`` itself: no occurrence lies
        # between the two, so the slots in (last_planned, now] are the same for every schedule
        # sharing it — 10,000 schedules written at run time, each armed from the instant of its
        # own write, are one walk too (keyed by ``last_planned`` they were 10,000: ~0.4 s of
        # loop at the herd's instant). One entry holds the slots, whether the walk was capped
        # and the next occurrence (``None`` when no slot passed).
        walks: dict[tuple[int, datetime], tuple[list[datetime], bool, datetime | None]] = {}
        # The instant's requests as two aligned lists (see dispatcher.Due): none per firing.
        due_now = Due()
        stepped_back: list[_Armed] = []
        live, is_paused = self._armed, self.pauses.is_paused
        while self._instants and self._instants[0] <= now:
            for armed in self._due.pop(heapq.heappop(self._instants)):
                schedule = armed.schedule
                if live.get(schedule.name) is not armed:
                    continue  # re-armed since: that entry is the live one
                walk_key = (id(schedule.spec), armed.slot)
                walk = walks.get(walk_key)
                if walk is None:
                    passed, capped = passed_slots(schedule.spec, armed.last_planned, now)
                    after = schedule.next_occurrence(passed[-1]) if passed else None
                    walk = walks[walk_key] = (passed, capped, after)
                slots, capped, due = walk
                if capped:
                    logger.warning(
                        "schedule: catch-up capped  name=%s slots=%d (older slots not enumerated)",
                        schedule.name,
                        len(slots),
                    )
                if due is None:
                    # The clock went back while we slept (a step it took, see SteadyClock):
                    # re-arm, fire nothing twice.
                    stepped_back.append(armed)
                    continue
                # The entry just popped is the live one: moved to its next instant in place (a
                # new one per firing was an object per firing for the collector to promote).
                armed.last_planned = slots[-1]
                armed.slot = due
                armed.due_at = schedule.fires_at(due)
                self._enqueue(armed)
                if is_paused(schedule.name):
                    continue  # paused: the slots pass unfired and unrecorded (see pauses.py)
                due_now.add(schedule, slots)
        for armed in stepped_back:
            self._enqueue(armed)
        if not due_now.schedules:
            return False
        self.dispatcher.spawn(self.dispatcher.fire, due_now)
        return True
