"""The timer's passes over its heap, seen from a test: proof that an instant was looked at.

"Nothing fired at this instant" holds only once the timer has made its pass for that instant;
a sleep in real time is a guess at when that was. :class:`TimerPasses` wraps
``Timer.dispatch_due`` — the synchronous heart of a pass: every firing due is handed to the
dispatcher (or dropped, when paused) before it returns — and records the instant each pass
read and whether it handed anything on.
"""

from __future__ import annotations

from datetime import datetime

import pytest

from fastapi_voltro_schedules.timer import Timer
from support.waiting import wait_until


class TimerPasses:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.passes: list[tuple[datetime, bool]] = []
        """Every pass so far: ``(now, whether it dispatched anything)``."""
        dispatch_due = Timer.dispatch_due

        def recorded(timer: Timer, now: datetime) -> bool:
            dispatched = dispatch_due(timer, now)
            self.passes.append((now, dispatched))
            return dispatched

        monkeypatch.setattr(Timer, "dispatch_due", recorded)

    def mark(self) -> int:
        """Where the passes to come begin (for :meth:`reach` and :meth:`dispatched`)."""
        return len(self.passes)

    async def reach(self, instant: datetime, since: int = 0) -> None:
        """Wait until a pass since ``since`` has read the clock at ``instant`` or later."""
        await wait_until(
            lambda: any(now >= instant for now, _ in self.passes[since:]),
            what=f"the timer's pass at {instant.isoformat()}",
        )

    def dispatched(self, since: int = 0) -> list[datetime]:
        """The instants of the passes since ``since`` that handed a firing on."""
        return [now for now, dispatched in self.passes[since:] if dispatched]
