"""Database URLs: the one normaliser used by the config, boot and every CLI command.

A URL without a driver picks SQLAlchemy's default DBAPI, which is synchronous — and the
ledger runs on asyncio. So the forms people paste from a hosting dashboard or a ``.env``
(``postgres://``, ``postgresql://``, ``mysql://``, ``mariadb://``, ``sqlite:///``) get the async
driver the package supports; ``postgres`` (which SQLAlchemy does not know) becomes
``postgresql``. A URL naming an async driver is kept; one naming a synchronous driver is
refused with the fix, instead of the raw SQLAlchemy error it would raise at boot.
"""

from __future__ import annotations

import importlib

from sqlalchemy.engine import URL, make_url

from .errors import ConfigurationError

__all__ = [
    "ASYNC_DRIVERS",
    "DRIVER_EXTRAS",
    "SYNC_DRIVERS",
    "normalize_database_url",
    "redact_url",
    "require_driver",
]

ASYNC_DRIVERS: dict[str, str] = {
    "sqlite": "sqlite+aiosqlite",
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
    "mysql": "mysql+asyncmy",
    "mariadb": "mysql+asyncmy",
}
"""Backend (as written in the URL) → the driver-qualified name it is given."""

SYNC_DRIVERS = frozenset(
    {"psycopg2", "psycopg2cffi", "pg8000", "pysqlite", "pysqlcipher", "pymysql", "mysqldb",
     "mysqlconnector", "mariadbconnector", "cymysql", "pyodbc"}
)  # fmt: skip
"""DBAPIs SQLAlchemy drives synchronously: they cannot serve an ``AsyncEngine``."""


DRIVER_EXTRAS: dict[str, str] = {"asyncpg": "postgres", "asyncmy": "mysql"}
"""Async driver → the package extra that installs it (aiosqlite is a hard dependency)."""


def require_driver(url: str | URL) -> None:
    """:class:`ConfigurationError` naming the extra to install when ``url``'s async driver
    cannot be imported — instead of SQLAlchemy's bare ``No module named 'asyncpg'``."""
    u = make_url(url)
    driver = u.get_driver_name()
    extra = DRIVER_EXTRAS.get(driver)
    if extra is None:
        return
    try:
        importlib.import_module(driver)
    except ImportError as exc:
        raise ConfigurationError(
            f"{redact_url(u)} needs the {driver} driver, which is not installed ({exc}) — "
            f"install it with: pip install 'fastapi-voltro-schedules[{extra}]'"
        ) from None


def normalize_database_url(url: str | URL, *, source: str = "VOLTRO_DATABASE_URL") -> URL:
    """``url`` with an asyncio driver, or :class:`ConfigurationError` naming ``source``.

    ``postgres://u@h/db`` → ``postgresql+asyncpg://u@h/db``; ``mysql://`` and ``mariadb://`` →
    ``mysql+asyncmy://``; ``sqlite:///x.db`` → ``sqlite+aiosqlite:///x.db`` (``sqlite://`` is
    the in-memory ledger). Idempotent.
    """
    try:
        parsed = make_url(url)
    except Exception:  # the parser's message quotes the string, password and all
        raise ConfigurationError(
            f"{source}: cannot parse the database URL — use e.g. "
            "sqlite+aiosqlite:///./voltro.db or postgresql+asyncpg://user@host/db"
        ) from None
    backend, _, driver = parsed.drivername.partition("+")
    if backend not in ASYNC_DRIVERS:
        raise ConfigurationError(
            f'{source}: database backend "{backend}" is not supported — use sqlite+aiosqlite, '
            "postgresql+asyncpg or mysql+asyncmy (postgres://, mysql://, mariadb:// and "
            "sqlite:/// get those drivers)"
        )
    if not driver:
        return parsed.set(drivername=ASYNC_DRIVERS[backend])
    if driver in SYNC_DRIVERS:
        raise ConfigurationError(
            f"{source}: {backend}+{driver} is a synchronous driver and the scheduler runs on "
            f"asyncio — use {ASYNC_DRIVERS[backend]}:// (or leave the driver out: "
            f"{backend}://…)"
        )
    if backend == "postgres":
        return parsed.set(drivername=f"postgresql+{driver}")
    return parsed


def redact_url(database_url: str | URL) -> str:
    """The URL for logs and messages: the password replaced by ``***``."""
    try:
        return make_url(database_url).render_as_string(hide_password=True)
    except Exception:  # an unparsable URL: show none of it rather than a secret
        return "<unparsable database URL>"
