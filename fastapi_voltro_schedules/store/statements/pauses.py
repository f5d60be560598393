"""The pauses table: one row per schedule, which a resume keeps and a later pause reuses; and
the pause spans table: one row per pause, for ever (the audit's history)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Insert, Select, Update, insert, select
from sqlalchemy import update as sa_update
from sqlalchemy.dialects import postgresql, sqlite

from ...models import pause_spans_table, pauses_table
from ...records import ALL_SCHEDULES, RESUMES_BY_ITSELF
from .dialects import dialect_family


def pause_insert(dialect_name: str, row: Mapping[str, Any]) -> Insert:
    """Insert a pauses row unless one exists (an existing row is left as it is)."""
    family = dialect_family(dialect_name)
    if family == "postgresql":
        return (
            postgresql.insert(pauses_table)
            .values(**row)
            .on_conflict_do_nothing(index_elements=[pauses_table.c.name])
        )
    if family == "sqlite":
        return (
            sqlite.insert(pauses_table)
            .values(**row)
            .on_conflict_do_nothing(index_elements=[pauses_table.c.name])
        )
    return insert(pauses_table).values(**row).prefix_with("IGNORE")


def pause_again(name: str, paused_at: datetime, paused_by: str, reason: str | None) -> Update:
    """Re-pause a resumed schedule's row (a paused one is left alone: the first pause wins)."""
    c = pauses_table.c
    return (
        sa_update(pauses_table)
        .where(c.name == name, c.resumed_at.is_not(None))
        .values(
            paused_at=paused_at,
            paused_by=paused_by,
            reason=reason,
            resumed_at=None,
            resumed_by=None,
        )
    )


def pause_resume(name: str, resumed_at: datetime, resumed_by: str) -> Update:
    c = pauses_table.c
    return (
        sa_update(pauses_table)
        .where(c.name == name, c.resumed_at.is_(None))
        .values(resumed_at=resumed_at, resumed_by=resumed_by)
    )


def pauses_select(name: str | None = None) -> Select[Any]:
    stmt = select(pauses_table).order_by(pauses_table.c.name)
    if name is not None:
        stmt = stmt.where(pauses_table.c.name == name)
    return stmt


def span_insert(row: Mapping[str, Any]) -> Insert:
    """A new span: written only by the pause that set ``paused_at`` (its own transaction), so
    its key ``(name, paused_at)`` is new."""
    return insert(pause_spans_table).values(**row)


def span_resume(name: str, resumed_at: datetime, resumed_by: str) -> Update:
    """Close ``name``'s open span (the resume that stamped the pauses row, same transaction)."""
    c = pause_spans_table.c
    return (
        sa_update(pause_spans_table)
        .where(c.name == name, c.resumed_at.is_(None))
        .values(resumed_at=resumed_at, resumed_by=resumed_by)
    )


def spans_select() -> Select[Any]:
    c = pause_spans_table.c
    return select(pause_spans_table).order_by(c.name, c.paused_at)


# -- the fleet-wide pause: the row ALL_SCHEDULES, whose end may be written ahead (``until``)


def _fleet_in_force(table: Any, now: datetime) -> Any:
    """The fleet pause holds at ``now``: not resumed, or its own end (``until``, the window's
    last instant) not passed — not a resume stamped a little ahead by a replica whose clock
    runs fast."""
    c = table.c
    ahead = (c.resumed_by == RESUMES_BY_ITSELF) & (c.resumed_at >= now)
    return (c.name == ALL_SCHEDULES) & (c.resumed_at.is_(None) | ahead)


def _fleet_end(until: datetime | None) -> dict[str, Any]:
    return {"resumed_at": until, "resumed_by": None if until is None else RESUMES_BY_ITSELF}


def fleet_extend(table: Any, now: datetime, until: datetime | None) -> Update:
    """A fleet pause in force at ``now`` (its row, or its open span): set its end."""
    return sa_update(table).where(_fleet_in_force(table, now)).values(**_fleet_end(until))


def fleet_again(
    now: datetime, paused_by: str, reason: str | None, until: datetime | None
) -> Update:
    """Open a new fleet pause on the row of one that is over (not in force at ``now``)."""
    return (
        sa_update(pauses_table)
        .where(pauses_table.c.name == ALL_SCHEDULES, ~_fleet_in_force(pauses_table, now))
        .values(paused_at=now, paused_by=paused_by, reason=reason, **_fleet_end(until))
    )


def fleet_row(
    now: datetime, paused_by: str, reason: str | None, until: datetime | None
) -> dict[str, Any]:
    return {
        "name": ALL_SCHEDULES,
        "paused_at": now,
        "paused_by": paused_by,
        "reason": reason,
        **_fleet_end(until),
    }


def fleet_resume(table: Any, now: datetime, resumed_by: str) -> Update:
    """End the fleet pause in force at ``now`` (its row, or its open span) at ``now``."""
    return (
        sa_update(table)
        .where(_fleet_in_force(table, now))
        .values(resumed_at=now, resumed_by=resumed_by)
    )
