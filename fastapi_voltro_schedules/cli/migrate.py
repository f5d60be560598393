"""``voltro migrate``: create or upgrade the ledger tables.

The database is the one the app would use: with ``--app``, that app's ``Scheduling`` (its
shared engine, else its config's URL — set in code or read from ``VOLTRO_DATABASE_URL``);
without, ``--database-url`` / ``VOLTRO_DATABASE_URL`` / the embedded default. Either way the
URL goes through the same normaliser as the config (``urls.py``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated

import typer
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from ..migrations import (
    VOLTRO_TABLES,
    current_revision,
    pending_upgrade,
    redact_url,
    upgrade_sql,
    upgrade_to_head,
)
from ..models import (
    CLAIMS_TABLE,
    DEFINITIONS_TABLE,
    LEASES_TABLE,
    MEMBERS_TABLE,
    PAUSE_SPANS_TABLE,
    PAUSES_TABLE,
    ROLLUPS_TABLE,
    RUNS_TABLE,
    STATE_TABLE,
)
from ..urls import require_driver
from .common import (
    AppOption,
    CliError,
    DatabaseUrlOption,
    _fail,
    _scrub,
    app,
    find_scheduling,
    resolve_database_url,
)


async def _migrate(target: str | AsyncEngine) -> tuple[str | None, str]:
    # The app's own engine is migrated in place (and disposed: this process ends here).
    if not isinstance(target, AsyncEngine):
        require_driver(target)
    engine = (
        target
        if isinstance(target, AsyncEngine)
        else create_async_engine(target, poolclass=NullPool)
    )
    try:
        await upgrade_to_head(engine)
        revision = await current_revision(engine)
        return revision, engine.dialect.name
    finally:
        await engine.dispose()


def _app_target(app_path: str, database_url: str | None) -> tuple[str | AsyncEngine, str]:
    """The ledger of ``--app``'s Scheduling, and the URL to show (and scrub) for it."""
    try:
        scheduling, _ = find_scheduling(app_path)
    except CliError as exc:
        raise _fail(
            "migrate", f"{exc} — or migrate a URL instead: voltro migrate --database-url URL"
        ) from None
    target = scheduling.ledger_target()
    url = (
        target.url.render_as_string(hide_password=False)
        if isinstance(target, AsyncEngine)
        else target
    )
    where = "its shared engine" if isinstance(target, AsyncEngine) else "its config"
    typer.echo(
        f"voltro migrate: --app {app_path}: migrating {redact_url(url)} (the database its "
        f"Scheduling uses, from {where})",
        err=True,
    )
    if database_url is not None:
        try:
            given = resolve_database_url(database_url)
        except CliError:
            given = None
        if given != url:
            typer.echo(
                f"voltro migrate: ignoring --database-url / VOLTRO_DATABASE_URL "
                f"({redact_url(database_url)}): --app's Scheduling uses {redact_url(url)}",
                err=True,
            )
    return target, url


SqlOption = Annotated[
    bool,
    typer.Option(
        "--sql",
        help="Print the DDL (CREATE TABLE …) for the database's kind instead of running it; "
        "connects to nothing.",
    ),
]
CheckOption = Annotated[
    bool,
    typer.Option(
        "--check",
        help="Change nothing: exit 0 when the database is at the newest migration, 1 (saying "
        "what to run) when it is not.",
    ),
]


async def _pending(target: str | AsyncEngine) -> str | None:
    try:
        return await pending_upgrade(target)
    finally:
        if isinstance(target, AsyncEngine):
            await target.dispose()


@app.command()
def migrate(
    database_url: DatabaseUrlOption = None,
    app_path: AppOption = None,
    sql: SqlOption = False,
    check: CheckOption = False,
) -> None:
    """Create or upgrade the ledger tables (_voltro_schedule_runs, _voltro_schedule_claims,
    _voltro_schedule_pauses, _voltro_schedule_pause_spans, _voltro_schedule_definitions,
    _voltro_schedule_members, _voltro_schedule_leases, _voltro_schedule_state).

    Run it in your release step for PostgreSQL / MariaDB / MySQL; SQLite is migrated at boot.
    With --app module:app it migrates the database that app's Scheduling uses. Only our
    tables and our own version table (_voltro_alembic_version) are touched. --sql prints the
    DDL for a DBA instead; --check only says whether the database is at the newest migration.
    """
    if sql and check:
        raise _fail("migrate", "--sql and --check do not go together: pick one")
    target: str | AsyncEngine
    if app_path:
        target, url = _app_target(app_path, database_url)
    else:
        try:
            target = url = resolve_database_url(database_url)
        except CliError as exc:
            raise _fail("migrate", str(exc)) from None
    shown = redact_url(url)
    if sql:
        try:
            script = upgrade_sql(url)
        except Exception as exc:
            detail = _scrub(f"{type(exc).__name__}: {exc}", url)
            raise _fail("migrate", f"--sql failed for {shown}: {detail}") from None
        typer.echo(script, nl=False)
        return
    if check:
        try:
            pending = asyncio.run(_pending(target))
        except Exception as exc:
            detail = _scrub(f"{type(exc).__name__}: {exc}", url)
            raise _fail("migrate", f"--check failed on {shown}: {detail}") from None
        if pending is not None:
            where = f"--app {app_path}" if app_path else f"--database-url {shown}"
            raise _fail(
                "migrate",
                f"{shown} {pending} — run `voltro migrate {where}` (or apply the DDL of "
                f"`voltro migrate --sql`) before starting the app",
            )
        typer.echo(f"voltro migrate: {shown} is at the newest migration")
        return
    asyncmy_logger = logging.getLogger("asyncmy")
    if asyncmy_logger.level == logging.NOTSET:
        # MariaDB notes such as "Name ... ignored for PRIMARY key" are not news to the user
        asyncmy_logger.setLevel(logging.ERROR)
    try:
        revision, dialect = asyncio.run(_migrate(target))
    except Exception as exc:
        detail = _scrub(f"{type(exc).__name__}: {exc}", url)
        raise _fail("migrate", f"failed on {shown}: {detail}") from None
    ours = (
        RUNS_TABLE,
        CLAIMS_TABLE,
        PAUSES_TABLE,
        PAUSE_SPANS_TABLE,
        DEFINITIONS_TABLE,
        MEMBERS_TABLE,
        LEASES_TABLE,
        STATE_TABLE,
        ROLLUPS_TABLE,
    )
    tables = ", ".join(t for t in ours if t in VOLTRO_TABLES)
    typer.echo(f"voltro migrate: {tables} at {revision} ({dialect})")
