"""``voltro schedule audit``: read the ledger and report duplicate slots, stuck rows and
unexplained gaps (the analysis is :mod:`fastapi_voltro_schedules.audit`)."""

from __future__ import annotations

import asyncio
import json
import os
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated

import typer
from sqlalchemy import make_url

from ..audit import AuditReport, audit_ledger
from ..backfill import parse_instant
from ..enums import TriggerMode
from ..errors import BackfillRequestError
from ..migrations import redact_url
from .common import CliError, DatabaseUrlOption, _scrub, find_scheduling, schedule_app
from .serve import validate_app_spec

if TYPE_CHECKING:
    from ..definition import Schedule

EXIT_CLEAN = 0
"""No finding in the range."""
EXIT_FINDINGS = 1
"""At least one duplicate slot, stuck row or gap (each printed)."""
EXIT_BAD_INPUT = 2
"""A bad --from/--to, a wrong --app, a SQLite ledger file that does not exist."""
EXIT_UNREADABLE = 3
"""The ledger could not be read (unreachable, not migrated, refused)."""
DEFAULT_SPAN = timedelta(hours=24)

AUDIT_HELP = (
    "Audit the ledger in (--from, --to]: report every duplicate slot (one clock-driven slot "
    "run twice), every stuck row (running/queued, silent for more than 3 heartbeats) and, "
    "with --app, every unexplained gap (an occurrence of a self schedule with no row at all, "
    "counted from the schedule's first row in the ledger).\n\n"
    "--to defaults to the database's clock now, --from to 24 hours before --to. The ledger is "
    "--database-url (or VOLTRO_DATABASE_URL), else the app's configured database; the "
    "heartbeat is the app's schedule_heartbeat_ms (VOLTRO_SCHEDULE_HEARTBEAT_MS without "
    "--app).\n\n"
    "Exit status: 0 clean, 1 findings, 2 bad input, 3 the ledger could not be read."
)


def _say(message: str) -> None:
    typer.echo(f"voltro schedule audit: {message}", err=True)


def _sqlite_file_missing(url: str) -> str | None:
    """The path of a SQLite ledger URL whose file does not exist (opening it would create
    an empty one, which audits clean)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    path = os.path.abspath(parsed.database or "")
    return None if os.path.exists(path) else path


async def _run(
    url: str,
    schedules: list[Schedule],
    start: str | None,
    end: str | None,
    heartbeat_ms: int,
) -> AuditReport:
    from ..store import create_store

    store = create_store(url)
    try:
        until = parse_instant(end, "--to") if end else await store.database_now()
        since = parse_instant(start, "--from") if start else until - DEFAULT_SPAN
        if since >= until:
            raise BackfillRequestError(f"--from ({start or since}) must be before --to")
        return await audit_ledger(store, schedules, since, until, heartbeat_ms=heartbeat_ms)
    finally:
        await store.dispose()


@schedule_app.command("audit", help=AUDIT_HELP)
def schedule_audit(
    start: Annotated[
        str | None,
        typer.Option("--from", help="ISO-8601 instant with a zone, exclusive."),
    ] = None,
    end: Annotated[
        str | None,
        typer.Option("--to", help="ISO-8601 instant with a zone, inclusive."),
    ] = None,
    app_spec: Annotated[
        str | None,
        typer.Option(
            "--app",
            envvar="VOLTRO_APP",
            show_envvar=True,
            help="Your application as module:attribute: its self schedules are checked for "
            "gaps, and its database and heartbeat are used.",
        ),
    ] = None,
    database_url: DatabaseUrlOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """``voltro schedule audit`` (help text: :data:`AUDIT_HELP`)."""
    from ..config import SchedulingConfig

    schedules: list[Schedule] = []
    if app_spec:
        try:
            scheduling, _ = find_scheduling(validate_app_spec(app_spec))
        except CliError as exc:
            _say(str(exc))
            raise typer.Exit(code=EXIT_BAD_INPUT) from None
        config = scheduling.config
        schedules = [
            s for s in scheduling.schedules if scheduling.trigger_of(s) is TriggerMode.SELF
        ]
    else:
        config = SchedulingConfig()
    url = database_url or config.database_url
    missing = _sqlite_file_missing(url)
    if missing:
        _say(f"no ledger at {missing} — pass --database-url (or --app) for the app's database")
        raise typer.Exit(code=EXIT_BAD_INPUT)
    try:
        report = asyncio.run(_run(url, schedules, start, end, config.schedule_heartbeat_ms))
    except ValueError as exc:  # a bad instant or range (BackfillRequestError is one too)
        _say(str(exc))
        raise typer.Exit(code=EXIT_BAD_INPUT) from None
    except Exception as exc:
        _say(f"cannot read {redact_url(url)}: {_scrub(f'{type(exc).__name__}: {exc}', url)}")
        raise typer.Exit(code=EXIT_UNREADABLE) from None
    typer.echo(json.dumps(report.to_json(), indent=2) if as_json else report.text())
    raise typer.Exit(code=EXIT_CLEAN if report.clean else EXIT_FINDINGS)
