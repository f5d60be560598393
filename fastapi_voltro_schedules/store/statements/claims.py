"""The claims table: its primary key elects the one firer of a slot.

The queue line's lock is a claims row too (``<name>@queue-line``): every look at the line
refreshes it, so claim pruning never takes it away. The bounded delete serves the sweep of
terminal runs as well: both retentions are the same statement on another table.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Delete,
    Insert,
    Select,
    Update,
    bindparam,
    delete,
    func,
    insert,
    select,
    text,
)
from sqlalchemy import update as sa_update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.elements import TextClause

from ...models import UTCDateTime, claims_table, runs_table
from ..base import TERMINAL_STATUSES
from .dialects import dialect_family


def _values(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [dict(r) for r in rows]


def claim_insert(
    dialect_name: str, rows: Sequence[Mapping[str, Any]], *, returning: bool = True
) -> Insert:
    """Insert claims rows, silently skipping keys already present (committed or in flight).

    With ``returning`` the statement yields exactly the keys it inserted. Rows should be sorted
    by key: concurrent batches then lock keys in one global order and cannot deadlock.
    """
    family = dialect_family(dialect_name)
    stmt: Insert
    if family == "postgresql":
        stmt = (
            postgresql.insert(claims_table)
            .values(_values(rows))
            .on_conflict_do_nothing(index_elements=[claims_table.c.key])
        )
    elif family == "sqlite":
        stmt = (
            sqlite.insert(claims_table)
            .values(_values(rows))
            .on_conflict_do_nothing(index_elements=[claims_table.c.key])
        )
    elif family == "mysql":
        # IGNORE also downgrades non-conflict errors (truncation...) to warnings: the store
        # validates key length before building this.
        stmt = insert(claims_table).values(_values(rows)).prefix_with("IGNORE")
    else:
        raise ValueError(f"no claim statement for dialect {dialect_name!r}")
    if returning:
        stmt = stmt.returning(claims_table.c.key)
    return stmt


@cache
def claim_insert_array() -> TextClause:
    """Postgres: claim many keys with one array parameter — ``unnest`` keeps the (sorted)
    order, and the statement text never changes, so it is prepared once instead of a
    1,000-row ``VALUES`` list compiled per call (that compile cost more than the database)."""
    return text(
        f"INSERT INTO {claims_table.name} (key, replica_id, claimed_at) "
        "SELECT k, :replica_id, :claimed_at FROM unnest(CAST(:keys AS VARCHAR[])) AS k "
        "ON CONFLICT (key) DO NOTHING RETURNING key"
    ).bindparams(bindparam("claimed_at", type_=UTCDateTime()))


def claims_won_by(keys: Collection[str], replica_id: str, claimed_at: datetime) -> Select[Any]:
    """MySQL without RETURNING: which of ``keys`` carry this caller's replica id and instant.

    Exact as long as one replica does not claim the same key twice with the same ``claimed_at``
    (it would read its earlier win as a new one — the same caller, so still one winner).
    """
    c = claims_table.c
    return select(c.key).where(
        c.key.in_(list(keys)), c.replica_id == replica_id, c.claimed_at == claimed_at
    )


def claim_by_key(key: str) -> Select[Any]:
    c = claims_table.c
    return select(c.replica_id, c.claimed_at).where(c.key == key)


def claim_touch(key: str, replica_id: str, at: datetime) -> Update:
    c = claims_table.c
    return (
        sa_update(claims_table)
        .where(c.key == key, c.replica_id == replica_id)
        .values(claimed_at=at)
    )


def claim_release(key: str, replica_id: str | None, claimed_at: datetime | None) -> Delete:
    c = claims_table.c
    stmt = delete(claims_table).where(c.key == key)
    if replica_id is not None:
        stmt = stmt.where(c.replica_id == replica_id)
    if claimed_at is not None:
        stmt = stmt.where(c.claimed_at == claimed_at)
    return stmt


def claims_prune(dialect_name: str, older_than: datetime, limit: int) -> Delete:
    """Delete at most ``limit`` of the oldest claims with ``claimed_at < older_than``.

    On PostgreSQL the rows are picked ``FOR UPDATE SKIP LOCKED``: replicas pruning at the same
    moment each take a different batch instead of queueing on (or deadlocking over) the same
    rows, and a queue line's row locked for a turn is simply left for the next batch.
    Elsewhere it is :func:`bounded_delete`: SQLite has one writer anyway, and on MariaDB/MySQL
    a replica whose batch met another's waits for it and finds those rows gone — its batch
    comes back short and ends its sweep, while the other carries on."""
    if dialect_family(dialect_name) != "postgresql":
        return bounded_delete(claims_table.name, older_than, limit)
    c = claims_table.c
    doomed = (
        select(c.key)
        .where(c.claimed_at < older_than)
        .order_by(c.claimed_at, c.key)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    return delete(claims_table).where(c.key.in_(doomed))


def bounded_delete(table_name: str, older_than: datetime, limit: int) -> Delete:
    """Delete at most ``limit`` of the oldest rows: claims by ``claimed_at``, or terminal runs
    by ``finished_at``."""
    if table_name == claims_table.name:
        pk, age = claims_table.c.key, claims_table.c.claimed_at
        extra: list[ColumnElement[bool]] = []
        table = claims_table
    else:
        pk, age = runs_table.c.id, runs_table.c.finished_at
        extra = [runs_table.c.status.in_([s.value for s in TERMINAL_STATUSES])]
        table = runs_table
    # The sweep walks the age index; its status term is a filter, written so that no planner
    # reads it through ix_voltro_runs_status_scheduled instead (SQLite, without statistics,
    # did: every terminal row read and sorted by age, where the age index stops at `limit`).
    unindexed = (
        [func.coalesce(runs_table.c.status, "").in_([s.value for s in TERMINAL_STATUSES])]
        if extra
        else []
    )
    doomed = select(pk).where(age < older_than, *unindexed).order_by(age, pk).limit(limit)
    wrapped = doomed.subquery("doomed")
    stmt = delete(table).where(pk.in_(select(wrapped.c[0])))
    if unindexed:  # the same: the delete finds its rows by primary key
        stmt = stmt.where(*unindexed)
    elif extra:
        # belt and braces: even a row that turned live between the subquery and the delete
        # (impossible for terminal rows, but cheap to state) is never swept
        stmt = stmt.where(*extra)
    return stmt


LINE_SUFFIX = "@queue-line"
"""The claims row whose lock serialises one schedule's queue line (see ``take_turn``)."""


def line_lock(name: str, at: datetime) -> Update:
    """``UPDATE claims SET claimed_at WHERE key = <name>@queue-line``: the row lock every look
    at the line takes first (and keeps the row fresh, so claim pruning never removes it)."""
    c = claims_table.c
    return sa_update(claims_table).where(c.key == name + LINE_SUFFIX).values(claimed_at=at)


def claims_between(after: datetime, upto: datetime, limit: int) -> Select[Any]:
    """Slot claims with ``after < claimed_at <= upto``, oldest first (served by
    ``ix_voltro_claims_claimed_at``) — not the queue lines' lock rows."""
    c = claims_table.c
    return (
        select(c.key, c.replica_id, c.claimed_at)
        .where(c.claimed_at > after, c.claimed_at <= upto, c.key.not_like("%" + LINE_SUFFIX))
        .order_by(c.claimed_at, c.key)
        .limit(limit)
    )


def slots_with_rows(names: Collection[str], first: datetime, last: datetime) -> Select[Any]:
    """``(name, scheduled_at)`` of the rows of ``names`` with ``first <= scheduled_at < last``
    — a superset of the slots asked about; the caller keeps its own, compared by the claim
    key's whole second (``ix_voltro_runs_name_scheduled`` serves it)."""
    c = runs_table.c
    return (
        select(c.name, c.scheduled_at)
        .where(c.name.in_(list(names)), c.scheduled_at >= first, c.scheduled_at < last)
        .distinct()
    )


def claim_take_over(key: str, replica_id: str, claimed_at: datetime, by: str) -> Update:
    """Hand a claim to ``by`` iff it is still the one read (holder and instant): of several
    replicas accounting for the same claim, one updates it."""
    c = claims_table.c
    return (
        sa_update(claims_table)
        .where(c.key == key, c.replica_id == replica_id, c.claimed_at == claimed_at)
        .values(replica_id=by)
    )
