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
import json
import logging
import os
import re
import sys
from collections.abc import MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import quote

import httpx
import typer
from sqlalchemy import make_url
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from . import devtokens
from .backfill import RangeSummary
from .clock import iso_z
from .migrations import (
    DEFAULT_DATABASE_URL,
    VOLTRO_TABLES,
    async_url,
    current_revision,
    redact_url,
    upgrade_to_head,
)
from .models import CLAIMS_TABLE, RUNS_TABLE

if TYPE_CHECKING:
    from .scheduling import Scheduling

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


# --- schedule backfill ----------------------------------------------------------------------

schedule_app = typer.Typer(
    name="schedule",
    help="Operator verbs on one schedule (range backfill).",
    no_args_is_help=True,
)
app.add_typer(schedule_app, name="schedule")

EXIT_OK = 0
"""Every slot of the range ran and succeeded."""
EXIT_ERROR = 1
"""Anything else: the server is unreachable, the inspect token is missing/wrong (401) or unset
on the server (503), the ledger failed, the stream broke off before its summary."""
EXIT_BAD_INPUT = 2
"""Bad input, nothing fired: from >= to, an unparseable or zone-less instant, a limit above the
hard ceiling, an unknown schedule, a wrong ``--app`` (Click's own usage errors are 2 too)."""
EXIT_NEEDS_CONFIRMATION = 3
"""More than 25 occurrences and no ``--yes`` (stdin is not a terminal, or the prompt was
declined); nothing fired."""
EXIT_REFUSED = 4
"""Refused outright, nothing fired: above the limit, or a range of this schedule is running."""
EXIT_SLOTS_FAILED = 5
"""The range ran to the end but at least one slot failed (each is recorded ``failed``)."""

REFUSAL_EXIT = {
    "needs-confirmation": EXIT_NEEDS_CONFIRMATION,
    "over-limit": EXIT_REFUSED,
    "in-progress": EXIT_REFUSED,
}
BACKFILL_HELP = (
    "Range backfill: fire every occurrence of NAME in (--from, --to], in order, as manual "
    "runs.\n\n"
    "Each slot runs against its own cron-derived scheduled_at and is recorded "
    "trigger=manual; a failed slot is recorded and the next still fires. Above 25 occurrences "
    "it asks first (on a terminal) or refuses with the count (exit 3) — pass --yes after "
    "reading the number. Above --limit (default 1000, at most 10000) it refuses outright, "
    "firing nothing (exit 4); so does a second range of a schedule while one runs.\n\n"
    "With --url it asks a running app (POST /_voltro/inspect/schedules/NAME/backfill, with "
    "the inspect token); without, it imports --app and runs the range in this process "
    "against the app's database (its Scheduling's config: VOLTRO_DATABASE_URL applies).\n\n"
    "Exit status: 0 every slot succeeded, 5 the range ran but some slots failed, 3 needs "
    "confirmation, 4 over the limit / another range running, 2 bad input or unknown "
    "schedule, 1 anything else (unreachable, 401/503, ledger errors)."
)


def _interactive() -> bool:
    """Whether to ask before a range above 25 occurrences (else refuse with exit 3)."""
    return sys.stdin.isatty()


def _progress_bar_wanted() -> bool:
    return sys.stderr.isatty()


def _say(message: str) -> None:
    typer.echo(f"voltro schedule backfill: {message}", err=True)


class _Reporter:
    """Progress of one range: a Rich bar on a terminal, one plain line per slot otherwise."""

    def __init__(self, name: str, start: str, end: str) -> None:
        self.name, self.start, self.end = name, start, end
        self.count = 0
        self._failed = 0
        self._bar: Any = None
        self._task: Any = None

    def begin(self, count: int, already_succeeded: int) -> None:
        self.count = count
        _say(
            f'"{self.name}" — {count:,} occurrence{"" if count == 1 else "s"} in '
            f"({self.start}, {self.end}], {already_succeeded:,} already succeeded (they run "
            "again); firing in order"
        )
        if _progress_bar_wanted():
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._bar = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("succeeded={task.fields[succeeded]} failed={task.fields[failed]}"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
            )
            self._bar.start()
            self._task = self._bar.add_task(self.name, total=count, succeeded=0, failed=0)

    def update(self, fired: int, succeeded: int, failed: int, slot: str | None = None) -> None:
        if failed > self._failed:
            self._failed = failed
            at = f" ({slot})" if slot else ""
            line = f"slot {fired}/{self.count}{at} failed — recorded failed; the next still fires"
            if self._bar is not None:
                self._bar.console.print(f"voltro schedule backfill: {line}", markup=False)
            else:
                _say(line)
        if self._bar is not None:
            self._bar.update(self._task, completed=fired, succeeded=succeeded, failed=failed)
        else:
            _say(f"{fired}/{self.count}  succeeded={succeeded} failed={failed}")

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def finish(self, fired: int, succeeded: int, failed: int, already_succeeded: int) -> int:
        self.close()
        typer.echo(
            f'voltro schedule backfill: "{self.name}" fired={fired} succeeded={succeeded} '
            f"failed={failed} (alreadySucceeded={already_succeeded})"
        )
        if failed:
            _say(
                f"{failed} of {fired} slots failed (see the trigger=manual runs in "
                "_voltro_schedule_runs or the dashboard)"
            )
            return EXIT_SLOTS_FAILED
        return EXIT_OK


def _ask(name: str, start: str, end: str, count: int, already_succeeded: int) -> bool:
    """On a terminal, show the count and ask; ``False`` when declined or not a terminal."""
    if not _interactive():
        return False
    return typer.confirm(
        f'"{name}" has {count:,} occurrences in ({start}, {end}] ({already_succeeded:,} of '
        f"them already succeeded and would run again). Fire all {count:,}?",
        default=False,
        err=True,
    )


def _declined() -> int:
    _say("not confirmed — nothing fired")
    return EXIT_NEEDS_CONFIRMATION


# -- over HTTP ------------------------------------------------------------------------------


def _error_detail(response: httpx.Response) -> tuple[str, dict[str, Any]]:
    """The server's ``detail`` sentence and the whole body (FastAPI's 422 list flattened)."""
    try:
        body = response.json()
    except ValueError:
        return f"HTTP {response.status_code}: {response.text.strip()[:500]}", {}
    if not isinstance(body, dict):
        return f"HTTP {response.status_code}: {body!r}", {}
    detail = body.get("detail")
    if isinstance(detail, list):  # FastAPI's own body validation
        parts = []
        for item in detail:
            if isinstance(item, dict):
                where = ".".join(str(p) for p in item.get("loc", ()) if p != "body")
                parts.append(f"{where}: {item.get('msg')}" if where else str(item.get("msg")))
        detail = "invalid request — " + "; ".join(parts)
    return str(detail if detail is not None else body), body


def _http_exit(status: int, body: dict[str, Any]) -> int:
    if status == 409 and body.get("code") == "backfill_refused":
        return REFUSAL_EXIT.get(str(body.get("reason")), EXIT_REFUSED)
    if status in (404, 422):
        return EXIT_BAD_INPUT
    return EXIT_ERROR


def _consume(response: httpx.Response, reporter: _Reporter) -> int:
    started = False
    try:
        for raw in response.iter_lines():
            if not raw.strip():
                continue
            event = json.loads(raw)
            kind = event.get("event")
            if kind in ("progress", "summary") and not started:
                reporter.begin(int(event["count"]), int(event["alreadySucceeded"]))
                started = True
            if kind == "progress":
                reporter.update(int(event["fired"]), int(event["succeeded"]), int(event["failed"]))
            elif kind == "summary":
                return reporter.finish(
                    int(event["fired"]),
                    int(event["succeeded"]),
                    int(event["failed"]),
                    int(event["alreadySucceeded"]),
                )
            elif kind == "error":
                reporter.close()
                _say(str(event.get("detail")))
                return REFUSAL_EXIT.get(str(event.get("reason")), EXIT_ERROR)
    finally:
        reporter.close()
    _say("the server closed the stream before the summary — see the runs in the ledger")
    return EXIT_ERROR


def _http_backfill(
    url: str,
    token: str | None,
    name: str,
    start: str,
    end: str,
    *,
    yes: bool,
    limit: int | None,
) -> int:
    endpoint = f"{url.rstrip('/')}/_voltro/inspect/schedules/{quote(name, safe='')}/backfill"
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    reporter = _Reporter(name, start, end)
    confirm = yes
    # The read timeout is off: one line arrives per slot, and a slot takes the handler's time.
    with httpx.Client(timeout=httpx.Timeout(30.0, read=None)) as client:
        while True:
            body: dict[str, Any] = {"from": start, "to": end, "confirm": confirm}
            if limit is not None:
                body["limit"] = limit
            try:
                with client.stream("POST", endpoint, json=body, headers=headers) as response:
                    if response.status_code == 200:
                        return _consume(response, reporter)
                    response.read()
            except httpx.HTTPError as exc:
                _say(f"cannot reach {url}: {type(exc).__name__}: {exc}")
                return EXIT_ERROR
            detail, error = _error_detail(response)
            if (
                response.status_code == 409
                and error.get("reason") == "needs-confirmation"
                and not confirm
                and _interactive()
            ):
                count, already = (
                    int(error.get("count") or 0),
                    int(error.get("alreadySucceeded") or 0),
                )
                if not _ask(name, start, end, count, already):
                    return _declined()
                confirm = True
                continue
            _say(detail)
            return _http_exit(response.status_code, error)


# -- in this process, against the app's database ---------------------------------------------


def find_scheduling(spec: str) -> tuple[Scheduling, Any]:
    """The :class:`Scheduling` of ``--app module:attr`` and the app to hand to handlers.

    In order: the attribute itself when it is a ``Scheduling``; ``app.state.scheduling`` when
    the app set one; else the one module-level ``Scheduling`` instance of the attribute's
    module (two or more: name the one you mean, ``--app module:scheduling``).
    """
    from .scheduling import Scheduling

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


async def _direct_backfill(
    scheduling: Scheduling,
    target: Any,
    name: str,
    start: str,
    end: str,
    *,
    yes: bool,
    limit: int | None,
) -> int:
    from fastapi import FastAPI

    from .errors import (
        BackfillRefusedError,
        BackfillRequestError,
        ScheduleNotFoundError,
        VoltroError,
    )

    reporter = _Reporter(name, start, end)
    try:
        async with scheduling.run(target if isinstance(target, FastAPI) else None, arm=False):
            try:
                plan = await scheduling.plan_backfill(name, start, end, confirm=yes, limit=limit)
            except BackfillRefusedError as refusal:
                if refusal.reason != "needs-confirmation" or not _interactive():
                    raise
                if not _ask(name, start, end, refusal.count or 0, refusal.already_succeeded or 0):
                    return _declined()
                plan = await scheduling.plan_backfill(name, start, end, confirm=True, limit=limit)
            reporter.begin(plan.count, plan.already_succeeded)
            slots = plan.slots

            def progress(summary: RangeSummary) -> None:
                index = summary.fired - 1
                slot = iso_z(slots[index]) if 0 <= index < len(slots) else None
                reporter.update(summary.fired, summary.succeeded, summary.failed, slot)

            summary = await scheduling.backfill(
                name, start, end, confirm=True, limit=limit, progress=progress
            )
            return reporter.finish(
                summary.fired, summary.succeeded, summary.failed, summary.already_succeeded
            )
    except BackfillRefusedError as refusal:
        reporter.close()
        _say(str(refusal))
        return REFUSAL_EXIT.get(refusal.reason, EXIT_REFUSED)
    except (BackfillRequestError, ScheduleNotFoundError) as error:
        reporter.close()
        _say(str(error))
        return EXIT_BAD_INPUT
    except VoltroError as error:
        reporter.close()
        _say(str(error))
        return EXIT_ERROR
    finally:
        reporter.close()


@schedule_app.command("backfill", help=BACKFILL_HELP)
def schedule_backfill(
    name: Annotated[str, typer.Argument(help="The schedule's name.")],
    start: Annotated[
        str,
        typer.Option(
            "--from", help="ISO-8601 instant with a zone, exclusive: 2026-08-10T00:00:00Z."
        ),
    ],
    end: Annotated[
        str,
        typer.Option("--to", help="ISO-8601 instant with a zone, inclusive."),
    ],
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Confirm a range above 25 occurrences.")
    ] = False,
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit", help="Refuse above this many occurrences (default 1000, at most 10000)."
        ),
    ] = None,
    url: Annotated[
        str | None,
        typer.Option(
            "--url",
            help="A running app (http://host:port): run the range there, over the inspect API.",
        ),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            envvar=devtokens.INSPECT_TOKEN_ENV,
            show_envvar=True,
            show_default=False,
            help="The inspect token, with --url.",
        ),
    ] = None,
    app_spec: Annotated[
        str | None,
        typer.Option(
            "--app",
            envvar="VOLTRO_APP",
            show_envvar=True,
            help="Without --url: your application as module:attribute; the range runs in this "
            "process against its database.",
        ),
    ] = None,
) -> None:
    """``voltro schedule backfill`` (help text: :data:`BACKFILL_HELP`)."""
    if url:
        code = _http_backfill(url, token, name, start, end, yes=yes, limit=limit)
        raise typer.Exit(code=code)
    if not app_spec:
        _say("give --url http://host:port (a running app) or --app module:attribute")
        raise typer.Exit(code=EXIT_BAD_INPUT)
    try:
        scheduling, target = find_scheduling(validate_app_spec(app_spec))
    except CliError as exc:
        _say(str(exc))
        raise typer.Exit(code=EXIT_BAD_INPUT) from None
    database = scheduling.config.database_url
    try:
        code = asyncio.run(
            _direct_backfill(scheduling, target, name, start, end, yes=yes, limit=limit)
        )
    except Exception as exc:
        _say(
            f"failed on {redact_url(database)}: {_scrub(f'{type(exc).__name__}: {exc}', database)}"
        )
        raise typer.Exit(code=EXIT_ERROR) from None
    raise typer.Exit(code=code)


def main() -> None:
    """The ``voltro`` console script."""
    app(prog_name="voltro")
