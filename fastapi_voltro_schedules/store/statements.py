"""Every SQL statement the store runs, built with SQLAlchemy Core, in one reviewable place.

The dialect differences live here and nowhere else:

==============  ==========================================  =====================================
statement       PostgreSQL / SQLite (>= 3.38)               MariaDB (>= 10.6) / MySQL (>= 8.0)
==============  ==========================================  =====================================
claim           ``INSERT … ON CONFLICT DO NOTHING           ``INSERT IGNORE … RETURNING key``
                RETURNING key``                             (MariaDB); MySQL has no RETURNING:
                                                            ``INSERT IGNORE`` then
                                                            :func:`claims_won_by` reads back
bounded delete  ``DELETE … WHERE pk IN (SELECT pk FROM (SELECT … ORDER BY … LIMIT n) AS doomed)``
                — the extra derived table is what lets MySQL/MariaDB delete from the table it
                reads (error 1093), and it is harmless elsewhere
last runs       names from ``unnest(:names)``          names from ``JSON_TABLE(:names, …)``
                (PostgreSQL), ``json_each(:names)``    (MariaDB >= 10.6, MySQL >= 8.0); then
                (SQLite); then per name a correlated   the same per-name probe
                ``ORDER BY … LIMIT 1`` probe
==============  ==========================================  =====================================

Never ``ON DUPLICATE KEY UPDATE``: it turns a lost race into a write (and into "2 rows
affected"), which is the very thing a claim must not do.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from functools import cache
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Delete,
    Insert,
    Select,
    String,
    Text,
    Update,
    and_,
    any_,
    bindparam,
    delete,
    insert,
    literal_column,
    or_,
    select,
    text,
)
from sqlalchemy import update as sa_update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.elements import TextClause
from sqlalchemy.sql.selectable import TextualSelect

from ..enums import RunStatus, Trigger
from ..models import UTCDateTime, bind_utc, claims_table, pauses_table, runs_table
from .base import CLOCK_TRIGGERS, LIVE_STATUSES, TERMINAL_STATUSES

CLAIM_CHUNK = 1000
"""Keys per claim statement (3 parameters each: far below every driver's parameter cap)."""
RUN_CHUNK = 500
"""Rows per run insert (13 parameters each)."""
NAME_CHUNK = 2000
"""Schedule names per ``IN (…)`` list: well under every driver's bind-parameter limit."""
DELETE_BATCH = 1000
"""Rows per bounded-delete statement: short transactions that never hold the table for long."""

UPDATABLE_COLUMNS = frozenset(c.name for c in runs_table.c if c.name != "id")


def dialect_family(dialect_name: str) -> str:
    """``"postgresql"``, ``"sqlite"`` or ``"mysql"`` (MariaDB included)."""
    return "mysql" if dialect_name in ("mysql", "mariadb") else dialect_name


def _values(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [dict(r) for r in rows]


# -- claims ---------------------------------------------------------------------------------


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
    doomed = select(pk).where(age < older_than, *extra).order_by(age, pk).limit(limit)
    wrapped = doomed.subquery("doomed")
    stmt = delete(table).where(pk.in_(select(wrapped.c[0])))
    if extra:
        # belt and braces: even a row that turned live between the subquery and the delete
        # (impossible for terminal rows, but cheap to state) is never swept
        stmt = stmt.where(*extra)
    return stmt


# -- runs -----------------------------------------------------------------------------------


def _stored(value: Any) -> Any:
    return value.value if isinstance(value, Enum) else value


def insert_runs() -> Insert:
    """The run-row ``INSERT``, executed with a list of rows (``executemany``): one statement
    compiled once and cached, whatever the batch size — a multi-``VALUES`` insert would be
    recompiled for every new row count."""
    return insert(runs_table)


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

    def rows(
        self,
        values: Sequence[Mapping[str, Any]],
        dialect_name: str,
        shared: Mapping[str, Any] | None = None,
    ) -> list[tuple[Any, ...]]:
        """One tuple per row, in placeholder order; a bind missing from a row comes from
        ``shared`` (the same for every row), else from the statement's own constants."""
        fixed = {**self.constants, **(shared or {})}
        memo: dict[datetime, Any] = {}  # a batch repeats its slot and its "now" thousands of times

        def convert(name: str, value: Any) -> Any:
            if name not in self.datetimes or value is None:
                return value
            bound = memo.get(value)
            if bound is None:
                bound = memo[value] = bind_utc(value, dialect_name)
            return bound

        return [
            tuple(convert(n, row[n] if n in row else fixed[n]) for n in self.names)
            for row in values
        ]


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
    columns = [c.name for c in runs_table.c]
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


def finish_update_array_announced() -> TextClause:
    """Postgres: :func:`finish_update_array` and one ``pg_notify`` per name of ``:names`` on
    ``:channel`` in the same statement (``change_strategy="cdc"``). A data-modifying ``WITH``
    runs whether or not the query reads it; the notifications go out when it commits."""
    update = finish_update_array().text
    return text(
        f"WITH finished AS ({update}) "
        "SELECT pg_notify(:channel, n) FROM unnest(CAST(:names AS VARCHAR[])) AS n"
    )


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


LINE_SUFFIX = "@queue-line"
"""The claims row whose lock serialises one schedule's queue line (see ``take_turn``)."""


def line_lock(name: str, at: datetime) -> Update:
    """``UPDATE claims SET claimed_at WHERE key = <name>@queue-line``: the row lock every look
    at the line takes first (and keeps the row fresh, so claim pruning never removes it)."""
    c = claims_table.c
    return sa_update(claims_table).where(c.key == name + LINE_SUFFIX).values(claimed_at=at)


def database_now_sql(dialect_name: str) -> str:
    """The database's clock as SQL, in the form ``UTCDateTime`` stores on that dialect:
    ``timestamptz`` on Postgres, naive UTC ``DATETIME(6)`` on MariaDB/MySQL (``UTC_TIMESTAMP``
    ignores the session's time zone), ISO-8601 text on SQLite (``%f`` is milliseconds: padded
    to the stored microseconds so the text still sorts like time)."""
    family = dialect_family(dialect_name)
    if family == "postgresql":
        return "statement_timestamp()"
    if family == "mysql":
        return "UTC_TIMESTAMP(6)"
    if family == "sqlite":
        return "(strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000+00:00')"
    raise ValueError(f"no clock for dialect {dialect_name!r}")


def database_now(dialect_name: str) -> Select[Any]:
    return select(literal_column(database_now_sql(dialect_name), type_=UTCDateTime()))


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


def silent_runs(
    names: Collection[str],
    statuses: Collection[RunStatus],
    cutoff: datetime,
    dialect_name: str,
) -> Select[Any]:
    """Rows of ``names`` in ``statuses`` with no sign of life at or after ``cutoff``: read
    through ``ix_voltro_runs_name_status_scheduled`` (live rows only), then filtered."""
    c = runs_table.c
    return runs_in_status(names, statuses, dialect_name).where(
        or_(c.heartbeat_at.is_(None), c.heartbeat_at < cutoff),
        or_(c.fired_at.is_(None), c.fired_at < cutoff),
    )


def select_runs() -> Select[Any]:
    """Every column of the runs table."""
    return select(runs_table)


def run_by_id(run_id: str) -> Select[Any]:
    return select_runs().where(runs_table.c.id == run_id)


BY_NAME_INDEX = "ix_voltro_runs_name_scheduled"
BY_TIME_INDEX = "ix_voltro_runs_scheduled"


def _force_index(stmt: Select[Any], index: str) -> Select[Any]:
    """MariaDB/MySQL only: read through ``index``. MariaDB 10.11 otherwise walks a page of
    ``name = ? AND scheduled_at < ? ORDER BY scheduled_at DESC LIMIT n`` as a ``ref`` on the
    name alone — from the schedule's newest row down, 495,000 rows read for 100 at 1 M — and
    probes a rare schedule's newest row by walking the ``scheduled_at`` index of every
    schedule. The other dialects plan these right unaided."""
    hint = f"FORCE INDEX ({index})"
    return stmt.with_hint(runs_table, hint, "mysql").with_hint(runs_table, hint, "mariadb")


def list_runs(
    name: str | None,
    limit: int,
    before: datetime | None,
    before_id: str | None = None,
    statuses: Collection[RunStatus] | None = None,
) -> Select[Any]:
    c = runs_table.c
    stmt = select_runs().order_by(c.scheduled_at.desc(), c.id.desc()).limit(limit)
    stmt = _force_index(stmt, BY_TIME_INDEX if name is None else BY_NAME_INDEX)
    if name is not None:
        stmt = stmt.where(c.name == name)
    if statuses is not None:
        stmt = stmt.where(c.status.in_([s.value for s in statuses]))
    if before is not None and before_id is not None:
        stmt = stmt.where(
            or_(c.scheduled_at < before, and_(c.scheduled_at == before, c.id < before_id))
        )
    elif before is not None:
        stmt = stmt.where(c.scheduled_at < before)
    return stmt


# -- pauses ---------------------------------------------------------------------------------


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


def runs_between(
    after: datetime, until: datetime, limit: int, cursor: tuple[datetime, str] | None
) -> Select[Any]:
    """One keyset page of every schedule's runs in ``(after, until]``, oldest first."""
    c = runs_table.c
    stmt = (
        select_runs()
        .where(c.scheduled_at > after, c.scheduled_at <= until)
        .order_by(c.scheduled_at, c.id)
        .limit(limit)
    )
    if cursor is not None:
        at, run_id = cursor
        stmt = stmt.where(or_(c.scheduled_at > at, and_(c.scheduled_at == at, c.id > run_id)))
    return _force_index(stmt, BY_TIME_INDEX)


def runs_in_status(
    names: Collection[str], statuses: Collection[RunStatus], dialect_name: str = ""
) -> Select[Any]:
    c = runs_table.c
    # Postgres takes the names as one array: the statement stays the same for any count,
    # where an expanding IN list is re-rendered (and re-planned) for every new length.
    named = (
        c.name == any_(bindparam("names", list(names), type_=postgresql.ARRAY(String)))
        if dialect_name == "postgresql"
        else c.name.in_(list(names))
    )
    return (
        select_runs()
        .where(named, c.status.in_([s.value for s in statuses]))
        .order_by(c.scheduled_at, c.id)
    )


def queued_rows() -> Select[Any]:
    c = runs_table.c
    return select_runs().where(c.status == RunStatus.QUEUED.value).order_by(c.scheduled_at, c.id)


NOTIFY_CHANNEL = "voltro_schedule_runs"
"""Postgres ``LISTEN``/``NOTIFY`` channel of ``change_strategy="cdc"``; the payload is a
schedule name."""


def notify(names: Collection[str]) -> TextClause:
    """Postgres: one ``pg_notify`` per name, in one statement."""
    return text(
        "SELECT pg_notify(:channel, n) FROM unnest(CAST(:names AS VARCHAR[])) AS n"
    ).bindparams(channel=NOTIFY_CHANNEL, names=sorted(set(names)))


def run_for_slot(name: str, scheduled_at: datetime, trigger: Trigger) -> Select[Any]:
    """The oldest row of one slot (served by ``ix_voltro_runs_name_scheduled``)."""
    c = runs_table.c
    return (
        select_runs()
        .where(c.name == name, c.scheduled_at == scheduled_at, c.trigger == trigger.value)
        .order_by(c.id)
        .limit(1)
    )


def succeeded_slots(name: str, after: datetime, until: datetime) -> Select[Any]:
    c = runs_table.c
    return select(c.scheduled_at).where(
        c.name == name,
        c.status == RunStatus.SUCCEEDED.value,
        c.scheduled_at > after,
        c.scheduled_at <= until,
    )


def _names_source(dialect_name: str) -> str:
    """The derived table of schedule names ``last_runs`` walks, fed by ONE parameter
    ``:names`` (the statement text never changes with the count, so it is prepared once)."""
    family = dialect_family(dialect_name)
    if family == "postgresql":
        return "unnest(CAST(:names AS VARCHAR[])) AS n(name)"
    if family == "sqlite":
        return "(SELECT value AS name FROM json_each(:names)) AS n"
    if family == "mysql":
        # MariaDB >= 10.6 / MySQL >= 8.0 (the JSON array is what ``last_runs_params`` builds)
        return "JSON_TABLE(:names, '$[*]' COLUMNS (name VARCHAR(255) PATH '$')) AS n"
    raise ValueError(f"no last_runs statement for dialect {dialect_name!r}")


@cache
def last_runs(dialect_name: str) -> TextualSelect:
    """The newest clock-driven row of each name: one index probe per name, not a scan.

    For each name a correlated ``ORDER BY scheduled_at DESC, id DESC LIMIT 1`` walks
    ``ix_voltro_runs_name_scheduled`` backwards from the newest row and stops at the first
    ``self``/``external`` one, then the row is fetched by primary key. The cost per name is the
    rows newer than its last clock-driven one (``manual`` rows only), whatever the ledger's
    size. The window function this replaces (``ROW_NUMBER() OVER (PARTITION BY name …)``) read
    every row of every named schedule: 2.5 s at 1 M rows.

    One parameter, ``:names`` — build it with :func:`last_runs_params`.
    """
    table = runs_table.name
    clock = ", ".join(f"'{t.value}'" for t in CLOCK_TRIGGERS)
    columns = ", ".join(f'r."{c.name}"' for c in runs_table.c)
    hint = ""
    if dialect_family(dialect_name) == "mysql":
        columns = ", ".join(f"r.`{c.name}`" for c in runs_table.c)
        trigger = "p.`trigger`"
        hint = f" FORCE INDEX ({BY_NAME_INDEX})"  # see _force_index
    else:
        trigger = 'p."trigger"'
    pick = (
        f"SELECT p.id FROM {table} AS p{hint} WHERE p.name = n.name AND {trigger} IN ({clock}) "
        "ORDER BY p.scheduled_at DESC, p.id DESC LIMIT 1"
    )
    sql = (
        f"SELECT {columns} FROM (SELECT ({pick}) AS pick FROM {_names_source(dialect_name)}) "
        f"AS picks JOIN {table} AS r ON r.id = picks.pick"
    )
    return text(sql).columns(*runs_table.c)


def last_runs_params(names: Sequence[str], dialect_name: str) -> dict[str, Any]:
    """The ``:names`` parameter of :func:`last_runs`: an array on Postgres, a JSON array
    elsewhere."""
    if dialect_family(dialect_name) == "postgresql":
        return {"names": list(names)}
    return {"names": json.dumps(list(names))}


def ping() -> Select[Any]:
    return select(1)
