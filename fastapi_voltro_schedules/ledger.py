"""The engine's hot-path writes, group-committed (see :mod:`batching`).

Claims, ``running`` rows and terminal writes from concurrent firings share round trips; the
per-row guarantees are the store's (a claim is still a primary-key insert, a terminal write
still a compare-and-set per row).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING

import anyio

from .batching import GroupCommit
from .clock import Clock, iso_z
from .enums import CoordinationOutcome, RunStatus, Trigger
from .errors import StoreUnavailableError
from .exclusions import EXCLUDED_TAG
from .logs import logger
from .models import claim_key
from .planning import CATCH_UP_CAP, DEAD_AFTER_BEATS, is_live
from .store import RunOutcome, RunRecord, Store, new_run_id

if TYPE_CHECKING:
    from .definition import Schedule


class Ledger:
    """Batched writes for one replica."""

    def __init__(self, store: Store, clock: Clock, replica_id: str) -> None:
        self.store = store
        self.clock = clock
        self.replica_id = replica_id
        self.announce = False
        """Terminal writes also notify other replicas' listeners (``change_strategy="cdc"``,
        set by the engine), inside their own transaction."""
        self._claims: GroupCommit[str, bool] = GroupCommit(self._claim_many)
        # One item is a firing's rows — one row, or a whole herd's: a herd is a batch like
        # any other, and firings admitted concurrently still share a round trip.
        self._inserts: GroupCommit[Sequence[RunRecord], None] = GroupCommit(self._insert_many)
        self._claimed_inserts: GroupCommit[Sequence[RunRecord], set[str]] = GroupCommit(
            self._claim_and_insert
        )
        # A whole herd's outcomes are one item: one future per flush of the caller, not per row.
        self._finishes: GroupCommit[Sequence[RunOutcome], None] = GroupCommit(self._finish_many)
        self.holes = Holes(store, clock, replica_id)

    async def claim(self, key: str) -> bool:
        """Whether this replica won ``key`` (raises ``StoreUnavailableError``: fail closed).

        A key this replica left claimed without a row (a hole, see :class:`Holes`) is repaired
        first: a retried external arrival then wins its slot again instead of reading it as a
        duplicate of a run that never existed."""
        if self.holes.pending(key):
            await self.holes.settle(key)
        return await self._claims.submit(key)

    async def insert(self, runs: Sequence[RunRecord]) -> None:
        """Write ``runs`` (one firing's row, or a herd's)."""
        if runs:
            await self._inserts.submit(runs)

    async def claim_and_insert(self, runs: Sequence[RunRecord]) -> set[str]:
        """Claim each run's slot and write its row in one transaction; the ids of the runs
        whose slot this replica won (and whose row is written). Raises
        ``StoreUnavailableError``: fail closed. A hole left at a key is repaired first, as
        :meth:`claim` does."""
        if not runs:
            return set()
        if len(self.holes):  # nothing to look up on the hot path when no write has failed
            for run in runs:
                key = claim_key(run.name, run.scheduled_at)
                if self.holes.pending(key):
                    await self.holes.settle(key)
        return await self._claimed_inserts.submit(runs)

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

    async def _claim_and_insert(self, batches: list[Sequence[RunRecord]]) -> Sequence[set[str]]:
        # Two runs of one slot in a flush (two arrivals of one external slot): the store keeps
        # the first, the second is a duplicate like any other loser. Every caller gets the
        # flush's answer and looks up its own runs in it.
        runs = batches[0] if len(batches) == 1 else [r for batch in batches for r in batch]
        inserted = await self.store.claim_and_insert(runs, self.replica_id, self._now())
        return [inserted] * len(batches)

    async def _insert_many(self, batches: list[Sequence[RunRecord]]) -> Sequence[None]:
        runs = batches[0] if len(batches) == 1 else [r for batch in batches for r in batch]
        await self.store.insert_runs(runs)
        return [None] * len(batches)

    async def _finish_many(self, batches: list[Sequence[RunOutcome]]) -> Sequence[None]:
        outcomes = [o for batch in batches for o in batch]
        await self.store.finish_runs(outcomes, self.replica_id, announce=self.announce)
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


def excluded_reasons(
    missed: Sequence[tuple[Schedule, Sequence[datetime]]],
) -> dict[tuple[str, datetime], str]:
    """The (name, slot) pairs of ``missed`` on an excluded day, with the reason."""
    return {
        (schedule.name, slot): why
        for schedule, slots in missed
        if schedule.exclude is not None
        for slot in slots
        if (why := schedule.excluded(slot)) is not None
    }


def excluded_row(row: RunRecord, reason: str) -> RunRecord:
    """``row`` as the record of an excluded slot: ``skipped``, ``error_tag="excluded"`` and
    the reason (``holiday: Tag der Deutschen Einheit``) — the slot has its row, is never run
    and never owed as ``missed`` (see :mod:`.exclusions`)."""
    now = row.fired_at or row.finished_at
    return replace(
        row,
        status=RunStatus.SKIPPED,
        error_tag=EXCLUDED_TAG,
        error_message=reason,
        fired_at=now,
        finished_at=now,
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
    so every replica that reads a gap records it once between them (a slot on one of the
    schedule's excluded days: ``skipped``, see :func:`excluded_row`). Returns the slots
    recorded; raises ``StoreUnavailableError``."""
    recorded = await record_missed_many(
        store,
        {schedule.name: slots},
        trigger,
        outcome,
        replica_id=replica_id,
        now=now,
        claim=claim,
        excluded=excluded_reasons([(schedule, slots)]),
    )
    return recorded.get(schedule.name, [])


async def record_missed_many(
    store: Store,
    missed: Mapping[str, list[datetime]],
    trigger: Trigger,
    outcome: CoordinationOutcome,
    *,
    replica_id: str,
    now: datetime,
    claim: bool,
    excluded: Mapping[tuple[str, datetime], str] | None = None,
) -> dict[str, list[datetime]]:
    """:func:`record_missed_slots` for many schedules at once (name → slots): one claim
    statement per 1,000 keys and one insert for all of them, as a herd's rows are written — a
    boot catching up 10,000 schedules wrote 10,000 transactions one after another, and the
    live herds queued behind them. Returns each schedule's slots recorded. ``excluded``:
    the (name, slot) pairs on an excluded day, with the reason — recorded ``skipped``
    (:func:`excluded_row`), not ``missed``."""
    if claim:
        keys = {
            claim_key(name, slot): (name, slot) for name, slots in missed.items() for slot in slots
        }
        won = await store.claim_many(list(keys), replica_id, now)
        pairs = [keys[key] for key in keys if key in won]
    else:
        pairs = [(name, slot) for name, slots in missed.items() for slot in slots]
    status = RunStatus.MISSED
    rows = [new_row(name, s, status, trigger, outcome, now, replica_id) for name, s in pairs]
    if excluded:
        # a slot written off on an excluded day is not missed: its row says skipped, and why
        rows = [
            excluded_row(replace(r, fired_at=now), why)
            if (why := excluded.get((r.name, r.scheduled_at))) is not None
            else r
            for r in rows
        ]
    await store.insert_runs(rows)
    recorded: dict[str, list[datetime]] = {}
    for name, slot in pairs:
        recorded.setdefault(name, []).append(slot)
    return recorded


async def mark_abandoned(
    store: Store,
    name: str,
    rows: Sequence[RunRecord],
    now: datetime,
    heartbeat_ms: int,
    *,
    pending: bool = False,
    jobs: bool = False,
) -> int:
    """Mark the dead ones among ``rows`` (``running`` rows of ``name``) ``failed/abandoned``.

    One conditional write per corpse — on its status, owner *and the heartbeat that was
    judged* — so each is marked exactly once across every replica that reads it dead, and a run
    that beat in between is left alone. A stale beat hands ownership to nobody. Returns how
    many this call marked; a store failure counts as none (the next look retries).

    A row waiting between two attempts (``retry_at`` set, see :mod:`.retries`) is not a corpse
    but a pending retry another replica takes over (``catchup.resume_retries``): it is left
    alone — unless ``pending``, which marks only such rows (of a schedule no replica here can
    retry), keeping their last failure's tag in the message.

    A row naming a handed-off job (``job_id``, no retry pending) is not a corpse either: another
    replica takes it over and follows its job (``catchup.resume_jobs``) — unless ``jobs``,
    which marks only such rows (of a schedule no replica here hands off).
    """
    marked = 0
    for row in rows:
        if (
            row.status is not RunStatus.RUNNING
            or (row.retry_at is not None) is not pending
            or (row.job_id is not None and row.retry_at is None) is not jobs
            or is_live(row.status, row.fired_at, row.heartbeat_at, now, heartbeat_ms)
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
                error_message=(
                    f"{row.error_tag}: {row.error_message} — retry pending; " if pending else ""
                )
                + f"replica {row.replica_id} stopped reporting (no heartbeat "
                f"for {heartbeat_ms * DEAD_AFTER_BEATS} ms)",
                **({"retry_at": None} if pending else {}),
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


STORE_UNAVAILABLE_TAG = "store-unavailable"
"""``error_tag`` of a ``missed`` row for a slot that fell due while the ledger was unreachable."""
REPAIR_RETRY_SECONDS = 0.5
"""How often pending holes are retried while the store is down. Real time, not the scheduler's
clock: this waits on the database, not on a schedule."""


@dataclass(frozen=True, slots=True)
class Hole:
    """A slot admission stopped at, fail-closed, after which no row may say what happened."""

    schedule: Schedule
    slot: datetime
    trigger: Trigger
    claimed: bool | None
    """``True``: this replica won the slot's claim; ``None``: the claim itself failed (it may
    have committed all the same); ``False``: the slot is not claimed (``single``)."""


class Holes:
    """Slots this replica fired nothing for because the store failed between deciding and
    recording — repaired once the store answers again, so the ledger has no silent gap and no
    claim is left that makes a slot unrecoverable.

    Per hole, once the store is back: if another replica holds the slot's claim, the slot is
    theirs (nothing to do); if a row exists for it, the write did land (its answer was lost).
    Otherwise a clock-driven (``self``) slot is recorded ``missed`` with ``error_tag=
    "store-unavailable"`` — claimed first when it was not, so replicas that all failed on it
    record it once between them — and an external slot's claim is *released*: the platform's
    retry (the route answered 503 "retry") then runs it. At most :data:`CATCH_UP_CAP` holes are
    kept per schedule (the backfill cap); older ones are dropped with a warning.
    """

    def __init__(self, store: Store, clock: Clock, replica_id: str) -> None:
        self.store = store
        self.clock = clock
        self.replica_id = replica_id
        self._pending: dict[str, Hole] = {}
        self._per_name: dict[str, list[str]] = {}
        self._added = anyio.Event()
        self.recorded = 0
        """``missed`` rows written by repairs (all time)."""
        self.released = 0
        """External claims released by repairs (all time)."""

    def __len__(self) -> int:
        return len(self._pending)

    def pending(self, key: str) -> bool:
        return key in self._pending

    def add(
        self, schedule: Schedule, slot: datetime, trigger: Trigger, claimed: bool | None
    ) -> None:
        if trigger is Trigger.MANUAL:
            return  # nothing claimed, nothing owed: the operator saw the 503 and retries
        key = claim_key(schedule.name, slot)
        if key in self._pending:
            return
        self._pending[key] = Hole(schedule, slot, trigger, claimed)
        keys = self._per_name.setdefault(schedule.name, [])
        keys.append(key)
        if len(keys) > CATCH_UP_CAP:
            dropped = keys.pop(0)
            self._pending.pop(dropped, None)
            logger.warning(
                "schedule: more than %d slots unrecorded during a store outage — the oldest "
                "is dropped  name=%s key=%s",
                CATCH_UP_CAP,
                schedule.name,
                dropped,
            )
        self._added.set()

    async def settle(self, key: str) -> None:
        """Repair the hole at ``key`` now (raises ``StoreUnavailableError``: still down)."""
        hole = self._pending.get(key)
        if hole is not None:
            await self._repair(key, hole)

    async def repair(self) -> int:
        """Repair every pending hole, oldest first, until the store fails again; returns how
        many were settled."""
        settled = 0
        for key, hole in list(self._pending.items()):
            if self._pending.get(key) is not hole:
                continue
            try:
                await self._repair(key, hole)
            except StoreUnavailableError as exc:
                logger.debug("schedule: hole repair deferred (store still down): %s", exc)
                break
            settled += 1
        return settled

    async def loop(self) -> None:
        """Repair holes as they appear, retrying while the store is down; until cancelled."""
        while True:
            if not self._pending:
                self._added = anyio.Event()
                await self._added.wait()
            await self.repair()
            if self._pending:
                await anyio.sleep(REPAIR_RETRY_SECONDS)

    def _forget(self, key: str, hole: Hole) -> None:
        if self._pending.get(key) is hole:
            del self._pending[key]
            keys = self._per_name.get(hole.schedule.name, [])
            if key in keys:
                keys.remove(key)

    async def _repair(self, key: str, hole: Hole) -> None:
        name, me = hole.schedule.name, self.replica_id
        holder = await self.store.claim_holder(key)
        if holder is not None and holder[0] != me:
            self._forget(key, hole)  # another replica holds the slot: it is theirs
            return
        if holder is not None or hole.claimed is False:
            if await self.store.run_for_slot(name, hole.slot, hole.trigger) is not None:
                self._forget(key, hole)  # the write landed; only its answer was lost
                return
        if hole.trigger is Trigger.EXTERNAL:
            if holder is not None:
                await self.store.release_claim(key, replica_id=me)
                self.released += 1
                logger.info(
                    "schedule: released the claim of an unrecorded external slot — a retry "
                    "runs it  name=%s slot=%s",
                    name,
                    iso_z(hole.slot),
                )
            self._forget(key, hole)
            return
        now = self.clock.now()
        if holder is None and hole.claimed is not False:
            if not await self.store.claim(key, me, now):
                self._forget(key, hole)  # someone else recorded or ran it meanwhile
                return
        outcome = (
            CoordinationOutcome.SINGLE if hole.claimed is False else CoordinationOutcome.WON_LOCK
        )
        row = replace(
            new_row(name, hole.slot, RunStatus.MISSED, hole.trigger, outcome, now, me),
            error_tag=STORE_UNAVAILABLE_TAG,
            error_message="the ledger was unreachable when this slot fell due — nothing ran "
            "(fail-closed); run it with a range backfill if it matters",
        )
        await self.store.insert_run(row)
        self._forget(key, hole)
        self.recorded += 1
        logger.warning(
            "schedule: missed (store was unavailable)  name=%s slot=%s errorTag=%s",
            name,
            iso_z(hole.slot),
            STORE_UNAVAILABLE_TAG,
        )
