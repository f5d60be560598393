"""``InstrumentedStore``: the ledger seam where outcomes become metrics and hook calls.

Every outcome the scheduler records passes through the store as a write, whichever part of the
engine made it, so this is the one place that sees them all:

* ``insert_run(s)`` of terminal rows — ``skipped``, ``missed``;
* ``finish_runs`` — ``succeeded`` / ``failed`` of the runs this process executed;
* ``update_run`` to a terminal status — a corpse marked ``failed/abandoned``;
* ``insert_run(s)`` of ``running`` rows, and ``update_run`` to ``running`` (a queued turn) —
  the running gauge and the firing lag, and the cron monitors' "run started"
  (``on_started``).

Each is observed after the write committed; a write that raised is not an outcome. Every
:class:`~fastapi_voltro_schedules.errors.StoreUnavailableError` is counted in
``voltro_schedule_store_errors_total{operation}`` (the method's name) and re-raised unchanged:
the engine still fails closed, and now an alert can say so.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection, Hashable, Iterable, Sequence
from datetime import datetime, timedelta
from itertools import repeat
from typing import Any, TypeVar

from ..clock import iso_z
from ..enums import RunStatus, Trigger
from ..errors import StoreUnavailableError
from ..logs import logger, run_fields
from ..metrics import Recorded, SchedulerMetrics
from ..outcomes import RecordedOutcome
from .base import (
    CLOCK_TRIGGERS,
    UNCHECKED,
    ClaimRecord,
    D,
    DefinitionRecord,
    Latest,
    LineDecision,
    OutcomeRecord,
    PauseRecord,
    RollupRecord,
    RunOutcome,
    RunRecord,
    Store,
)
from .sql import SQLStore

T = TypeVar("T")

__all__ = ["InstrumentedStore", "sql_store_behind"]


class InstrumentedStore(Store):
    """A :class:`Store` that delegates every call to ``inner`` and observes what it writes."""

    def __init__(
        self,
        inner: Store,
        metrics: SchedulerMetrics,
        on_recorded: Callable[[RecordedOutcome], None] | None = None,
        on_started: Callable[[Sequence[RunRecord]], None] | None = None,
    ) -> None:
        self._inner = inner
        """The store every call is delegated to: see :func:`sql_store_behind` to reach it."""
        self.metrics = metrics
        self.on_recorded = on_recorded
        self.on_started = on_started
        """Told the ``running`` rows this process just committed, before their handlers
        start (the cron monitors' ``in_progress``); ``None`` — no monitor — costs one check
        a write."""
        self._running: dict[str, str] = {}
        """run id → schedule name of the ``running`` rows this process wrote (the gauge)."""
        self._series = metrics.series

    # No ``__getattr__`` forwarding to the wrapped store: every :class:`Store` method is
    # spelled out below, so none can bypass the counting (or the types) unnoticed. What only a
    # SQL store has (its engine) is reached through :func:`sql_store_behind`, by name.

    # -- observing ---------------------------------------------------------------------------

    async def _counted(self, operation: str, call: Awaitable[T]) -> T:
        """Await ``call``; a ``StoreUnavailableError`` is counted under ``operation``."""
        try:
            return await call
        except StoreUnavailableError:
            self.observe_error(operation)
            raise

    def observe_error(self, operation: str) -> None:
        """Count an outage of ``operation`` — also one that ran past this seam (the cluster's
        lease statements, :class:`~.leases.LeaseStore`)."""
        self.metrics.store_errors.labels(operation=operation).inc()

    def _count_started(self, new: Sequence[RunRecord], running: Sequence[RunRecord]) -> None:
        """The running gauge up for ``new`` (runs this process just took on), the firing lag
        of every one of ``running``."""
        # Manual runs are excluded from the lag: a range backfill of last month is not a late
        # timer.
        lags = [
            (run.name, max(0.0, (run.fired_at - run.scheduled_at).total_seconds()))
            for run in running
            if run.fired_at is not None and run.trigger in CLOCK_TRIGGERS
        ]
        self._series.started([run.name for run in new], lags)

    def _ended(self, run_ids: Iterable[str]) -> None:
        pop = self._running.pop
        names = [name for name in map(pop, run_ids, repeat(None)) if name is not None]
        if names:
            self._series.ended(names)

    def observe_inserted(self, runs: Sequence[RunRecord]) -> None:
        """Observe ``runs``, inserted by a write that did not pass through this seam (the
        cluster's fenced insert, :meth:`~.leases.LeaseStore.insert_fenced`), as
        :meth:`insert_runs` observes its own."""
        self._observe_rows(runs, soon=True)

    def forget_running(self) -> None:
        """The scheduler stopped: none of its runs execute here any more."""
        self._ended(list(self._running))

    def _recorded(
        self, rows: Sequence[Recorded], outcome: Callable[[int], RecordedOutcome]
    ) -> None:
        """Count terminal rows; ``outcome(i)`` builds the :class:`RecordedOutcome` of
        ``rows[i]``, called only when the hook or the debug log wants one (a steady 1,000 a
        second would otherwise build and drop 1,000 of them)."""
        if not rows:
            return
        self._series.recorded(rows)
        debug = logger.isEnabledFor(logging.DEBUG)
        if not debug and self.on_recorded is None:
            return
        for i, (name, status, trigger, _, _) in enumerate(rows):
            recorded = outcome(i)
            if debug:
                logger.debug(
                    "schedule: recorded  name=%s runId=%s status=%s trigger=%s",
                    name,
                    recorded.run_id,
                    status,
                    trigger,
                    extra=run_fields(
                        name,
                        recorded.run_id,
                        iso_z(recorded.scheduled_at),
                        status,
                        trigger=trigger,
                        error_tag=recorded.error_tag,
                    ),
                )
            if self.on_recorded is not None:
                self.on_recorded(recorded)

    def _observe_rows(self, runs: Sequence[RunRecord], *, soon: bool = False) -> None:
        """Observe committed rows: ``running`` ones in the gauge and the lag, terminal ones as
        outcomes (counters, the hook — in the order written).

        ``soon``: the ``running`` rows' series are touched two turns of the loop later,
        behind the handlers their firings start right after this write. A schedule's first
        firing creates its series, and at 1,000 schedules that creation alone set off a full
        collection before the herd's handlers had started. Which runs are running here is
        recorded at once all the same: a handler that ends before the loop turns is counted
        out by :meth:`_ended`, and the gauge's ``inc`` and ``dec`` meet at the same value in
        either order."""
        running = [run for run in runs if run.status is RunStatus.RUNNING]
        new = [run for run in running if run.id not in self._running]
        for run in new:
            self._running[run.id] = run.name
        if new and self.on_started is not None:
            self.on_started(new)
        if running:
            if soon:
                loop = asyncio.get_running_loop()
                loop.call_soon(loop.call_soon, self._count_started, new, running)
            else:
                self._count_started(new, running)
        ended = [run for run in runs if run.status.terminal]
        rows = [_series_row(r.name, r.status, r.trigger, None, r.finished_at) for r in ended]
        self._recorded(rows, lambda i: _of_row(ended[i]))

    # -- claims ------------------------------------------------------------------------------

    @property
    def dialect_name(self) -> str:
        return self._inner.dialect_name

    @property
    def supports_multi_instance(self) -> bool:
        return self._inner.supports_multi_instance

    @property
    def shared_file(self) -> bool:
        return self._inner.shared_file

    async def claim(self, key: str, replica_id: str, claimed_at: datetime) -> bool:
        return await self._counted("claim", self._inner.claim(key, replica_id, claimed_at))

    async def claim_many(
        self, keys: Sequence[str], replica_id: str, claimed_at: datetime
    ) -> set[str]:
        return await self._counted(
            "claim_many", self._inner.claim_many(keys, replica_id, claimed_at)
        )

    async def claim_and_insert(
        self,
        runs: Sequence[RunRecord],
        replica_id: str,
        claimed_at: datetime,
        *,
        keys: Sequence[str] | None = None,
    ) -> set[str]:
        try:
            inserted = await self._inner.claim_and_insert(runs, replica_id, claimed_at, keys=keys)
        except StoreUnavailableError:
            self.observe_error("claim_and_insert")
            raise
        self._observe_rows([r for r in runs if r.id in inserted], soon=True)
        return inserted

    async def rowless_claims(
        self, after: datetime, upto: datetime, limit: int
    ) -> tuple[list[tuple[ClaimRecord, str, datetime]], datetime | None]:
        return await self._counted("rowless_claims", self._inner.rowless_claims(after, upto, limit))

    async def account_claim(self, claim: ClaimRecord, row: RunRecord, replica_id: str) -> bool:
        try:
            wrote = await self._inner.account_claim(claim, row, replica_id)
        except StoreUnavailableError:
            self.observe_error("account_claim")
            raise
        if wrote:  # a missed row: counted like every other outcome written
            self._observe_rows([row])
        return wrote

    async def prune_claims(self, older_than: datetime, limit: int) -> int:
        return await self._counted("prune_claims", self._inner.prune_claims(older_than, limit))

    async def claim_holder(self, key: str) -> tuple[str, datetime] | None:
        return await self._counted("claim_holder", self._inner.claim_holder(key))

    async def touch_claim(self, key: str, replica_id: str, at: datetime) -> bool:
        return await self._counted("touch_claim", self._inner.touch_claim(key, replica_id, at))

    async def release_claim(
        self, key: str, *, replica_id: str | None = None, claimed_at: datetime | None = None
    ) -> bool:
        return await self._counted(
            "release_claim",
            self._inner.release_claim(key, replica_id=replica_id, claimed_at=claimed_at),
        )

    # -- runs: writes ------------------------------------------------------------------------

    async def insert_run(self, run: RunRecord) -> None:
        try:
            await self._inner.insert_run(run)
        except StoreUnavailableError:
            self.observe_error("insert_run")
            raise
        self._observe_rows([run])

    async def insert_runs(self, runs: Sequence[RunRecord]) -> None:
        try:
            await self._inner.insert_runs(runs)
        except StoreUnavailableError:
            self.observe_error("insert_runs")
            raise
        self._observe_rows(runs, soon=True)

    async def update_run(
        self,
        run_id: str,
        *,
        expect_status: RunStatus | Collection[RunStatus],
        expect_replica_id: str | None = None,
        expect_heartbeat_at: datetime | None = UNCHECKED,
        **values: Any,
    ) -> bool:
        try:
            matched = await self._inner.update_run(
                run_id,
                expect_status=expect_status,
                expect_replica_id=expect_replica_id,
                expect_heartbeat_at=expect_heartbeat_at,
                **values,
            )
        except StoreUnavailableError:
            self.observe_error("update_run")
            raise
        status = values.get("status")
        if matched and status is not None:
            await self._observe_update(run_id, RunStatus(status))
        return matched

    async def _observe_update(self, run_id: str, status: RunStatus) -> None:
        """Observe a committed conditional write that moved ``run_id`` to ``status``."""
        if status is not RunStatus.RUNNING and not status.terminal:
            return
        if status.terminal:
            self._ended((run_id,))
        # The update names the run by id only: read it back for its name and trigger. Rare
        # (a corpse, a queued turn), and the row is ours to read: it just matched.
        try:
            row = await self._inner.get_run(run_id)
        except StoreUnavailableError as exc:
            self.observe_error("get_run")
            logger.warning("schedule: could not read back run %s for its metrics: %s", run_id, exc)
            return
        if row is not None and row.status is status:
            self._observe_rows([row])

    async def claim_turn(
        self,
        key: str,
        replica_id: str,
        claimed_at: datetime,
        name: str,
        decide: Callable[[list[RunRecord]], D],
    ) -> D | None:
        try:
            plan = await self._inner.claim_turn(key, replica_id, claimed_at, name, decide)
        except StoreUnavailableError:
            self.observe_error("claim_turn")
            raise
        if plan is not None:
            await self._observe_turn(plan)
        return plan

    async def take_turn(self, name: str, decide: Callable[[list[RunRecord]], D]) -> D:
        try:
            plan = await self._inner.take_turn(name, decide)
        except StoreUnavailableError:
            self.observe_error("take_turn")
            raise
        await self._observe_turn(plan)
        return plan

    async def _observe_turn(self, plan: LineDecision) -> None:
        # What the line committed: a new queued row, turns taken (running), occurrences
        # written off past the adoption bound (missed).
        if plan.insert is not None:
            self._observe_rows([plan.insert])
        for write in plan.writes:
            status = write.values.get("status")
            if status is not None:
                await self._observe_update(write.run_id, RunStatus(str(status)))

    def change_stamp(self) -> tuple[float, Hashable] | None:
        return self._inner.change_stamp()

    async def checkpoint(self) -> None:
        await self._counted("checkpoint", self._inner.checkpoint())

    async def pause(
        self, name: str, *, paused_at: datetime, paused_by: str, reason: str | None
    ) -> PauseRecord:
        return await self._counted(
            "pause",
            self._inner.pause(name, paused_at=paused_at, paused_by=paused_by, reason=reason),
        )

    async def resume(
        self, name: str, *, resumed_at: datetime, resumed_by: str
    ) -> PauseRecord | None:
        return await self._counted(
            "resume", self._inner.resume(name, resumed_at=resumed_at, resumed_by=resumed_by)
        )

    async def pause_all(
        self,
        *,
        paused_at: datetime,
        paused_by: str,
        reason: str | None,
        until: datetime | None,
    ) -> PauseRecord:
        return await self._counted(
            "pause_all",
            self._inner.pause_all(
                paused_at=paused_at, paused_by=paused_by, reason=reason, until=until
            ),
        )

    async def resume_all(self, *, resumed_at: datetime, resumed_by: str) -> PauseRecord | None:
        return await self._counted(
            "resume_all", self._inner.resume_all(resumed_at=resumed_at, resumed_by=resumed_by)
        )

    async def pauses(self) -> list[PauseRecord]:
        return await self._counted("pauses", self._inner.pauses())

    async def pause_spans(self) -> list[PauseRecord]:
        return await self._counted("pause_spans", self._inner.pause_spans())

    async def definitions(
        self, names: Collection[str] | None = None
    ) -> dict[str, list[DefinitionRecord]]:
        return await self._counted("definitions", self._inner.definitions(names))

    async def definitions_since(
        self, after: datetime, known: Callable[[str, int], bool] | None = None
    ) -> tuple[datetime | None, list[DefinitionRecord]]:
        return await self._counted("definitions_since", self._inner.definitions_since(after, known))

    async def add_definitions(
        self, records: Sequence[DefinitionRecord], *, announce: bool = False
    ) -> int:
        return await self._counted(
            "add_definitions", self._inner.add_definitions(records, announce=announce)
        )

    async def queued_names(self) -> dict[str, list[RunRecord]]:
        return await self._counted("queued_names", self._inner.queued_names())

    async def notify_changed(self, names: Collection[str]) -> None:
        try:
            await self._inner.notify_changed(names)
        except StoreUnavailableError:
            self.observe_error("notify_changed")
            raise

    async def listen_changed(
        self,
        on_change: Callable[[str], None],
        *,
        on_definition: Callable[[str], None] | None = None,
        task_status: Any = None,
    ) -> None:
        await self._inner.listen_changed(
            on_change, on_definition=on_definition, task_status=task_status
        )

    async def finish_runs(
        self, outcomes: Sequence[RunOutcome], replica_id: str, *, announce: bool = False
    ) -> None:
        names = {o.run_id: self._running.get(o.run_id) for o in outcomes}
        self._ended(names)  # the handlers are over, whether or not the write lands
        try:
            await self._inner.finish_runs(outcomes, replica_id, announce=announce)
        except StoreUnavailableError:
            self.observe_error("finish_runs")
            raise
        ended: list[RunOutcome] = []
        rows: list[Recorded] = []
        for o in outcomes:
            name = o.name or names[o.run_id]
            if name is None or o.trigger is None or o.scheduled_at is None:
                logger.warning(
                    "schedule: outcome of run %s carries no schedule name — not counted", o.run_id
                )
                continue
            ended.append(o)
            rows.append(_series_row(name, o.status, o.trigger, o.fired_at, o.finished_at))
        self._recorded(rows, lambda i: _of_outcome(ended[i], rows[i][0], replica_id))

    async def defer_run(self, outcome: RunOutcome, replica_id: str) -> bool:
        deferred = await self._counted("defer_run", self._inner.defer_run(outcome, replica_id))
        if deferred and outcome.name is not None:
            # a failed attempt another follows: not an outcome (the row stays running)
            self.metrics.retries.labels(name=outcome.name).inc()
        return deferred

    async def heartbeat(self, run_ids: Sequence[str], at: datetime | None, replica_id: str) -> int:
        return await self._counted("heartbeat", self._inner.heartbeat(run_ids, at, replica_id))

    async def database_now(self) -> datetime:
        return await self._counted("database_now", self._inner.database_now())

    async def runs_between(
        self,
        after: datetime,
        until: datetime,
        limit: int = 1000,
        cursor: tuple[datetime, str] | None = None,
    ) -> list[RunRecord]:
        return await self._counted(
            "runs_between", self._inner.runs_between(after, until, limit, cursor)
        )

    async def silent_runs(
        self,
        names: Collection[str],
        silent_for: timedelta,
        statuses: Collection[RunStatus] = (RunStatus.RUNNING,),
    ) -> list[RunRecord]:
        return await self._counted(
            "silent_runs", self._inner.silent_runs(names, silent_for, statuses)
        )

    async def sweep_runs(self, finished_before: datetime, limit: int) -> int:
        return await self._counted("sweep_runs", self._inner.sweep_runs(finished_before, limit))

    async def sweep_rollups(self, before: datetime, limit: int) -> int:
        return await self._counted("sweep_rollups", self._inner.sweep_rollups(before, limit))

    async def rollups(
        self, names: Collection[str] | None, first: datetime, last: datetime, limit: int = 1000
    ) -> list[RollupRecord]:
        return await self._counted("rollups", self._inner.rollups(names, first, last, limit))

    # -- runs: reads -------------------------------------------------------------------------

    async def get_run(self, run_id: str) -> RunRecord | None:
        return await self._counted("get_run", self._inner.get_run(run_id))

    async def list_runs(
        self,
        name: str | None,
        limit: int = 100,
        before: datetime | None = None,
        *,
        before_id: str | None = None,
        statuses: Collection[RunStatus] | None = None,
    ) -> list[RunRecord]:
        return await self._counted(
            "list_runs",
            self._inner.list_runs(name, limit, before, before_id=before_id, statuses=statuses),
        )

    async def run_for_slot(
        self, name: str, scheduled_at: datetime, trigger: Trigger
    ) -> RunRecord | None:
        return await self._counted(
            "run_for_slot", self._inner.run_for_slot(name, scheduled_at, trigger)
        )

    async def succeeded_slots(self, name: str, after: datetime, until: datetime) -> set[datetime]:
        return await self._counted(
            "succeeded_slots", self._inner.succeeded_slots(name, after, until)
        )

    async def last_run(self, name: str) -> RunRecord | None:
        return await self._counted("last_run", self._inner.last_run(name))

    async def last_runs(self, names: Collection[str]) -> dict[str, RunRecord]:
        return await self._counted("last_runs", self._inner.last_runs(names))

    async def latest(self, names: Collection[str]) -> Latest:
        return await self._counted("latest", self._inner.latest(names))

    async def outcomes(self, names: Collection[str]) -> dict[str, OutcomeRecord]:
        return await self._counted("outcomes", self._inner.outcomes(names))

    async def names_in_status(
        self,
        statuses: Collection[RunStatus],
        *,
        after: str | None,
        prefix: str | None,
        limit: int,
    ) -> list[str]:
        return await self._counted(
            "names_in_status",
            self._inner.names_in_status(statuses, after=after, prefix=prefix, limit=limit),
        )

    async def live_runs(
        self, name: str | Collection[str], statuses: Collection[RunStatus] = (RunStatus.RUNNING,)
    ) -> list[RunRecord]:
        return await self._counted("live_runs", self._inner.live_runs(name, statuses))

    async def queued_runs(self, name: str) -> list[RunRecord]:
        return await self._counted("queued_runs", self._inner.queued_runs(name))

    # -- lifecycle ---------------------------------------------------------------------------

    async def ping(self) -> None:
        try:
            await self._inner.ping()
        except StoreUnavailableError:
            self.observe_error("ping")
            raise

    async def create_schema(self) -> None:
        try:
            await self._inner.create_schema()
        except StoreUnavailableError:
            self.observe_error("create_schema")
            raise

    async def dispose(self) -> None:
        await self._inner.dispose()


def sql_store_behind(store: Store) -> SQLStore | None:
    """The :class:`SQLStore` ``store`` is, or wraps for its metrics; ``None`` for any other
    store. For what only SQL has and the :class:`Store` interface does not carry — the
    cluster's lease statements on its engine, a test counting the statements sent. Calls made
    on it directly are not counted: a store call goes through ``store`` itself."""
    if isinstance(store, InstrumentedStore):
        store = store._inner
    return store if isinstance(store, SQLStore) else None


def _of_row(run: RunRecord) -> RecordedOutcome:
    return RecordedOutcome(
        name=run.name,
        run_id=run.id,
        status=run.status,
        trigger=run.trigger,
        scheduled_at=run.scheduled_at,
        fired_at=run.fired_at,
        finished_at=run.finished_at,
        error_tag=run.error_tag,
        error_message=run.error_message,
        error_traceback=run.error_traceback,
        replica_id=run.replica_id,
        attempts=run.attempt,
    )


def _of_outcome(o: RunOutcome, name: str, replica_id: str) -> RecordedOutcome:
    assert o.trigger is not None and o.scheduled_at is not None  # counted only when known
    return RecordedOutcome(
        name=name,
        run_id=o.run_id,
        status=o.status,
        trigger=o.trigger,
        scheduled_at=o.scheduled_at,
        fired_at=o.fired_at,
        finished_at=o.finished_at,
        error_tag=o.error_tag,
        error_message=o.error_message,
        error_traceback=o.error_traceback,
        replica_id=replica_id,
        attempts=o.attempt,
    )


def _series_row(
    name: str,
    status: RunStatus,
    trigger: Trigger,
    fired_at: datetime | None,
    finished_at: datetime | None,
) -> Recorded:
    """A terminal row as the run series counts it (a duration only with both instants)."""
    duration = None
    if fired_at is not None and finished_at is not None:
        duration = max(0.0, (finished_at - fired_at).total_seconds())
    success = None
    if status is RunStatus.SUCCEEDED and finished_at is not None:
        success = finished_at.timestamp()
    return (name, status.value, trigger.value, duration, success)
