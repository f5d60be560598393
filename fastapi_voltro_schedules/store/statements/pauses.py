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
