"""Alembic environment of fastapi-voltro-schedules' ledger tables.

Targets ``voltro_metadata`` only, records its state in its own version table
(``_voltro_alembic_version``) and never looks at any other table of the database: a user's
tables living beside ours are never diffed, altered or dropped.

Run from code (``fastapi_voltro_schedules.migrations`` / ``voltro migrate``) the connection
arrives in ``config.attributes["connection"]`` and is reused as is. Run from the ``alembic``
command line in a checkout (``alembic.ini`` at the repo root) the URL is ``sqlalchemy.url``,
else ``$VOLTRO_DATABASE_URL``, else the embedded SQLite default; async URLs are fine.
"""

from __future__ import annotations

import asyncio
import os
from logging.config import fileConfig

from alembic import context
from sqlalchemy import pool
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from fastapi_voltro_schedules.migrations import (
    DEFAULT_DATABASE_URL,
    async_url,
    autogenerate_options,
)

config = context.config

if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def _database_url() -> str:
    return (
        config.get_main_option("sqlalchemy.url")
        or os.environ.get("VOLTRO_DATABASE_URL")
        or DEFAULT_DATABASE_URL
    )


def run_migrations_offline() -> None:
    """``alembic upgrade head --sql``: emit the DDL instead of running it."""
    context.configure(
        url=async_url(_database_url()),
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        **autogenerate_options(),
    )
    with context.begin_transaction():
        context.run_migrations()


def do_run_migrations(connection: Connection) -> None:
    context.configure(connection=connection, **autogenerate_options())
    with context.begin_transaction():
        context.run_migrations()


async def run_async_migrations() -> None:
    engine = create_async_engine(async_url(_database_url()), poolclass=pool.NullPool)
    try:
        async with engine.begin() as connection:
            await connection.run_sync(do_run_migrations)
    finally:
        await engine.dispose()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        do_run_migrations(connection)
    else:
        asyncio.run(run_async_migrations())


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
