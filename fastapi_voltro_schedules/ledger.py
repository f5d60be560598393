"""The engine's hot-path writes, group-committed (see :mod:`batching`).

Claims, ``running`` rows and terminal writes from concurrent firings share round trips; the
per-row guarantees are the store's (a claim is still a primary-key insert, a terminal write
still a compare-and-set per row).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from .batching import GroupCommit
from .clock import Clock
from .enums import CoordinationOutcome, RunStatus, Trigger
from .errors import StoreUnavailableError
from .logs import logger
from .models import claim_key
from .planning import DEAD_AFTER_BEATS, is_live
from .store import RunOutcome, RunRecord, Store, new_run_id

if TYPE_CHECKING:
    from .definition import Schedule


class Ledger:
    """Batched writes for one replica."""

    def __init__(self, store: Store, clock: Clock, replica_id: str) -> None:
        self.store = store
        self.clock = clock
        self.replica_id = replica_id
        self._claims: GroupCommit[str, bool] = GroupCommit(self._claim_many)
        self._inserts: GroupCommit[RunRecord, None] = GroupCommit(self._insert_many)
        # A whole herd's outcomes are one item: one future per flush of the caller, not per row.
        self._finishes: GroupCommit[Sequence[RunOutcome], None] = GroupCommit(self._finish_many)

    async def claim(self, key: str) -> bool:
        """Whether this replica won ``key`` (raises ``StoreUnavailableError``: fail closed)."""
        return await self._claims.submit(key)

    async def insert(self, run: RunRecord) -> None:
        await self._inserts.submit(run)

    async def finish_many(self, outcomes: Sequence[RunOutcome]) -> None:
        await self._finishes.submit(outcomes)

    async def _claim_many(self, keys: list[str]) -> Sequence[bool]:
        won = await self.store.claim_many(keys, self.replica_id, self._now())
        # Two callers in one batch may ask for the same key (two arrivals of one external
        # slot): the first asker wins it, the second is a duplicate like any other loser.
        answers = []
        for key in keys:
            answers.append(key in won)
            won.discard(key)
        return answers

    async def _insert_many(self, runs: list[RunRecord]) -> Sequence[None]:
        await self.store.insert_runs(runs)
        return [None] * len(runs)

    async def _finish_many(self, batches: list[Sequence[RunOutcome]]) -> Sequence[None]:
        await self.store.finish_runs([o for batch in batches for o in batch], self.replica_id)
        return [None] * len(batches)

    def _now(self) -> datetime:
        return self.clock.now()


def new_row(
    name: str,
    scheduled_at: datetime,
    status: RunStatus,
    trigger: Trigger,
    outcome: CoordinationOutcome,
    now: datetime,
    replica_id: str,
    run_id: str | None = None,
) -> RunRecord:
    """A new ledger row. A ``missed`` slot never fired (no ``fired_at``); a terminal row is
    finished the moment it is written."""
    return RunRecord(
        id=new_run_id() if run_id is None else run_id,
        name=name,
        scheduled_at=scheduled_at,
        status=status,
        trigger=trigger,
        coordination_outcome=outcome,
        fired_at=None if status is RunStatus.MISSED else now,
        finished_at=now if status.terminal else None,
        replica_id=replica_id,
    )


async def record_missed_slots(
    store: Store,
    schedule: Schedule,
    slots: list[datetime],
    trigger: Trigger,
    outcome: CoordinationOutcome,
    *,
    replica_id: str,
    now: datetime,
    claim: bool,
) -> list[datetime]:
    """Write ``missed`` rows for ``slots`` — with ``claim``, only for the slots this call wins,
    so every replica that reads a gap records it once between them. Returns the slots
    recorded; raises ``StoreUnavailableError``."""
    if claim:
        keys = {claim_key(schedule.name, slot): slot for slot in slots}
        won = await store.claim_many(list(keys), replica_id, now)
        slots = [slot for key, slot in keys.items() if key in won]
    missed = RunStatus.MISSED
    await store.insert_runs(
        [new_row(schedule.name, s, missed, trigger, outcome, now, replica_id) for s in slots]
    )
    return slots


async def mark_abandoned(
    store: Store, name: str, rows: Sequence[RunRecord], now: datetime, heartbeat_ms: int
) -> int:
    """Mark the dead ones among ``rows`` (``running`` rows of ``name``) ``failed/abandoned``.

    One conditional write per corpse — on its status, owner *and the heartbeat that was
    judged* — so each is marked exactly once across every replica that reads it dead, and a run
    that beat in between is left alone. A stale beat hands ownership to nobody. Returns how
    many this call marked; a store failure counts as none (the next look retries).
    """
    marked = 0
    for row in rows:
        if row.status is not RunStatus.RUNNING or is_live(
            row.status, row.fired_at, row.heartbeat_at, now, heartbeat_ms
        ):
            continue
        try:
            done = await store.update_run(
                row.id,
                expect_status=RunStatus.RUNNING,
                expect_replica_id=row.replica_id,
                expect_heartbeat_at=row.heartbeat_at,
                status=RunStatus.FAILED,
                finished_at=now,
                error_tag="abandoned",
                error_message=f"replica {row.replica_id} stopped reporting (no heartbeat "
                f"for {heartbeat_ms * DEAD_AFTER_BEATS} ms)",
            )
        except StoreUnavailableError:
            done = False
        if done:
            marked += 1
            logger.warning(
                "schedule: marked a silent run abandoned  name=%s runId=%s heldBy=%s",
                name,
                row.id,
                row.replica_id,
            )
    return marked
