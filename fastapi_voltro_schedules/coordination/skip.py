"""``on_overlap="skip"``: stand down when a run of the schedule is live on any replica.

The check reads ``running`` rows cluster-wide (this process's own runs first, without a
read) for the schedules whose runs may live in other processes (:mod:`.sharing`: all of them on
a fleet, the external ones on a SQLite file several workers share); the others' runs are all
here. A row silent for three beats is a corpse: marked ``failed/abandoned`` on the way and not
counted. A read that fails closes the door: a skip that cannot see the cluster does not run
anyway — it records nothing and says so (``Verdict.UNAVAILABLE``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from ..ledger import mark_abandoned
from ..logs import logger
from ..planning import is_live, last_seen

if TYPE_CHECKING:
    from ..definition import Schedule
    from ..store import RunRecord, Store
    from .inflight import InFlight
    from .sharing import Shared


class SkipRule:
    def __init__(
        self, store: Store, inflight: InFlight, replica_id: str, heartbeat_ms: int, shared: Shared
    ) -> None:
        self._store = store
        self._inflight = inflight
        self._replica_id = replica_id
        self._heartbeat_ms = heartbeat_ms
        self._shared = shared
        """Whether other processes can hold the schedule (see :mod:`.sharing`)."""

    async def holder(self, schedule: Schedule, now: datetime) -> RunRecord | None:
        """The live run that makes this firing stand down, if any. Raises
        ``StoreUnavailableError`` when the cluster cannot be read (fail closed)."""
        holder, rows = await self.judge(schedule, now)
        await self.bury(schedule, rows, now)
        return holder

    async def judge(
        self, schedule: Schedule, now: datetime
    ) -> tuple[RunRecord | None, Sequence[RunRecord]]:
        """:meth:`holder` without marking the corpses: the holder and the rows read (pass
        them to :meth:`bury` once this replica won the slot — a replica that loses the claim
        must not mark, at its own later instant, a corpse the winner judged dead first)."""
        held = self._inflight.held(schedule.name)
        if held is not None or not self._shared(schedule):
            return held, ()
        rows = await self._store.live_runs(schedule.name)
        return await self.live_among(schedule, rows, now, bury=False), rows

    async def bury(self, schedule: Schedule, rows: Sequence[RunRecord], now: datetime) -> None:
        """Mark the corpses among ``rows`` ``failed/abandoned`` (comparing the beat judged)."""
        if rows:
            rows = [row for row in rows if row.id not in self._inflight.finishing]
            await mark_abandoned(self._store, schedule.name, rows, now, self._heartbeat_ms)

    def held_here(self, schedule: Schedule) -> RunRecord | None:
        """The run of ``schedule`` live in this process, if any (no read)."""
        return self._inflight.held(schedule.name)

    def needs_read(self, schedule: Schedule) -> bool:
        """Whether :meth:`holder` would read the store (the herd reads once for all)."""
        return self._shared(schedule) and self.held_here(schedule) is None

    async def live_among(
        self, schedule: Schedule, rows: Sequence[RunRecord], now: datetime, *, bury: bool = True
    ) -> RunRecord | None:
        """The live run among ``schedule``'s ``running`` rows, if any; with ``bury``, corpses
        found on the way are marked ``failed/abandoned`` (comparing the beat judged)."""
        held = self._inflight.held(schedule.name)
        if held is not None:
            return held
        rows = [row for row in rows if row.id not in self._inflight.finishing]
        live = [
            r
            for r in rows
            if is_live(r.status, r.fired_at, r.heartbeat_at, now, self._heartbeat_ms)
        ]
        if bury:
            await mark_abandoned(self._store, schedule.name, rows, now, self._heartbeat_ms)
        return live[0] if live else None

    def log_skip(self, schedule: Schedule, holder: RunRecord, now: datetime) -> None:
        seen = last_seen(holder.fired_at, holder.heartbeat_at) or now
        logger.info(
            "schedule: overlap skip  name=%s scope=%s heldBy=%s lastSeenMs=%d",
            schedule.name,
            "process" if holder.replica_id == self._replica_id else "cluster",
            holder.replica_id,
            int((now - seen).total_seconds() * 1000),
        )
