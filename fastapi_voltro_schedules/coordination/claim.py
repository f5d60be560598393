"""``advisoryLock``: the claims-row race. Exactly-once is the primary key of
``_voltro_schedule_claims`` — one replica's insert of ``<name>@<second>`` wins, the losers write
no row. A claim that cannot be written raises: the caller fails closed (a missing run is
recoverable by backfill, a double-fire often is not)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from ..enums import CoordinationOutcome, Trigger
from ..models import claim_key

if TYPE_CHECKING:
    from ..clock import Clock
    from ..definition import Schedule
    from ..ledger import Ledger
    from ..store import Store


class ClaimGate:
    def __init__(self, ledger: Ledger, store: Store, clock: Clock, replica_id: str) -> None:
        self._ledger = ledger
        self._store = store
        self._clock = clock
        self._replica_id = replica_id

    def claims(self, trigger: Trigger) -> bool:
        return True

    async def elect(
        self, schedule: Schedule, slot: datetime, trigger: Trigger
    ) -> CoordinationOutcome | None:
        if not await self._ledger.claim(claim_key(schedule.name, slot)):
            return None
        if trigger is Trigger.EXTERNAL:
            return CoordinationOutcome.EXTERNAL
        return CoordinationOutcome.WON_LOCK

    async def elect_many(
        self, schedules: Sequence[Schedule], slots: Sequence[datetime]
    ) -> list[CoordinationOutcome | None]:
        keys = [claim_key(s.name, slot) for s, slot in zip(schedules, slots, strict=True)]
        won = await self._store.claim_many(keys, self._replica_id, self._clock.now())
        return [CoordinationOutcome.WON_LOCK if key in won else None for key in keys]
