"""Writes of the runs table: every change of a row's state is a compare-and-set whose
``rowcount`` says who won.

The hot batches (inserts, the terminal update) are compiled once and fed plain tuples, or one
array per column on Postgres: at 10,000 rows SQLAlchemy's per-row parameter processing cost
more than the database's own work.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from functools import cache
from operator import itemgetter
from typing import Any

from sqlalchemy import Insert, Text, Update, bindparam, insert, literal_column, text
from sqlalchemy import update as sa_update
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.elements import TextClause

from ...enums import RunStatus
from ...models import UTCDateTime, bind_utc, runs_table
from ...records import RUN_COLUMNS
from ..base import LIVE_STATUSES
from .dialects import database_now_sql
from .state import noted_finish

UPDATABLE_COLUMNS = frozenset(c.name for c in runs_table.c if c.name != "id")


def _stored(value: Any) -> Any:
    return value.value if isinstance(value, Enum) else value


def insert_runs() -> Insert:
    """The run-row ``INSERT``, executed with a list of rows (``executemany``): one statement
    compiled once and cached, whatever the batch size — a multi-``VALUES`` insert would be
    recompiled for every new row count. It names :data:`RUN_COLUMNS` only: ``attempt`` and
    ``retry_at`` (a retry's, see :mod:`...retries`) take their server defaults, so a firing's
    insert sends nothing for them."""
    return insert(runs_table).values({name: bindparam(name) for name in RUN_COLUMNS})


@dataclass(frozen=True, slots=True)
class DriverStatement:
    """A statement compiled once for one dialect, run with plain tuples on the driver
    (``exec_driver_sql``): the hot batches skip SQLAlchemy's per-row parameter processing,
    which cost more than the database's own work at 10,000 rows."""

    sql: str
    names: tuple[str, ...]
    """The bind names in placeholder order."""
    constants: Mapping[str, Any]
    """Values the statement carries itself (literals compiled as binds)."""
    datetimes: frozenset[str]
    """Binds that hold instants: converted as ``UTCDateTime`` would."""

    def tuples(
        self,
        keys: Sequence[str],
        values: Sequence[tuple[Any, ...]],
        dialect_name: str,
        shared: Mapping[str, Any] | None = None,
    ) -> list[tuple[Any, ...]]:
        """One tuple per row of ``values`` (each holds the binds ``keys`` names, in that
        order), in placeholder order and with its instants bound; a bind not in ``keys`` comes
        from ``shared`` (the same for every row), else from the statement's own constants."""
        fixed = {**self.constants, **(shared or {})}
        index = {key: i for i, key in enumerate(keys)}
        extra = tuple(fixed[n] for n in self.names if n not in index)
        positions, appended = [], len(keys)
        for n in self.names:
            if n in index:
                positions.append(index[n])
            else:
                positions.append(appended)
                appended += 1
        # Rows already in placeholder order (the insert's) are taken as they are; the others
        # are reordered by one itemgetter call (C) each.
        take: Callable[[tuple[Any, ...]], tuple[Any, ...]] | None = None
        if positions != list(range(len(keys))) or extra:
            take = itemgetter(*positions) if len(positions) > 1 else lambda r: (r[positions[0]],)
        instants = [i for i, n in enumerate(self.names) if n in self.datetimes]
        memo: dict[datetime, Any] = {}  # a batch repeats its slot and its "now" thousands of times
        out: list[tuple[Any, ...]] = []
        for row in values:
            picked = row if take is None else take(row + extra if extra else row)
            if instants:
                converted = list(picked)
                for i in instants:
                    value = converted[i]
                    if value is not None:
                        bound = memo.get(value)
                        if bound is None:
                            bound = memo[value] = bind_utc(value, dialect_name)
                        converted[i] = bound
                picked = tuple(converted)
            out.append(picked)
        return out


def driver_statement(stmt: Insert | Update, dialect: Dialect) -> DriverStatement:
    compiled = stmt.compile(dialect=dialect)
    names = tuple(compiled.positiontup or ())
    if not names:
        raise AssertionError(f"{dialect.name}: expected a positional paramstyle")
    binds = compiled.binds
    datetimes = frozenset(n for n in names if isinstance(binds[n].type, UTCDateTime))
    constants = {n: binds[n].effective_value for n in names if binds[n].value is not None}
    return DriverStatement(compiled.string, names, constants, datetimes)


def _pg_array_type(column_name: str) -> str:
    kind = runs_table.c[column_name].type
    if isinstance(kind, UTCDateTime):
        return "TIMESTAMPTZ[]"
    return "TEXT[]" if isinstance(kind, Text) else "VARCHAR[]"


@cache
def insert_runs_array() -> TextClause:
    """Postgres: many run rows in one ``INSERT … SELECT FROM unnest(<one array per column>)``
    — one statement and one plan instead of a protocol round of ``executemany`` per row."""
    columns = list(RUN_COLUMNS)
    casts = ", ".join(f"CAST(:{n} AS {_pg_array_type(n)})" for n in columns)
    quoted = ", ".join(f'"{n}"' for n in columns)
    return text(f"INSERT INTO {runs_table.name} ({quoted}) SELECT * FROM unnest({casts})")


@cache
def finish_update_array() -> TextClause:
    """Postgres: :func:`finish_update` for many rows as one ``UPDATE … FROM unnest(…)``, each
    row still guarded by its own ``status = 'running' AND replica_id`` condition."""
    return text(
        f"UPDATE {runs_table.name} AS r SET status = u.status, finished_at = u.finished_at, "
        "error_tag = u.error_tag, error_message = u.error_message, "
        "error_traceback = u.error_traceback "
        "FROM unnest(CAST(:b_id AS VARCHAR[]), CAST(:b_status AS VARCHAR[]), "
        "CAST(:b_finished AS TIMESTAMPTZ[]), CAST(:b_tag AS VARCHAR[]), "
        "CAST(:b_message AS TEXT[]), CAST(:b_traceback AS TEXT[])) "
        "AS u(id, status, finished_at, error_tag, error_message, error_traceback) "
        f"WHERE r.id = u.id AND r.status = '{RunStatus.RUNNING.value}' "
        "AND r.replica_id = :b_replica"
    )


@cache
def finish_update_array_noted() -> TextClause:
    """Postgres: :func:`finish_update_array` and the schedules' newest outcomes
    (:mod:`.state`) in one statement."""
    return noted_finish(finish_update_array().text, announced=False)


@cache
def finish_update_array_announced() -> TextClause:
    """Postgres: :func:`finish_update_array_noted` and one ``pg_notify`` per name of
    ``:names`` on ``:channel`` in the same statement (``change_strategy="cdc"``). A
    data-modifying ``WITH`` runs whether or not the query reads it; the notifications go out
    when it commits."""
    return noted_finish(finish_update_array().text, announced=True)


FINISH_KEYS = ("b_id", "b_status", "b_finished", "b_tag", "b_message", "b_traceback")
"""The per-row binds of :func:`finish_update` (and its array form), in the order
``finish_runs`` builds them."""


def finish_update() -> Update:
    """The terminal write of many runs in one ``executemany``: ``UPDATE runs SET status,
    finished_at, error_tag, error_message, error_traceback WHERE id = :b_id AND status =
    'running' AND replica_id = :b_replica`` — each row keeps its own compare-and-set
    condition."""
    c = runs_table.c
    return (
        sa_update(runs_table)
        .where(
            c.id == bindparam("b_id"),
            c.status == RunStatus.RUNNING.value,
            c.replica_id == bindparam("b_replica"),
        )
        .values(
            status=bindparam("b_status"),
            finished_at=bindparam("b_finished", type_=UTCDateTime()),
            error_tag=bindparam("b_tag"),
            error_message=bindparam("b_message"),
            error_traceback=bindparam("b_traceback"),
        )
    )


def conditional_update(
    run_id: str,
    expect_status: Collection[RunStatus],
    expect_replica_id: str | None,
    values: Mapping[str, Any],
    expect_heartbeat_at: Any = None,
    check_heartbeat: bool = False,
) -> Update:
    """``UPDATE runs SET … WHERE id = ? AND status IN (…) [AND replica_id = ?]``.

    The caller reads ``rowcount``: SQLAlchemy's MySQL drivers connect with
    ``CLIENT_FOUND_ROWS``, so MariaDB counts rows *matched*, like the others — an update that
    writes the values already stored still says "you won".
    """
    unknown = set(values) - UPDATABLE_COLUMNS
    if unknown:
        raise TypeError(f"update_run(): unknown run column(s) {sorted(unknown)}")
    if not values:
        raise TypeError("update_run(): nothing to set")
    c = runs_table.c
    stmt = (
        sa_update(runs_table)
        .where(c.id == run_id, c.status.in_([s.value for s in expect_status]))
        .values({k: _stored(v) for k, v in values.items()})
    )
    if expect_replica_id is not None:
        stmt = stmt.where(c.replica_id == expect_replica_id)
    if check_heartbeat:
        stmt = stmt.where(
            c.heartbeat_at.is_(None)
            if expect_heartbeat_at is None
            else c.heartbeat_at == expect_heartbeat_at
        )
    return stmt


def heartbeat_update(
    run_ids: Sequence[str], at: datetime | None, replica_id: str, dialect_name: str
) -> Update:
    """Bump ``heartbeat_at`` of this replica's live rows among ``run_ids`` — to ``at``, or to
    the database's clock when ``at`` is ``None``."""
    c = runs_table.c
    value: Any = at if at is not None else literal_column(database_now_sql(dialect_name))
    return (
        sa_update(runs_table)
        .where(
            c.id.in_(list(run_ids)),
            c.status.in_([s.value for s in LIVE_STATUSES]),
            c.replica_id == replica_id,
        )
        .values(heartbeat_at=value)
    )
