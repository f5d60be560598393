"""Each schedule's newest outcome (``_voltro_schedule_state``): written with a run's terminal
status, read by the inspect listing.

The write is one conditional upsert per batch that only moves forward — a row replaces the
stored outcome only when its ``(scheduled_at, id)`` is at least the stored one's — so a range
backfill of last month finishing now never hides today's outcome, and two replicas finishing
runs of one schedule in either order leave the newer one. Rows go in name order: two batches
that touch the same schedules take their row locks in the same order (no deadlock).

=================  =======================================  ===================================
                   PostgreSQL / SQLite                      MariaDB / MySQL
=================  =======================================  ===================================
upsert             ``INSERT … SELECT … ON CONFLICT (name)   ``INSERT … SELECT … ON DUPLICATE
                   DO UPDATE … WHERE (stored) <= (new)``    KEY UPDATE col = IF(newer, …)``
                   (Postgres: ``DISTINCT ON (name)`` — one  (``last_scheduled_at`` assigned
                   row per name, ``ON CONFLICT`` may not    last: the others' condition reads
                   touch a row twice)                       it before it moves)
terminal write     Postgres: the run update and the upsert  the run update, then the upsert
                   in ONE statement (a data-modifying       by id, in the same transaction
                   ``WITH``); SQLite: two statements in
                   one transaction
=================  =======================================  ===================================
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from functools import cache
from typing import Any

from sqlalchemy import Select, String, any_, bindparam, select, text, union_all
from sqlalchemy.dialects import postgresql
from sqlalchemy.sql.elements import TextClause

from ...enums import RunStatus
from ...models import runs_table, state_table
from ...records import TERMINAL_STATUSES
from .dialects import dialect_family

STATE_COLUMNS = ("name", "last_run_id", "last_scheduled_at", "last_finished_at", "last_status")
_RUN_SOURCE = "name, id, scheduled_at, finished_at, status"
_TERMINAL = ", ".join(f"'{s.value}'" for s in TERMINAL_STATUSES)


def _on_conflict(dialect_name: str) -> str:
    table = state_table.name
    family = dialect_family(dialect_name)
    if family == "mysql":
        newer = (
            "(VALUES(last_scheduled_at), VALUES(last_run_id)) >= (last_scheduled_at, last_run_id)"
        )
        # last_scheduled_at goes last: MySQL assigns left to right and every IF before it must
        # still compare with the stored slot.
        sets = ", ".join(
            f"{c} = IF({newer}, VALUES({c}), {c})"
            for c in ("last_status", "last_finished_at", "last_run_id", "last_scheduled_at")
        )
        return f" ON DUPLICATE KEY UPDATE {sets}"
    stored = "s" if family == "postgresql" else table
    sets = ", ".join(f"{c} = excluded.{c}" for c in STATE_COLUMNS[1:])
    return (
        f" ON CONFLICT (name) DO UPDATE SET {sets} WHERE "
        f"({stored}.last_scheduled_at, {stored}.last_run_id) <= "
        "(excluded.last_scheduled_at, excluded.last_run_id)"
    )


def _insert_head(dialect_name: str) -> str:
    alias = " AS s" if dialect_family(dialect_name) == "postgresql" else ""
    return f"INSERT INTO {state_table.name}{alias} ({', '.join(STATE_COLUMNS)}) "


@cache
def note_runs(dialect_name: str) -> TextClause:
    """Upsert the outcome of the terminal runs among ``:state_ids`` (read back from the runs
    table, in the caller's transaction: whatever path wrote the terminal status — a finish, a
    ``skipped``/``missed`` insert, an abandoned or written-off row). One parameter; build it
    with :func:`note_runs_params`."""
    runs = runs_table.name
    family = dialect_family(dialect_name)
    if family == "postgresql":
        select_sql = (
            f"SELECT DISTINCT ON (name) {_RUN_SOURCE} FROM {runs} "
            f"WHERE id = ANY(CAST(:state_ids AS VARCHAR[])) AND status IN ({_TERMINAL}) "
            "ORDER BY name, scheduled_at DESC, id DESC"
        )
    elif family == "sqlite":
        # CROSS JOIN: SQLite keeps the ids outside, so each is a primary-key probe — left to
        # itself (no statistics) it read every terminal row through the status index
        select_sql = (
            "SELECT r.name, r.id, r.scheduled_at, r.finished_at, r.status "
            f"FROM json_each(:state_ids) AS j CROSS JOIN {runs} AS r "
            f"WHERE r.id = j.value AND r.status IN ({_TERMINAL}) "
            "ORDER BY r.name, r.scheduled_at, r.id"
        )
    elif family == "mysql":
        select_sql = (
            "SELECT r.name, r.id, r.scheduled_at, r.finished_at, r.status "
            "FROM JSON_TABLE(:state_ids, '$[*]' COLUMNS (id VARCHAR(40) PATH '$')) AS j "
            f"JOIN {runs} AS r FORCE INDEX (PRIMARY) ON r.id = j.id "
            f"WHERE r.status IN ({_TERMINAL}) "
            "ORDER BY r.name, r.scheduled_at, r.id"
        )
    else:
        raise ValueError(f"no state statement for dialect {dialect_name!r}")
    return text(_insert_head(dialect_name) + select_sql + _on_conflict(dialect_name))


def note_runs_params(run_ids: Sequence[str], dialect_name: str) -> dict[str, Any]:
    """The ``:state_ids`` parameter of :func:`note_runs`: an array on Postgres, a JSON array
    elsewhere."""
    if dialect_family(dialect_name) == "postgresql":
        return {"state_ids": list(run_ids)}
    return {"state_ids": json.dumps(list(run_ids))}


def noted_finish(update_sql: str, *, announced: bool) -> TextClause:
    """Postgres: the terminal update ``update_sql`` (an ``UPDATE … AS r …`` without
    ``RETURNING``) and the state upsert of the rows it changed, in one statement — the hot
    path's one round trip stays one. ``announced``: the ``pg_notify`` of ``:names`` on
    ``:channel`` rides along too (``change_strategy="cdc"``)."""
    upsert = (
        _insert_head("postgresql") + f"SELECT DISTINCT ON (name) {_RUN_SOURCE} FROM finished "
        f"WHERE status IN ({_TERMINAL}) ORDER BY name, scheduled_at DESC, id DESC"
        + _on_conflict("postgresql")
    )
    finished = (
        f"WITH finished AS ({update_sql} "
        "RETURNING r.name, r.id, r.scheduled_at, r.finished_at, r.status)"
    )
    if not announced:
        return text(f"{finished} {upsert}")
    return text(
        f"{finished}, noted AS ({upsert} RETURNING 1) "
        "SELECT pg_notify(:channel, n) FROM unnest(CAST(:names AS VARCHAR[])) AS n"
    )


def states_of(names: Collection[str], dialect_name: str) -> Select[Any]:
    """The stored outcome of each of ``names`` (a page's worth)."""
    c = state_table.c
    named = (
        c.name == any_(bindparam("names", list(names), type_=postgresql.ARRAY(String)))
        if dialect_family(dialect_name) == "postgresql"
        else c.name.in_(list(names))
    )
    return select(state_table).where(named)


def names_in_status(
    statuses: Collection[RunStatus], after: str | None, prefix: str | None, limit: int
) -> Select[Any]:
    """Up to ``limit`` names whose newest outcome is one of ``statuses``, in name order after
    ``after``, starting with ``prefix``. One range of ``ix_voltro_state_status_name`` per
    status, merged: an ``IN`` over the statuses would read every match and sort it."""
    c = state_table.c

    def one(status: RunStatus) -> Select[Any]:
        stmt = select(c.name).where(c.last_status == status.value)
        if after is not None:
            stmt = stmt.where(c.name > after)
        if prefix:
            stmt = stmt.where(c.name.startswith(prefix, autoescape=True))
        return stmt.order_by(c.name).limit(limit)

    parts = [one(s) for s in sorted(set(statuses), key=lambda s: s.value)]
    if len(parts) == 1:
        return parts[0]
    merged = union_all(*(select(p.subquery().c.name) for p in parts)).subquery()
    return select(merged.c.name).order_by(merged.c.name).limit(limit)


__all__ = [
    "STATE_COLUMNS",
    "names_in_status",
    "note_runs",
    "note_runs_params",
    "noted_finish",
    "states_of",
]
