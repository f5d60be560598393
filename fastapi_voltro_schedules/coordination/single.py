"""``single``: one process owns the store, so every slot is its own — no gate at all.

An external arrival is still claimed (see :class:`.claim.ClaimGate`): delivery is at-least-once,
so the claim is what dedupes it, on SQLite too.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from ..enums import CoordinationOutcome, Trigger
from .claim import ClaimGate

if TYPE_CHECKING:
    from ..definition import Schedule


class SingleGate:
    def __init__(self, claims: ClaimGate) -> None:
        self._claims = claims

    def claims(self, trigger: Trigger) -> bool:
        return trigger is Trigger.EXTERNAL

    async def elect(
        self, schedule: Schedule, slot: datetime, trigger: Trigger
    ) -> CoordinationOutcome | None:
        if trigger is Trigger.EXTERNAL:
            return await self._claims.elect(schedule, slot, trigger)
        return CoordinationOutcome.SINGLE

    async def elect_many(
        self, schedules: Sequence[Schedule], slots: Sequence[datetime]
    ) -> list[CoordinationOutcome | None]:
        return [CoordinationOutcome.SINGLE] * len(schedules)
