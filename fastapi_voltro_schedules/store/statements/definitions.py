"""The definitions table: versions are only ever added, and ``(name, version)`` elects the one
replica that records a change when several boot with it at once."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import Insert, Select, TextClause, and_, func, insert, or_, select, text
from sqlalchemy.dialects import postgresql, sqlite

from ...models import definitions_table
from .dialects import DEFINITIONS_CHANNEL, dialect_family


@cache
def definitions_insert(dialect_name: str) -> Insert:
    """Insert version rows — executed with a list of them (``executemany``) — skipping any
    ``(name, version)`` already present: a peer that recorded the same version first wins, and
    the caller reads back what is stored. Postgres and SQLite return the name of each row
    really inserted (SQLAlchemy pages an ``executemany`` with ``RETURNING`` into multi-row
    inserts itself); MariaDB counts them in ``rowcount``.

    One statement, compiled once: a multi-``VALUES`` insert built from the rows was compiled
    afresh for each chunk, 17 binds a row — a first boot of 100,000 schedules spent most of
    its time in SQLAlchemy's compiler."""
    family = dialect_family(dialect_name)
    c = definitions_table.c
    keys = [c.name, c.version]
    if family == "postgresql":
        return (
            postgresql.insert(definitions_table)
            .on_conflict_do_nothing(index_elements=keys)
            .returning(c.name)
        )
    if family == "sqlite":
        return (
            sqlite.insert(definitions_table)
            .on_conflict_do_nothing(index_elements=keys)
            .returning(c.name)
        )
    return insert(definitions_table).prefix_with("IGNORE")


def definitions_announce(names: Sequence[str]) -> TextClause:
    """Postgres (``change_strategy="cdc"``): one ``pg_notify`` on :data:`DEFINITIONS_CHANNEL`
    per name, in the inserting transaction — so a listener is told at commit, never of a row it
    cannot read yet, and (given the names the insert returned) never of a version a peer wrote
    first."""
    return text(
        "SELECT pg_notify(:channel, n) FROM unnest(CAST(:names AS VARCHAR[])) AS n"
    ).bindparams(channel=DEFINITIONS_CHANNEL, names=list(names))


def definitions_select(names: Collection[str] | None = None) -> Select[Any]:
    """Versions, per schedule newest first (of ``names`` only, when given)."""
    c = definitions_table.c
    stmt = select(definitions_table).order_by(c.name, c.version.desc())
    if names is not None:
        stmt = stmt.where(c.name.in_(sorted(names)))
    return stmt


def definitions_page(after: tuple[str, int] | None, limit: int) -> Select[Any]:
    """Up to ``limit`` versions in :func:`definitions_select`'s order (name, then newest
    first), from just after the version ``after`` (``(name, version)``; ``None``: the start) —
    a whole-table read in pages that never split what a later page would skip."""
    c = definitions_table.c
    stmt = select(definitions_table).order_by(c.name, c.version.desc()).limit(limit)
    if after is not None:
        name, version = after
        stmt = stmt.where(or_(c.name > name, and_(c.name == name, c.version < version)))
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
