"""Pure decisions: which slots are due, which of them run, whether a row is alive.

Nothing here does I/O or reads the clock; the engine passes ``now`` in and carries the plan
out, so every rule is tested with a table.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING

from .cron import CronSpec
from .enums import BackfillPolicy, RunStatus
from .records import RowWrite
from .retries import RETRY_WINDOW_CLOSED

if TYPE_CHECKING:
    from .records import RunRecord

CATCH_UP_CAP = 1000
"""The most slots one catch-up walk enumerates (seed: "capped (1000 slots)")."""

DEAD_AFTER_BEATS = 3
"""A live row silent for this many heartbeat intervals is read as dead."""


@dataclass(frozen=True, slots=True)
class CatchUpPlan:
    """What to do with a run of passed slots: fire some, record the rest ``missed``."""

    fire: list[datetime] = field(default_factory=list)
    missed: list[datetime] = field(default_factory=list)
    capped: bool = False
    """The walk stopped at :data:`CATCH_UP_CAP`; older slots were not even enumerated."""

    @property
    def last_planned(self) -> datetime | None:
        """The newest slot this plan accounts for (the live timer continues after it)."""
        slots = self.fire + self.missed
        return max(slots) if slots else None


def passed_slots(
    spec: CronSpec, after: datetime, now: datetime, cap: int = CATCH_UP_CAP
) -> tuple[list[datetime], bool]:
    """The occurrences in ``(after, now]``, newest ``cap`` of them; and whether it was capped.

    When more than ``cap`` slots passed, the *newest* ``cap`` are kept: they are the ones a
    catch-up could still usefully run, and the walk never enumerates unboundedly.
    """
    slots = spec.occurrences(after, now, limit=cap + 1)
    if len(slots) <= cap:
        return slots, False
    # Too many: walk back from now instead, so the kept window ends at now.
    newest: list[datetime] = []
    cursor = spec.previous_occurrence(now)
    while cursor is not None and cursor > after and len(newest) < cap:
        newest.append(cursor)
        cursor = spec.previous_occurrence(cursor - timedelta(microseconds=1))
    newest.reverse()
    return newest, True


def unplanned_after_edit(
    old: CronSpec, new: CronSpec, effective_from: datetime, last_planned: datetime
) -> list[datetime]:
    """The slots an edit read late leaves owed: the new cadence's occurrences in
    ``(effective_from, last_planned]`` that the old one did not plan, oldest first.

    A replica runs the old cadence until it reads an edit another replica wrote (up to one
    heartbeat), planning its slots up to ``last_planned``. From ``effective_from`` on the slots
    are the new version's (:mod:`.definitions`): an instant both cadences share was accounted
    for once, by the old version's row, and must not run again; the new cadence's other
    instants in that stretch were planned by nobody — the writer does not fire them when it is
    not the firer (a follower on a SQLite file, a non-owner under ``cluster``), and re-arming
    after ``last_planned`` would step over them, leaving no row at all.
    """
    if last_planned <= effective_from:
        return []
    owed, _ = passed_slots(new, effective_from, last_planned)
    if not owed:
        return []
    planned = set(passed_slots(old, effective_from, last_planned)[0])
    return [slot for slot in owed if slot not in planned]


def plan_fall_behind(slots: list[datetime], policy: BackfillPolicy) -> CatchUpPlan:
    """The live timer found ``slots`` (oldest first) due at once.

    Falling behind is treated like downtime (SPEC §1): the newest slot runs now; the older
    ones follow the schedule's ``backfill`` policy — ``all`` runs them too, in order; ``skip``
    and ``latest`` record them ``missed`` (under ``latest`` the newest *is* the one catch-up).
    """
    if not slots:
        return CatchUpPlan()
    if policy is BackfillPolicy.ALL:
        return CatchUpPlan(fire=list(slots))
    return CatchUpPlan(fire=[slots[-1]], missed=list(slots[:-1]))


BOOT_GRACE = timedelta(seconds=2)
"""Slots this recent at boot are the live timer's, not the boot backfill's."""

TAKEOVER_REACH = timedelta(days=1)
"""How far back a new owner under ``cluster`` catches up (older gaps need an explicit
``voltro schedule backfill``)."""


def plan_boot_backfill(
    slots: list[datetime], policy: BackfillPolicy, capped: bool = False
) -> CatchUpPlan:
    """Slots that passed while no process ran (oldest first), per the ``backfill`` policy:
    ``skip`` runs none, ``latest`` runs the newest, ``all`` runs every one; the rest are
    recorded ``missed`` — never a silent hole."""
    if not slots:
        return CatchUpPlan(capped=capped)
    if policy is BackfillPolicy.ALL:
        return CatchUpPlan(fire=list(slots), capped=capped)
    if policy is BackfillPolicy.LATEST:
        return CatchUpPlan(fire=[slots[-1]], missed=list(slots[:-1]), capped=capped)
    return CatchUpPlan(missed=list(slots), capped=capped)


def plan_takeover(
    last_slot: datetime | None,
    boundary: datetime,
    handover: timedelta,
    *,
    backfill: BackfillPolicy,
    recorded: bool,
    owed: Callable[[datetime | None, datetime], tuple[list[datetime], bool]],
) -> CatchUpPlan:
    """``cluster``: what a replica that just took a schedule over catches up — the slots in
    ``(last_slot, boundary]`` (no further back than :data:`TAKEOVER_REACH`) that the previous
    owner left. Those within ``handover`` of ``boundary`` are live slots the handover fell on
    (the previous owner released, this one takes at its next beat): they fire whatever the
    policy; the older ones follow ``backfill`` like downtime at boot. A schedule that never ran
    catches up only its handover slots — and, once its definition versions are ``recorded``,
    only the slots they say are ``owed`` (``Versions.owed``): none of a cadence from before it
    took effect (a first boot fires no past slot of a ``skip`` schedule)."""
    if last_slot is None and not recorded:
        last_slot = boundary - handover
    reach = boundary - TAKEOVER_REACH
    after = reach if last_slot is None else max(last_slot, reach)
    slots, capped = owed(after, boundary)
    recent = [s for s in slots if s > boundary - handover]
    older = slots[: len(slots) - len(recent)]
    plan = plan_boot_backfill(older, backfill, capped)
    return CatchUpPlan(fire=plan.fire + recent, missed=plan.missed, capped=capped)


def last_seen(fired_at: datetime | None, heartbeat_at: datetime | None) -> datetime | None:
    """The newest sign of life of a row: ``max(heartbeat_at, fired_at)``."""
    seen = [t for t in (fired_at, heartbeat_at) if t is not None]
    return max(seen) if seen else None


def is_live(
    status: RunStatus,
    fired_at: datetime | None,
    heartbeat_at: datetime | None,
    now: datetime,
    heartbeat_ms: int,
) -> bool:
    """Whether a ``running``/``queued`` row still counts (SPEC §4 liveness): its last sign of
    life is within ``3 × schedule_heartbeat_ms`` of ``now``. A stale beat only stops a corpse
    from holding the schedule shut; it hands ownership to nobody."""
    if status not in (RunStatus.RUNNING, RunStatus.QUEUED):
        return False
    seen = last_seen(fired_at, heartbeat_at)
    if seen is None:
        return False
    return now - seen <= timedelta(milliseconds=DEAD_AFTER_BEATS * heartbeat_ms)


# -- the durable queue: whose turn it is ------------------------------------------------------


class TurnAction(StrEnum):
    START = "start"
    """Nothing is ahead: the firing's own row becomes (or is written) ``running``."""
    ADOPT = "adopt"
    """A dead waiter ahead is taken over: run its occurrence first, then ask again."""
    WAIT = "wait"
    """Something live is ahead (``blocker``): the firing's row is (or stays) ``queued``."""
    GONE = "gone"
    """The firing's row is no longer its own queued row (adopted by another replica, written
    off): stand down."""


@dataclass(frozen=True, slots=True)
class TurnPlan:
    """What one look at a schedule's line decided (see :func:`plan_turn`)."""

    action: TurnAction
    run: RunRecord | None = None
    """START/ADOPT: the row to run, as it will be once written ``running``."""
    blocker: RunRecord | None = None
    """WAIT: the live row ahead (a ``running`` row, or an earlier ``queued`` one)."""
    insert: RunRecord | None = None
    """A new firing's own row (``running`` or ``queued``) to insert."""
    writes: list[RowWrite] = field(default_factory=list)
    abandoned: list[RunRecord] = field(default_factory=list)
    """Dead waiters past the adoption bound, written off ``missed``."""
    dead_running: list[RunRecord] = field(default_factory=list)
    """Dead ``running`` rows marked ``failed/abandoned`` on the way."""


def _order(row: RunRecord) -> tuple[datetime, str]:
    return (row.scheduled_at, row.id)


def plan_turn(
    line: Sequence[RunRecord],
    me: RunRecord,
    *,
    new: bool,
    now: datetime,
    replica_id: str,
    heartbeat_ms: int,
    adoption_bound: Callable[[RunRecord], timedelta],
    here: Callable[[str], bool] = lambda run_id: False,
) -> TurnPlan:
    """Decide one firing's turn from its schedule's ``line`` (every ``queued``/``running`` row
    of the schedule, read under the line's lock).

    ``here(run_id)``: whether this replica is running (or beating the place of) the row now —
    its own rows are live while it says so, however late their beat (a loaded machine: the
    next occurrence started beside one still running here, CI saw it on MariaDB).

    ``me`` is the firing's row: a candidate not yet written (``new``) or its ``queued`` row.
    Order is by ``scheduled_at`` (ties by id), never by who looked first. A live ``running``
    row anywhere, or a live earlier ``queued`` row, makes it wait. A dead ``running`` row is
    marked ``failed/abandoned``; a dead earlier waiter is adopted when its silence is within
    ``adoption_bound(row)`` — run first, keeping its trigger and coordination outcome — else
    written off ``missed`` (counted ``abandoned``). Every write compares what was judged, so a
    row that beat or moved meanwhile is left alone.
    """
    if not new:
        current = next((r for r in line if r.id == me.id), None)
        if (
            current is None
            or current.status is not RunStatus.QUEUED
            or current.replica_id != replica_id
        ):
            return TurnPlan(TurnAction.GONE)
        me = current
    plan_writes: list[RowWrite] = []
    abandoned: list[RunRecord] = []
    dead_running: list[RunRecord] = []

    def seen(row: RunRecord) -> datetime:
        return last_seen(row.fired_at, row.heartbeat_at) or now

    def alive(row: RunRecord) -> bool:
        if is_live(row.status, row.fired_at, row.heartbeat_at, now, heartbeat_ms):
            return True
        return row.replica_id == replica_id and here(row.id)

    blocker: RunRecord | None = None
    adopt: RunRecord | None = None
    for row in sorted(line, key=_order):
        if row.id == me.id:
            continue
        if row.status is RunStatus.RUNNING:
            if alive(row):
                blocker = blocker or row
                continue
            dead_running.append(row)
            silent = (
                f"replica {row.replica_id} stopped reporting (no heartbeat for "
                f"{heartbeat_ms * DEAD_AFTER_BEATS} ms)"
            )
            ended: dict[str, object] = {
                "status": RunStatus.FAILED,
                "finished_at": now,
                "error_tag": "abandoned",
                "error_message": silent,
            }
            if row.retry_at is not None:
                # a dead pending retry behind a later slot: its window closed (retries.py),
                # its last failure is final
                ended |= {
                    "retry_at": None,
                    "error_tag": RETRY_WINDOW_CLOSED,
                    "error_message": f"{row.error_tag}: {row.error_message} — a later slot "
                    f"came due while its retry was pending; {silent}",
                }
            plan_writes.append(
                RowWrite(row.id, RunStatus.RUNNING, row.replica_id, row.heartbeat_at, ended)
            )
            continue
        if _order(row) > _order(me) or blocker is not None or adopt is not None:
            continue  # behind us (its own firing handles it), or we wait anyway
        if alive(row):
            blocker = row
            continue
        silence = now - seen(row)
        if silence <= adoption_bound(row):
            adopt = row
            continue
        abandoned.append(row)
        plan_writes.append(
            RowWrite(
                row.id,
                RunStatus.QUEUED,
                row.replica_id,
                row.heartbeat_at,
                {
                    "status": RunStatus.MISSED,
                    "finished_at": now,
                    "error_tag": "abandoned",
                    "error_message": f"replica {row.replica_id} stopped reporting while queued; "
                    f"silent {int(silence.total_seconds() * 1000)} ms, past the adoption bound "
                    f"of {int(adoption_bound(row).total_seconds() * 1000)} ms",
                },
            )
        )
    if blocker is not None:
        insert = replace(me, status=RunStatus.QUEUED) if new else None
        return TurnPlan(
            TurnAction.WAIT,
            blocker=blocker,
            insert=insert,
            writes=plan_writes,
            abandoned=abandoned,
            dead_running=dead_running,
        )
    if adopt is not None:
        running = replace(
            adopt, status=RunStatus.RUNNING, replica_id=replica_id, fired_at=now, heartbeat_at=now
        )
        plan_writes.append(
            RowWrite(
                adopt.id,
                RunStatus.QUEUED,
                adopt.replica_id,
                adopt.heartbeat_at,
                {
                    "status": RunStatus.RUNNING,
                    "replica_id": replica_id,
                    "fired_at": now,
                    "heartbeat_at": now,
                },
            )
        )
        return TurnPlan(
            TurnAction.ADOPT,
            run=running,
            insert=replace(me, status=RunStatus.QUEUED) if new else None,
            writes=plan_writes,
            abandoned=abandoned,
            dead_running=dead_running,
        )
    running = replace(me, status=RunStatus.RUNNING, fired_at=now, heartbeat_at=None)
    if new:
        return TurnPlan(
            TurnAction.START,
            run=running,
            insert=running,
            writes=plan_writes,
            abandoned=abandoned,
            dead_running=dead_running,
        )
    plan_writes.append(
        RowWrite(
            me.id,
            RunStatus.QUEUED,
            replica_id,
            me.heartbeat_at,
            {"status": RunStatus.RUNNING, "fired_at": now},
        )
    )
    return TurnPlan(
        TurnAction.START,
        run=running,
        writes=plan_writes,
        abandoned=abandoned,
        dead_running=dead_running,
    )


def adoption_bound(
    period: timedelta, window_ms: int | None, backfill: BackfillPolicy = BackfillPolicy.SKIP
) -> timedelta:
    """How long a dead waiter's occurrence may be adopted after its last beat: the configured
    ``queue_adoption_window_ms``, else twice the schedule's period at that occurrence — except
    under ``backfill="all"``, where a waiter is a slot still owed whatever its age (as
    :func:`plan_resume` says): it is adopted, never written off ``missed`` because the replica
    that wrote it went silent a little longer than two periods (a loaded host, a slow reboot)."""
    if backfill is BackfillPolicy.ALL:
        return timedelta.max
    if window_ms is not None:
        return timedelta(milliseconds=window_ms)
    return 2 * period


def plan_resume(
    rows: Sequence[RunRecord],
    *,
    backfill: BackfillPolicy,
    now: datetime,
    heartbeat_ms: int,
    here: Callable[[str], bool],
) -> list[RunRecord]:
    """Which ``queued`` rows of one schedule a replica takes over and puts back in line
    (oldest first): under ``backfill="all"``, every silent one (no beat for
    ``3 × heartbeat``) that no waiter here beats (``here``), whatever its age.

    A queued row is a slot recorded and not yet run — an ``all`` catch-up's slot (any
    overlap) or a ``queue`` waiter — left by a replica that stopped (a crash in the middle of
    a catch-up, a full-fleet stop). ``all`` owes every one. Under ``latest`` and ``skip`` the
    line decides, as it always has: a waiter adopts a dead one ahead within the adoption
    bound and writes it off past it — once that long has passed a newer slot is due, and the
    policy owes that one at most (the catch-up's); the queued rows of a schedule no longer
    ``queue`` are written off at boot (``Maintenance.write_off``).
    """
    if backfill is not BackfillPolicy.ALL:
        return []
    return sorted(
        (
            r
            for r in rows
            if r.status is RunStatus.QUEUED
            and not here(r.id)
            and not is_live(r.status, r.fired_at, r.heartbeat_at, now, heartbeat_ms)
        ),
        key=_order,
    )


# -- range backfill: which slots run again ------------------------------------------------


class SlotAction(StrEnum):
    """What a range backfill does with one slot of its range (see :func:`plan_reprocess`)."""

    RUN = "run"
    """Nothing is recorded for it: it runs (under every ``reprocess``)."""
    RERUN = "rerun"
    """It has an outcome that ``reprocess`` says to run again: a new ``manual`` row, the
    earlier rows left as they are."""
    KEEP = "keep"
    """It has an outcome ``reprocess`` leaves alone."""
    IN_PROGRESS = "in-progress"
    """A run of it is ``running`` or ``queued`` now: never a second one beside it."""
    EXCLUDED = "excluded"
    """Its day is one of the schedule's excluded days (``exclude=``): a backfill never runs
    it, whatever ``reprocess`` says (Run now does, on purpose; see :mod:`.exclusions`)."""


@dataclass(frozen=True, slots=True)
class SlotPlan:
    """One slot of a range backfill: what the ledger says of it now, and what happens."""

    slot: datetime
    status: RunStatus | None
    """Its current status (:func:`current_row`); ``None``: nothing recorded."""
    action: SlotAction
    current: RunRecord | None = None
    """The row that says so (a re-run is a re-run *of this row*: its claim names it)."""
    rows: int = 0
    """How many rows the slot has (a slot run again keeps every earlier row)."""

    @property
    def fires(self) -> bool:
        return self.action in (SlotAction.RUN, SlotAction.RERUN)


_RERUN_WHEN: dict[str, frozenset[RunStatus]] = {
    "none": frozenset(),
    "failed": frozenset({RunStatus.FAILED, RunStatus.MISSED}),
    "all": frozenset({RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.MISSED, RunStatus.SKIPPED}),
}
_RAN = frozenset({RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.RUNNING})


def current_row(rows: Sequence[RunRecord]) -> RunRecord | None:
    """The row that says what became of a slot, of all its rows (any trigger): a live one
    (``running``/``queued``) if any; else the newest whose handler ran (a re-run's row is
    newer than the run it re-ran; a ``missed`` row an external slot's missed policy wrote
    beside its run does not hide the run); else the newest. Ids sort by creation time."""
    if not rows:
        return None
    live = [r for r in rows if r.status in (RunStatus.RUNNING, RunStatus.QUEUED)]
    if live:
        return max(live, key=lambda r: r.id)
    ran = [r for r in rows if r.status in _RAN]
    return max(ran or rows, key=lambda r: r.id)


def plan_reprocess(
    slots: Sequence[datetime], rows: Sequence[RunRecord], reprocess: str
) -> list[SlotPlan]:
    """Each of ``slots`` (a range's occurrences) with its current status and what a range
    backfill under ``reprocess`` (``none``/``failed``/``all``, see
    :class:`~.enums.Reprocess`) does with it. ``rows``: the schedule's rows in the range (any
    trigger); rows at other instants (a Run now) are no slot's. Pure."""
    by_slot: dict[datetime, list[RunRecord]] = {}
    for row in rows:
        by_slot.setdefault(row.scheduled_at, []).append(row)
    rerun = _RERUN_WHEN[reprocess]
    plans: list[SlotPlan] = []
    for slot in slots:
        mine = by_slot.get(slot, [])
        current = current_row(mine)
        if current is None:
            plans.append(SlotPlan(slot, None, SlotAction.RUN))
            continue
        status = current.status
        if status in (RunStatus.RUNNING, RunStatus.QUEUED):
            action = SlotAction.IN_PROGRESS
        elif status in rerun:
            action = SlotAction.RERUN
        else:
            action = SlotAction.KEEP
        plans.append(SlotPlan(slot, status, action, current, len(mine)))
    return plans
