"""Engines for the ledger, and what the store must know of each driver.

Nothing here depends on a store's state: the SQLite locking hooks, the server timeouts and the
asyncmy log filter are settled when the engine is made, and whether a failure may be retried
(and how it is told) is read from the driver's own error.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from sqlalchemy import event, exc, make_url
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import StaticPool

from ..urls import normalize_database_url, require_driver

DEFAULT_URL = "sqlite+aiosqlite:///./voltro.db"
SQLITE_BUSY_TIMEOUT_MS = 5000
WAL_AUTOCHECKPOINT_PAGES = 10_000
"""SQLite's own checkpoint, as a backstop only (~40 MB of log; SQLite's default is 1,000
pages). The running scheduler folds the log at its quiet moments (``Store.checkpoint``): left
to SQLite, the commit that crossed 1,000 pages did the checkpoint inline — every 2–3 s at 1,000
firings a second, and that second's handlers all started 10–25 ms late."""
CONNECT_TIMEOUT_S = 5.0
STATEMENT_TIMEOUT_S = 5.0
"""A server statement that has not answered by then is a dead link, not a slow query."""
WRITE_OPTION = "voltro_write"
"""Execution option marking a write transaction: SQLite opens it with ``BEGIN IMMEDIATE``."""

# Deadlock victims and lock-wait timeouts: the transaction was rolled back whole, so running it
# again is safe. Sorted keys make these rare; the retry makes them harmless.
_RETRY_MYSQL_CODES = frozenset({1205, 1213})
_RETRY_PG_STATES = frozenset({"40001", "40P01"})


def is_memory_url(url: str | URL) -> bool:
    """``sqlite+aiosqlite://`` with no path, or ``:memory:``: the in-process memory store."""
    u = make_url(url)
    return u.get_backend_name() == "sqlite" and u.database in (None, "", ":memory:")


def make_engine(url: str | URL, **options: Any) -> AsyncEngine:
    """An engine configured for the ledger: WAL + busy timeout + ``BEGIN IMMEDIATE`` writes on
    SQLite files, one shared connection for memory, pre-ping and connect timeouts on servers.
    ``options`` go to ``create_async_engine`` and win over these defaults. A driver-less URL
    gets its async driver (``urls.normalize_database_url``)."""
    u = normalize_database_url(url)
    backend = u.get_backend_name()
    if backend == "sqlite":
        if is_memory_url(u):
            options = {"poolclass": StaticPool, **options}
            return create_async_engine(u, **options)
        options = {
            "connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
            **options,
        }
        engine = create_async_engine(u, **options)
        _install_sqlite_hooks(engine)
        return engine
    require_driver(u)
    connect_args: dict[str, Any] = {}
    # Statement timeouts as well as connect timeouts: a link that silently drops packets must
    # end in StoreUnavailableError (fail closed), not in a claim that waits forever.
    if backend == "postgresql":
        connect_args = {"timeout": CONNECT_TIMEOUT_S, "command_timeout": STATEMENT_TIMEOUT_S}
    elif backend in ("mysql", "mariadb"):
        connect_args = {"connect_timeout": CONNECT_TIMEOUT_S, "read_timeout": STATEMENT_TIMEOUT_S}
        _quiet_asyncmy_claim_warnings()
    options = {"pool_pre_ping": True, "connect_args": connect_args, **options}
    return create_async_engine(u, **options)


def _install_sqlite_hooks(engine: AsyncEngine) -> None:
    # The pysqlite recipe ("Serializable isolation / Savepoints / Transactional DDL"): take
    # BEGIN away from the driver and emit our own, so a write transaction takes the write lock
    # up front and concurrent writers queue on busy_timeout instead of deadlocking on a lock
    # upgrade ("database is locked").
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        # WAL + NORMAL: no fsync per commit; a power cut may lose the newest commits but never
        # corrupts the file (sqlite.org/wal.html). The ledger takes thousands of commits a second.
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA wal_autocheckpoint={WAL_AUTOCHECKPOINT_PAGES}")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Any) -> None:
        write = conn.get_execution_options().get(WRITE_OPTION, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


class _DuplicateClaimFilter(logging.Filter):
    """asyncmy logs every server warning; a lost ``INSERT IGNORE`` claim is not news."""

    _pattern = re.compile(r"^Duplicate entry '.*@\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d' for key")

    def filter(self, record: logging.LogRecord) -> bool:
        return not self._pattern.match(record.getMessage())


def _quiet_asyncmy_claim_warnings() -> None:
    logger = logging.getLogger("asyncmy")
    if not any(isinstance(f, _DuplicateClaimFilter) for f in logger.filters):
        logger.addFilter(_DuplicateClaimFilter())


def retryable(error: exc.DBAPIError) -> bool:
    orig = error.orig
    code = orig.args[0] if orig is not None and orig.args else None
    if isinstance(code, int) and code in _RETRY_MYSQL_CODES:
        return True
    state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    return state in _RETRY_PG_STATES


def describe(error: BaseException) -> str:
    # the driver's own message, never the statement's parameters or the URL
    orig = getattr(error, "orig", None) or error
    return f"{type(orig).__name__}: {orig}".splitlines()[0][:300]
