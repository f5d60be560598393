"""Alembic, driven from code: the ledger schema (the ``_voltro_schedule_*`` tables).

The migrations live in the repo's top-level ``alembic/`` and ship inside the wheel as
``fastapi_voltro_schedules/_alembic``; :func:`script_location` finds whichever is there, and
:func:`alembic_config` builds the configuration in memory, so no ``alembic.ini`` is needed.

Every entry point takes a database URL *or* the application's own ``AsyncEngine``. The
migrations always run on one connection opened here (``engine.connect()`` → ``run_sync`` →
``conn.begin()``) and handed to ``alembic/env.py`` through ``config.attributes["connection"]``,
so an in-memory SQLite engine or a shared engine is migrated in place. Concurrent migrators
(replicas running ``voltro migrate`` at once) are serialised by a database lock.

Only our tables (:data:`VOLTRO_TABLES`, and our own version table,
``_voltro_alembic_version``) are ever looked at: :func:`include_name` /
:func:`include_object` keep the user's tables in the same database out of every comparison,
so an autogenerate here can never propose to drop them.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, Literal, TypeVar

from alembic import command
from alembic.autogenerate.api import AutogenContext, compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, inspect, text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from .errors import ConfigurationError, SchemaError
from .leadership import file_lock, sqlite_file
from .models import (
    ALEMBIC_VERSION_TABLE,
    CLAIMS_TABLE,
    DEFINITIONS_TABLE,
    LEASES_TABLE,
    MEMBERS_TABLE,
    PAUSE_SPANS_TABLE,
    PAUSES_TABLE,
    ROLLUPS_TABLE,
    RUNS_TABLE,
    STATE_TABLE,
    UTCDateTime,
    voltro_metadata,
)
from .urls import normalize_database_url, redact_url, require_driver

__all__ = [
    "ALEMBIC_VERSION_TABLE",
    "DEFAULT_DATABASE_URL",
    "VOLTRO_TABLES",
    "alembic_config",
    "async_url",
    "autogenerate_options",
    "current_revision",
    "ensure_schema",
    "head_revision",
    "include_name",
    "include_object",
    "is_at_head",
    "pending_upgrade",
    "redact_url",
    "render_item",
    "schema_matches_models",
    "script_location",
    "upgrade_sql",
    "upgrade_to_head",
]

DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///./voltro.db"
"""The embedded default store (``VOLTRO_DATABASE_URL`` unset)."""

VOLTRO_TABLES: frozenset[str] = frozenset(
    {
        RUNS_TABLE,
        CLAIMS_TABLE,
        PAUSES_TABLE,
        PAUSE_SPANS_TABLE,
        DEFINITIONS_TABLE,
        MEMBERS_TABLE,
        LEASES_TABLE,
        STATE_TABLE,
        ROLLUPS_TABLE,
    }
)
"""The only tables our migrations create, compare or drop."""

_PACKAGE_DIR = Path(__file__).resolve().parent

_MIGRATE_LOCK_KEY = 0x766F6C74726F  # "voltro": the advisory lock serialising concurrent migrates

_T = TypeVar("_T")


# --------------------------------------------------------------------------- locations / config


def script_location() -> Path:
    """The Alembic script directory.

    The copy packaged inside the installed wheel (``fastapi_voltro_schedules/_alembic``) when
    it exists, else the repository's top-level ``alembic/`` (editable installs, a checkout).
    """
    packaged = _PACKAGE_DIR / "_alembic"
    if (packaged / "env.py").is_file():
        return packaged
    repo = _PACKAGE_DIR.parent / "alembic"
    if (repo / "env.py").is_file():
        return repo
    raise SchemaError(
        f"fastapi-voltro-schedules: the migration scripts are missing (looked in {packaged} "
        f"and {repo}); reinstall the package"
    )


def alembic_config(database_url: str | URL | None = None) -> Config:
    """An Alembic :class:`~alembic.config.Config` built in memory (no ``alembic.ini``).

    ``database_url`` becomes ``sqlalchemy.url`` (normalised to an async driver, see
    :func:`async_url`); it is only used when no connection is handed over in
    ``config.attributes["connection"]``.
    """
    config = Config()
    config.set_main_option("script_location", str(script_location()))
    config.set_main_option("path_separator", "os")
    if database_url is not None:
        rendered = async_url(database_url).render_as_string(hide_password=False)
        # ConfigParser interpolation: a literal "%" (an escaped password) must be doubled
        config.set_main_option("sqlalchemy.url", rendered.replace("%", "%%"))
    return config


def head_revision() -> str:
    """The newest migration's revision id (``"0001"``, …)."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:  # pragma: no cover - the package always ships migrations
        raise SchemaError("fastapi-voltro-schedules: no migrations found")
    return head


# --------------------------------------------------------------------------- URLs


def async_url(database_url: str | URL) -> URL:
    """``database_url`` with an asyncio driver, by the one normaliser
    (:func:`fastapi_voltro_schedules.urls.normalize_database_url`); a URL it refuses is a
    :class:`SchemaError` here, as every other unusable URL of this module."""
    try:
        return normalize_database_url(database_url)
    except ConfigurationError as exc:
        raise SchemaError(str(exc)) from None


# --------------------------------------------------------------------------- autogenerate hooks


def include_name(
    name: str | None,
    type_: Literal[
        "schema", "table", "column", "index", "unique_constraint", "foreign_key_constraint"
    ],
    parent_names: Any,
) -> bool:
    """Reflect only our tables: every other table of the database is invisible to us."""
    if type_ == "table":
        return name in VOLTRO_TABLES
    return True


def include_object(
    obj: Any,
    name: str | None,
    type_: Literal[
        "schema",
        "table",
        "column",
        "index",
        "unique_constraint",
        "foreign_key_constraint",
    ],
    reflected: bool,
    compare_to: Any,
) -> bool:
    """Compare only our tables (and what hangs off them), in both directions."""
    if type_ == "table":
        return name in VOLTRO_TABLES
    table = getattr(obj, "table", None)
    if table is not None:
        return getattr(table, "name", None) in VOLTRO_TABLES
    return True


_UTC_DATETIME_RENDERED = (
    "sa.DateTime(timezone=True)"
    '.with_variant(sa.String(length=32), "sqlite")'
    '.with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")'
)


def render_item(type_: str, obj: Any, autogen_context: AutogenContext) -> str | Literal[False]:
    """Render :class:`UTCDateTime` as plain SQLAlchemy types in generated migrations.

    A migration must not import the package's Python types (they may change later); the
    variant spells out the same DDL: ``VARCHAR(32)`` on SQLite, ``DATETIME(6)`` on
    MySQL/MariaDB, ``TIMESTAMP WITH TIME ZONE`` elsewhere.
    """
    if type_ == "type" and isinstance(obj, UTCDateTime):
        autogen_context.imports.add("from sqlalchemy.dialects import mysql")
        return _UTC_DATETIME_RENDERED
    return False


def autogenerate_options() -> dict[str, Any]:
    """The ``context.configure`` / ``MigrationContext.configure(opts=…)`` options of env.py.

    Shared with the tests, so that the "autogenerate produces no diff" check compares exactly
    what ``alembic revision --autogenerate`` would.
    """
    return {
        "target_metadata": voltro_metadata,
        "version_table": ALEMBIC_VERSION_TABLE,
        "include_name": include_name,
        "include_object": include_object,
        "render_item": render_item,
        "compare_type": True,
        "compare_server_default": True,
        "render_as_batch": True,  # SQLite cannot ALTER most things; batch works everywhere
    }


# --------------------------------------------------------------------------- running


async def _with_connection(
    target: str | URL | AsyncEngine,
    fn: Callable[[Connection], _T],
    *,
    create_parent_dir: bool = False,
) -> _T:
    """Run ``fn(sync_connection)`` on one connection of ``target`` (a URL or an engine)."""
    if isinstance(target, AsyncEngine):
        if create_parent_dir:
            _ensure_sqlite_dir(target.url)
        return await _run_on(target, fn)
    url = async_url(target)
    if create_parent_dir:
        _ensure_sqlite_dir(url)
    require_driver(url)
    try:
        engine = create_async_engine(url, poolclass=NullPool)
    except Exception as exc:
        raise SchemaError(
            f"fastapi-voltro-schedules: cannot open {redact_url(url)}: {exc}"
        ) from exc
    try:
        return await _run_on(engine, fn)
    finally:
        await engine.dispose()


async def _run_on(engine: AsyncEngine, fn: Callable[[Connection], _T]) -> _T:
    async with engine.connect() as conn:
        return await conn.run_sync(fn)


def _ensure_sqlite_dir(url: URL) -> None:
    if url.get_backend_name() != "sqlite":
        return
    database = url.database or ""
    if database in ("", ":memory:") or database.startswith("file:"):
        return
    Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)


_MYSQL_LOCK = "voltro_migrate"
_MYSQL_LOCK_WAIT_S = 120


def _upgrade_sync(conn: Connection, revision: str) -> None:
    """Upgrade on ``conn`` (no transaction open yet), serialising concurrent migrators.

    Two replicas running ``voltro migrate`` at once must not both see "no tables" and race
    the ``CREATE TABLE``s: the second waits for the first and then finds the schema at head.

    * PostgreSQL: a transaction-scoped advisory lock, released by the commit that publishes
      the new schema (DDL is transactional there).
    * MySQL/MariaDB: a session lock (``GET_LOCK``) taken *before* the migration's transaction,
      so that transaction's REPEATABLE READ snapshot starts after the previous holder's
      commit and sees its version row.
    * SQLite: ``BEGIN IMMEDIATE`` takes the write lock up front (others wait their busy
      timeout).
    """
    config = alembic_config()
    config.attributes["connection"] = conn
    backend = conn.dialect.name
    if backend in ("mysql", "mariadb"):
        got = conn.execute(
            text("SELECT GET_LOCK(:name, :wait)"), {"name": _MYSQL_LOCK, "wait": _MYSQL_LOCK_WAIT_S}
        ).scalar()
        conn.commit()
        if got != 1:
            raise SchemaError(
                f"another migration holds the lock {_MYSQL_LOCK!r} "
                f"(waited {_MYSQL_LOCK_WAIT_S} s); try again when it has finished"
            )
        try:
            with conn.begin():
                command.upgrade(config, revision)
        finally:
            with contextlib.suppress(Exception):  # closing the session releases it anyway
                conn.execute(text("SELECT RELEASE_LOCK(:name)"), {"name": _MYSQL_LOCK})
                conn.commit()
        return
    with conn.begin():
        if backend == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _MIGRATE_LOCK_KEY})
        elif backend == "sqlite":
            driver = conn.connection.driver_connection  # sqlite3 / aiosqlite connection
            if driver is not None and getattr(driver, "in_transaction", True) is False:
                conn.exec_driver_sql("BEGIN IMMEDIATE")
        command.upgrade(config, revision)


def _current_heads_sync(conn: Connection) -> tuple[str, ...]:
    context = MigrationContext.configure(conn, opts={"version_table": ALEMBIC_VERSION_TABLE})
    return tuple(context.get_current_heads())


def _sqlite_migrate_lock(target: str | URL | AsyncEngine) -> AbstractAsyncContextManager[None]:
    """On a SQLite file, the file lock that serialises migrators across processes.

    ``BEGIN IMMEDIATE`` alone is not enough on a fresh file: the first connection's
    ``journal_mode=WAL`` switch and the first ``CREATE TABLE`` race without a busy handler, and
    a second booting process fails with ``database is locked``.
    """
    url = target.url if isinstance(target, AsyncEngine) else async_url(target)
    database = sqlite_file(url)
    return file_lock(database) if database is not None else contextlib.nullcontext()


async def _upgrade(target: str | URL | AsyncEngine, revision: str) -> None:
    await _with_connection(
        target, lambda conn: _upgrade_sync(conn, revision), create_parent_dir=True
    )


async def upgrade_to_head(target: str | URL | AsyncEngine, *, revision: str = "head") -> None:
    """Migrate the ledger tables of ``target`` (a database URL or an ``AsyncEngine``) to head.

    Idempotent. A SQLite file's directory is created if missing. Raises
    :class:`~fastapi_voltro_schedules.errors.SchemaError` when the URL cannot be used;
    database errors propagate.
    """
    async with _sqlite_migrate_lock(target):
        await _upgrade(target, revision)


async def current_revision(target: str | URL | AsyncEngine) -> str | None:
    """The revision the database is at, or ``None`` when it was never migrated."""
    heads = await _with_connection(target, _current_heads_sync)
    if not heads:
        return None
    return ",".join(sorted(heads))


async def is_at_head(target: str | URL | AsyncEngine) -> bool:
    """Whether the ledger tables of ``target`` are at the newest migration."""
    return await current_revision(target) == head_revision()


def upgrade_sql(database_url: str | URL, *, start: str | None = None) -> str:
    """The DDL ``voltro migrate`` would run, as a SQL script for a DBA (Alembic's offline mode).

    Rendered for the URL's database kind (PostgreSQL, MariaDB/MySQL, SQLite) from an empty
    database, or from revision ``start``; nothing is opened or connected to — the URL only picks
    the dialect — so a database that does not exist yet, or is out of reach, is fine.
    """
    buffer = io.StringIO()
    config = alembic_config(database_url)
    config.output_buffer = buffer
    command.upgrade(config, f"{start}:head" if start else "head", sql=True)
    return buffer.getvalue()


async def pending_upgrade(target: str | URL | AsyncEngine) -> str | None:
    """Why boot would refuse ``target``'s schema (``None``: it is at head, or the application's
    own Alembic manages tables exactly as modelled — what :func:`ensure_schema` accepts).

    A SQLite file that does not exist is reported as such and is not created.
    """
    url = target.url if isinstance(target, AsyncEngine) else async_url(target)
    database = sqlite_file(url)
    if database is not None and not database.exists():
        return f"has no ledger tables ({database} does not exist), head is {head_revision()}"
    current = await current_revision(target)
    head = head_revision()
    if current == head:
        return None
    if current is None and await schema_matches_models(target):
        return None
    state = "has no ledger tables" if current is None else f"is at revision {current}"
    return f"{state}, head is {head}"


def _schema_matches_models_sync(conn: Connection) -> bool:
    """Both tables exist and autogenerate finds nothing to change in them."""
    if not VOLTRO_TABLES <= set(inspect(conn).get_table_names()):
        return False
    context = MigrationContext.configure(conn, opts=autogenerate_options())
    return not compare_metadata(context, voltro_metadata)


async def schema_matches_models(target: str | URL | AsyncEngine) -> bool:
    """Whether the ledger tables exist exactly as the models describe them (any version table)."""
    return await _with_connection(target, _schema_matches_models_sync)


async def ensure_schema(target: str | URL | AsyncEngine) -> None:
    """What boot does with the schema (SPEC §2).

    * at head (our version table says so) → nothing to do;
    * no version table, but both tables exist exactly as the models describe them → the
      application's own Alembic manages them (``docs/migrations.md``) → accepted as is;
    * SQLite → migrated in place;
    * a server database → :class:`~fastapi_voltro_schedules.errors.SchemaError` naming the
      remedy, ``voltro migrate``.
    """
    url = target.url if isinstance(target, AsyncEngine) else async_url(target)
    _ensure_sqlite_dir(url)
    async with _sqlite_migrate_lock(target):
        current = await current_revision(target)
        head = head_revision()
        if current == head:
            return
        if current is None and await schema_matches_models(target):
            return
        if url.get_backend_name() == "sqlite":
            await _upgrade(target, "head")
            return
    state = "has no ledger tables" if current is None else f"is at revision {current}"
    raise SchemaError(
        f"the scheduler's tables ({RUNS_TABLE}, {CLAIMS_TABLE}, {PAUSES_TABLE}) are missing or "
        f"not at the newest migration: {redact_url(url)} {state}, head is {head} — run "
        f"`voltro migrate` (it reads VOLTRO_DATABASE_URL, or --database-url) as part of your "
        f"release, then start the app again"
    )
