"""``SQLStore``: the :class:`Store` contract on an ``AsyncEngine`` (SQLite, PostgreSQL, MariaDB).

The statements come from :mod:`.statements`, the engines from :mod:`.engines`, and how a call
reaches the database (connections, transactions, retries, the translation of driver failures
into ``StoreUnavailableError``) from :mod:`.sql_connections`. Each part of the contract is its
own class on top of that, so no one module has to hold them all.
"""

from __future__ import annotations

from .engines import (
    CONNECT_TIMEOUT_S,
    DEFAULT_URL,
    SQLITE_BUSY_TIMEOUT_MS,
    STATEMENT_TIMEOUT_S,
    is_memory_url,
    make_engine,
)
from .sql_changes import SQLChanges
from .sql_claimed_rows import SQLClaimedRows
from .sql_claims import MAX_KEY_LENGTH
from .sql_connections import OPERATION_TIMEOUT_S
from .sql_definitions import SQLDefinitions
from .sql_pauses import SQLPauses
from .sql_reads import SQLReads


class SQLStore(SQLClaimedRows, SQLReads, SQLChanges, SQLPauses, SQLDefinitions):
    """The store on a SQLAlchemy ``AsyncEngine``."""


__all__ = [
    "CONNECT_TIMEOUT_S",
    "DEFAULT_URL",
    "MAX_KEY_LENGTH",
    "OPERATION_TIMEOUT_S",
    "SQLITE_BUSY_TIMEOUT_MS",
    "STATEMENT_TIMEOUT_S",
    "SQLStore",
    "is_memory_url",
    "make_engine",
]
