"""The inspect API's wire shapes: every answer and body as a named model, and the parsing of
what a client sends back (the runs cursor, the status filter, the backfill body).

Kept apart from the routes: a change here is a change to the published OpenAPI and to the
dashboard's client, and should read as one. The class names are the schema names — renaming
one is an API change.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    ValidationError,
    WithJsonSchema,
    field_validator,
)
from pydantic.alias_generators import to_camel

from ..backfill import HARD_CEILING, from_iso
from ..clock import iso_z
from ..definition import NAME_RE
from ..enums import BackfillPolicy, OverlapPolicy, RecordPolicy, RunStatus
from ..errors import BackfillRequestError, InvalidQueryError, InvalidScheduleError, shown
from ..pauses import MAX_REASON_LENGTH
from ..records import ALL_SCHEDULES, DefinitionRecord, PauseRecord, RollupRecord, RunRecord
from ..retries import RetryPolicy
from ..runtime_schedules import MAX_RUNTIME_MS_CEILING
from ..zones import iana_zone_names
from .edge import StorableText
from .trigger import RunView, within_range


class InspectRunView(RunView):
    """One run with everything the dashboard shows."""

    trigger: str
    coordination_outcome: str
    replica_id: str
    heartbeat_at: str | None
    duration_ms: int | None
    attempt: int = Field(
        default=1,
        description="Which attempt of the slot the row is on (1; more when a RetryPolicy "
        "retried it within its slot — one row per slot whatever its attempts).",
    )
    retry_at: str | None = Field(
        default=None,
        description="While a running row waits between two attempts: when the next is due "
        "(the last attempt's error is in errorTag/error).",
    )
    job_id: str | None = Field(
        default=None,
        description="The job a hand-off gave this firing to (Celery task id, arq job id, "
        "procrastinate job id); null when the firing ran in process. See docs/handoff.md.",
    )
    job_tracking: str | None = Field(
        default=None,
        description="followed: the status is the job's; handed-off: succeeded means the job "
        "was enqueued, nothing more; null without a job.",
    )

    @classmethod
    def of(cls, run: RunRecord) -> InspectRunView:
        duration = (
            None
            if run.fired_at is None or run.finished_at is None
            else int((run.finished_at - run.fired_at).total_seconds() * 1000)
        )
        # RunView's fields as keywords: building a RunView to dump it and build this one
        # again was a third of a listing page's views (200 of them on a page of 100)
        return cls(
            **RunView.fields_of(run),
            trigger=run.trigger.value,
            coordination_outcome=run.coordination_outcome.value,
            replica_id=run.replica_id,
            heartbeat_at=None if run.heartbeat_at is None else iso_z(run.heartbeat_at),
            duration_ms=duration,
            attempt=run.attempt,
            retry_at=None if run.retry_at is None else iso_z(run.retry_at),
            job_id=run.job_id,
            job_tracking=run.job_tracking,
        )


def _integral(value: object) -> object:
    """``5.0`` is the integer 5 in JSON Schema (and in the JSON a client library writes)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


_Limit = Annotated[
    int,
    BeforeValidator(_integral),
    WithJsonSchema({"type": "integer", "minimum": 1, "maximum": HARD_CEILING}),
]
"""A range's ``limit``: the bounds are published here and checked by the planner
(``backfill.check_limit``), whose refusal names the ceiling."""


class BackfillRequest(BaseModel):
    """``POST /_voltro/inspect/schedules/{name}/backfill``."""

    # strict: `"confirm": 0` or `"limit": "5"` is not what the schema says, and is refused
    # rather than read as false or 5.
    model_config = ConfigDict(populate_by_name=True, extra="forbid", strict=True)

    start: str = Field(
        alias="from",
        description="ISO-8601 instant with a zone; exclusive.",
        json_schema_extra={"format": "date-time"},
    )
    end: str = Field(
        alias="to",
        description="ISO-8601 instant with a zone; inclusive.",
        json_schema_extra={"format": "date-time"},
    )
    confirm: bool = Field(default=False, description="Required above 25 slots to run.")
    limit: _Limit | None = Field(default=None, description=f"Default 1000; at most {HARD_CEILING}.")
    reprocess: Literal["none", "failed", "all"] = Field(
        default="none",
        description="Which slots that already have an outcome run again: none (only slots "
        "with nothing recorded run), failed (also failed and missed ones), all (every slot).",
    )
    dry_run: bool = Field(
        default=False,
        alias="dryRun",
        description="List each slot with its current status and what would happen; fire "
        "nothing, write nothing (answers one JSON object, not a stream).",
    )


class _Camel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class PauseRequest(BaseModel):
    """``POST /_voltro/inspect/schedules/{name}/pause`` (the body is optional)."""

    model_config = ConfigDict(extra="forbid")

    reason: StorableText | None = Field(
        default=None,
        max_length=MAX_REASON_LENGTH,
        description="Why, for the listing and the dashboard (e.g. a ticket). Any text but a "
        "NUL (U+0000), which no store holds.",
        json_schema_extra={"pattern": "^[^\\u0000]*$"},
    )


class PauseAllRequest(BaseModel):
    """``POST /_voltro/inspect/pause-all`` (the body is optional)."""

    model_config = ConfigDict(extra="forbid")

    reason: StorableText | None = Field(
        default=None,
        max_length=MAX_REASON_LENGTH,
        description="Why, for the listing and the dashboard's banner (e.g. a ticket).",
    )
    until: str | None = Field(
        default=None,
        description="ISO-8601 instant with a zone, after now: every schedule resumes by itself "
        "after it (a slot at exactly `until` is inside the window). Omitted: until resumed.",
        json_schema_extra={"format": "date-time"},
    )


class PauseView(_Camel):
    """Who paused a schedule, when and why."""

    paused_at: str
    paused_by: str = Field(description="The role of the token that paused it (operator).")
    reason: str | None
    every_schedule: bool = Field(
        default=False,
        description="True: the fleet-wide pause holds it (every schedule paused at once).",
    )
    until: str | None = Field(
        default=None,
        description="When the fleet-wide pause resumes by itself (null: until resumed).",
    )

    @classmethod
    def of(cls, record: PauseRecord) -> PauseView:
        return cls(
            paused_at=iso_z(record.paused_at),
            paused_by=record.paused_by,
            reason=record.reason,
            every_schedule=record.name == ALL_SCHEDULES,
            until=None if record.until is None else iso_z(record.until),
        )


class PauseAnswer(_Camel):
    """What pause and resume answer."""

    name: str
    paused: bool = Field(description="Whether the schedule is paused after this call.")
    changed: bool = Field(description="False when it already was in that state.")
    pause: PauseView | None = Field(description="The pause in force (null once resumed).")
    resumed_at: str | None = Field(description="When it was resumed (resume only).")


class RetryView(_Camel):
    """A schedule's ``RetryPolicy``: a failed run is retried within its slot."""

    attempts: int = Field(description="The most attempts of one slot, the first run included.")
    backoff_ms: int = Field(description="The wait before the first retry; it doubles after.")
    max_backoff_ms: int = Field(description="The cap of that wait.")

    @classmethod
    def of(cls, policy: RetryPolicy | None) -> RetryView | None:
        if policy is None:
            return None
        return cls(
            attempts=policy.attempts,
            backoff_ms=policy.backoff_ms,
            max_backoff_ms=policy.max_backoff_ms,
        )


class ScheduleView(_Camel):
    """One schedule as the listing shows it."""

    name: str
    cron: str
    timezone: str
    trigger: str = Field(description="self | external (the effective trigger)")
    on_overlap: str
    backfill: str
    max_runtime_ms: int
    description: str | None
    next_firing: str | None = Field(
        description="The next occurrence this replica's timer will fire (self) or the next "
        "occurrence the platform should call (external); null while paused."
    )
    last_run: InspectRunView | None = Field(description="The newest clock-driven run.")
    newest_run: InspectRunView | None = Field(
        description="The newest run of any trigger (a Run now or a range backfill included), "
        "by slot: the first row of its runs list. The dashboard's header shows it, so a failed "
        "Run now is seen.",
    )
    paused: bool
    pause: PauseView | None = Field(description="Who paused it, when and why (null if not).")
    source: str = Field(
        default="code", description="code (declared with define_schedule) | runtime"
    )
    handler: str | None = Field(
        default=None,
        description="A run-time schedule's handler (the define_handler name); null for a "
        "declared one.",
    )
    args: dict[str, Any] | None = Field(
        default=None,
        description="A run-time schedule's args (each firing's ctx.args); null for a declared "
        "one. With handler and the fields above, everything a PUT of it takes: an editor "
        "prefills its form from the listing.",
    )
    retry: RetryView | None = Field(
        default=None, description="How a failed run is retried within its slot (null: not)."
    )
    exclude: list[Any] | None = Field(
        default=None,
        description="The days it does not run (an excluded slot is recorded skipped): ISO "
        'dates and holidays specs {"country", "subdiv"?, "language"?}, as a PUT takes them; '
        '"calendar:<class>" for a declared schedule\'s own calendar object. Null: none.',
    )
    record: str = Field(
        default="all",
        description="all | failures — which runs keep a row: under failures a clock-driven "
        "success is counted in its hour's rollup (the detail's `rollups`) once a newer one "
        "replaces it.",
    )
    last_status: str | None = Field(
        default=None,
        description="The newest outcome: the status of its finished run with the newest slot "
        "(succeeded | failed | skipped | missed; null before its first). What the listing's "
        "`status` filter matches.",
    )


class VersionView(_Camel):
    """One version of a schedule's definition (``_voltro_schedule_definitions``)."""

    version: int
    cron: str
    timezone: str
    trigger: str
    on_overlap: str
    backfill: str
    handler: str = Field(description="module:qualname of the handler (or workflow:NAME).")
    effective_from: str = Field(
        description="When it took effect: the first boot (or write) that saw it. Slots of "
        "its cron before this instant are not owed by it."
    )
    source: str = Field(description="code | runtime")
    deleted: bool = Field(
        default=False,
        description="A run-time schedule's deletion (a tombstone): nothing is owed from "
        "effectiveFrom on, until it is written again.",
    )
    exclude: list[Any] | None = Field(
        default=None,
        description="The days this version does not run (ISO dates, holidays specs); null: "
        "none. A changed exclusion is a new version.",
    )
    record: str = Field(
        default="all", description="all | failures (a changed record policy is a new version)."
    )

    @classmethod
    def of(cls, record: DefinitionRecord) -> VersionView:
        return cls(
            version=record.version,
            cron=record.cron,
            timezone=record.timezone,
            trigger=record.trigger,
            on_overlap=record.on_overlap,
            backfill=record.backfill,
            handler=record.handler,
            effective_from=iso_z(record.effective_from),
            source=record.source,
            deleted=record.deleted,
            exclude=None if record.exclude is None else json.loads(record.exclude),
            record=record.record or RecordPolicy.ALL.value,
        )


class RollupView(_Camel):
    """One hour of a ``record="failures"`` schedule's successes without rows of their own."""

    hour: str = Field(description="The hour's first instant (UTC): slots in [hour, hour+1h).")
    succeeded: int
    total_ms: int = Field(description="Their summed run time (fired to finished), ms.")
    max_ms: int = Field(description="The longest of them, ms.")

    @classmethod
    def of(cls, record: RollupRecord) -> RollupView:
        return cls(
            hour=iso_z(record.hour),
            succeeded=record.succeeded,
            total_ms=record.total_ms,
            max_ms=record.max_ms,
        )


class ScheduleDetail(ScheduleView):
    """``GET /_voltro/inspect/schedules/{name}``: the schedule as the listing shows it, with
    its definition versions."""

    versions: list[VersionView] = Field(description="Newest first.")
    rollups: list[RollupView] = Field(
        default_factory=list,
        description="The successes counted per hour instead of recorded (record=failures), "
        "newest hour first, the last 48 hours; empty for a schedule recording all.",
    )


class ScheduleList(_Camel):
    """``GET /_voltro/inspect/schedules``."""

    coordination: str = Field(description="The effective coordination, shown once.")
    replica_id: str = Field(description="The replica that answered.")
    fires_here: bool = Field(
        description="Whether this process arms the timer (false on the non-firing workers of a "
        "shared SQLite file: they serve the routes, another process fires)."
    )
    now: str = Field(description="The answering replica's clock (for countdowns).")
    pause_all: PauseView | None = Field(
        default=None,
        description="The fleet-wide pause in force (every schedule paused at once: who, "
        "since, why, until), or null.",
    )
    schedules: list[ScheduleView]
    next_cursor: str | None = Field(
        default=None,
        description="Pass it back as `cursor` for the next page; null on the last page. A "
        "page may hold fewer than `limit` schedules (even none) and still have a next one: "
        "a filter that matches little examines a bounded number of schedules per page.",
    )


class PauseAllAnswer(_Camel):
    """What pause-all and resume-all answer."""

    paused: bool = Field(description="Whether every schedule is paused after this call.")
    changed: bool = Field(
        description="False when it already was in that state (pause-all: a window in force, "
        "whose `until` this call set)."
    )
    pause: PauseView | None = Field(description="The pause in force (null once resumed).")
    resumed_at: str | None = Field(description="When it was resumed (resume-all only).")


class RunPage(_Camel):
    """``GET /_voltro/inspect/schedules/runs``: newest first."""

    runs: list[InspectRunView]
    next_cursor: str | None = Field(
        description="Pass as `cursor` for the next (older) page; null on the last page."
    )


class FireAnswer(_Camel):
    """``POST /_voltro/inspect/schedules/{name}/fire``."""

    status: Literal["accepted"]
    run_id: str = Field(description="Poll the runs listing (or /_voltro/schedules/runs/{runId}).")
    scheduled_at: str = Field(description="The instant of the click.")


RESERVED_NAME = "runs"
"""``/_voltro/inspect/schedules/runs`` is the runs listing: ``PUT`` there is a 405, not a
schedule named ``runs`` (which could never be read back at its own URL)."""
NAME_PATTERN = f"^(?!{RESERVED_NAME}$){NAME_RE.pattern.removeprefix('^')}"
"""A run-time schedule's name (``definition.NAME_RE``, but the reserved one), as the PUT's path
parameter says."""


MAX_EXCLUDE_ITEMS = 1000
"""Items a PUT's ``exclude`` may hold (the body's 64 KiB holds them, at their longest); more
days are a job for a holidays calendar."""


class PutScheduleRequest(BaseModel):
    """``PUT /_voltro/inspect/schedules/{name}``: a run-time schedule's definition. The
    values are checked by the scheduler (``put_schedule``), which names the field it refuses;
    the schema says what it takes (the zones, the policies), and ``format: cron`` marks the
    expression whose grammar no JSON Schema holds (docs/configuration.md spells it)."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)

    cron: str = Field(
        description='Five fields ("0 9 * * *"), or six with leading seconds, or a macro '
        "(@daily…): numbers within each field's range, names (MON, JAN), ranges that do not "
        "run backwards, lists and steps.",
        json_schema_extra={"format": "cron", "minLength": 1, "maxLength": 1000},
    )
    timezone: str = Field(
        description='An IANA zone, e.g. "Europe/Berlin".',
        json_schema_extra={"enum": list[JsonValue](sorted(iana_zone_names()))},
    )
    handler: str = Field(
        description="The name of a handler registered with define_handler (the app's "
        "OpenAPI lists them as an enum once its scheduler booted)."
    )
    args: Any = Field(
        default=None,
        description="A JSON object handed to each firing as ctx.args (at most 16 KiB).",
        json_schema_extra={"anyOf": [{"type": "object"}, {"type": "null"}]},
    )
    on_overlap: str = Field(
        default="skip",
        description="skip | queue | parallel",
        json_schema_extra={"enum": [p.value for p in OverlapPolicy]},
    )
    backfill: str = Field(
        default="skip",
        description="skip | latest | all",
        json_schema_extra={"enum": [p.value for p in BackfillPolicy]},
    )
    record: str = Field(
        default="all",
        description="all | failures — failures keeps a row only for the runs that did not "
        "succeed; successes are counted per hour.",
        json_schema_extra={"enum": [p.value for p in RecordPolicy]},
    )
    max_runtime_ms: Any = Field(
        default=None,
        description="Watchdog bound in milliseconds (default 30 min).",
        json_schema_extra={
            "anyOf": [
                {"type": "integer", "minimum": 1, "maximum": MAX_RUNTIME_MS_CEILING},
                {"type": "null"},
            ]
        },
    )
    retry: Any = Field(
        default=None,
        description='Retries within the slot: {"attempts", "backoffMs"?, "maxBackoffMs"?} '
        "(default: the handler's own policy, else none).",
        json_schema_extra={
            "anyOf": [
                {
                    "type": "object",
                    "properties": {
                        "attempts": {"type": "integer", "minimum": 1, "maximum": 100},
                        "backoffMs": {"type": "integer", "minimum": 0, "maximum": 604_800_000},
                        "maxBackoffMs": {
                            "type": "integer",
                            "minimum": 0,
                            "maximum": 604_800_000,
                        },
                    },
                    "required": ["attempts"],
                    "additionalProperties": False,
                },
                {"type": "null"},
            ]
        },
    )

    exclude: Any = Field(
        default=None,
        description="Days it does not run — each slot on one is recorded skipped with the "
        'reason: ISO dates ("2026-12-24") and holidays specs {"country": "DE", "subdiv"?: '
        '"BY", "language"?: "de"} (the holidays package\'s public holidays).',
        json_schema_extra={
            "anyOf": [
                {
                    "type": "array",
                    "maxItems": MAX_EXCLUDE_ITEMS,
                    "items": {
                        "anyOf": [
                            {"type": "string", "format": "date"},
                            {
                                "type": "object",
                                # custom formats: which codes exist is the holidays
                                # package's to say (a subdivision depends on its country)
                                "properties": {
                                    "country": {"type": "string", "format": "holidays-country"},
                                    "subdiv": {"type": "string", "format": "holidays-subdiv"},
                                    "language": {"type": "string", "format": "holidays-language"},
                                },
                                "required": ["country"],
                                "additionalProperties": False,
                            },
                        ]
                    },
                },
                {"type": "null"},
            ]
        },
    )

    @field_validator("max_runtime_ms", mode="before")
    @classmethod
    def _integral(cls, value: Any) -> Any:
        # The schema says integer, which JSON Schema reads as a number with no fraction:
        # 262145.0 is one, and put_schedule (which takes only an int) would refuse it.
        if isinstance(value, float) and value.is_integer():
            return int(value)
        return value


def put_schedule_request(raw: bytes) -> PutScheduleRequest:
    """The PUT body, or :class:`InvalidScheduleError` (422) naming the first bad field."""
    try:
        return PutScheduleRequest.model_validate_json(raw or b"null")
    except ValidationError as exc:
        item = exc.errors()[0]
        where = ".".join(shown(str(p), 60) for p in item["loc"]) or "body"
        got = f" (got {shown(item['input'])})" if "input" in item and item["loc"] else ""
        raise InvalidScheduleError(
            f"invalid schedule — {where}: {shown(item['msg'], 200)}{got} — send a JSON object "
            '{"cron", "timezone", "handler", "args"?, "onOverlap"?, "backfill"?, '
            '"maxRuntimeMs"?, "retry"?, "exclude"?, "record"?}',
            field=where,
        ) from None


CURSOR_PATTERN = r"^(?:[0-9]{1,18}\.sr_[0-9a-f]{32})?$"
"""A runs cursor: ``<microseconds since 1970>.<run id>`` — the last row's ``(scheduled_at,
id)``, the keyset of the next page. Opaque to a client (pass ``nextCursor`` back unchanged),
but every text of this shape is a page: the schema says which texts are cursors, and the
route takes each of them."""
MAX_CURSOR_CHARS = 54
_CURSOR_RE = re.compile(CURSOR_PATTERN.replace("^", r"\A").replace("$", r"\Z"))
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def encode_cursor(run: RunRecord) -> str:
    """The cursor of the page after ``run`` (the last row of a page)."""
    micros = (run.scheduled_at - _EPOCH) // timedelta(microseconds=1)
    return f"{max(micros, 0)}.{run.id}"


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """The ``(scheduled_at, id)`` of a cursor, or :class:`InvalidQueryError` (422) for text
    of another shape. An instant past the ones the API names reads as that bound (nothing is
    scheduled after it), so no text of the shape overflows the store's keyset query."""
    if _CURSOR_RE.match(cursor) is None or not cursor:
        raise InvalidQueryError(
            "cursor is not a cursor this API hands out — pass the nextCursor of the previous "
            "page unchanged, or omit it for the newest page"
        )
    micros, _, run_id = cursor.partition(".")
    try:
        instant = within_range(_EPOCH + timedelta(microseconds=int(micros)))
    except OverflowError:
        instant = within_range(datetime.max.replace(tzinfo=UTC))
    return instant, run_id


STATUS_FILTER_PATTERN = "^[, ]*(?:(?:{0})(?: *,[, ]*(?:{0}))*)?[, ]*$".format(
    "|".join(s.value for s in RunStatus)
)
"""One ``status`` value: run statuses separated by commas (spaces around them allowed), or
empty (no filter)."""


def _instant(
    text: str, field: str, error: type[InvalidQueryError | BackfillRequestError]
) -> datetime:
    try:
        instant = from_iso(text)
    except ValueError:
        raise error(
            f"{field}={shown(text)!r} is not an ISO-8601 instant — write e.g. 2026-08-10T00:00:00Z"
        ) from None
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise error(
            f"{field}={shown(text)} has no zone — add one (2026-08-10T00:00:00Z or "
            "2026-08-10T02:00:00+02:00); an instant here is absolute, never server-local"
        )
    return within_range(instant)


def query_instant(text: str, field: str) -> datetime:
    """A query parameter's instant (``before``): ISO-8601 with a zone, held to the instants
    the API takes; :class:`InvalidQueryError` (422) naming the field otherwise."""
    return _instant(text, field, InvalidQueryError)


def range_instant(text: str, field: str) -> datetime:
    """A range backfill's ``from``/``to``, like :func:`query_instant` but refused as
    :class:`BackfillRequestError` (422 invalid_backfill)."""
    return _instant(text, field, BackfillRequestError)


LISTING_STATUS_PATTERN = "^[, ]*(?:(?:{0})(?: *,[, ]*(?:{0}))*)?[, ]*$".format(
    "|".join(s.value for s in RunStatus if s.terminal)
)
"""One ``status`` value of the schedules listing: outcomes separated by commas, or empty."""


def parse_outcomes(values: list[str] | None) -> frozenset[RunStatus] | None:
    """The schedules listing's ``status``: outcomes only (a schedule's newest finished run)."""
    wanted = parse_statuses(values)
    if wanted is None:
        return None
    live = [s.value for s in wanted if not s.terminal]
    if live:
        allowed = "|".join(s.value for s in RunStatus if s.terminal)
        raise InvalidQueryError(
            f"status={live[0]!r} is no outcome: the listing filters by each schedule's newest "
            f"finished run — use {allowed} (runs in flight: the runs listing's status filter)"
        )
    return frozenset(wanted)


def parse_statuses(values: list[str] | None) -> list[RunStatus] | None:
    """``status=queued&status=running`` or ``status=queued,running``."""
    if not values:
        return None
    wanted: list[RunStatus] = []
    for value in values:
        for part in value.split(","):
            part = part.strip()
            if not part:
                continue
            try:
                wanted.append(RunStatus(part))
            except ValueError:
                allowed = "|".join(s.value for s in RunStatus)
                shown = part if len(part) <= 40 else part[:40] + "…"
                raise InvalidQueryError(
                    f"status={shown!r} is not a run status — use {allowed} (repeat the "
                    "parameter or separate with commas)"
                ) from None
    return wanted or None


def backfill_request(raw: bytes) -> BackfillRequest:
    """The backfill body, or :class:`BackfillRequestError` (422) naming each bad field."""
    try:
        return BackfillRequest.model_validate_json(raw or b"null")
    except ValidationError as exc:
        problems = []
        for item in exc.errors()[:5]:
            where = ".".join(shown(str(p), 60) for p in item["loc"]) or "body"
            got = f" (got {shown(item['input'])})" if "input" in item else ""
            problems.append(f"{where}: {shown(item['msg'], 200)}{got}")
        raise BackfillRequestError(
            "invalid backfill request — " + "; ".join(problems) + " — send a JSON object "
            '{"from": ISO, "to": ISO, "confirm": bool, "limit": int, '
            '"reprocess": "none"|"failed"|"all", "dryRun": bool}'
        ) from None


__all__ = [
    "MAX_EXCLUDE_ITEMS",
    "NAME_PATTERN",
    "RESERVED_NAME",
    "BackfillRequest",
    "FireAnswer",
    "InspectRunView",
    "PauseAllAnswer",
    "PauseAllRequest",
    "PauseAnswer",
    "PauseRequest",
    "PauseView",
    "PutScheduleRequest",
    "RetryView",
    "RunPage",
    "ScheduleList",
    "ScheduleView",
    "backfill_request",
    "decode_cursor",
    "encode_cursor",
    "parse_statuses",
    "put_schedule_request",
    "query_instant",
    "range_instant",
]
