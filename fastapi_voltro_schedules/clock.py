"""Time, injected.

The engine never calls ``datetime.now()`` or ``anyio.sleep()`` directly: it asks a ``Clock``.
Tests pass a :class:`fastapi_voltro_schedules.testing.ManualClock` and move time instead of
sleeping.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
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


def iso_z(instant: datetime) -> str:
    """``2026-03-04T09:00:00.000Z``: how instants appear in logs and JSON."""
    return instant.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
