"""Housekeeping: the reaper, retention, and the boot write-off of orphaned queued rows.

Liveness is read from the same pure rules as admission (:mod:`planning`), and corpses are
marked by the same conditional write (:func:`ledger.mark_abandoned`) — not through admission.

**Retention keeps up with any firing rate.** Every firing under ``advisoryLock`` (and every
external arrival, on any store) leaves a claims row, and every firing a run row; a sweep deletes
the expired ones batch after batch until a batch comes back short — not a fixed count per sweep
(it was one batch of 1,000 claims per 10 minutes: above 1.7 firings a second the claims table
grew without bound). Each batch is one statement, one short transaction. Between two batches
the sweep rests as long as the batch took (the database's time is never more than half
pruning) and starts the next only in a stretch clear of herds: cron instants fall on whole
seconds, so no batch starts within :data:`HERD_GUARD_SECONDS` (or twice the last batch's time)
before a whole second, nor within :data:`HERD_CLEARANCE_SECONDS` after one the sweep saw pass —
the herd due then has its claims and rows written first. A sweep deletes from a table for at
most :data:`SWEEP_BUDGET_SECONDS`; one cut short leaves the rest to the next, which then comes
after :data:`BACKLOG_PAUSE_SECONDS` (without the rests) instead of the interval. Sweeps come at
least every tenth of the shorter retention (at most every :data:`RETENTION_INTERVAL_SECONDS`),
so a table holds at most about 10% more than its retention's worth of rows, and each sweep's
first batch is timed half-way between two whole seconds.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from .clock import iso_z
from .config import DEFAULT_CLAIM_RETENTION_MS
from .enums import CoordinationOutcome, OverlapPolicy, RunStatus, Trigger
from .errors import StoreUnavailableError
from .ledger import mark_abandoned, new_row
from .logs import logger
from .planning import DEAD_AFTER_BEATS, is_live
from .store.base import UNCHECKED

if TYPE_CHECKING:
    from .clock import Clock
    from .coordination import InFlight
    from .metrics import QueueMetrics
    from .store import ClaimRecord, RunRecord, Store

RETENTION_INTERVAL_SECONDS = 600.0
"""Longest pause between two sweeps (shorter for a short retention: see
:meth:`Maintenance.sweep_interval`)."""
RETENTION_INTERVAL_SHARE = 10
"""A sweep at least every ``retention / 10``: a table holds at most ~10% past its retention."""
MIN_RETENTION_INTERVAL_SECONDS = 1.0
RETENTION_BATCH = 1000
"""Rows per delete statement — one short transaction."""
CLAIM_RETENTION = timedelta(milliseconds=DEFAULT_CLAIM_RETENTION_MS)
"""Claims rows older than this are pruned, unless ``claim_retention_ms`` says otherwise (what a
claim must outlive: :func:`~.config.claim_retention_floor_ms`)."""
SWEEP_BUDGET_SECONDS = 60.0
"""Longest a sweep deletes from one table; expired rows left then are the next sweep's."""
BACKLOG_PAUSE_SECONDS = 1.0
"""After a sweep cut short by its budget, the next one starts this soon (not an interval later)."""
REST_RATIO = 1.0
"""Between two batches the sweep rests this many times the last batch's time (none while it
catches up on a backlog)."""
MAX_REST_SECONDS = 1.0
HERD_GUARD_SECONDS = 0.1
"""No batch starts closer than this (or twice the last batch's time, at most
:data:`MAX_GUARD_SECONDS`) before a whole second: it would still hold the database when the
herd due then is claimed and written."""
MAX_GUARD_SECONDS = 0.5
HERD_CLEARANCE_SECONDS = 0.2
"""After a whole second passed, the next batch waits this long past it: the herd's admission
(claims, rows) goes first."""
ROWLESS_CLAIM = "claim-without-row"
"""``error_tag`` of a ``missed`` row the sweeper wrote for a slot claimed more than three beats
ago with no row: the replica that claimed it stopped before recording it (a path that claims
apart from its row), and nothing ran it."""
ROWLESS_LOOKBACK = timedelta(minutes=10)
"""How far back a replica's first claims sweep reads (a replica down longer leaves older claims
to the audit)."""
ROWLESS_READ = 5000
"""Claims read per statement by the claims sweep."""
WRITTEN_OFF = "written-off"
"""``error_tag`` of a queued row written off because its schedule has no line any more — no
longer declared, or no longer ``on_overlap="queue"`` (at boot), or a run-time schedule deleted
(at the delete) — distinct from ``abandoned``: a waiter that died and was not adopted in
time."""


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
        claim_retention_ms: int | None = None,
        overlaps: Mapping[str, OverlapPolicy] | None = None,
        owing: Collection[str] = (),
        rowless: RowlessAccounting | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.inflight = inflight
        self.heartbeat_ms = heartbeat_ms
        self.run_retention = (
            None if run_retention_ms is None else timedelta(milliseconds=run_retention_ms)
        )
        self.claim_retention = (
            CLAIM_RETENTION
            if claim_retention_ms is None
            else timedelta(milliseconds=claim_retention_ms)
        )
        """Claims older than this are pruned (``None`` given: :data:`CLAIM_RETENTION`)."""
        self.last_sweep: SweepResult | None = None
        """What the latest sweep did (``None`` before the first one ended)."""
        self.watched_names = list(watched_names)
        """Every schedule of the app (external ones too): whose corpses :meth:`reap` marks."""
        self._watched = set(self.watched_names)
        """The same names, for :meth:`track`'s membership test (a list's is O(n) a write)."""
        self.queue_metrics = queue_metrics
        self.overlaps = dict(overlaps or {})
        """Each declared schedule's ``on_overlap`` (by name); one not given counts as
        ``queue`` — its queued rows are left to its line."""
        self.owing = frozenset(owing)
        """Declared ``backfill="all"`` schedules: each queued row of theirs is a slot still
        owed, resumed (``catchup.resume_orphans``), never written off."""
        self.rowless = rowless
        """How this replica accounts for claims without rows (``None``: a store no other
        process shares — nobody else's claim can be left there)."""
        self._rowless_after: datetime | None = None
        """Where the next claims sweep reads from (``None``: not swept yet)."""
        self.pending_jobs: list[RunRecord] = []
        """The ``running`` rows naming a handed-off job (``job_id``, no retry pending) that the
        last :meth:`reap` read and this process does not hold: the take-over judges."""
        self.pending_retries: list[RunRecord] = []
        """The ``running`` rows with a retry pending (``retry_at``) that the last :meth:`reap`
        read and this process does not hold — live or silent: the take-over judges."""

    def track(self, name: str, overlap: OverlapPolicy, owes_all: bool) -> None:
        """A schedule written at run time joins the ones this room looks after: its corpses
        are reaped, its queued rows left to its line, its rowless claims accounted for. (A
        deleted one stays tracked: a corpse or a claim it left is still to be accounted.)"""
        if name not in self._watched:
            self._watched.add(name)
            self.watched_names.append(name)
        self.overlaps[name] = overlap
        self.owing = self.owing | {name} if owes_all else self.owing - {name}
        if self.rowless is not None and name not in self.rowless.self_names:
            self.rowless = replace(self.rowless, self_names=self.rowless.self_names | {name})

    async def _write_off_row(
        self,
        name: str,
        row: RunRecord,
        now: datetime,
        reason: str,
        beat: datetime | None = UNCHECKED,
    ) -> bool:
        """``row`` (``queued``, of its replica — and of ``beat``, when given: a silent row's
        last beat) written off ``missed``; ``False`` when it moved since or the store did not
        answer (logged: the next boot or delete tries again)."""
        try:
            return await self.store.update_run(
                row.id,
                expect_status=RunStatus.QUEUED,
                expect_replica_id=row.replica_id,
                expect_heartbeat_at=beat,
                status=RunStatus.MISSED,
                finished_at=now,
                error_tag=WRITTEN_OFF,
                error_message=reason,
            )
        except StoreUnavailableError as exc:
            logger.warning(
                "scheduler: could not write off a queued firing  name=%s runId=%s: %s",
                name,
                row.id,
                exc,
            )
            return False

    async def account_rowless(self) -> int:
        """Turn every claim older than three beats whose slot has no row into a ``missed`` row
        (``error_tag="claim-without-row"``), so no slot stays claimed and unrecorded: its
        replica stopped between a claim and the row (paths that write them apart — a queue's
        fenced claim under ``cluster``, a missed slot's claim, a hole's repair), and a retried
        arrival or the replicas' own firings would lose to the claim for ever. Each is taken
        over in one transaction with its row, compared on the holder and instant read, so
        replicas sweeping together write it once. Runs every three heartbeats; each sweep reads
        the claims since the last (three beats of overlap: claims stamped by a replica whose
        clock lags). Returns how many this call recorded."""
        if self.rowless is None:
            return 0
        beats = timedelta(milliseconds=DEAD_AFTER_BEATS * self.heartbeat_ms)
        now = self.clock.now()
        upto = now - beats
        floor = upto - min(ROWLESS_LOOKBACK, self.claim_retention)
        if self.run_retention is not None:  # older rows may be pruned: not a missing row
            floor = max(floor, now - self.run_retention + beats)
        after = max(floor, (self._rowless_after or floor) - beats)
        recorded = 0
        try:
            while after < upto:
                found, more = await self.store.rowless_claims(after, upto, ROWLESS_READ)
                for claim, name, slot in found:
                    recorded += await self._account(claim, name, slot, now)
                if more is None:
                    break
                after = more
        except StoreUnavailableError as exc:
            logger.warning("scheduler: claims sweep failed: %s", exc)
            return recorded
        self._rowless_after = upto
        return recorded

    async def _account(self, claim: ClaimRecord, name: str, slot: datetime, now: datetime) -> int:
        assert self.rowless is not None
        trigger, outcome = self.rowless.explain(name)
        if trigger is None:
            return 0  # not a schedule of this app: its own deployment accounts for it
        row = replace(
            new_row(name, slot, RunStatus.MISSED, trigger, outcome, now, self.rowless.replica_id),
            error_tag=ROWLESS_CLAIM,
            error_message=(
                f"claimed by {claim.replica_id or '?'} at {iso_z(claim.claimed_at)}, which "
                "stopped before recording the slot — nothing ran; run it with a range backfill "
                "if it matters"
            ),
        )
        if not await self.store.account_claim(claim, row, self.rowless.replica_id):
            return 0
        logger.warning(
            "scheduler: missed (claimed, never recorded)  name=%s slot=%s claimedBy=%s errorTag=%s",
            name,
            iso_z(slot),
            claim.replica_id,
            ROWLESS_CLAIM,
        )
        return 1

    async def reap(self) -> int:
        """Mark every dead ``running`` row of this app's schedules ``failed/abandoned`` (any
        overlap policy, any coordination), so the ledger never shows a corpse as running —
        except a row waiting between two attempts (``RetryPolicy``), kept in
        :attr:`pending_retries` for the take-over. Runs at boot and every three heartbeats;
        returns how many rows this call marked."""
        if not self.watched_names:
            return 0
        try:
            rows = await self.store.live_runs(self.watched_names)
        except StoreUnavailableError as exc:
            logger.warning("scheduler: corpse check failed: %s", exc)
            return 0
        mine = self.inflight.ids() | self.inflight.finishing
        by_name: dict[str, list[RunRecord]] = defaultdict(list)
        pending: list[RunRecord] = []
        jobs: list[RunRecord] = []
        for row in rows:
            if row.id not in mine:
                by_name[row.name].append(row)
                if row.retry_at is not None:
                    pending.append(row)
                elif row.job_id is not None:
                    jobs.append(row)
        # Rows waiting between two attempts are not corpses (mark_abandoned leaves them):
        # handed to the retries' take-over (catchup.resume_retries) without a second read.
        self.pending_retries = pending
        # Rows naming a handed-off job likewise: followed by whoever takes them over.
        self.pending_jobs = jobs
        now = self.clock.now()
        marked = 0
        for name, candidates in by_name.items():
            marked += await mark_abandoned(self.store, name, candidates, now, self.heartbeat_ms)
        return marked

    async def write_off(self) -> int:
        """Boot: record ``missed`` (``error_tag="written-off"``) the silent ``queued`` rows no
        line will ever reach — of names this app no longer declares (renamed or deleted, that
        name never fires again), and of declared schedules no longer ``on_overlap="queue"``
        (their firings never look at the line again) — so nothing could ever adopt them, and
        the retention sweep keeps queued rows forever. Each is counted ``abandoned`` (its work
        will not run). A beating waiter is left alone: under an unknown name it belongs to
        another deployment sharing the database; under a declared one, to a replica still
        running the previous version (its line is its own until it stops; then the next boot
        writes it off). Every write compares the beat it judged, so a waiter that beat
        meanwhile is not touched."""
        try:
            queued = await self.store.queued_names()
        except StoreUnavailableError as exc:
            logger.warning("scheduler: queued rows check failed: %s", exc)
            return 0
        declared = set(self.watched_names)
        now = self.clock.now()
        written = 0
        for name, rows in queued.items():
            policy = self.overlaps.get(name, OverlapPolicy.QUEUE)
            if name in declared and (policy is OverlapPolicy.QUEUE or name in self.owing):
                continue
            if name in declared:
                why = f"no longer on_overlap=queue (now {policy.value})"
                reason = (
                    f'schedule "{name}" is no longer on_overlap="queue" (now "{policy.value}"): '
                    "its queued firing never gets a turn"
                )
            else:
                why = "no longer declared"
                reason = f'schedule "{name}" is no longer declared (renamed or deleted): its '
                reason += "queued firing can never run"
            count = 0
            for row in rows:
                if is_live(row.status, row.fired_at, row.heartbeat_at, now, self.heartbeat_ms):
                    continue
                count += await self._write_off_row(
                    name, row, now, f"{reason} — written off at boot", row.heartbeat_at
                )
            written += count
            if count:
                if self.queue_metrics is not None:
                    self.queue_metrics.recoveries.labels(name=name, outcome="abandoned").inc(count)
                logger.warning(
                    "scheduler: wrote off queued firings of a schedule %s  name=%s rows=%d",
                    why,
                    name,
                    count,
                )
        return written

    async def write_off_deleted(
        self, name: str, deleted_at: datetime, withdrawn: Sequence[RunRecord] = ()
    ) -> int:
        """A run-time schedule was deleted: the firings waiting in its line never run. Record
        each ``missed`` (``error_tag="written-off"``): ``withdrawn``, this process's
        in-process waiters taken out of the line (no row written yet: inserted now), and
        every ``queued`` row of ``name`` in the ledger, whichever replica's and however
        alive — each by a write compared on its status and owner, so a waiter whose turn
        came first runs (it started before the delete was done) and one that looks after
        finds its row no longer queued and stands down. Counted ``abandoned``; returns how
        many rows this call wrote."""
        now = self.clock.now()
        reason = (
            f'schedule "{name}" was deleted at {iso_z(deleted_at)}: its queued firing never '
            "runs — written off"
        )
        count = 0
        if withdrawn:
            rows = [
                replace(
                    row,
                    status=RunStatus.MISSED,
                    fired_at=None,
                    finished_at=now,
                    heartbeat_at=None,
                    error_tag=WRITTEN_OFF,
                    error_message=reason,
                )
                for row in withdrawn
            ]
            try:
                await self.store.insert_runs(rows)
                count += len(rows)
            except StoreUnavailableError as exc:
                logger.warning(
                    "scheduler: could not record the written-off firings of a deleted "
                    "schedule  name=%s rows=%d: %s",
                    name,
                    len(rows),
                    exc,
                )
        try:
            queued = await self.store.queued_runs(name)
        except StoreUnavailableError as exc:
            # Left queued: their waiters run them if their turn comes; the next boot (or a
            # replica applying the delete) writes them off.
            logger.warning("scheduler: queued rows check failed: %s", exc)
            queued = []
        for row in queued:
            count += await self._write_off_row(name, row, now, reason)
        if count:
            if self.queue_metrics is not None:
                self.queue_metrics.recoveries.labels(name=name, outcome="abandoned").inc(count)
            logger.warning(
                "scheduler: wrote off queued firings of a deleted schedule  name=%s rows=%d",
                name,
                count,
            )
        return count

    async def retention_loop(self) -> None:
        while True:
            result = await self._sweep()
            pause = BACKLOG_PAUSE_SECONDS if result.behind else self.sweep_interval()
            await self.clock.sleep(between_herds(self.clock.now(), pause))

    def sweep_interval(self) -> float:
        """Seconds between two sweeps: a tenth of the shorter retention, within
        [:data:`MIN_RETENTION_INTERVAL_SECONDS`, :data:`RETENTION_INTERVAL_SECONDS`]."""
        shortest = min(r for r in (self.run_retention, self.claim_retention) if r is not None)
        share = shortest.total_seconds() / RETENTION_INTERVAL_SHARE
        return min(RETENTION_INTERVAL_SECONDS, max(MIN_RETENTION_INTERVAL_SECONDS, share))

    async def sweep(self) -> int:
        """Delete finished runs past retention and expired claims, batch after batch until a
        batch comes back short or the sweep's time budget is spent (see the module's
        docstring); returns how many runs it deleted (:attr:`last_sweep` has the rest).
        ``queued`` rows stay: they are positions in the line, not records of a firing."""
        return (await self._sweep()).runs

    async def _sweep(self) -> SweepResult:
        clock = self.clock
        now, began = clock.now(), clock.monotonic()
        catching_up = self.last_sweep is not None and self.last_sweep.behind
        result = SweepResult()

        def runs(n: int) -> None:
            result.runs += n

        def claims(n: int) -> None:
            result.claims += n

        def rollups(n: int) -> None:
            result.rollups += n

        try:
            if self.run_retention is not None:
                cutoff = now - self.run_retention
                if await self._prune(self.store.sweep_runs, cutoff, runs, catching_up):
                    result.behind = True
                # an hour's count goes with the hour's rows: once the whole hour is past
                # retention (the successes it counts would have been swept by now)
                hours = cutoff - timedelta(hours=1)
                if await self._prune(self.store.sweep_rollups, hours, rollups, catching_up):
                    result.behind = True
            cutoff = now - self.claim_retention
            if await self._prune(self.store.prune_claims, cutoff, claims, catching_up):
                result.behind = True
        except StoreUnavailableError as exc:
            logger.warning("scheduler: retention sweep failed: %s", exc)
        result.seconds = clock.monotonic() - began
        if result.behind:
            logger.warning(
                "scheduler: retention behind — deleted runs=%d claims=%d in %.1f s and "
                "expired rows remain; the next sweep follows in %g s",
                result.runs,
                result.claims,
                result.seconds,
                BACKLOG_PAUSE_SECONDS,
            )
        elif catching_up:
            logger.info(
                "scheduler: retention caught up  runs=%d claims=%d", result.runs, result.claims
            )
        self.last_sweep = result
        return result

    async def _prune(
        self,
        delete: Callable[[datetime, int], Awaitable[int]],
        cutoff: datetime,
        tally: Callable[[int], None],
        catching_up: bool,
    ) -> bool:
        """Delete the rows older than ``cutoff``, one batch at a time, until a batch comes
        back short; ``True`` when the budget ran out first (expired rows may remain)."""
        clock = self.clock
        deadline = clock.monotonic() + SWEEP_BUDGET_SECONDS
        while True:
            began, second = clock.monotonic(), whole_second(clock.now())
            n = await delete(cutoff, RETENTION_BATCH)
            tally(n)
            if n < RETENTION_BATCH:
                return False
            took = clock.monotonic() - began
            if clock.monotonic() >= deadline:
                return True
            await clock.sleep(0.0 if catching_up else min(took * REST_RATIO, MAX_REST_SECONDS))
            await self._clear_of_herds(second, took)

    async def _clear_of_herds(self, second: datetime, took: float) -> None:
        """Wait until the next batch cannot meet a herd: past the clearance of a whole second
        passed since ``second`` (when the last batch began), and far enough from the next."""
        guard = min(MAX_GUARD_SECONDS, max(HERD_GUARD_SECONDS, 2 * took))
        while True:
            now = self.clock.now()
            into = into_second(now)
            if whole_second(now) != second and into < HERD_CLEARANCE_SECONDS:
                wait = HERD_CLEARANCE_SECONDS - into
            elif 1.0 - into < guard:
                wait = 1.0 - into + HERD_CLEARANCE_SECONDS
            else:
                return
            await self.clock.sleep(wait)


@dataclass(frozen=True, slots=True)
class RowlessAccounting:
    """What the claims sweep needs to know of this app: who it is, and how the slots of each
    of its schedules are claimed (``self`` ones by this coordination; the rest by arrivals)."""

    replica_id: str
    self_names: frozenset[str]
    external_names: frozenset[str]
    self_outcome: CoordinationOutcome

    def explain(self, name: str) -> tuple[Trigger | None, CoordinationOutcome]:
        """The trigger and coordination outcome a row of ``name`` is written with (trigger
        ``None``: not a schedule of this app)."""
        if name in self.self_names:
            return Trigger.SELF, self.self_outcome
        if name in self.external_names:
            return Trigger.EXTERNAL, CoordinationOutcome.EXTERNAL
        return None, CoordinationOutcome.NONE


@dataclass(slots=True)
class SweepResult:
    """What one retention sweep did."""

    runs: int = 0
    """Finished runs deleted."""
    claims: int = 0
    """Claims rows deleted."""
    rollups: int = 0
    """Hourly rollup rows deleted (``record="failures"``)."""
    behind: bool = False
    """A table's budget ran out with expired rows (maybe) left: the next sweep comes soon."""
    seconds: float = 0.0
    """How long the sweep took, rests and waits included."""


def whole_second(instant: datetime) -> datetime:
    return instant.replace(microsecond=0)


def into_second(instant: datetime) -> float:
    """Seconds past the last whole second (cron instants fall on whole seconds)."""
    return instant.microsecond / 1_000_000


def between_herds(now: datetime, delay: float) -> float:
    """``delay``, stretched by less than a second so that it ends half-way between two whole
    seconds: a sweep's first batch starts clear of any herd."""
    end = now + timedelta(seconds=delay)
    return delay + (0.5 - into_second(end)) % 1.0
