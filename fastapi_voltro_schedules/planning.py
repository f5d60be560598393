"""Pure decisions: which slots are due, which of them run, whether a row is alive.

Nothing here does I/O or reads the clock; the engine passes ``now`` in and carries the plan
out, so every rule is tested with a table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from .cron import CronSpec
from .enums import BackfillPolicy, RunStatus

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
