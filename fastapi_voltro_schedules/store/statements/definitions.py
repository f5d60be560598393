"""The definitions table: versions are only ever added, and ``(name, version)`` elects the one
replica that records a change when several boot with it at once."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Insert, Select, func, insert, literal, select
from sqlalchemy.dialects import postgresql, sqlite

from ...models import definitions_table
from .dialects import DEFINITIONS_CHANNEL, dialect_family


def definitions_insert(dialect_name: str, rows: Sequence[Mapping[str, Any]]) -> Insert:
    """Insert version rows, skipping any ``(name, version)`` already present: a peer that
    recorded the same version first wins, and the caller reads back what is stored."""
    family = dialect_family(dialect_name)
    values = [dict(r) for r in rows]
    keys = [definitions_table.c.name, definitions_table.c.version]
    if family == "postgresql":
        return (
            postgresql.insert(definitions_table)
            .values(values)
            .on_conflict_do_nothing(index_elements=keys)
        )
    if family == "sqlite":
        return (
            sqlite.insert(definitions_table)
            .values(values)
            .on_conflict_do_nothing(index_elements=keys)
        )
    return insert(definitions_table).values(values).prefix_with("IGNORE")


def definitions_insert_announced(rows: Sequence[Mapping[str, Any]]) -> Select[Any]:
    """Postgres (``change_strategy="cdc"``): :func:`definitions_insert`, and one ``pg_notify``
    on :data:`DEFINITIONS_CHANNEL` per row it inserted, in one statement — so a listener is
    told at commit, never of a row it cannot read yet, and never of a version a peer wrote
    first (the conflict inserts nothing, so returns nothing to announce)."""
    c = definitions_table.c
    added = (
        postgresql.insert(definitions_table)
        .values([dict(r) for r in rows])
        .on_conflict_do_nothing(index_elements=[c.name, c.version])
        .returning(c.name)
        .cte("added")
    )
    return select(func.pg_notify(literal(DEFINITIONS_CHANNEL), added.c.name)).select_from(added)


def definitions_select(names: Collection[str] | None = None) -> Select[Any]:
    """Versions, per schedule newest first (of ``names`` only, when given)."""
    c = definitions_table.c
    stmt = select(definitions_table).order_by(c.name, c.version.desc())
    if names is not None:
        stmt = stmt.where(c.name.in_(sorted(names)))
    return stmt


def definition_keys_since_select(after: datetime) -> Select[Any]:
    """``(name, version)`` of the versions that took effect after ``after``: what a follower
    compares with what it knows before it reads any whole row (no instant per row: converting
    10,000 of them was most of the read)."""
    c = definitions_table.c
    return select(c.name, c.version).where(c.effective_from > after)


def newest_effective_since_select(after: datetime) -> Select[Any]:
    """The newest ``effective_from`` after ``after`` (``NULL``: none)."""
    c = definitions_table.c
    return select(func.max(c.effective_from)).where(c.effective_from > after)


def definitions_since_select(after: datetime, names: Collection[str] | None = None) -> Select[Any]:
    """Versions that took effect after ``after``, oldest first (by the effective_from index);
    of ``names`` only, when given."""
    c = definitions_table.c
    stmt = select(definitions_table).where(c.effective_from > after)
    if names is not None:
        stmt = stmt.where(c.name.in_(sorted(names)))
    return stmt.order_by(c.effective_from, c.name, c.version)
