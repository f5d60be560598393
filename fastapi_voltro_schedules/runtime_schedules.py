"""Schedules written at run time (SPEC §7): the rules, apart from the writes.

A run-time schedule is data — name, cron, zone, the name of a handler (``define_handler``),
JSON ``args``, overlap, backfill, watchdog bound — stored as a version in
``_voltro_schedule_definitions`` with ``source="runtime"``. Once built it is a
:class:`~.definition.Schedule` like any declared one, fired through the same timer, door,
claims, overlap rules, pauses, ledger and metrics. This module decides, purely:

* whether a write is acceptable (:func:`build_runtime_schedule`: every field checked, each
  refusal an :class:`~.errors.InvalidScheduleError` naming the field and the fix);
* which schedule a stored version stands for (:func:`schedule_from_record`);
* what a version read or written means for a running scheduler (:func:`plan_change`): arm a
  new schedule, re-arm an edited one, disarm a deleted one, or nothing.

The writes and the engine's side are :mod:`.catalog`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from .cron import CronSpec
from .definition import DEFAULT_MAX_RUNTIME_MS, NAME_RE, Schedule, define_schedule
from .enums import BackfillPolicy, OverlapPolicy, RecordPolicy, TriggerMode
from .errors import InvalidCronError, InvalidScheduleError, ScheduleDefinitionError, shown
from .exclusions import ExcludeError, Exclusions, exclusions_from_json, parse_exclude
from .handlers import NamedHandler
from .records import DefinitionRecord
from .retries import RetryPolicy
from .zones import zone_problem

__all__ = [
    "MAX_ARGS_BYTES",
    "MAX_RUNTIME_MS_CEILING",
    "RUNTIME_SOURCE",
    "Change",
    "ChangeKind",
    "audited_runtime",
    "build_runtime_schedule",
    "canonical_args",
    "plan_change",
    "record_retry",
    "retry_policy",
    "schedule_from_record",
]

MAX_ARGS_BYTES = 16 * 1024
"""The largest ``args`` a run-time schedule may carry, as compact JSON in UTF-8 (16 KiB).
Args are parameters (a tenant id, a report's options), not payloads: every replica holds every
schedule's args in memory, and a firing copies them into its context."""
RUNTIME_SOURCE = "runtime"
"""``source`` of a version written at run time (declared ones: ``code``)."""


MAX_RUNTIME_MS_CEILING = 366 * 24 * 3600 * 1000
"""The largest ``max_runtime_ms`` a run-time schedule takes (a year and a day): a watchdog
bound past it is no bound, and ``timedelta`` overflows not much further on."""


def _refuse(name: object, field: str, why: str) -> InvalidScheduleError:
    return InvalidScheduleError(f'put_schedule("{shown(name)}"): {field} — {why}', field=field)


def canonical_args(name: str, args: object) -> tuple[dict[str, Any], str]:
    """``args`` as every replica will read them back (``None``: ``{}``), and as stored: compact
    JSON with sorted keys. Refused unless a JSON object within :data:`MAX_ARGS_BYTES`."""
    if args is None:
        return {}, "{}"
    if not isinstance(args, Mapping):
        raise _refuse(
            name,
            "args",
            f"{shown(args, 60)} is not a JSON object — pass an object such as "
            '{"tenant": "acme"} (or omit args)',
        )
    try:
        text = json.dumps(
            _plain(args), sort_keys=True, separators=(",", ":"), allow_nan=False, ensure_ascii=False
        )
    except (TypeError, ValueError, RecursionError) as exc:
        raise _refuse(
            name,
            "args",
            f"not JSON ({shown(str(exc), 120)}) — use strings, numbers, booleans, null, lists "
            "and objects with string keys only",
        ) from None
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_ARGS_BYTES:
        raise _refuse(
            name,
            "args",
            f"{size:,} bytes of JSON is over the {MAX_ARGS_BYTES:,}-byte limit — keep "
            "parameters in args (ids, options) and the data they point to in your own tables",
        )
    if "\x00" in text or _has_lone_surrogate(text):
        raise _refuse(name, "args", "holds a NUL or a lone surrogate, which no store can keep")
    return json.loads(text), text


def _plain(value: object) -> object:
    """``value`` checked to be JSON as it would read back: object keys must be strings
    (``json.dumps`` would turn ``{1: …}`` into ``{"1": …}``, and the firing would see other
    args than the caller wrote)."""
    if isinstance(value, Mapping):
        for key in value:
            if not isinstance(key, str):
                raise TypeError(f"object key {key!r} is not a string")
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{value!r} is not a JSON number")
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def _has_lone_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _choice(name: str, field: str, value: object, enum: type[StrEnum]) -> Any:
    try:
        return enum(value)  # type: ignore[arg-type]
    except ValueError:
        allowed = " | ".join(f'"{m.value}"' for m in enum)
        raise _refuse(name, field, f"{shown(value, 40)} is not one of {allowed}") from None


def build_runtime_schedule(
    name: object,
    *,
    cron: object,
    timezone: object,
    handler: object,
    handlers: Mapping[str, NamedHandler],
    args: object = None,
    on_overlap: object = OverlapPolicy.SKIP,
    backfill: object = BackfillPolicy.SKIP,
    max_runtime_ms: object = None,
    retry: object = None,
    exclude: object = None,
    record: object = None,
) -> Schedule:
    """The :class:`Schedule` a ``put_schedule`` call describes, every field checked first:
    :class:`InvalidScheduleError` names the first bad field (``name``, ``cron``,
    ``timezone``, ``handler``, ``args``, ``on_overlap``, ``backfill``, ``max_runtime_ms``,
    ``retry``, ``exclude``/``exclude[i]``, ``record``). ``retry`` ``None``: the handler's own policy
    (``define_handler(retry=...)``). ``exclude``: what :func:`.exclusions.parse_exclude`
    reads, as data only (dates, holidays specs or ``holidays`` calendars) — a run-time
    schedule is rebuilt from its stored version on every replica."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise _refuse(
            name,
            "name",
            'use 1–200 letters, digits, "_", "-", "." or ":", starting with a letter or digit '
            '(e.g. "report.acme"); it is the claim key and a URL segment',
        )
    problem = zone_problem(timezone)
    if problem is not None:
        raise _refuse(name, "timezone", problem)
    assert isinstance(timezone, str)
    if not isinstance(cron, str) or not cron.strip():
        raise _refuse(
            name,
            "cron",
            f"{shown(cron, 60)} is not a cron expression — pass five fields such as "
            '"0 9 * * *" or six with leading seconds',
        )
    try:
        CronSpec.parse(cron, timezone)
    except InvalidCronError as exc:
        raise _refuse(name, "cron", str(exc)) from None
    if not isinstance(handler, str) or handler not in handlers:
        known = ", ".join(sorted(handlers)[:20]) or "none registered"
        raise _refuse(
            name,
            "handler",
            f"{shown(handler, 60)} is not a registered handler (known: {known}) — register "
            "it with @define_handler(name=...) in a *_cron module or Scheduling(handlers=...)",
        )
    values, _ = canonical_args(name, args)
    overlap = _choice(name, "on_overlap", on_overlap, OverlapPolicy)
    policy = _choice(name, "backfill", backfill, BackfillPolicy)
    if max_runtime_ms is None:
        max_runtime_ms = DEFAULT_MAX_RUNTIME_MS
    if (
        isinstance(max_runtime_ms, bool)
        or not isinstance(max_runtime_ms, int)
        or not 0 < max_runtime_ms <= MAX_RUNTIME_MS_CEILING
    ):
        raise _refuse(
            name,
            "max_runtime_ms",
            f"{shown(max_runtime_ms, 40)} must be a positive number of milliseconds, at most "
            f"{MAX_RUNTIME_MS_CEILING:_} (default {DEFAULT_MAX_RUNTIME_MS:_} = 30 min)",
        )
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise _refuse(
            name,
            "retry",
            f"{shown(retry, 60)} is not a RetryPolicy — pass RetryPolicy(attempts=3, "
            "backoff_ms=1000, max_backoff_ms=60000) or omit it",
        )
    exclusions = runtime_exclude(name, exclude)
    recording = _choice(
        name, "record", RecordPolicy.ALL if record is None else record, RecordPolicy
    )
    named = handlers[handler]
    schedule = define_schedule(
        name=name,
        cron=cron,
        timezone=timezone,
        handler=named.fn,
        trigger=TriggerMode.SELF,
        on_overlap=overlap,
        backfill=policy,
        max_runtime_ms=max_runtime_ms,
        retry=retry if retry is not None else named.retry,
        exclude=exclusions,
        record=recording,
    )
    return replace(
        schedule, args=values, source=RUNTIME_SOURCE, handler_ref=named.name, module=named.module
    )


def runtime_exclude(name: str, value: object) -> Exclusions | None:
    """``exclude`` read for a run-time schedule: data only (refused naming the item)."""
    if isinstance(value, Exclusions):
        exclusions: Exclusions | None = value
    else:
        try:
            exclusions = parse_exclude(value)
        except ExcludeError as exc:
            raise _refuse(name, exc.path, str(exc)) from None
    if exclusions is not None and not exclusions.storable:
        raise _refuse(
            name,
            "exclude",
            "a run-time schedule is data, stored and rebuilt on every replica: exclude dates, "
            'ISO date strings, holidays specs such as {"country": "DE", "subdiv": "BY"} or '
            "holidays.country_holidays(...) calendars — not a calendar object of your own",
        )
    return exclusions


def retry_policy(name: str, value: object) -> RetryPolicy | None:
    """The :class:`RetryPolicy` a wire ``retry`` object describes (``None``: none given) —
    ``{"attempts", "backoffMs", "maxBackoffMs"}`` (the last two optional); refused with the
    field named (``retry.attempts``, …)."""
    if value is None or isinstance(value, RetryPolicy):
        return value
    if not isinstance(value, Mapping):
        raise _refuse(
            name,
            "retry",
            f"{shown(value, 60)} is not an object — pass "
            '{"attempts": 3, "backoffMs": 1000, "maxBackoffMs": 60000}',
        )
    wire = {"attempts": "attempts", "backoffMs": "backoff_ms", "maxBackoffMs": "max_backoff_ms"}
    unknown = sorted(set(value) - set(wire))
    if unknown:
        raise _refuse(
            name, f"retry.{unknown[0]}", f"is not a retry field (known: {', '.join(wire)})"
        )
    if "attempts" not in value:
        raise _refuse(name, "retry.attempts", "is required — how many attempts a slot may take")
    # JSON Schema's integer is a number with no fraction: 3.0 is one (as the schema says)
    fields = {
        wire[key]: int(item) if isinstance(item, float) and item.is_integer() else item
        for key, item in value.items()
    }
    try:
        return RetryPolicy(**fields)
    except ScheduleDefinitionError as exc:
        said = str(exc)
        field = next((k for k, v in wire.items() if said.startswith(f"RetryPolicy: {v}=")), "")
        raise _refuse(name, f"retry.{field}", str(exc).removeprefix("RetryPolicy: ")) from None


def record_retry(record: DefinitionRecord) -> RetryPolicy | None:
    """The retry policy a stored version holds (``None``: none)."""
    if record.retry_attempts is None:
        return None
    return RetryPolicy(
        attempts=record.retry_attempts,
        backoff_ms=record.retry_backoff_ms if record.retry_backoff_ms is not None else 1000,
        max_backoff_ms=(
            record.retry_max_backoff_ms if record.retry_max_backoff_ms is not None else 60_000
        ),
    )


def schedule_from_record(
    record: DefinitionRecord, handlers: Mapping[str, NamedHandler]
) -> Schedule:
    """The schedule a stored run-time version stands for (checked as a write is: a version
    another deployment wrote may name a handler this one lacks — :class:`InvalidScheduleError`
    with ``field="handler"``)."""
    return build_runtime_schedule(
        record.name,
        cron=record.cron,
        timezone=record.timezone,
        handler=record.handler,
        handlers=handlers,
        args=json.loads(record.args or "{}"),
        on_overlap=record.on_overlap,
        backfill=record.backfill,
        max_runtime_ms=record.max_runtime_ms,
        retry=record_retry(record),
        exclude=exclusions_from_json(record.exclude),
        record=record.record,
    )


class ChangeKind(StrEnum):
    """What a run-time version means for a running scheduler."""

    ADD = "add"
    """A schedule this scheduler does not run yet: arm it from the version's
    ``effective_from`` (nothing before it is owed)."""
    REPLACE = "replace"
    """An edit of a schedule it runs: re-arm it with the new definition from the version's
    ``effective_from`` (slots the previous version accounted for are not fired again)."""
    REMOVE = "remove"
    """A deletion (a tombstone), or a version whose handler this deployment lacks: disarm it
    (a run in flight finishes; nothing new fires)."""
    NOTHING = "nothing"
    """Not this scheduler's to act on: a declared schedule's version, or a deletion of a
    schedule it does not run."""


@dataclass(frozen=True, slots=True)
class Change:
    kind: ChangeKind
    record: DefinitionRecord
    schedule: Schedule | None = None
    """The schedule to arm (:attr:`ChangeKind.ADD`/:attr:`ChangeKind.REPLACE`)."""
    problem: InvalidScheduleError | None = None
    """Why a version could not be built here (its handler is not registered in this
    deployment): :attr:`ChangeKind.REMOVE`, to be logged."""


def plan_change(
    record: DefinitionRecord,
    *,
    running: bool,
    declared: bool,
    handlers: Mapping[str, NamedHandler],
) -> Change:
    """What ``record`` (a new newest version of its schedule) means here. ``running``: this
    scheduler runs a run-time schedule of that name; ``declared``: the app declares it in
    code (code wins: run-time versions of its name are not this scheduler's)."""
    if declared:
        return Change(ChangeKind.NOTHING, record)
    if record.source != RUNTIME_SOURCE or record.deleted:
        # a tombstone, or the name taken over by another deployment's code: no longer ours
        return Change(ChangeKind.REMOVE if running else ChangeKind.NOTHING, record)
    try:
        schedule = schedule_from_record(record, handlers)
    except InvalidScheduleError as problem:
        kind = ChangeKind.REMOVE if running else ChangeKind.NOTHING
        return Change(kind, record, problem=problem)
    return Change(ChangeKind.REPLACE if running else ChangeKind.ADD, record, schedule)


def audited_runtime(
    known: Mapping[str, list[DefinitionRecord]], declared: set[str]
) -> list[Schedule]:
    """The run-time schedules the audit checks for gaps, from the versions table alone (their
    definitions are data: no app is needed to know what they owe) — each name not declared
    whose newest version is a run-time one, deleted ones included (their slots before the
    deletion are owed). Built without a handler: the audit only walks their slots."""
    found: list[Schedule] = []
    for name, versions in sorted(known.items()):
        if name in declared or not versions or versions[0].source != RUNTIME_SOURCE:
            continue
        shape = next((v for v in versions if not v.deleted), versions[0])
        spec = CronSpec.parse(shape.cron, shape.timezone)
        found.append(
            Schedule(
                name=name,
                cron=shape.cron,
                timezone=shape.timezone,
                spec=spec,
                trigger=TriggerMode.SELF,
                source=RUNTIME_SOURCE,
                handler_ref=shape.handler,
            )
        )
    return found
