"""The ``voltro`` command line.

One Typer app, one function per command; later commands (``dev``, ``serve``/``start``,
``schedule backfill``, ``schedule-manifest``) are added beside :func:`migrate` as
``@app.command()`` functions, or as sub-apps with ``app.add_typer(...)`` for groups.

Options shared by commands (``--database-url``, ``--app``) are declared once below as
``Annotated`` aliases so every command reads them the same way: the flag, else
``$VOLTRO_DATABASE_URL``, else the embedded SQLite default. URLs are only ever printed with
the password hidden.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import sys
from typing import Annotated, Any

import typer
from sqlalchemy import make_url
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from .migrations import (
    DEFAULT_DATABASE_URL,
    VOLTRO_TABLES,
    async_url,
    current_revision,
    redact_url,
    upgrade_to_head,
)
from .models import CLAIMS_TABLE, RUNS_TABLE

__all__ = ["app", "main"]

app = typer.Typer(
    name="voltro",
    help="fastapi-voltro-schedules: cron jobs inside a FastAPI app.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """fastapi-voltro-schedules: cron jobs inside a FastAPI app."""
    # A callback keeps `voltro migrate` a sub-command even while it is the only one.


DatabaseUrlOption = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        envvar="VOLTRO_DATABASE_URL",
        show_envvar=True,
        help=f"The ledger database (default {DEFAULT_DATABASE_URL}).",
    ),
]
AppOption = Annotated[
    str | None,
    typer.Option(
        "--app",
        help="Your application, as module:attribute (imported from the current directory).",
    ),
]


SUPPORTED_BACKENDS = frozenset({"sqlite", "postgresql", "mysql", "mariadb"})


class CliError(Exception):
    """A failure reported as one line on stderr and exit status 1."""


def _fail(command: str, message: str) -> typer.Exit:
    typer.echo(f"voltro {command}: {message}", err=True)
    return typer.Exit(code=1)


def resolve_database_url(database_url: str | None) -> str:
    """The flag/env value (Typer already merged them), else the embedded default."""
    return database_url or DEFAULT_DATABASE_URL


def import_app(spec: str) -> Any:
    """Import ``module:attribute`` the way uvicorn does (the current directory first)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise CliError(f"--app {spec!r}: expected module:attribute, e.g. example_app.main:app")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise CliError(f"--app {spec!r}: cannot import {module_name!r}: {exc!r}") from exc
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            raise CliError(f"--app {spec!r}: {module_name!r} has no attribute {attr!r}") from exc
    return obj


def _scrub(message: str, url: str) -> str:
    """Remove the URL's password from a driver error message, should one echo it."""
    try:
        password = make_url(url).password
    except Exception:
        return message
    if password:
        message = message.replace(str(password), "***")
    return message


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
    """Create or upgrade the ledger tables (_voltro_schedule_runs, _voltro_schedule_claims).

    Run it in your release step for PostgreSQL / MariaDB / MySQL; SQLite is migrated at boot.
    Only our two tables and our own version table (_voltro_alembic_version) are touched.
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
    tables = ", ".join(t for t in (RUNS_TABLE, CLAIMS_TABLE) if t in VOLTRO_TABLES)
    typer.echo(f"voltro migrate: {tables} at {revision} ({dialect})")


def main() -> None:
    """The ``voltro`` console script."""
    app(prog_name="voltro")
