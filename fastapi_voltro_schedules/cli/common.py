"""What every ``voltro`` command shares: the Typer apps, the common options, the error type,
importing ``--app`` and finding its :class:`Scheduling`.

Options shared by commands (``--database-url``, ``--app``) are declared once here as
``Annotated`` aliases so every command reads them the same way: the flag, else
``$VOLTRO_DATABASE_URL``, else the embedded SQLite default. URLs are only ever printed with
the password hidden.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer
from sqlalchemy import make_url

from ..errors import ConfigurationError
from ..migrations import DEFAULT_DATABASE_URL
from ..urls import normalize_database_url

if TYPE_CHECKING:
    from ..scheduling import Scheduling

app = typer.Typer(
    name="voltro",
    help="fastapi-voltro-schedules: cron jobs inside a FastAPI app.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def package_version() -> str:
    """The installed distribution's version (the source tree's ``__version__`` without one)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("fastapi-voltro-schedules")
    except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        from .. import __version__

        return __version__


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"voltro (fastapi-voltro-schedules) {package_version()}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print the package version and exit.",
        ),
    ] = False,
) -> None:
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


class CliError(Exception):
    """A failure reported as one line on stderr and exit status 1."""


def _fail(command: str, message: str) -> typer.Exit:
    typer.echo(f"voltro {command}: {message}", err=True)
    return typer.Exit(code=1)


def resolve_database_url(database_url: str | None) -> str:
    """The flag/env value (Typer already merged them), else the embedded default — through
    the one normaliser (``urls.py``), so the CLI opens what the app's config would.
    :class:`CliError` for a URL it refuses (the message never holds the password)."""
    try:
        url = normalize_database_url(
            database_url or DEFAULT_DATABASE_URL, source="--database-url / VOLTRO_DATABASE_URL"
        )
    except ConfigurationError as exc:
        raise CliError(str(exc)) from None
    return url.render_as_string(hide_password=False)


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


schedule_app = typer.Typer(
    name="schedule",
    help="Operator verbs: list, runs, fire, next, pause, resume, backfill, audit.",
    no_args_is_help=True,
)
app.add_typer(schedule_app, name="schedule")


def find_scheduling(spec: str) -> tuple[Scheduling, Any]:
    """The :class:`Scheduling` of ``--app module:attr`` and the app to hand to handlers.

    In order: the attribute itself when it is a ``Scheduling``; ``app.state.scheduling`` when
    the app set one; else the one module-level ``Scheduling`` instance of the attribute's
    module (two or more: name the one you mean, ``--app module:scheduling``).
    """
    from ..scheduling import Scheduling

    target = import_app(spec)
    if isinstance(target, Scheduling):
        return target, None
    state = getattr(target, "state", None)
    on_state = getattr(state, "scheduling", None) if state is not None else None
    if isinstance(on_state, Scheduling):
        return on_state, target
    module_name = spec.partition(":")[0]
    module = sys.modules[module_name]
    found: list[Scheduling] = []
    for value in vars(module).values():
        if isinstance(value, Scheduling) and not any(value is f for f in found):
            found.append(value)
    if len(found) == 1:
        return found[0], target
    if not found:
        raise CliError(
            f"--app {spec!r}: no Scheduling in module {module_name!r} (and no "
            "app.state.scheduling) — keep your Scheduling(...) at module level, or point --app "
            "at it: --app module:scheduling"
        )
    raise CliError(
        f"--app {spec!r}: module {module_name!r} holds {len(found)} Scheduling objects — name "
        "the one to use: --app module:attribute"
    )
