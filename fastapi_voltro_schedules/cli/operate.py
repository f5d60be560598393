"""The operator's verbs: ``voltro schedule list|runs|fire|next|pause|resume`` (``pause --all
[--until ISO]`` / ``resume --all``: every schedule at once).

Each verb talks to the inspect API, either of a running app (``--url`` + ``--token``, default
``$VOLTRO_INSPECT_TOKEN``) or of the app imported in this process (``--app module:app``): the
CLI then boots the app's :class:`Scheduling` against its database *without arming any timer*
and calls the same routes in memory, as the operator (a process that can read the app's
database needs no bearer token). One code path, so both modes answer alike.

Tables for people (plain full lines when stdout is not a terminal: :mod:`.output`), ``--json``
for scripts (the API's own JSON; the shapes are in docs/operating.md). Over ``--url`` a refused
connection — the app not up yet, or restarting — is retried with backoff for ``--retry-for``
seconds, then reported naming the URL. Exit status: 0 done (``fire``: the run succeeded), 1 the
run failed or anything else went wrong (unreachable, 401/403/503, 409 paused), 2 bad input or
an unknown schedule.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import quote

import httpx
import typer

from .. import devtokens
from ..clock import iso_z
from ..cron import CronSpec
from ..errors import VoltroError
from ..exclusions import exclusions_from_json
from .common import CliError, find_scheduling, schedule_app
from .output import print_table
from .retry import DEFAULT_RETRY_FOR, RetryOpt, refused, retry_delays, retrying, unreachable

if TYPE_CHECKING:
    from ..scheduling import Scheduling

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
"""409 answers that are bad input all the same (exit 2): the request named an instant gone."""
INSPECT = "/_voltro/inspect/schedules"
FIRE_POLL_SECONDS = 0.2

AppOpt = Annotated[
    str | None,
    typer.Option("--app", help="Your application (module:attribute), run in this process."),
]
UrlOpt = Annotated[
    str | None, typer.Option("--url", help="Base URL of a running app, e.g. http://127.0.0.1:8000")
]
TokenOpt = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar=devtokens.INSPECT_TOKEN_ENV,
        show_envvar=True,
        help="Inspect token for --url (the operator's for fire/pause/resume).",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the API's JSON instead of a table.")]


class OperateError(CliError):
    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Api:
    """An inspect client over HTTP or in memory (``scheduling`` set in-process)."""

    http: httpx.AsyncClient
    scheduling: Scheduling | None = None
    retry_for: float = DEFAULT_RETRY_FOR

    async def _send(self, method: str, path: str, **kw: Any) -> httpx.Response:
        delays = retry_delays(self.retry_for) if self.scheduling is None else []
        base = str(self.http.base_url).rstrip("/")
        attempt = 0
        while True:
            try:
                return await self.http.request(method, path, **kw)
            except httpx.ConnectError as exc:
                if not refused(exc) or attempt == len(delays):
                    raise OperateError(
                        unreachable(base, exc, attempt + 1, self.retry_for)
                    ) from None
                if attempt == 0:
                    typer.echo(f"voltro schedule: {retrying(base, self.retry_for)}", err=True)
                await asyncio.sleep(delays[attempt])
                attempt += 1
            except httpx.HTTPError as exc:
                raise OperateError(f"cannot reach {base}: {type(exc).__name__}: {exc}") from None

    async def call(self, method: str, path: str, **kw: Any) -> Any:
        response = await self._send(method, path, **kw)
        if response.status_code >= 400:
            error_code = None
            try:
                body = response.json()
                detail = body.get("detail", body) if isinstance(body, dict) else body
                error_code = body.get("code") if isinstance(body, dict) else None
            except ValueError:
                detail = response.text[:300]
            code = _exit_code(error_code)
            raise OperateError(f"{response.status_code}: {detail}", code)
        if response.status_code == 204:
            return None
        return response.json()


@asynccontextmanager
async def connect(
    app: str | None, url: str | None, token: str | None, retry_for: float = DEFAULT_RETRY_FOR
) -> AsyncIterator[Api]:
    if (app is None) == (url is None):
        raise OperateError("pass exactly one of --app module:app or --url URL", EXIT_BAD_INPUT)
    if url is not None:
        if not token:
            raise OperateError(
                f"--url needs the inspect token: --token or ${devtokens.INSPECT_TOKEN_ENV}"
            )
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as http:
            yield Api(http, retry_for=retry_for)
        return
    assert app is not None
    from fastapi import FastAPI

    from .. import schedules_router
    from ..api.auth import require_inspect_token, require_operator
    from ..tokens import Role

    scheduling, _target = find_scheduling(app)
    local = FastAPI()
    local.include_router(schedules_router)

    async def as_operator() -> Role:
        return Role.OPERATOR

    local.dependency_overrides[require_inspect_token] = as_operator
    local.dependency_overrides[require_operator] = as_operator
    async with scheduling.run(local, arm=False):
        transport = httpx.ASGITransport(app=local)
        async with httpx.AsyncClient(transport=transport, base_url="http://in-process") as http:
            yield Api(http, scheduling)


def _run(coro: Any) -> Any:
    try:
        return asyncio.run(coro)
    except OperateError as exc:
        typer.echo(f"voltro schedule: {exc}", err=True)
        raise typer.Exit(exc.code) from None
    except CliError as exc:
        typer.echo(f"voltro schedule: {exc}", err=True)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    except VoltroError as exc:  # in-process: the domain error itself (the route maps it)
        typer.echo(f"voltro schedule: {exc}", err=True)
        from ..api.errors import status_of

        raise typer.Exit(_exit_code(status_of(exc)[1])) from None


def _exit_code(error_code: object) -> int:
    """2 when the refusal is the caller's to fix (the route's error code, the same whether
    the CLI asked over HTTP or in process), else 1."""
    from ..api.errors import CALLERS_TO_FIX  # the routes' table: loaded once a call failed

    return EXIT_BAD_INPUT if error_code in CALLERS_TO_FIX else EXIT_FAILED


def _print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2))


def _ago(iso: str | None, now: datetime) -> str:
    if iso is None:
        return "—"
    delta = (datetime.fromisoformat(iso) - now).total_seconds()
    sign, seconds = ("in ", delta) if delta >= 0 else ("", -delta)
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    text = (
        f"{days}d {hours}h" if days else f"{hours}h {minutes}m" if hours else f"{minutes}m {secs}s"
    )
    return f"{sign}{text}" + ("" if delta >= 0 else " ago")


# ----------------------------------------------------------------------------------- list


LIST_PAGE = 500
"""Schedules per request while ``voltro schedule list`` pages through the listing."""


@schedule_app.command("list")
def list_command(
    app: AppOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
    retry_for: RetryOpt = DEFAULT_RETRY_FOR,
    prefix: Annotated[
        str | None, typer.Option("--prefix", help="Only names starting with this text.")
    ] = None,
    status: Annotated[
        list[str] | None,
        typer.Option(
            "--status",
            help="The newest outcome: succeeded|failed|skipped|missed (repeat for several).",
        ),
    ] = None,
    source: Annotated[
        str | None, typer.Option("--source", help="code (declared) | runtime (written).")
    ] = None,
    paused: Annotated[
        bool | None,
        typer.Option("--paused/--not-paused", help="Only paused schedules / only the others."),
    ] = None,
    page_size: Annotated[
        int, typer.Option("--page-size", min=1, max=1000, help="Schedules per request.")
    ] = LIST_PAGE,
) -> None:
    """Every schedule (or those the filters hold): cron, zone, trigger, next firing, last
    outcome, paused. Pages through the listing, so 100,000 schedules are read a page at a time;
    --json prints one object (the first page's header, every schedule, nextCursor null)."""
    params: dict[str, Any] = {"limit": page_size}
    if prefix:
        params["prefix"] = prefix
    if status:
        params["status"] = status
    if source is not None:
        params["source"] = source
    if paused is not None:
        params["paused"] = "true" if paused else "false"

    async def go() -> Any:
        async with connect(app, url, token, retry_for) as api:
            first = body = await api.call("GET", INSPECT, params=params)
            schedules = list(body["schedules"])
            while body.get("nextCursor"):
                body = await api.call(
                    "GET", INSPECT, params={**params, "cursor": body["nextCursor"]}
                )
                schedules += body["schedules"]
            return {**first, "schedules": schedules, "nextCursor": None}

    body = _run(go())
    if as_json:
        _print_json(body)
        return
    now = datetime.fromisoformat(body["now"])
    fleet = body.get("pauseAll")
    if fleet is not None:
        typer.echo(
            f"every schedule paused since {fleet['pausedAt']} by {fleet['pausedBy']}"
            + (f": {fleet['reason']}" if fleet["reason"] else "")
            + (f" — until {fleet['until']}" if fleet["until"] else " — until resumed")
            + " (voltro schedule resume --all)"
        )
    rows = []
    for s in body["schedules"]:
        last = s["lastRun"]
        pause = s["pause"]
        rows.append(
            (
                s["name"],
                s["cron"],
                s["timezone"],
                s["trigger"],
                "—"
                if s["nextFiring"] is None
                else f"{s['nextFiring']} ({_ago(s['nextFiring'], now)})",
                "—" if last is None else f"{last['status']} {_ago(last['scheduledAt'], now)}",
                "no"
                if pause is None
                else f"since {pause['pausedAt']} by {pause['pausedBy']}"
                + (f": {pause['reason']}" if pause["reason"] else ""),
            )
        )
    print_table(
        f"schedules — coordination {body['coordination']}",
        ("name", "cron", "zone", "trigger", "next", "last", "paused"),
        rows,
    )


# ----------------------------------------------------------------------------------- runs


@schedule_app.command("runs")
def runs_command(
    name: Annotated[str, typer.Argument(help="The schedule.")],
    status: Annotated[
        list[str] | None,
        typer.Option("--status", help="queued|running|succeeded|failed|skipped|missed (repeat)"),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000)] = 20,
    app: AppOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
    retry_for: RetryOpt = DEFAULT_RETRY_FOR,
) -> None:
    """NAME's firing history, newest first."""

    async def go() -> Any:
        params: list[tuple[str, str | int]] = [("name", name), ("limit", limit)]
        params += [("status", s) for s in status or []]
        async with connect(app, url, token, retry_for) as api:
            return await api.call("GET", f"{INSPECT}/runs", params=params)

    body = _run(go())
    if as_json:
        _print_json(body)
        return
    rows = []
    for run in body["runs"]:
        error = " ".join(x for x in (run["errorTag"], run["error"]) if x)
        rows.append(
            (
                run["scheduledAt"],
                run["status"],
                run["trigger"],
                run["firedAt"] or "—",
                "—" if run["durationMs"] is None else str(run["durationMs"]),
                run["replicaId"],
                error[:80],
            )
        )
    columns = ("scheduled", "status", "trigger", "fired", "ms", "replica", "error")
    print_table(f"runs of {name}", columns, rows)
    if not body["runs"]:
        typer.echo(f"no runs of {name} yet")


# ----------------------------------------------------------------------------------- fire


async def _wait_for(api: Api, name: str, run_id: str, wait_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + wait_s
    while True:
        page = await api.call("GET", f"{INSPECT}/runs", params={"name": name, "limit": 50})
        for run in page["runs"]:
            if run["runId"] == run_id and run["terminal"]:
                return dict(run)
        if time.monotonic() > deadline:
            raise OperateError(f"run {run_id} of {name} not finished after {wait_s:g} s")
        await asyncio.sleep(FIRE_POLL_SECONDS)


@schedule_app.command("fire")
def fire_command(
    name: Annotated[str, typer.Argument(help="The schedule.")],
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait.")] = 3600.0,
    app: AppOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
    retry_for: RetryOpt = DEFAULT_RETRY_FOR,
) -> None:
    """Run NAME now (trigger=manual), wait, and exit with its outcome: 0 succeeded."""

    async def go() -> dict[str, Any]:
        async with connect(app, url, token, retry_for) as api:
            if api.scheduling is not None:
                # In-process nothing is armed: Run now through the facade, as the route does
                # (manual, no coordination, refused while paused), and the run executes here.
                run_id = (await api.scheduling.fire_now(name)).id
            else:
                accepted = await api.call("POST", f"{INSPECT}/{quote(name, safe='')}/fire")
                run_id = accepted["runId"]
            return await _wait_for(api, name, run_id, timeout)

    try:
        run = _run(go())
    except typer.Exit:
        raise
    if as_json:
        _print_json(run)
    else:
        tail = f" — {run['errorTag'] or ''} {run['error'] or ''}".rstrip(" —")
        typer.echo(f"{name}: {run['status']} ({run['runId']}, {run['durationMs']} ms){tail}")
    if run["status"] != "succeeded":
        raise typer.Exit(EXIT_FAILED)


# ----------------------------------------------------------------------------------- next


def dst_note(spec: CronSpec, occurrence: datetime) -> str | None:
    """Why an occurrence is not at the cron's plain wall time, if it is not: moved out of a
    skipped (spring-forward) hour, or inside a repeated (fall-back) hour."""
    local = occurrence.astimezone(spec.zone)
    fields = spec.fields()
    if local.hour not in fields.hours or local.minute not in fields.minutes:
        return "DST: the wall time does not exist that day — fires at the first instant after"
    other = local.replace(fold=1 - local.fold)
    if other.utcoffset() != local.utcoffset():
        if spec.is_wildcard:
            return f"DST: repeated hour, pass {local.fold + 1} of 2"
        return "DST: repeated hour — fires once, on the first pass"
    return None


@schedule_app.command("next")
def next_command(
    name: Annotated[str, typer.Argument(help="The schedule.")],
    count: Annotated[int, typer.Option("--count", min=1, max=1000)] = 5,
    app: AppOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
    retry_for: RetryOpt = DEFAULT_RETRY_FOR,
) -> None:
    """NAME's next occurrences, in its zone and in UTC (DST-shifted ones marked)."""

    async def go() -> tuple[str, str, datetime, list[Any] | None]:
        async with connect(app, url, token, retry_for) as api:
            body = await api.call("GET", INSPECT)
        for s in body["schedules"]:
            if s["name"] == name:
                now = datetime.fromisoformat(body["now"])
                return s["cron"], s["timezone"], now, s.get("exclude")
        raise OperateError(f'no schedule named "{name}"', EXIT_BAD_INPUT)

    cron, zone, now, exclude = _run(go())
    spec = CronSpec.parse(cron, zone)
    # the listing's exclude is data (dates, holidays specs); a declared schedule's own
    # calendar object ("calendar:<class>") is not, and its days are not marked here
    exclusions = exclusions_from_json(json.dumps(exclude)) if exclude else None
    rows = []
    at = now.astimezone(UTC)
    for _ in range(count):
        at = spec.next_occurrence(at)
        local = at.astimezone(spec.zone)
        rows.append(
            {
                "utc": iso_z(at),
                "local": local.isoformat(),
                "dst": dst_note(spec, at),
                "excluded": None if exclusions is None else exclusions.reason(local.date()),
            }
        )
    if as_json:
        _print_json({"name": name, "cron": cron, "timezone": zone, "occurrences": rows})
        return

    def note(row: dict[str, Any]) -> str:
        said = [row["dst"], row["excluded"] and f"skipped — {row['excluded']}"]
        return "; ".join(str(n) for n in said if n)

    print_table(
        f"{name}: {cron} ({zone})",
        (zone, "UTC", "note"),
        [(str(row["local"]), str(row["utc"]), note(row)) for row in rows],
    )


# ------------------------------------------------------------------------- pause / resume


PAUSE_ALL = "/_voltro/inspect/pause-all"
RESUME_ALL = "/_voltro/inspect/resume-all"
AllOpt = Annotated[
    bool,
    typer.Option("--all", help="Every schedule at once (a maintenance window), instead of NAME."),
]


def _one_or_all(name: str | None, every: bool, verb: str) -> None:
    if (name is not None) != every:  # exactly one of them
        return
    raise typer.BadParameter(
        f"give NAME or --all, not both — `voltro schedule {verb} NAME` for one schedule, "
        f"`voltro schedule {verb} --all` for every schedule",
        param_hint="NAME / --all",
    )


@schedule_app.command("pause")
def pause_command(
    name: Annotated[str | None, typer.Argument(help="The schedule (or --all).")] = None,
    every: AllOpt = False,
    until: Annotated[
        str | None,
        typer.Option(
            "--until",
            help="With --all: resume by itself after this ISO-8601 instant (with a zone); "
            "without it, until `resume --all`.",
        ),
    ] = None,
    reason: Annotated[str | None, typer.Option("--reason", help="Why (shown in listings).")] = None,
    app: AppOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
    retry_for: RetryOpt = DEFAULT_RETRY_FOR,
) -> None:
    """Pause NAME (or --all: every schedule) on every replica: nothing fires or is recorded
    until resumed (or, with --all --until, until that instant)."""
    _one_or_all(name, every, "pause")
    if until is not None and not every:
        raise typer.BadParameter("--until goes with --all", param_hint="--until")

    async def go() -> Any:
        async with connect(app, url, token, retry_for) as api:
            if every:
                body: dict[str, Any] = {"reason": reason}
                if until is not None:
                    body["until"] = until
                return await api.call("POST", PAUSE_ALL, json=body)
            assert name is not None
            return await api.call(
                "POST", f"{INSPECT}/{quote(name, safe='')}/pause", json={"reason": reason}
            )

    body = _run(go())
    if as_json:
        _print_json(body)
        return
    pause = body["pause"]
    state = "paused" if body["changed"] else "already paused"
    who = "every schedule" if every else name
    ends = ""
    if every:
        ends = f", until {pause['until']}" if pause.get("until") else ", until resumed"
    typer.echo(f"{who}: {state} since {pause['pausedAt']} by {pause['pausedBy']}{ends}")


@schedule_app.command("resume")
def resume_command(
    name: Annotated[str | None, typer.Argument(help="The schedule (or --all).")] = None,
    every: AllOpt = False,
    app: AppOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
    retry_for: RetryOpt = DEFAULT_RETRY_FOR,
) -> None:
    """Resume NAME (or --all: end the fleet-wide pause) from the next occurrence (the paused
    span is not caught up; with --all, schedules paused on their own stay paused)."""
    _one_or_all(name, every, "resume")

    async def go() -> Any:
        async with connect(app, url, token, retry_for) as api:
            if every:
                return await api.call("POST", RESUME_ALL)
            assert name is not None
            return await api.call("POST", f"{INSPECT}/{quote(name, safe='')}/resume")

    body = _run(go())
    if as_json:
        _print_json(body)
        return
    who = "every schedule" if every else name
    typer.echo(f"{who}: resumed" if body["changed"] else f"{who}: was not paused")
