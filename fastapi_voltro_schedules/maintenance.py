"""Housekeeping: the reaper, retention, and the boot write-off of orphaned queued rows.

Liveness is read from the same pure rules as admission (:mod:`planning`), and corpses are
marked by the same conditional write (:func:`ledger.mark_abandoned`) — not through admission.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

from .enums import RunStatus
from .errors import StoreUnavailableError
from .ledger import mark_abandoned
from .logs import logger
from .planning import DEAD_AFTER_BEATS, is_live

if TYPE_CHECKING:
    from .clock import Clock
    from .coordination import InFlight
    from .metrics import QueueMetrics
    from .store import RunRecord, Store

RETENTION_INTERVAL_SECONDS = 600.0
RETENTION_BATCH = 1000
CLAIM_RETENTION = timedelta(days=7)
WRITTEN_OFF = "written-off"
"""``error_tag`` of a queued row written off at boot because its schedule is no longer
declared (distinct from ``abandoned``: a waiter that died and was not adopted in time)."""


class Maintenance:
    def __init__(
        self,
        *,
        store: Store,
        clock: Clock,
        inflight: InFlight,
        heartbeat_ms: int,
        run_retention_ms: int | None,
        watched_names: Sequence[str],
        queue_metrics: QueueMetrics | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.inflight = inflight
        self.heartbeat_ms = heartbeat_ms
        self.run_retention = (
            None if run_retention_ms is None else timedelta(milliseconds=run_retention_ms)
        )
        self.watched_names = list(watched_names)
        """Every schedule of the app (external ones too): whose corpses :meth:`reap` marks."""
        self.queue_metrics = queue_metrics

    async def reaper_loop(self) -> None:
        interval = DEAD_AFTER_BEATS * self.heartbeat_ms / 1000
        while True:
            await self.clock.sleep(interval)
            await self.reap()

    async def reap(self) -> int:
        """Mark every dead ``running`` row of this app's schedules ``failed/abandoned`` (any
        overlap policy, any coordination), so the ledger never shows a corpse as running.
        Runs at boot and every three heartbeats; returns how many rows this call marked."""
        if not self.watched_names:
            return 0
        try:
            rows = await self.store.live_runs(self.watched_names)
        except StoreUnavailableError as exc:
            logger.warning("scheduler: corpse check failed: %s", exc)
            return 0
        mine = self.inflight.ids() | self.inflight.finishing
        by_name: dict[str, list[RunRecord]] = defaultdict(list)
        for row in rows:
            if row.id not in mine:
                by_name[row.name].append(row)
        now = self.clock.now()
        marked = 0
        for name, candidates in by_name.items():
            marked += await mark_abandoned(self.store, name, candidates, now, self.heartbeat_ms)
        return marked

    async def write_off(self) -> int:
        """Boot: record ``missed`` (``error_tag="written-off"``) the silent ``queued`` rows of
        names this app no longer declares — renamed or deleted, that name never fires again, so
        nothing could ever adopt them, and the retention sweep keeps queued rows forever. Each
        is counted ``abandoned`` (its work will not run). A beating waiter under an unknown name
        belongs to another deployment sharing the database: left alone. Every write compares
        the beat it judged, so a waiter that beat meanwhile is not touched."""
        try:
            queued = await self.store.queued_names()
        except StoreUnavailableError as exc:
            logger.warning("scheduler: queued rows check failed: %s", exc)
            return 0
        declared = set(self.watched_names)
        now = self.clock.now()
        written = 0
        for name, rows in queued.items():
            if name in declared:
                continue
            count = 0
            for row in rows:
                if is_live(row.status, row.fired_at, row.heartbeat_at, now, self.heartbeat_ms):
                    continue
                try:
                    done = await self.store.update_run(
                        row.id,
                        expect_status=RunStatus.QUEUED,
                        expect_replica_id=row.replica_id,
                        expect_heartbeat_at=row.heartbeat_at,
                        status=RunStatus.MISSED,
                        finished_at=now,
                        error_tag=WRITTEN_OFF,
                        error_message=f'schedule "{name}" is no longer declared (renamed or '
                        "deleted): its queued firing can never run — written off at boot",
                    )
                except StoreUnavailableError as exc:
                    logger.warning(
                        "scheduler: could not write off a queued firing  name=%s runId=%s: %s",
                        name,
                        row.id,
                        exc,
                    )
                    done = False
                if done:
                    count += 1
            written += count
            if count:
                if self.queue_metrics is not None:
                    self.queue_metrics.recoveries.labels(name=name, outcome="abandoned").inc(count)
                logger.warning(
                    "scheduler: wrote off queued firings of a schedule no longer declared  "
                    "name=%s rows=%d",
                    name,
                    count,
                )
        return written

    async def retention_loop(self) -> None:
        while True:
            await self.sweep()
            await self.clock.sleep(RETENTION_INTERVAL_SECONDS)

    async def sweep(self) -> int:
        """Delete finished runs past retention and old claims, in batches. ``queued`` rows
        stay: they are positions in the line, not records of a firing."""
        now = self.clock.now()
        removed = 0
        try:
            if self.run_retention is not None:
                while True:
                    n = await self.store.sweep_runs(now - self.run_retention, RETENTION_BATCH)
                    removed += n
                    if n < RETENTION_BATCH:
                        break
            await self.store.prune_claims(now - CLAIM_RETENTION, RETENTION_BATCH)
        except StoreUnavailableError as exc:
            logger.warning("scheduler: retention sweep failed: %s", exc)
        return removed
