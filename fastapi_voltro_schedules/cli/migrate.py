"""``voltro migrate``: create or upgrade the ledger tables."""

from __future__ import annotations

import asyncio
import logging

import typer
from sqlalchemy import make_url
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from ..migrations import VOLTRO_TABLES, async_url, current_revision, redact_url, upgrade_to_head
from ..models import CLAIMS_TABLE, PAUSES_TABLE, RUNS_TABLE
from .common import (
    SUPPORTED_BACKENDS,
    AppOption,
    CliError,
    DatabaseUrlOption,
    _fail,
    _scrub,
    app,
    import_app,
    resolve_database_url,
)


async def _migrate(url: str) -> tuple[str | None, str]:
    engine = create_async_engine(async_url(url), poolclass=NullPool)
    try:
        await upgrade_to_head(engine)
        revision = await current_revision(engine)
        return revision, engine.dialect.name
    finally:
        await engine.dispose()


@app.command()
def migrate(database_url: DatabaseUrlOption = None, app_path: AppOption = None) -> None:
    """Create or upgrade the ledger tables (_voltro_schedule_runs, _voltro_schedule_claims,
    _voltro_schedule_pauses).

    Run it in your release step for PostgreSQL / MariaDB / MySQL; SQLite is migrated at boot.
    Only our tables and our own version table (_voltro_alembic_version) are touched.
    """
    if app_path:
        try:
            import_app(app_path)
        except CliError as exc:
            raise _fail("migrate", str(exc)) from None
    url = resolve_database_url(database_url)
    shown = redact_url(url)
    try:
        backend = make_url(url).get_backend_name()
    except Exception:
        raise _fail("migrate", f"cannot parse the database URL {shown}") from None
    if backend not in SUPPORTED_BACKENDS:
        raise _fail(
            "migrate",
            f'database backend "{backend}" is not supported ({shown}) — use '
            "sqlite+aiosqlite, postgresql+asyncpg or mysql+asyncmy",
        )
    asyncmy_logger = logging.getLogger("asyncmy")
    if asyncmy_logger.level == logging.NOTSET:
        # MariaDB notes such as "Name ... ignored for PRIMARY key" are not news to the user
        asyncmy_logger.setLevel(logging.ERROR)
    try:
        revision, dialect = asyncio.run(_migrate(url))
    except Exception as exc:
        detail = _scrub(f"{type(exc).__name__}: {exc}", url)
        raise _fail("migrate", f"failed on {shown}: {detail}") from None
    tables = ", ".join(t for t in (RUNS_TABLE, CLAIMS_TABLE, PAUSES_TABLE) if t in VOLTRO_TABLES)
    typer.echo(f"voltro migrate: {tables} at {revision} ({dialect})")
