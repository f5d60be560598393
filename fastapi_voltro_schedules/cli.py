"""The ``voltro`` command line.

One Typer app, one function per command; later commands (``schedule backfill``,
``schedule-manifest``) are added beside :func:`migrate`, :func:`dev` and :func:`serve` as
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
import re
import sys
from collections.abc import MutableMapping
from pathlib import Path
from typing import Annotated, Any

import typer
from sqlalchemy import make_url
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from . import devtokens
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


# --- dev / serve / start ------------------------------------------------------------------

_DOTTED = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
_APP_SPEC = re.compile(rf"{_DOTTED}:{_DOTTED}")
APP_SPEC_HELP = "expected module:attribute, e.g. example_app.main:app"


def validate_app_spec(spec: str) -> str:
    """Check the ``module:attribute`` form uvicorn imports (nothing is imported here)."""
    spec = spec.strip()
    if not _APP_SPEC.fullmatch(spec):
        raise CliError(f"--app {spec!r}: {APP_SPEC_HELP}")
    return spec


def _app_spec_callback(value: str) -> str:
    try:
        return validate_app_spec(value)
    except CliError as exc:
        raise typer.BadParameter(f"{value!r}: {APP_SPEC_HELP}") from exc


ServeAppOption = Annotated[
    str,
    typer.Option(
        "--app",
        envvar="VOLTRO_APP",
        show_envvar=True,
        callback=_app_spec_callback,
        help="Your ASGI application, as module:attribute (like uvicorn's), e.g. "
        "example_app.main:app.",
    ),
]
HostOption = Annotated[str, typer.Option("--host", help="Bind socket to this host.")]
PortOption = Annotated[int, typer.Option("--port", min=0, max=65535, help="Bind to this port.")]
AppDirOption = Annotated[
    Path,
    typer.Option(
        "--app-dir",
        exists=True,
        file_okay=False,
        help="Look for the --app module in this directory (put first on sys.path, like "
        "uvicorn's --app-dir).",
    ),
]
ReloadOption = Annotated[
    bool,
    typer.Option("--reload/--no-reload", help="Restart the server when a .py file changes."),
]

TOKEN_LABELS = (
    (devtokens.TRIGGER_TOKEN_ENV, "trigger token"),
    (devtokens.INSPECT_TOKEN_ENV, "inspect token"),
)


def _run_uvicorn(spec: str, host: str, port: int, app_dir: Path, *, reload: bool) -> None:
    import uvicorn

    # uvicorn.run puts app_dir first on sys.path; the reloader's spawned children inherit it,
    # and they inherit os.environ (the tokens, VOLTRO_DEV) too.
    uvicorn.run(spec, host=host, port=port, reload=reload, app_dir=str(app_dir.resolve()))


def dev_environment(
    project_dir: Path, environ: MutableMapping[str, str] | None = None
) -> list[str]:
    """Prepare the environment of ``voltro dev``; returns the banner lines to print.

    Sets ``VOLTRO_DEV=1``; unless the user set both tokens, reads (or mints) the project's
    token file and exports the tokens the user did not set. A user-set token is never printed.
    """
    env = os.environ if environ is None else environ
    env[devtokens.DEV_ENV] = "1"
    hidden = "set in the environment (not shown)"
    if all(devtokens.user_set(name, env) for name, _ in TOKEN_LABELS):
        shown = {name: hidden for name, _ in TOKEN_LABELS}
        where = None
    else:
        tokens = devtokens.load_or_mint(project_dir)
        exported = devtokens.apply_to_environ(tokens, env)
        values = {
            devtokens.TRIGGER_TOKEN_ENV: tokens.trigger,
            devtokens.INSPECT_TOKEN_ENV: tokens.inspect,
        }
        shown = {name: values[name] if exported[name] else hidden for name, _ in TOKEN_LABELS}
        verb = "minted, kept in" if tokens.minted else "kept in"
        where = (
            f"voltro dev: tokens {verb} {tokens.path} (mode 0600, git-ignored); "
            "delete it to mint new ones"
        )
    width = max(len(name) for name, _ in TOKEN_LABELS) + 2
    lines = [
        f"voltro dev: {label:<15}{'(' + name + ')':<{width}} = {shown[name]}"
        for name, label in TOKEN_LABELS
    ]
    if where:
        lines.append(where)
    return lines


DEV_HELP = (
    "Run the app for development: uvicorn with reload, and dev tokens.\n\n"
    "Mints a trigger token and an inspect token once per project (the current directory), "
    "keeps them in .voltro/dev-tokens.json (mode 0600, git-ignored) and reuses them on later "
    "runs; prints them once at boot and exports them as VOLTRO_SCHEDULE_TRIGGER_TOKEN and "
    "VOLTRO_INSPECT_TOKEN, unless you set those yourself. Sets VOLTRO_DEV=1."
)
SERVE_HELP = (
    "Run the app for production (alias: start). Mints no tokens, prints none.\n\n"
    "The trigger and inspect routes answer 503 until VOLTRO_SCHEDULE_TRIGGER_TOKEN and "
    "VOLTRO_INSPECT_TOKEN are set."
)
START_HELP = "Alias of serve: run the app for production. Mints no tokens, prints none."


@app.command(help=DEV_HELP)
def dev(
    app_spec: ServeAppOption,
    host: HostOption = "127.0.0.1",
    port: PortOption = 8000,
    app_dir: AppDirOption = Path("."),
    reload: ReloadOption = True,
) -> None:
    """``voltro dev`` (help text: :data:`DEV_HELP`)."""
    try:
        lines = dev_environment(Path.cwd())
    except OSError as exc:
        raise _fail("dev", f"cannot keep the dev tokens: {exc}") from None
    for line in lines:
        typer.echo(line, err=True)
    _run_uvicorn(app_spec, host, port, app_dir, reload=reload)


def serve_note(environ: MutableMapping[str, str] | None = None) -> str | None:
    """The one-line note ``serve`` prints when a token is unset (never a token's value)."""
    env = os.environ if environ is None else environ
    unset = [name for name, _ in TOKEN_LABELS if not devtokens.user_set(name, env)]
    if not unset:
        return None
    if len(unset) == 2:
        routes, verb = "the trigger and inspect routes", "are"
    elif unset[0] == devtokens.TRIGGER_TOKEN_ENV:
        routes, verb = "the trigger routes", "is"
    else:
        routes, verb = "the inspect routes", "is"
    return f"{routes} will answer 503 until {' / '.join(unset)} {verb} set"


def _serve(command: str, spec: str, host: str, port: int, app_dir: Path) -> None:
    if devtokens.is_dev_mode():
        # Dev mode is what `voltro dev` sets; an exported VOLTRO_DEV must not leak into prod.
        typer.echo(f"voltro {command}: ignoring {devtokens.DEV_ENV} (use voltro dev)", err=True)
    os.environ.pop(devtokens.DEV_ENV, None)
    note = serve_note()
    if note:
        typer.echo(f"voltro {command}: {note}", err=True)
    _run_uvicorn(spec, host, port, app_dir, reload=False)


@app.command(help=SERVE_HELP)
def serve(
    app_spec: ServeAppOption,
    host: HostOption = "127.0.0.1",
    port: PortOption = 8000,
    app_dir: AppDirOption = Path("."),
) -> None:
    """``voltro serve`` (help text: :data:`SERVE_HELP`)."""
    _serve("serve", app_spec, host, port, app_dir)


@app.command(help=START_HELP)
def start(
    app_spec: ServeAppOption,
    host: HostOption = "127.0.0.1",
    port: PortOption = 8000,
    app_dir: AppDirOption = Path("."),
) -> None:
    """``voltro start``, the alias of :func:`serve`."""
    _serve("start", app_spec, host, port, app_dir)


def main() -> None:
    """The ``voltro`` console script."""
    app(prog_name="voltro")
