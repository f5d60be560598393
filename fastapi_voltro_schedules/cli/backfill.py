"""``voltro schedule backfill``: a range backfill over HTTP (``--url``) or in this process
(``--app``)."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import quote

import httpx
import typer

from .. import devtokens
from ..backfill import RangeSummary, parse_range
from ..clock import iso_z
from ..enums import Reprocess
from ..errors import BackfillRequestError
from ..migrations import redact_url
from .common import CliError, _scrub, find_scheduling, schedule_app
from .retry import DEFAULT_RETRY_FOR, RetryOpt, refused, retry_delays, retrying, unreachable
from .serve import validate_app_spec

if TYPE_CHECKING:
    from ..scheduling import Scheduling

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

REPROCESS_CHOICES = tuple(r.value for r in Reprocess)

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
    "--reprocess says which slots that already have an outcome run again: none (the "
    "default: only slots with nothing recorded run), failed (also failed and missed ones), "
    "all (every slot). A slot run again gets a new manual row; its earlier rows stay. "
    "--dry-run lists each slot with its current status and what would happen, and writes "
    "nothing (exit 0).\n\n"
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

    def begin(self, count: int, already_succeeded: int, to_run: int, reprocess: str) -> None:
        self.count = to_run
        again = "they run again" if reprocess == "all" else "not run again"
        _say(
            f'"{self.name}" — {count:,} occurrence{"" if count == 1 else "s"} in '
            f"({self.start}, {self.end}], {already_succeeded:,} already succeeded ({again}); "
            f"reprocess={reprocess}: firing {to_run:,} in order"
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
            self._task = self._bar.add_task(self.name, total=to_run, succeeded=0, failed=0)

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

    def finish(
        self, fired: int, succeeded: int, failed: int, already_succeeded: int, taken: int = 0
    ) -> int:
        self.close()
        typer.echo(
            f'voltro schedule backfill: "{self.name}" fired={fired} succeeded={succeeded} '
            f"failed={failed} (alreadySucceeded={already_succeeded})"
        )
        if taken:
            _say(
                f"{taken} slot{'' if taken == 1 else 's'} ran elsewhere first (another backfill "
                "or the schedule's own firing won the claim): not run again here"
            )
        if failed:
            _say(
                f"{failed} of {fired} slots failed (see the trigger=manual runs in "
                "_voltro_schedule_runs or the dashboard)"
            )
            return EXIT_SLOTS_FAILED
        return EXIT_OK


def _ask(
    name: str, start: str, end: str, count: int, already_succeeded: int, reprocess: str
) -> bool:
    """On a terminal, show the count and ask; ``False`` when declined or not a terminal."""
    if not _interactive():
        return False
    again = "would run again" if reprocess == "all" else "are not run again"
    return typer.confirm(
        f'"{name}" has {count:,} occurrences in ({start}, {end}] ({already_succeeded:,} of '
        f"them already succeeded and {again}; reprocess={reprocess}). Fire them?",
        default=False,
        err=True,
    )


def _print_dry_run(answer: dict[str, Any]) -> int:
    """A dry run's answer (the route's JSON) as a table on stdout; exit 0."""
    typer.echo(
        f'"{answer["name"]}" ({answer["from"]}, {answer["to"]}] reprocess={answer["reprocess"]}:'
        f" {answer['count']} occurrences, {answer['toRun']} would run, {answer['kept']} kept"
        f" (alreadySucceeded={answer['alreadySucceeded']}) — dry run, nothing fired"
    )
    for slot in answer["slots"]:
        status = slot["status"] or "-"
        rows = f"  rows={slot['rows']}" if slot["rows"] > 1 else ""
        typer.echo(f"{slot['scheduledAt']}  {status:<9}  {slot['action']}{rows}")
    return EXIT_OK


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
                reporter.begin(
                    int(event["count"]),
                    int(event["alreadySucceeded"]),
                    int(event.get("toRun", event["count"])),
                    str(event.get("reprocess", "none")),
                )
                started = True
            if kind == "progress":
                reporter.update(int(event["fired"]), int(event["succeeded"]), int(event["failed"]))
            elif kind == "summary":
                return reporter.finish(
                    int(event["fired"]),
                    int(event["succeeded"]),
                    int(event["failed"]),
                    int(event["alreadySucceeded"]),
                    int(event.get("taken", 0)),
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
    reprocess: str = "none",
    dry_run: bool = False,
    retry_for: float = DEFAULT_RETRY_FOR,
) -> int:
    endpoint = f"{url.rstrip('/')}/_voltro/inspect/schedules/{quote(name, safe='')}/backfill"
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    reporter = _Reporter(name, start, end)
    confirm = yes
    base = url.rstrip("/")
    delays, attempt = retry_delays(retry_for), 0
    # The read timeout is off: one line arrives per slot, and a slot takes the handler's time.
    with httpx.Client(timeout=httpx.Timeout(30.0, read=None)) as client:
        while True:
            body: dict[str, Any] = {"from": start, "to": end, "confirm": confirm}
            if limit is not None:
                body["limit"] = limit
            body["reprocess"] = reprocess
            if dry_run:
                body["dryRun"] = True
            try:
                with client.stream("POST", endpoint, json=body, headers=headers) as response:
                    if response.status_code == 200 and dry_run:
                        response.read()
                        return _print_dry_run(response.json())
                    if response.status_code == 200:
                        return _consume(response, reporter)
                    response.read()
            except httpx.ConnectError as exc:
                # Refused: the request never reached the app (see .retry), so it is sent again.
                if not refused(exc) or attempt == len(delays):
                    _say(unreachable(base, exc, attempt + 1, retry_for))
                    return EXIT_ERROR
                if attempt == 0:
                    _say(retrying(base, retry_for))
                time.sleep(delays[attempt])
                attempt += 1
                continue
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
                if not _ask(name, start, end, count, already, reprocess):
                    return _declined()
                confirm = True
                continue
            _say(detail)
            return _http_exit(response.status_code, error)


# -- in this process, against the app's database ---------------------------------------------


async def _direct_backfill(
    scheduling: Scheduling,
    target: Any,
    name: str,
    start: str,
    end: str,
    *,
    yes: bool,
    limit: int | None,
    reprocess: str = "none",
    dry_run: bool = False,
) -> int:
    from fastapi import FastAPI

    from ..api.inspect import dry_run_answer
    from ..errors import (
        BackfillRefusedError,
        BackfillRequestError,
        ScheduleNotFoundError,
        VoltroError,
    )

    reporter = _Reporter(name, start, end)
    try:
        async with scheduling.run(target if isinstance(target, FastAPI) else None, arm=False):
            options: dict[str, Any] = {"limit": limit, "reprocess": reprocess}
            try:
                plan = await scheduling.plan_backfill(
                    name, start, end, confirm=yes, dry_run=dry_run, **options
                )
            except BackfillRefusedError as refusal:
                if refusal.reason != "needs-confirmation" or not _interactive():
                    raise
                count, already = refusal.count or 0, refusal.already_succeeded or 0
                if not _ask(name, start, end, count, already, reprocess):
                    return _declined()
                plan = await scheduling.plan_backfill(name, start, end, confirm=True, **options)
            if plan.dry_run:
                return _print_dry_run(dry_run_answer(plan))
            reporter.begin(plan.count, plan.already_succeeded, plan.to_run, plan.reprocess.value)
            slots = [state.slot for state in plan.firing]

            def progress(summary: RangeSummary) -> None:
                index = summary.fired + summary.taken - 1
                slot = iso_z(slots[index]) if 0 <= index < len(slots) else None
                reporter.update(summary.fired, summary.succeeded, summary.failed, slot)

            # The plan shown is the plan fired, as the HTTP route does: not planned again.
            summary = await scheduling.run_backfill(plan, progress=progress)
            return reporter.finish(
                summary.fired,
                summary.succeeded,
                summary.failed,
                summary.already_succeeded,
                summary.taken,
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
    reprocess: Annotated[
        str,
        typer.Option(
            "--reprocess",
            help="Which slots that already have an outcome run again: none (only slots with "
            "nothing recorded), failed (also failed and missed ones), all (every slot).",
        ),
    ] = "none",
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="List each slot with its current status and what would happen; fire and "
            "write nothing.",
        ),
    ] = False,
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
    retry_for: RetryOpt = DEFAULT_RETRY_FOR,
) -> None:
    """``voltro schedule backfill`` (help text: :data:`BACKFILL_HELP`)."""
    if reprocess not in REPROCESS_CHOICES:
        _say(
            f"--reprocess {reprocess!r} is not one of {', '.join(REPROCESS_CHOICES)} — none "
            "runs only the slots with nothing recorded, failed also re-runs failed and missed "
            "ones, all re-runs every slot"
        )
        raise typer.Exit(code=EXIT_BAD_INPUT)
    options: dict[str, Any] = {"yes": yes, "limit": limit, "reprocess": reprocess}
    if url:
        # Checked here, not left to the server: over HTTP a range holding no instant answers an
        # empty summary (a client may well ask for one); typed by a person, it is a mistake.
        try:
            parse_range(start, end)
        except BackfillRequestError as exc:
            _say(str(exc))
            raise typer.Exit(code=EXIT_BAD_INPUT) from None
        code = _http_backfill(
            url, token, name, start, end, dry_run=dry_run, retry_for=retry_for, **options
        )
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
            _direct_backfill(scheduling, target, name, start, end, dry_run=dry_run, **options)
        )
    except Exception as exc:
        _say(
            f"failed on {redact_url(database)}: {_scrub(f'{type(exc).__name__}: {exc}', database)}"
        )
        raise typer.Exit(code=EXIT_ERROR) from None
    raise typer.Exit(code=code)
