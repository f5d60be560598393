"""``on_overlap="queue"`` on multi-instance stores: the line is a row, not a promise.

Consecutive occurrences land on different replicas as a matter of course, so a firing that
cannot start yet records itself ``queued`` in ``_voltro_schedule_runs`` and waits until no run
of the schedule is live on any replica and no earlier queued occurrence (by ``scheduled_at``)
still waits. Every look at the line is one :meth:`Store.take_turn` — the decision is the pure
:func:`~fastapi_voltro_schedules.planning.plan_turn`, taken under the line's lock and written
with conditional updates — so two replicas can never both conclude they are next.

A waiter beats its row like a running one (the watchdog), so a replica that dies while queued
leaves a corpse by the same rule; the firing behind it adopts that occurrence — runs it first,
with its own trigger and coordination outcome, stamped with the adopter's ``replica_id`` —
within the adoption bound, or records it ``missed`` (counted ``abandoned``) past it. A waiter
that was only slow finds its row no longer its own and stands down.

A waiter whose schedule is paused is *held* (:func:`hold_while_paused`): it stops looking at
the line — so it neither starts nor adopts — and keeps beating its row, so its place is kept and
nothing adopts it; it looks again once the schedule is resumed. The in-process chain holds its
waiters the same way when their turn comes (see :mod:`~fastapi_voltro_schedules.pauses`).

A waiter looks again when the ledger changes (a terminal write here, or a ``NOTIFY`` under
``change_strategy="cdc"``) and at least every :data:`POLL_SECONDS`. Only this replica's
earliest waiter of a schedule answers a change: a later one cannot be next while an earlier
one waits (and a dead waiter ahead is seen by the earliest just as well), and letting all of
them queue for the line's lock on every change put the one that mattered behind the rest —
measured, a third of the cdc handoff. The others look when they become the earliest, and
otherwise only every :data:`BEHIND_POLL_FACTOR` polls: their 1 s looks held the same lock.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import anyio

from ..clock import iso_z
from ..enums import RunStatus
from ..errors import StoreUnavailableError
from ..logs import logger
from ..models import claim_key
from ..pauses import NO_PAUSES, PauseView
from ..planning import TurnAction, TurnPlan, adoption_bound, plan_turn
from .base import Step

if TYPE_CHECKING:
    from ..clock import Clock
    from ..definition import Schedule
    from ..metrics import QueueMetrics
    from ..store import RunRecord, Store
    from ..watchdog import Watchdog, Watched
    from .inflight import Wakeups

POLL_SECONDS = 1.0
"""How often a waiter looks at the line with no change event (``change_strategy="poll"``)."""
BEHIND_POLL_FACTOR = 10
"""A waiter behind this replica's earlier waiter of the same schedule looks only when it
becomes the earliest, or every ``BEHIND_POLL_FACTOR`` polls as a backstop."""


class DurableLine:
    """The queue lines of every schedule, as seen by this replica."""

    def __init__(
        self,
        *,
        store: Store,
        clock: Clock,
        replica_id: str,
        heartbeat_ms: int,
        adoption_window_ms: int | None,
        watchdog: Watchdog,
        wakeups: Wakeups,
        metrics: QueueMetrics,
        poll_seconds: float = POLL_SECONDS,
    ) -> None:
        self.store = store
        self.clock = clock
        self.replica_id = replica_id
        self.heartbeat_ms = heartbeat_ms
        self.adoption_window_ms = adoption_window_ms
        self.watchdog = watchdog
        self.wakeups = wakeups
        self.metrics = metrics
        self.poll_seconds = poll_seconds
        self._waiting: dict[str, list[LineTurn]] = {}
        """Per schedule, this replica's waiters by ``(scheduled_at, id)``: the first answers
        change events."""

    def _bound(self, schedule: Schedule) -> Callable[[RunRecord], timedelta]:
        def bound(row: RunRecord) -> timedelta:
            period = schedule.period_at(row.scheduled_at)
            return adoption_bound(period, self.adoption_window_ms, schedule.backfill)

        return bound

    async def join(self, schedule: Schedule, me: RunRecord) -> TurnPlan | None:
        """``me`` claims its slot and joins the line in one transaction (the claims-row race
        folded into the first look, see ``Store.claim_turn``); ``None``: the slot is another
        replica's. Raises ``StoreUnavailableError``."""
        key = claim_key(schedule.name, me.scheduled_at)
        plan = await self.store.claim_turn(
            key, self.replica_id, self.clock.now(), schedule.name, self._decide(schedule, me, True)
        )
        if plan is not None:
            self._report(schedule, plan)
        return plan

    async def look(self, schedule: Schedule, me: RunRecord, *, new: bool) -> TurnPlan:
        """One look at the line for ``me`` (raises ``StoreUnavailableError``)."""
        plan = await self.store.take_turn(schedule.name, self._decide(schedule, me, new))
        self._report(schedule, plan)
        return plan

    def _decide(
        self, schedule: Schedule, me: RunRecord, new: bool
    ) -> Callable[[list[RunRecord]], TurnPlan]:
        now = self.clock.now()

        def decide(line: list[RunRecord]) -> TurnPlan:
            return plan_turn(
                line,
                me,
                new=new,
                now=now,
                replica_id=self.replica_id,
                heartbeat_ms=self.heartbeat_ms,
                adoption_bound=self._bound(schedule),
                here=self.watchdog.beats,
            )

        return decide

    def _report(self, schedule: Schedule, plan: TurnPlan) -> None:
        for row in plan.dead_running:
            logger.warning(
                "schedule: marked a silent run abandoned  name=%s runId=%s heldBy=%s",
                schedule.name,
                row.id,
                row.replica_id,
            )
        for row in plan.abandoned:
            self.metrics.recoveries.labels(name=schedule.name, outcome="abandoned").inc()
            logger.warning(
                "schedule: a queued firing's replica stopped reporting past the adoption bound "
                "— recorded missed  name=%s runId=%s heldBy=%s scheduledAt=%s",
                schedule.name,
                row.id,
                row.replica_id,
                iso_z(row.scheduled_at),
            )
        if plan.action is TurnAction.ADOPT and plan.run is not None:
            self.metrics.recoveries.labels(name=schedule.name, outcome="adopted").inc()
            logger.warning(
                "schedule: adopted a queued firing from a replica that stopped reporting  "
                "name=%s runId=%s",
                schedule.name,
                plan.run.id,
            )

    def log_wait(self, schedule: Schedule, blocker: RunRecord) -> None:
        if blocker.status is RunStatus.RUNNING:
            logger.info(
                "schedule: queued behind a run in flight   name=%s heldBy=%s",
                schedule.name,
                blocker.replica_id,
            )
        else:
            logger.info(
                "schedule: queued behind an earlier firing name=%s behind=%s",
                schedule.name,
                _iso_ms(blocker.scheduled_at),
            )

    def turn(
        self, schedule: Schedule, queued: RunRecord, pauses: PauseView = NO_PAUSES
    ) -> LineTurn:
        """``queued`` waits its turn; held while ``pauses`` says the schedule is paused."""
        turn = LineTurn(self, schedule, queued, pauses)
        bisect.insort(self._waiting.setdefault(schedule.name, []), turn)
        return turn

    def is_head(self, turn: LineTurn) -> bool:
        waiting = self._waiting.get(turn.name)
        return waiting is not None and waiting[0] is turn

    def leave(self, turn: LineTurn) -> None:
        waiting = self._waiting.get(turn.name, [])
        was_head = bool(waiting) and waiting[0] is turn
        if turn in waiting:
            waiting.remove(turn)
        if not waiting:
            self._waiting.pop(turn.name, None)
        elif was_head:
            waiting[0].promote()


class LineTurn:
    """One firing's ``queued`` row, waiting: beats while it waits, looks on every change."""

    def __init__(
        self,
        line: DurableLine,
        schedule: Schedule,
        queued: RunRecord,
        pauses: PauseView = NO_PAUSES,
    ) -> None:
        self._line = line
        self._schedule = schedule
        self._queued = queued
        self._pauses = pauses
        self._queued_at = queued.fired_at or line.clock.now()
        self._beat: Watched | None = line.watchdog.keep_alive(queued.id)
        self._done = False
        self._promoted = anyio.Event()
        line.metrics.queued.labels(name=schedule.name).inc()

    @property
    def name(self) -> str:
        return self._schedule.name

    def __lt__(self, other: LineTurn) -> bool:
        return (self._queued.scheduled_at, self._queued.id) < (
            other._queued.scheduled_at,
            other._queued.id,
        )

    def promote(self) -> None:
        """This waiter became this replica's earliest: look now, then answer change events."""
        self._promoted.set()

    async def next(self) -> Step | None:
        line, schedule = self._line, self._schedule
        blocker_seen: str | None = None
        while not self._done:
            # Paused: no look at all (a look may start or adopt) until resumed; the row beats.
            await hold_while_paused(self._pauses, schedule, self._queued)
            # Subscribe before looking: a change that lands during the look still wakes us.
            event = line.wakeups.event(schedule.name)
            try:
                plan = await line.look(schedule, self._queued, new=False)
            except StoreUnavailableError as exc:
                logger.warning(
                    "schedule: could not look at the queue — waiting  name=%s runId=%s: %s",
                    schedule.name,
                    self._queued.id,
                    exc,
                )
            else:
                if plan.action is TurnAction.GONE:
                    logger.info(
                        "schedule: queued firing taken over elsewhere — standing down  "
                        "name=%s runId=%s",
                        schedule.name,
                        self._queued.id,
                    )
                    self.close()
                    return None
                if plan.action is TurnAction.ADOPT and plan.run is not None:
                    return Step(plan.run, adopted=True)
                if plan.action is TurnAction.START and plan.run is not None:
                    self._started(plan.run)
                    return Step(plan.run)
                if plan.blocker is not None and plan.blocker.id != blocker_seen:
                    blocker_seen = plan.blocker.id
                    line.log_wait(schedule, plan.blocker)
            if line.is_head(self):
                with anyio.move_on_after(line.poll_seconds):
                    await event.wait()
            else:
                # Not next while this replica's earlier waiter waits, and a dead one ahead is
                # the earlier waiter's to see: only a slow backstop look. Every waiter looking
                # each second put the head's turn behind theirs on the line's lock (the cdc tail).
                with anyio.move_on_after(line.poll_seconds * BEHIND_POLL_FACTOR):
                    self._promoted = anyio.Event()
                    await self._promoted.wait()
        return None

    def _started(self, run: RunRecord) -> None:
        waited = (run.fired_at or self._queued_at) - self._queued_at
        self._line.metrics.wait_seconds.labels(name=self._schedule.name).observe(
            max(waited.total_seconds(), 0.0)
        )
        self.close()

    def close(self) -> None:
        if self._done:
            return
        self._done = True
        self._line.leave(self)
        if self._beat is not None:
            self._line.watchdog.unwatch(self._beat)
            self._beat = None
        self._line.metrics.queued.labels(name=self._schedule.name).dec()


async def hold_while_paused(pauses: PauseView, schedule: Schedule, queued: RunRecord) -> None:
    """The queued firing ``queued`` of ``schedule`` is about to take its turn: while the
    schedule is paused it is held here, keeping its place in the line, and returns once the
    schedule is resumed (at once when it is not paused)."""
    await pauses.current()
    if not pauses.is_paused(schedule.name):
        return
    logger.info(
        "schedule: paused — queued firing held in line  name=%s runId=%s scheduledAt=%s",
        schedule.name,
        queued.id,
        iso_z(queued.scheduled_at),
    )
    await pauses.until_resumed(schedule.name)
    logger.info(
        "schedule: resumed — queued firing takes its turn  name=%s runId=%s",
        schedule.name,
        queued.id,
    )


def _iso_ms(at: datetime) -> str:
    """``2026-09-13T10:05:00.000Z`` — the seed's shape of ``behind=``."""
    return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"
