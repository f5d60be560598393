"""Time, injected.

The engine never calls ``datetime.now()`` or ``anyio.sleep()`` directly: it asks a ``Clock``.
Tests pass a :class:`fastapi_voltro_schedules.testing.ManualClock` and move time instead of
sleeping.

Two clocks keep wall time that a local step of the host's clock does not move:
:class:`DatabaseClock` (server stores: the database's time, which replicas share) and
:class:`SteadyClock` (what the timer reads on SQLite and in memory: the host's wall clock, taking
a step only once it has held). See :func:`steady`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable

import anyio

from .logs import logger


@runtime_checkable
class Clock(Protocol):
    """A source of wall-clock time, of elapsed time, and a way to wait for it."""

    def now(self) -> datetime:
        """The current instant, timezone-aware, in UTC."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never steps (:func:`elapsed`): only differences mean
        anything. Deadlines are measured on it, so an NTP step of the wall clock neither
        cancels a run early nor lets it overrun."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of this clock's time (may return early; callers re-check now())."""
        ...


if hasattr(time, "CLOCK_BOOTTIME"):

    def elapsed() -> float:
        """Seconds since boot, the time the host spent suspended included (Linux's
        ``CLOCK_BOOTTIME``; elsewhere ``time.monotonic()``). Never stepped by NTP or an
        operator. A suspended host's wall clock and this one move on together when it wakes:
        the slots it slept through are *behind* (the backfill policy's), not a clock step."""
        return time.clock_gettime(time.CLOCK_BOOTTIME)

else:  # pragma: no cover - macOS, Windows
    elapsed = time.monotonic


class SystemClock:
    """The real clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return elapsed()

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


class SteadyClock:
    """The wall clock as the timer reads it: carried forward on the monotonic clock, following
    the wall clock's slewing at once and a *step* only once the step has held.

    The rule (issue 29 item 14): **a slot is owed once it is due on this clock.** Each read
    compares the wall clock with the estimate carried on ``monotonic()`` since the last read:

    * within ``tolerance`` (drift, NTP's slewing): the wall clock's reading is the time, and
      the new anchor;
    * further off: the wall clock *stepped* (NTP, an operator's ``date -s``, a bad time
      source). The step is not taken: the estimate — the time before the step plus the time
      that really elapsed — stays the time. A step forward therefore makes no slot due that is
      not due in elapsed time (none recorded ``missed``, none run early); a step back leaves
      every slot after the last one accounted for due on time (none fires twice, and the timer
      does not go quiet until the wall clock has caught up again);
    * a step that has *held* — the wall clock has kept the same offset from the estimate,
      within ``tolerance``, for ``confirm_seconds`` of elapsed time — is believed, and the wall
      clock is the time again, as it would be for a process started then: forward, the slots
      passed over are behind (the live timer's falling behind: the backfill policy decides);
      back, the slots up to the last one accounted for do not fire again. A step undone within
      that time (the wall clock back within ``tolerance`` of the estimate) never moved anything.

    A host that suspends is not stepped: :func:`elapsed` counts the suspension where the OS
    can (Linux), so its slots are behind on waking, as before.

    Server stores do without it: :class:`DatabaseClock` already keeps the database's time,
    which a local step does not move (:func:`steady`).
    """

    TOLERANCE = timedelta(seconds=1)
    """NTP slews at most 0.5 ms per second (15 ms over the timer's longest sleep), and the two
    clocks are read back to back — but on a loaded host the process can be descheduled
    between the reads. A step this small moves a slot by at most a second either way."""
    CONFIRM_SECONDS = 300.0
    """How long a step must hold before it is believed (like ntpd, which steps its clock only
    for an offset that persisted). Until then, slots come due on elapsed time."""

    def __init__(
        self,
        local: Clock,
        tolerance: timedelta = TOLERANCE,
        confirm_seconds: float = CONFIRM_SECONDS,
    ) -> None:
        self.local = local
        self.tolerance = tolerance
        self.confirm_seconds = confirm_seconds
        self._base: datetime | None = None
        """The estimate's anchor: a wall reading (``None`` until the first read)…"""
        self._at = 0.0
        """…and ``monotonic()`` when it was taken."""
        self.step: timedelta | None = None
        """Wall time − the estimate, while a step is held (for logs and tests)."""
        self._step_since = 0.0

    def now(self) -> datetime:
        wall = self.local.now()
        at = self.local.monotonic()
        base = self._base
        if base is None:
            self._base, self._at = wall, at
            return wall
        estimate = base + timedelta(seconds=at - self._at)
        offset = wall - estimate
        tolerance = self.tolerance
        if -tolerance <= offset <= tolerance:
            if self.step is not None:
                logger.warning("scheduler: wall clock back in step  undoneMs=%+d", _ms(self.step))
                self.step = None
            self._base, self._at = wall, at
            return wall
        step = self.step
        if step is None or abs(offset - step) > tolerance:
            logger.warning(
                "scheduler: wall clock stepped  byMs=%+d (slots come due on elapsed time until "
                "the step has held %d s)",
                _ms(offset if step is None else offset - step),
                int(self.confirm_seconds),
            )
            self.step, self._step_since = offset, at
            return estimate
        self.step = offset  # followed as it slews
        if at - self._step_since < self.confirm_seconds:
            return estimate
        logger.warning(
            "scheduler: wall clock step held %d s — following it  byMs=%+d",
            int(at - self._step_since),
            _ms(offset),
        )
        self.step = None
        self._base, self._at = wall, at
        return wall

    def monotonic(self) -> float:
        return self.local.monotonic()

    async def sleep(self, seconds: float) -> None:
        await self.local.sleep(seconds)


def steady(clock: Clock) -> Clock:
    """``clock`` as the timer should read it: itself when a local step cannot move it
    (:class:`DatabaseClock`, :class:`SteadyClock`), else a :class:`SteadyClock` over it."""
    if isinstance(clock, DatabaseClock | SteadyClock):
        return clock
    return SteadyClock(clock)


def _ms(delta: timedelta) -> int:
    return int(delta.total_seconds() * 1000)


def iso_z(instant: datetime) -> str:
    """``2026-03-04T09:00:00.000Z``: how instants appear in logs and JSON."""
    return instant.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
