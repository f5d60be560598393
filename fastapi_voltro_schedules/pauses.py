"""Pause / resume: an operator's off switch for one schedule, honoured by every replica.

The truth is the ``_voltro_schedule_pauses`` table. Each process keeps a copy of it in memory
(:class:`Pauses`), read at boot before any timer is armed, refreshed every
:data:`REFRESH_SECONDS` (on a SQLite file only once something was written since the last read:
the files' ``stat`` says so), and updated at once by this process's own pause/resume calls —
from the instant they are stamped with, before their write returns — so the hot paths (the
timer, admission, the trigger route) ask a dict, never the database, and a pause made on one
replica stops the others within about a second.

What "paused" means, at each place a firing can start:

* **the live timer** keeps its cadence but drops every slot that falls due while paused — no
  run, no ``skipped`` or ``missed`` row. Resume therefore continues at the next occurrence.
* **the boot backfill** of a paused schedule plans nothing; after a resume it starts from
  ``max(last run, resumed_at)``: the paused span is not downtime, so it is neither replayed nor
  recorded ``missed``.
* **an external arrival** answers ``200 {"status": "paused", "runId": null}`` (the CronJob exits
  0) while paused — and, after the resume, for a late redelivery of an occurrence inside the
  paused span. Nothing is claimed, so nothing is swallowed.
* **the external missed watcher** records nothing for occurrences inside a paused span.
* **Run now and a range backfill** are refused with ``409 paused`` and the remedy (resume
  first): an operator who paused a schedule because it is broken should not fire it by a
  stray click. A range backfill already running when the pause lands runs to its end.
* **a firing waiting in its line** (``on_overlap="queue"``: a ``queued`` row in the durable
  line, or a waiter in the in-process chain on SQLite) is *held*, not dropped and not written
  off: the line is work that must happen, in order. When its turn comes while paused it does
  not start — it stays ``queued`` and keeps its place (a queued row keeps beating, so nothing
  adopts it; the chain's waiter keeps the line handed to it), no later firing passes it, and
  it takes its turn after the resume, in ``scheduled_at`` order, before any occurrence after
  the resume. Nothing of the schedule starts while paused. A held waiter whose replica stops
  during the pause is a dead waiter like any other: the next firing after the resume adopts it
  within the adoption bound (measured from its last beat: a pause does not stretch it), or
  records it ``missed`` past it. A run already in flight when the pause lands runs to its end.

Every pause's span is also kept for good in ``_voltro_schedule_pause_spans`` (the pauses row
is reused by the next pause): ``voltro schedule audit`` reads them all
(:class:`RecordedPauses`), so a schedule paused twice owes no slot of either span.

**Every schedule at once** (a maintenance window): :meth:`Pauses.pause_all` writes one row,
:data:`ALL_SCHEDULES`, that holds every schedule — declared ones, run-time ones, and run-time
ones written during the window — exactly as its own pause would, at every place above. With
``until`` the row is written with its end (``resumed_at = until``): it holds the slots in
``(paused_at, until]`` and resumes by itself after ``until`` on every replica, with no write
and nothing to miss, even with every replica down at that instant. :meth:`Pauses.resume_all`
ends it sooner. It is a row beside the schedules' own: a schedule paused on its own before or
during the window stays paused after it. The span is kept like any other, so the audit owes no
slot inside it.

The cache fails safe in one direction only: when the table cannot be read, the last copy is
kept (a paused schedule stays paused) and a warning is logged once per outage.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Hashable, Iterable
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, TypeVar

import anyio
from anyio.abc import TaskStatus

from .errors import PauseUntilPassedError, StoreUnavailableError
from .logs import logger
from .records import ALL_SCHEDULES, RESUMES_BY_ITSELF, PauseRecord

if TYPE_CHECKING:
    from .clock import Clock
    from .store import Store

__all__ = [
    "ALL_SCHEDULES",
    "MAX_REASON_LENGTH",
    "NO_PAUSES",
    "REFRESH_SECONDS",
    "PauseView",
    "Pauses",
    "RecordedPauses",
]

REFRESH_SECONDS = 1.0
"""How often each process re-reads the pauses table (real time: it waits on other replicas'
writes, not on the schedule)."""
STALE_FACTOR = 1.5
""":meth:`Pauses.current` looks again once the last look is this many refreshes old: the
background check, a refresh before each instant, then leaves nothing for the timer to do."""
IDLE_CHECK_SECONDS = 30.0
"""The longest the background check waits on a SQLite ledger with nothing due."""
MAX_REASON_LENGTH = 500

_Written = TypeVar("_Written", PauseRecord, PauseRecord | None)


class PauseView:
    """What the hot paths ask. The base answers "nothing is paused" (an engine without a
    scheduler around it, e.g. in unit tests)."""

    def own(self, name: str) -> PauseRecord | None:
        """``name``'s own pauses row (the fleet-wide pause's: ``own(ALL_SCHEDULES)``)."""
        return None

    def now(self) -> datetime | None:
        """The instant a fleet-wide pause with an ``until`` is judged at (``None``: no clock,
        judged as written)."""
        return None

    def fleet(self) -> PauseRecord | None:
        """The fleet-wide pause in force now, as a pause in force reads (``resumed_at``
        unset; :attr:`~.records.PauseRecord.until` says when it ends by itself)."""
        record = self.own(ALL_SCHEDULES)
        if record is None or record.resumed_at is None:
            return record
        now = self.now()
        if record.until is None or now is None or not record.in_force(now):
            return None
        return replace(record, resumed_at=None, resumed_by=None)

    def get(self, name: str) -> PauseRecord | None:
        """The pause that holds ``name`` now: its own, else the fleet-wide one; else its own
        last pause, resumed (``None``: never paused)."""
        own = self.own(name)
        if own is not None and own.active:
            return own
        fleet = self.fleet()
        return fleet if fleet is not None else own

    async def current(self) -> None:
        """Make the copy current enough to be read (the base has nothing to refresh)."""

    def is_paused(self, name: str) -> bool:
        """Whether ``name`` is paused now (on its own, or with every schedule)."""
        record = self.get(name)
        return record is not None and record.active

    def holds(self, name: str, slot: datetime) -> bool:
        """Whether the occurrence ``slot`` of ``name`` must not fire: the schedule is paused
        (on its own or with every schedule), or ``slot`` lies in a span it was paused for
        (``paused_at < slot <= resumed_at``) — its own latest, or the fleet's."""
        if self.is_paused(name):
            return True
        return _in_span(self.own(name), slot) or _in_span(self.own(ALL_SCHEDULES), slot)

    def catch_up_from(self, name: str, last: datetime | None) -> datetime | None:
        """Where a boot backfill of ``name`` starts, given its last run's slot (``None``: it
        never ran): after the paused span — its own, or the fleet's — when that is newer. Ask
        :meth:`is_paused` first — a paused schedule plans nothing."""
        marks = [last]
        for record in (self.own(name), self.own(ALL_SCHEDULES)):
            if record is not None and record.resumed_at is not None:
                marks.append(record.resumed_at)
        present = [mark for mark in marks if mark is not None]
        return max(present) if present else None

    def unpaused(self, name: str, slots: Iterable[datetime]) -> list[datetime]:
        """``slots`` without those :meth:`holds` refuses."""
        return [slot for slot in slots if not self.holds(name, slot)]

    async def until_resumed(self, name: str) -> None:
        """Return once ``name`` is not paused (at once when it is not): a held queue waiter's
        wait. Looks again at least every :data:`REFRESH_SECONDS`, and at once when this
        process resumes it."""
        while True:
            await self.current()
            if not self.is_paused(name):
                return
            await self._next_look()

    async def _next_look(self) -> None:
        """Wait until the copy may have changed: :data:`REFRESH_SECONDS` (real time)."""
        await anyio.sleep(REFRESH_SECONDS)


NO_PAUSES = PauseView()


def _in_span(record: PauseRecord | None, slot: datetime) -> bool:
    """Whether ``slot`` lies in ``record``'s (closed or scheduled) span."""
    if record is None or record.resumed_at is None:
        return False
    return record.paused_at < slot <= record.resumed_at


class RecordedPauses(PauseView):
    """Recorded pause spans (what the audit read: ``Store.pause_spans``), asked like the live
    copy — except that a slot is held by *any* span of its schedule, not only the latest: a
    schedule paused twice owes neither span."""

    def __init__(self, spans: Iterable[PauseRecord]) -> None:
        self._spans: dict[str, list[PauseRecord]] = {}
        for span in sorted(spans, key=lambda s: s.paused_at):
            self._spans.setdefault(span.name, []).append(span)

    def own(self, name: str) -> PauseRecord | None:
        spans = self._spans.get(name)
        return spans[-1] if spans else None

    def holds(self, name: str, slot: datetime) -> bool:
        # Its own spans and the fleet-wide pause's (a window with an `until` is its span).
        spans = (*self._spans.get(name, ()), *self._spans.get(ALL_SCHEDULES, ()))
        return any(
            span.paused_at < slot and (span.resumed_at is None or slot <= span.resumed_at)
            for span in spans
        )


class Pauses(PauseView):
    """The process's copy of the pauses table, and the pause/resume operations."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self.store = store
        self.clock = clock
        self._records: dict[str, PauseRecord] = {}
        self._writing: dict[str, PauseRecord] = {}
        """What this process's pause/resume calls hold while their write is in flight (see
        :meth:`_hold_while_writing`): a refresh that read the table before the write
        committed keeps them."""
        self._failing = False
        self.due_in: Callable[[], float] | None = None
        """Seconds until the timer's next instant (set by the scheduler once its engine is
        built): where the store can tell cheaply whether anything was written, the
        background check waits for it instead of waking every second."""
        self._stamped = store.change_stamp() is not None
        """The store can tell without a query whether anything was written (SQLite files)."""
        self._checked_at = time.monotonic()
        self._current_for: Hashable = None
        """The store's change stamp the copy is known to be current for."""
        self._checking = anyio.Lock()
        self._change: anyio.Event | None = None
        """Set (and dropped) when the copy changes: held queue waiters look again at once."""

    def own(self, name: str) -> PauseRecord | None:
        return self._records.get(name)

    def now(self) -> datetime:
        return self.clock.now()

    # The herd asks these once per schedule: a schedule with no row of its own while no
    # fleet-wide row exists (nearly always) is answered by two dict lookups.

    def is_paused(self, name: str) -> bool:
        records = self._records
        if name not in records and ALL_SCHEDULES not in records:
            return False
        return super().is_paused(name)

    def holds(self, name: str, slot: datetime) -> bool:
        records = self._records
        if name not in records and ALL_SCHEDULES not in records:
            return False
        return super().holds(name, slot)

    async def _next_look(self) -> None:
        """Wait for a change of the copy, at most :data:`REFRESH_SECONDS`."""
        if self._change is None:
            self._change = anyio.Event()
        with anyio.move_on_after(REFRESH_SECONDS):
            await self._change.wait()

    def _announce(self) -> None:
        change, self._change = self._change, None
        if change is not None:
            change.set()

    def all(self) -> dict[str, PauseRecord]:
        return dict(self._records)

    async def refresh(self) -> None:
        """Replace the copy with the table. Raises ``StoreUnavailableError`` (copy kept)."""
        rows = await self.store.pauses()
        records = {row.name: row for row in rows}
        records.update(self._writing)
        self._records = records
        self._announce()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Keep the copy current until cancelled: every :data:`REFRESH_SECONDS` — or, on a
        store that can tell cheaply whether anything was written (SQLite files), only as
        often as something is due (:attr:`due_in`): the timer and every route ask
        :meth:`current` before they read the copy. A query a second, then a wake a second,
        was nearly all of an idle scheduler's CPU (0.20%, then 0.07% of a core, against
        0.03%)."""
        task_status.started()
        while True:
            await anyio.sleep(self._until_next_check())
            await self._check()

    def _until_next_check(self) -> float:
        if self.due_in is None or not self._stamped:
            return REFRESH_SECONDS
        # Before the next instant, so the timer finds the copy checked (its own check would
        # sit in front of the herd); never longer than IDLE_CHECK_SECONDS.
        return min(IDLE_CHECK_SECONDS, max(REFRESH_SECONDS, self.due_in() - REFRESH_SECONDS))

    async def current(self) -> None:
        """Make the copy at most about :data:`REFRESH_SECONDS` behind the table before it is
        read: on a store that can tell cheaply whether anything was written (SQLite files),
        look now if the last look is older than that; elsewhere the background refresh
        keeps it so and this does nothing. Never raises (see :meth:`_check`)."""
        if not self._stamped or not self._stale():
            return
        async with self._checking:
            if self._stale():  # not looked at by another caller meanwhile
                await self._check()

    def _stale(self) -> bool:
        return time.monotonic() - self._checked_at >= REFRESH_SECONDS * STALE_FACTOR

    async def _check(self) -> None:
        """Re-read the table unless the store can tell, without a query, that nothing was
        written since the last read (:meth:`Store.change_stamp`). An unreadable table keeps
        the last copy (a paused schedule stays paused), warned once per outage."""
        self._checked_at = time.monotonic()
        stamp = self.store.change_stamp()
        if stamp is not None and stamp[1] == self._current_for:
            return
        self._current_for = None
        read_at = time.time()
        try:
            await self.refresh()
        except StoreUnavailableError as exc:
            if not self._failing:
                logger.warning(
                    "scheduler: could not re-read the pauses table — keeping the last "
                    "known pauses (%d paused): %s",
                    sum(1 for r in self._records.values() if r.active),
                    exc,
                )
            self._failing = True
            return
        if self._failing:
            logger.info("scheduler: pauses table readable again")
        self._failing = False
        # Trusted only when the last write is older than a refresh before the read: a write
        # after the read but in the same tick of the file clock could leave the stamp as it
        # was.
        if stamp is not None and stamp[0] < read_at - REFRESH_SECONDS:
            self._current_for = stamp[1]

    async def pause(self, name: str, *, by: str, reason: str | None) -> PauseRecord:
        """Pause ``name`` cluster-wide (idempotent: an existing pause keeps its who/when)."""
        now = self.clock.now()
        own = self._records.get(name)
        held = None if own is not None and own.active else PauseRecord(name, now, by, reason)
        record = await self._hold_while_writing(
            name,
            held,
            self.store.pause(name, paused_at=now, paused_by=by, reason=reason),
        )
        self._records[name] = record
        logger.info(
            "schedule: paused  name=%s by=%s since=%s%s",
            name,
            record.paused_by,
            record.paused_at.isoformat(),
            f" reason={record.reason!r}" if record.reason else "",
        )
        return record

    async def pause_all(
        self, *, by: str, reason: str | None, until: datetime | None = None
    ) -> PauseRecord:
        """Pause every schedule cluster-wide — until resumed, or until ``until`` (after which
        every replica fires again by itself). A window in force keeps its who/when/why and
        takes the new ``until``. :class:`PauseUntilPassedError` for an ``until`` not after now."""
        now = self.clock.now()
        if until is not None and until <= now:
            raise PauseUntilPassedError(
                f"until={until.isoformat()} is not after now ({now.isoformat()}) — name a "
                "later instant, or leave it out to pause until resumed"
            )
        held = None
        if self.fleet() is None:  # a window in force already holds every slot
            held = PauseRecord(
                ALL_SCHEDULES,
                now,
                by,
                reason,
                resumed_at=until,
                resumed_by=None if until is None else RESUMES_BY_ITSELF,
                until=until,
            )
        record = await self._hold_while_writing(
            ALL_SCHEDULES,
            held,
            self.store.pause_all(paused_at=now, paused_by=by, reason=reason, until=until),
        )
        self._records[ALL_SCHEDULES] = record
        logger.warning(
            "schedule: every schedule paused  by=%s since=%s until=%s%s",
            record.paused_by,
            record.paused_at.isoformat(),
            "resumed" if record.until is None else record.until.isoformat(),
            f" reason={record.reason!r}" if record.reason else "",
        )
        self._announce()
        return record

    async def _hold_while_writing(
        self, name: str, held: PauseRecord | None, write: Awaitable[_Written]
    ) -> _Written:
        """Await ``write`` (a pause or resume of ``name`` stamped ``now``) with ``held`` — the
        row it will leave, as this process can tell beforehand — already in the copy, so it
        holds from the instant the write is stamped at: the timer and admission ask the copy,
        and a slot falling due while the write is in flight (a busy database: tens of ms)
        must already see it — a pause that let it fire, or a resume that dropped it, left a
        run inside the recorded span, or a hole after it. ``held`` is ``None`` when the copy
        already says what the write leaves (paused again, resumed while not paused). A
        failed write puts back what was there."""
        if held is None:
            return await write
        before = self._records.get(name)
        self._writing[name] = self._records[name] = held
        try:
            return await write
        except BaseException:
            if self._records.get(name) is held:
                if before is None:
                    del self._records[name]
                else:
                    self._records[name] = before
            raise
        finally:
            if self._writing.get(name) is held:
                del self._writing[name]

    async def resume_all(self, *, by: str) -> PauseRecord | None:
        """End the fleet-wide pause now; ``None`` if every schedule was never paused at once.
        The next occurrences fire; the window is not caught up. Schedules paused on their
        own stay paused."""
        now = self.clock.now()
        fleet = self.fleet()
        held = None if fleet is None else replace(fleet, resumed_at=now, resumed_by=by, until=None)
        record = await self._hold_while_writing(
            ALL_SCHEDULES, held, self.store.resume_all(resumed_at=now, resumed_by=by)
        )
        if record is not None:
            self._records[ALL_SCHEDULES] = record
            logger.warning("schedule: every schedule resumed  by=%s", by)
            self._announce()
        return record

    async def resume(self, name: str, *, by: str) -> PauseRecord | None:
        """Resume ``name``; ``None`` if it was never paused. The next occurrence fires; the
        paused span is not caught up."""
        now = self.clock.now()
        own = self._records.get(name)
        held = None
        if own is not None and own.active:
            held = replace(own, resumed_at=now, resumed_by=by)
        record = await self._hold_while_writing(
            name, held, self.store.resume(name, resumed_at=now, resumed_by=by)
        )
        if record is not None:
            self._records[name] = record
            logger.info("schedule: resumed  name=%s by=%s", name, record.resumed_by)
            self._announce()
        return record
