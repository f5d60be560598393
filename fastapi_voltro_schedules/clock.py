"""Time, injected.

The engine never calls ``datetime.now()`` or ``anyio.sleep()`` directly: it asks a ``Clock``.
Tests pass a :class:`fastapi_voltro_schedules.testing.ManualClock` and move time instead of
sleeping.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable

import anyio


@runtime_checkable
class Clock(Protocol):
    """A source of wall-clock time, of elapsed time, and a way to wait for it."""

    def now(self) -> datetime:
        """The current instant, timezone-aware, in UTC."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never steps (``time.monotonic()``): only differences mean
        anything. Deadlines are measured on it, so an NTP step of the wall clock neither
        cancels a run early nor lets it overrun."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of this clock's time (may return early; callers re-check now())."""
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(max(0.0, seconds))


class DatabaseClock:
    """The shared database's clock, carried forward on this process's monotonic clock.

    Replicas on one Postgres or MariaDB judge each other's runs by the timestamps they write
    (``fired_at``, ``heartbeat_at``): with each host's own wall clock, one replica whose clock
    stepped forward would read every other replica's live run as silent and start a second one,
    and one whose clock lags would look dead to the rest. Reading the time from the database
    they share gives every replica one clock for stamping *and* judging, so no host's clock can
    kill another's run. Between reads the estimate advances on ``monotonic()`` (never stepped),
    so a local step moves nothing past the tolerance below; :meth:`resync` re-reads it (every
    :data:`RESYNC_SECONDS` in the scheduler) to follow the database host's own corrections.

    A host clock within ``tolerance`` of the estimate is used as it is: it is finer than a
    read across the network, and a disagreement that small cannot make a live run look dead
    (liveness allows three heartbeats; the scheduler passes a quarter of one, at most 1 s).

    ``Scheduling`` uses it on server stores when its clock is the real :class:`SystemClock`; an
    injected clock (``ManualClock`` in tests) stays the only time source.
    """

    RESYNC_SECONDS = 30.0
    SAMPLES = 4
    """Reads per :meth:`resync`; the one with the shortest round trip is kept (NTP's clock
    filter): a first statement on a connection can take 10–20 ms, and half of that would be
    the estimate's error."""

    def __init__(
        self,
        local: Clock,
        read: Callable[[], Awaitable[datetime]],
        tolerance: timedelta = timedelta(0),
    ) -> None:
        self.local = local
        """The process's clock: its ``monotonic()`` and ``sleep()`` are used as they are."""
        self.tolerance = tolerance
        self._read = read
        self._base = local.now()
        self._at = local.monotonic()
        self.offset = timedelta(0)
        """Database time − this host's wall time at the last read (for logs and tests)."""

    async def resync(self) -> None:
        """Read the database's clock; the midpoint of the quickest round trip is taken as the
        instant read. Raises what ``read`` raises (the estimate so far stays in force)."""
        best: tuple[float, datetime, float] | None = None
        for _ in range(self.SAMPLES):
            before = self.local.monotonic()
            read = await self._read()
            after = self.local.monotonic()
            if best is None or after - before < best[0]:
                best = (after - before, read, (before + after) / 2)
        assert best is not None
        _, read, at = best
        self._base = read.astimezone(UTC)
        self._at = at
        self.offset = self._base - (
            self.local.now() - timedelta(seconds=self.local.monotonic() - at)
        )

    def now(self) -> datetime:
        estimate = self._base + timedelta(seconds=self.local.monotonic() - self._at)
        wall = self.local.now()
        return wall if abs(wall - estimate) <= self.tolerance else estimate

    def monotonic(self) -> float:
        return self.local.monotonic()

    async def sleep(self, seconds: float) -> None:
        await self.local.sleep(seconds)


def iso_z(instant: datetime) -> str:
    """``2026-03-04T09:00:00.000Z``: how instants appear in logs and JSON."""
    return instant.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
