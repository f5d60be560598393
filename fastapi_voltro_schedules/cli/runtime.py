"""Run-time schedules from the command line: ``voltro schedule put|delete``.

Both talk to ``PUT``/``DELETE /_voltro/inspect/schedules/{name}`` of a running app (``--url``
+ the operator's ``--token``) or of the app imported here (``--app module:app``, booted
without arming any timer: the running app's replicas pick the write up within a heartbeat),
as the other operator verbs do (:mod:`.operate`). Exit status: 0 done, 1 refused (409: the
name is declared in code) or anything else went wrong, 2 bad input (a field the scheduler
refused, named) or, for ``delete``, an unknown schedule.
"""

from __future__ import annotations

import json
from typing import Annotated, Any
from urllib.parse import quote

import typer

from .common import schedule_app
from .operate import (
    EXIT_BAD_INPUT,
    INSPECT,
    AppOpt,
    JsonOpt,
    OperateError,
    TokenOpt,
    UrlOpt,
    _print_json,
    _run,
    connect,
)
from .retry import DEFAULT_RETRY_FOR, RetryOpt


def _args(raw: str | None) -> Any:
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise OperateError(
            f"--args is not JSON ({exc}) — pass a JSON object, e.g. "
            '--args \'{"tenant": "acme"}\'',
            EXIT_BAD_INPUT,
        ) from None


def _retry(
    attempts: int | None, backoff_ms: int | None, max_backoff_ms: int | None
) -> dict[str, int] | None:
    """The PUT body's ``retry`` from the ``--retry-*`` options (``None``: none given)."""
    if attempts is None:
        if backoff_ms is not None or max_backoff_ms is not None:
            raise OperateError(
                "--retry-backoff-ms/--retry-max-ms need --retry-attempts — say how "
                "many attempts a slot may take, e.g. --retry-attempts 3",
                EXIT_BAD_INPUT,
            )
        return None
    retry = {"attempts": attempts}
    if backoff_ms is not None:
        retry["backoffMs"] = backoff_ms
    if max_backoff_ms is not None:
        retry["maxBackoffMs"] = max_backoff_ms
    return retry


def _holidays(text: str) -> dict[str, str]:
    """``DE``, ``DE:BY`` or ``DE:BY:de`` as the body's holidays spec (the scheduler checks the
    country and subdivision, and names the item it refuses)."""
    parts = text.split(":")
    if len(parts) > 3 or not all(parts):
        raise OperateError(
            f'--holidays "{text}" is not COUNTRY[:SUBDIV[:LANGUAGE]] — e.g. DE, DE:BY or DE:BY:de',
            EXIT_BAD_INPUT,
        )
    return dict(zip(("country", "subdiv", "language"), parts, strict=False))


@schedule_app.command("put")
def put_command(
    name: Annotated[str, typer.Argument(help="The run-time schedule to create or replace.")],
    cron: Annotated[str, typer.Option("--cron", help='e.g. "0 9 * * *"')],
    timezone: Annotated[str, typer.Option("--timezone", help='IANA zone, e.g. "Europe/Berlin"')],
    handler: Annotated[str, typer.Option("--handler", help="A define_handler name.")],
    args: Annotated[
        str | None, typer.Option("--args", help="JSON object handed to each firing (ctx.args).")
    ] = None,
    on_overlap: Annotated[
        str, typer.Option("--on-overlap", help="skip | queue | parallel")
    ] = "skip",
    backfill: Annotated[str, typer.Option("--backfill", help="skip | latest | all")] = "skip",
    max_runtime_ms: Annotated[
        int | None, typer.Option("--max-runtime-ms", help="Watchdog bound (default 30 min).")
    ] = None,
    retry_attempts: Annotated[
        int | None,
        typer.Option(
            "--retry-attempts",
            help="Retry a failed run within its slot: at most this many attempts (the run "
            "included). Default: the handler's own policy, else none.",
        ),
    ] = None,
    retry_backoff_ms: Annotated[
        int | None,
        typer.Option("--retry-backoff-ms", help="Wait before the first retry (default 1000)."),
    ] = None,
    retry_max_backoff_ms: Annotated[
        int | None,
        typer.Option("--retry-max-ms", help="Cap of the doubling wait (default 60000)."),
    ] = None,
    exclude: Annotated[
        list[str] | None,
        typer.Option(
            "--exclude",
            help="A day it does not run (YYYY-MM-DD, repeatable): the slot is recorded skipped.",
        ),
    ] = None,
    holidays: Annotated[
        list[str] | None,
        typer.Option(
            "--holidays",
            help="Public holidays it does not run on: COUNTRY[:SUBDIV[:LANGUAGE]], e.g. DE:BY "
            "(repeatable; the holidays package).",
        ),
    ] = None,
    record: Annotated[
        str,
        typer.Option(
            "--record",
            help="all | failures — failures keeps a row only for runs that did not succeed "
            "(successes are counted per hour).",
        ),
    ] = "all",
    app: AppOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
    retry_for: RetryOpt = DEFAULT_RETRY_FOR,
) -> None:
    """Create or replace the run-time schedule NAME (every replica runs it within a
    heartbeat)."""

    async def go() -> Any:
        body: dict[str, Any] = {
            "cron": cron,
            "timezone": timezone,
            "handler": handler,
            "onOverlap": on_overlap,
            "backfill": backfill,
            "record": record,
        }
        if args is not None:
            body["args"] = _args(args)
        if max_runtime_ms is not None:
            body["maxRuntimeMs"] = max_runtime_ms
        retry = _retry(retry_attempts, retry_backoff_ms, retry_max_backoff_ms)
        if retry is not None:
            body["retry"] = retry
        if exclude or holidays:
            body["exclude"] = [*(exclude or []), *(_holidays(h) for h in holidays or [])]
        async with connect(app, url, token, retry_for) as api:
            return await api.call("PUT", f"{INSPECT}/{quote(name, safe='')}", json=body)

    view = _run(go())
    if as_json:
        _print_json(view)
        return
    next_firing = view.get("nextFiring") or "—"
    typer.echo(f"{name}: {view['cron']} ({view['timezone']}) handler={handler} next={next_firing}")


@schedule_app.command("delete")
def delete_command(
    name: Annotated[str, typer.Argument(help="The run-time schedule to delete.")],
    app: AppOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    retry_for: RetryOpt = DEFAULT_RETRY_FOR,
) -> None:
    """Delete the run-time schedule NAME on every replica (a firing in flight finishes)."""

    async def go() -> None:
        async with connect(app, url, token, retry_for) as api:
            await api.call("DELETE", f"{INSPECT}/{quote(name, safe='')}")

    _run(go())
    typer.echo(f"{name}: deleted")
