"""The hourly rollup of successes (``record="failures"``, ``_voltro_schedule_rollups``).

A success of such a schedule is written ``succeeded`` with ``error_tag =``
:data:`~...records.ROLLED_UP_TAG`, like any run; the same transaction then *folds* the
schedule's older marked rows: reads them (locked), deletes them, adds them to their hours'
counts and hands their slot claims to :data:`ROLLED_UP_HOLDER`. Each success is a row or a
count, never both, and the schedule's newest success stays a row — what catch-up, a cluster
takeover and the external missed watcher read as "the last slot that ran".

==============  ==========================================  =====================================
                PostgreSQL / SQLite                         MariaDB / MySQL
==============  ==========================================  =====================================
add to an hour  ``INSERT … ON CONFLICT (name, hour) DO      ``INSERT … ON DUPLICATE KEY UPDATE
                UPDATE SET succeeded = t.succeeded +        succeeded = succeeded +
                excluded.succeeded, …``                     VALUES(succeeded), …``
==============  ==========================================  =====================================

(An upsert that adds is what a rollup is: unlike a claim, a lost race here must still write.)
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Delete, Select, Update, case, delete, select, tuple_, update
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.sql.dml import Insert

from ...enums import RunStatus
from ...models import claims_table, rollups_table, runs_table
from ...records import CLOCK_TRIGGERS, ROLLED_UP_HOLDER, ROLLED_UP_TAG
from .dialects import dialect_family


def marked_runs(names: Collection[str]) -> Select[Any]:
    """The marked successes of ``names`` (the newest of each is kept; the caller folds the
    rest), locked until the transaction ends where the dialect locks rows. Served by
    ``ix_voltro_runs_name_status_scheduled``: one short range per name."""
    c = runs_table.c
    return (
        select(c.id, c.name, c.scheduled_at, c.fired_at, c.finished_at)
        .where(
            c.name.in_(sorted(names)),
            c.status == RunStatus.SUCCEEDED.value,
            c.error_tag == ROLLED_UP_TAG,
            c.trigger.in_([t.value for t in CLOCK_TRIGGERS]),
        )
        .order_by(c.name, c.scheduled_at, c.id)
        .with_for_update()
    )


def delete_runs(run_ids: Sequence[str]) -> Delete:
    """Delete the folded rows (by primary key)."""
    return delete(runs_table).where(runs_table.c.id.in_(list(run_ids)))


def hand_claims_to_rollup(keys: Sequence[str]) -> Update:
    """The folded slots' claims, held by :data:`ROLLED_UP_HOLDER` from now on."""
    c = claims_table.c
    return update(claims_table).where(c.key.in_(list(keys))).values(replica_id=ROLLED_UP_HOLDER)


def add_to_hours(dialect_name: str) -> Insert:
    """Add ``(name, hour, succeeded, total_ms, max_ms)`` rows (an ``executemany``) to the
    stored hours: counts and totals summed, the longest kept."""
    family = dialect_family(dialect_name)
    t = rollups_table
    if family == "mysql":
        stmt = mysql.insert(t)
        return stmt.on_duplicate_key_update(
            succeeded=t.c.succeeded + stmt.inserted.succeeded,
            total_ms=t.c.total_ms + stmt.inserted.total_ms,
            max_ms=case(
                (stmt.inserted.max_ms > t.c.max_ms, stmt.inserted.max_ms), else_=t.c.max_ms
            ),
        )
    if family not in ("postgresql", "sqlite"):
        raise ValueError(f"no rollup statement for dialect {dialect_name!r}")
    ins = postgresql.insert(t) if family == "postgresql" else sqlite.insert(t)
    return ins.on_conflict_do_update(
        index_elements=[t.c.name, t.c.hour],
        set_={
            "succeeded": t.c.succeeded + ins.excluded.succeeded,
            "total_ms": t.c.total_ms + ins.excluded.total_ms,
            "max_ms": case(
                (ins.excluded.max_ms > t.c.max_ms, ins.excluded.max_ms), else_=t.c.max_ms
            ),
        },
    )


def rollups_between(
    names: Collection[str] | None, first: datetime, last: datetime, limit: int
) -> Select[Any]:
    """The rollup rows of ``names`` (every schedule: ``None``) with ``first <= hour <= last``,
    newest hour first (the primary key serves one name's)."""
    c = rollups_table.c
    stmt = select(rollups_table).where(c.hour >= first, c.hour <= last)
    if names is not None:
        stmt = stmt.where(c.name.in_(sorted(names)))
    return stmt.order_by(c.hour.desc(), c.name).limit(limit)


def prune_rollups(before: datetime, limit: int) -> Delete:
    """Delete at most ``limit`` rollup rows of the hours before ``before``, oldest first (short
    batches, like the ledger's sweep)."""
    c = rollups_table.c
    doomed = (
        select(c.name, c.hour).where(c.hour < before).order_by(c.hour, c.name).limit(limit)
    ).subquery("doomed")
    # the extra derived table lets MySQL/MariaDB delete from the table it reads (error 1093)
    return delete(rollups_table).where(
        tuple_(c.name, c.hour).in_(select(doomed.c.name, doomed.c.hour))
    )


__all__ = [
    "ROLLED_UP_HOLDER",
    "add_to_hours",
    "delete_runs",
    "hand_claims_to_rollup",
    "marked_runs",
    "prune_rollups",
    "rollups_between",
]
