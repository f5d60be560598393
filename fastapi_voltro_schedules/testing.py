"""Helpers for testing schedules: a clock you move by hand.

::

    clock = ManualClock(datetime(2026, 3, 1, 9, 0, tzinfo=UTC))
    scheduling = Scheduling(schedules=[...], clock=clock)
    await clock.advance(60)   # timers due within the minute fire
"""

from __future__ import annotations

import heapq
import itertools
from datetime import UTC, datetime, timedelta

import anyio


class ManualClock:
    """A :class:`~fastapi_voltro_schedules.clock.Clock` that only moves when told to.

    ``sleep()`` parks the caller until :meth:`advance` (or :meth:`set`) moves time past its
    deadline. Stepping backwards is allowed — that is how tests simulate a wall-clock step.

    :meth:`monotonic` moves with :meth:`advance` only: :meth:`set` is a step of the wall clock
    (NTP, an operator), which elapsed time — and so every deadline — does not see.
    """

    def __init__(self, start: datetime | None = None) -> None:
        start = start or datetime(2026, 1, 1, tzinfo=UTC)
        if start.tzinfo is None:
            raise ValueError("ManualClock needs an aware datetime")
        self._now = start.astimezone(UTC)
        self._monotonic = 0.0
        self._sleepers: list[tuple[datetime, int, anyio.Event]] = []
        self._seq = itertools.count()

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._monotonic

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await anyio.lowlevel.checkpoint()
            return
        event = anyio.Event()
        heapq.heappush(
            self._sleepers, (self._now + timedelta(seconds=seconds), next(self._seq), event)
        )
        await event.wait()

    def set(self, instant: datetime) -> None:
        """Jump to ``instant`` (forward or backward) and wake every sleeper now due.

        A step back wakes every sleeper (the Clock contract lets ``sleep()`` return early):
        a real sleep counts elapsed time, which the step does not touch, so a sleeper left
        parked until the wall clock caught up again would oversleep by the whole step."""
        instant = instant.astimezone(UTC)
        if instant < self._now:
            while self._sleepers:
                heapq.heappop(self._sleepers)[2].set()
        self._now = instant
        while self._sleepers and self._sleepers[0][0] <= self._now:
            heapq.heappop(self._sleepers)[2].set()

    async def advance(self, seconds: float = 0.0, *, settle: int = 20) -> None:
        """Move forward by ``seconds`` — wall and elapsed time both — and let woken tasks run
        (``settle`` scheduler passes)."""
        if seconds < 0:
            raise ValueError("advance() moves forward only; set() steps the wall clock back")
        self._monotonic += seconds
        self.set(self._now + timedelta(seconds=seconds))
        for _ in range(settle):
            await anyio.lowlevel.checkpoint()

    @property
    def sleepers(self) -> int:
        """How many tasks are parked in :meth:`sleep`."""
        return len(self._sleepers)
