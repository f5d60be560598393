"""A real clock on a host whose wall time is off: for tests of what one replica's clock does."""

from __future__ import annotations

from datetime import datetime, timedelta

from fastapi_voltro_schedules import SystemClock


class SteppedClock(SystemClock):
    """The real clock, its wall time ``step`` away (ahead when positive, behind when negative) —
    a bad NTP step, a drifting host. Still a :class:`SystemClock`, so ``Scheduling`` treats it
    as the real clock (the database's clock takes over past the tolerance)."""

    def __init__(self, step: timedelta) -> None:
        self.step = step

    def now(self) -> datetime:
        return super().now() + self.step
