"""``define_schedule``: a schedule is validated completely when it is defined.

A typo must fail at import, in the boot log, naming the schedule, the field, the bad value and
the fix — never inside a timer loop that then silently never fires.
"""

from __future__ import annotations

import hashlib
import inspect
import re
import sys
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeAlias, cast, overload

import anyio

from .context import ScheduleContext
from .cron import CronSpec
from .enums import BackfillPolicy, OverlapPolicy, RecordPolicy, TriggerMode
from .errors import ConfigurationError, InvalidCronError, ScheduleDefinitionError
from .exclusions import ExcludeError, Exclusions, parse_exclude
from .retries import RetryPolicy
from .zones import zone_problem

Handler: TypeAlias = Callable[[ScheduleContext], Awaitable[None] | None]
PayloadFactory: TypeAlias = Callable[[ScheduleContext], Mapping[str, Any]]

DEFAULT_MAX_RUNTIME_MS = 1_800_000
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$")
"""A valid schedule (or handler) name: the claim key and a URL segment."""
_NAME_RE = NAME_RE


@dataclass(frozen=True, slots=True)
class WorkflowTarget:
    """A schedule whose only job is to start a durable workflow.

    ``payload`` builds the workflow's input from the firing (``ctx.scheduled_at`` is the slot),
    or is a fixed mapping; ``None`` sends ``{}``.
    """

    name: str
    payload: PayloadFactory | Mapping[str, Any] | None = None

    def build_payload(self, ctx: ScheduleContext) -> dict[str, Any]:
        """The payload for one firing."""
        if self.payload is None:
            return {}
        if callable(self.payload):
            return dict(self.payload(ctx))
        return dict(self.payload)


def is_async_callable(fn: object) -> bool:
    """Whether calling ``fn`` returns something to await: an ``async def``, or an object whose
    ``__call__`` is one."""
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - async callable objects
    ):
        return True
    # An object standing for the function it calls (a ``define_handler`` result handed to
    # ``define_schedule``) is as async as that function: else an ``async def`` would be called
    # in a worker thread, its coroutine awaited after the thread round trip. A decorated
    # *function* is judged by itself (a sync wrapper around an ``async def`` stays sync).
    wrapped = getattr(fn, "__wrapped__", None)
    return wrapped is not None and not inspect.isroutine(fn) and is_async_callable(wrapped)


@dataclass(frozen=True, slots=True, eq=False)
class Schedule:
    """A validated schedule definition. Build one with :func:`define_schedule`.

    Its time functions are the ones the engine, backfill and the external snap use — there is
    no second copy of the cron math.
    """

    name: str
    cron: str
    timezone: str
    spec: CronSpec = field(repr=False)
    handler: Handler | None = field(default=None, repr=False)
    workflow: WorkflowTarget | None = None
    trigger: TriggerMode | None = None
    on_overlap: OverlapPolicy = OverlapPolicy.SKIP
    backfill: BackfillPolicy = BackfillPolicy.SKIP
    max_runtime_ms: int = DEFAULT_MAX_RUNTIME_MS
    description: str | None = None
    module: str | None = None
    """The module that defined it (for error messages)."""
    jitter_ms: int = 0
    """Spread a herd's start: each slot fires up to this many ms after its cron instant."""
    fallback: TriggerMode | None = None
    """``self`` on an ``external`` schedule: the app fires a slot itself when the platform has
    not triggered it by the close of its arrival window (see ``external_missed.py``)."""
    args: Mapping[str, Any] = field(default_factory=dict, repr=False)
    """A run-time schedule's JSON arguments, handed to each firing as ``ctx.args`` (``{}``
    for a declared schedule)."""
    source: str = "code"
    """``code`` (declared with :func:`define_schedule`) or ``runtime`` (written with
    ``Scheduling.put_schedule``)."""
    handler_ref: str | None = None
    """The registered name of the handler a run-time schedule runs (``define_handler``)."""
    retry: RetryPolicy | None = None
    """How a failed run is retried within its slot (``None``: it is not; see
    :mod:`.retries`)."""
    exclude: Exclusions | None = field(default=None, repr=False)
    """Days it does not run (dates, holidays): an excluded slot is recorded ``skipped`` with
    the reason, never run and never owed (see :mod:`.exclusions`)."""
    record: RecordPolicy = RecordPolicy.ALL
    """Which runs keep a row: ``failures`` rolls clock-driven successes up per hour
    (:class:`~.enums.RecordPolicy`)."""
    # Read by every firing, so worked out once here: the property and the two
    # ``iscoroutinefunction`` calls they replace were ~2.7 µs a firing, 27 ms of a 10,000 herd.
    max_runtime: timedelta = field(init=False, repr=False)
    """``max_runtime_ms`` as a duration (each firing's deadline is ``fired_at`` plus it)."""
    awaits_handler: bool = field(init=False, repr=False)
    """The handler is awaited on the loop (``async def``, or an object with an async
    ``__call__``); otherwise it runs in a worker thread. True for a ``workflow=`` target."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "max_runtime", timedelta(milliseconds=self.max_runtime_ms))
        awaited = self.handler is None or is_async_callable(self.handler)
        object.__setattr__(self, "awaits_handler", awaited)

    @property
    def has_seconds(self) -> bool:
        """Whether the cron has a leading seconds field (such a schedule is always ``self``)."""
        return self.spec.has_seconds

    async def __call__(self, ctx: ScheduleContext) -> None:
        """Run this schedule's target once with ``ctx`` — no ledger, no watchdog: an ``async
        def`` is awaited, a ``def`` runs in a worker thread, a ``workflow=`` target is started
        on ``ctx.workflows``. The runner calls this too (inside its watchdog and ledger
        writes), so a test runs exactly what a firing runs::

            await daily_digest(testing.make_context(daily_digest, at=...))
        """
        if self.workflow is not None:
            if ctx.workflows is None:
                raise ConfigurationError(
                    f'schedule "{self.name}" targets workflow "{self.workflow.name}" but no '
                    "workflow starter is configured — pass Scheduling(workflows=...) (in a "
                    "test: make_context(..., workflows=...))"
                )
            await ctx.workflows.start(self.workflow.name, self.workflow.build_payload(ctx))
            return
        handler = self.handler
        if handler is None:  # define_schedule always sets one of the two targets
            raise ConfigurationError(f'schedule "{self.name}" has neither handler nor workflow')
        if self.awaits_handler:
            await cast(Awaitable[Any], handler(ctx))
            return
        # A plain def runs in a worker thread; on timeout or shutdown the thread is abandoned
        # (Python cannot kill a thread) and keeps running until it returns.
        result = await anyio.to_thread.run_sync(handler, ctx, abandon_on_cancel=True)
        if inspect.isawaitable(result):  # a def that returns a coroutine
            await result

    def effective_trigger(self, app_default: TriggerMode | str) -> TriggerMode:
        """The schedule's own trigger, else the app-wide default."""
        if self.trigger is not None:
            return self.trigger
        # an enum's call is ~1.5 µs even for a member: asked per schedule at boot, several times
        return app_default if isinstance(app_default, TriggerMode) else TriggerMode(app_default)

    def next_occurrence(self, after: datetime) -> datetime:
        """The first occurrence strictly after ``after`` (aware), as an aware UTC datetime."""
        return self.spec.next_occurrence(after)

    def previous_occurrence(self, at: datetime) -> datetime | None:
        """The newest occurrence at or before ``at`` (aware UTC), if any."""
        return self.spec.previous_occurrence(at)

    def occurrences(
        self, start: datetime, end: datetime, limit: int | None = None
    ) -> list[datetime]:
        """Every occurrence in ``(start, end]``, in order (at most ``limit`` of them)."""
        return self.spec.occurrences(start, end, limit)

    def iter_occurrences(self, start: datetime, end: datetime | None = None) -> Iterator[datetime]:
        """Occurrences after ``start`` (up to ``end`` inclusive), lazily."""
        return self.spec.iter_occurrences(start, end)

    def jitter_at(self, slot: datetime) -> timedelta:
        """How long after ``slot`` the timer fires it: a deterministic draw in
        ``[0, jitter_ms]`` from a hash of (name, slot), so every replica agrees and a slot keeps
        its delay across restarts. ``scheduled_at`` stays ``slot``."""
        if self.jitter_ms <= 0:
            return timedelta(0)
        key = f"{self.name}@{slot.astimezone(UTC).isoformat()}".encode()
        draw = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")
        return timedelta(milliseconds=draw % (self.jitter_ms + 1))

    def fires_at(self, slot: datetime) -> datetime:
        """The instant the timer fires ``slot``: ``slot`` plus :meth:`jitter_at`, or ``slot``
        itself for a schedule without jitter (every firing asks: no zero delay is built)."""
        return slot + self.jitter_at(slot) if self.jitter_ms > 0 else slot

    def period_at(self, instant: datetime) -> timedelta:
        """The interval between the occurrences around ``instant`` (cron is not fixed-interval)."""
        return self.spec.period_at(instant)

    def excluded(self, slot: datetime) -> str | None:
        """Why ``slot`` is excluded (its date in the schedule's zone is a listed day or a
        holiday), or ``None`` when it runs."""
        if self.exclude is None:
            return None
        return self.exclude.reason_at(slot, self.spec.zone)

    def retry_window_end(self, slot: datetime) -> datetime | None:
        """Until when attempts of ``slot`` may start: the schedule's next slot after it (no
        retry collides with the next run). ``None``: the cron has no next occurrence."""
        try:
            return self.spec.next_occurrence(slot)
        except (ValueError, LookupError):
            return None


def _prefix(name: object) -> str:
    return f'define_schedule("{name}")' if isinstance(name, str) else f"define_schedule({name!r})"


def _choice(name: object, field_name: str, value: object, enum: type[Any]) -> Any:
    if isinstance(value, enum):
        return value  # a member already (the common case: 100,000 definitions, three each)
    try:
        return enum(value)
    except ValueError:
        allowed = " | ".join(f'"{m.value}"' for m in enum)
        raise ScheduleDefinitionError(
            f"{_prefix(name)}: {field_name}={value!r} is not one of {allowed} — pass one of those"
        ) from None


def _validate_timezone(name: object, timezone: object) -> str:
    if timezone is None or timezone == "":
        raise ScheduleDefinitionError(
            f"{_prefix(name)}: timezone is required and has no default — pass an IANA zone, "
            'e.g. timezone="UTC" or timezone="Europe/Berlin" (server-local time is never assumed)'
        )
    if not isinstance(timezone, str):
        raise ScheduleDefinitionError(
            f"{_prefix(name)}: timezone={timezone!r} must be an IANA zone name string, "
            'e.g. "Europe/Berlin"'
        )
    # zones.zone_problem is the one judge of a zone name (CronSpec.parse asks it too): IANA
    # names only, and the did-you-mean for a wrong-case name.
    problem = zone_problem(timezone)
    if problem is not None:
        raise ScheduleDefinitionError(f"{_prefix(name)}: {problem}")
    return timezone


_callable_once: list[object] = [None]
"""The last handler :func:`_check_arity` found callable with one argument: a fleet of
schedules generated in a loop shares one handler, and reading its signature was half the cost
of a definition (100,000 of them)."""


def _check_arity(name: object, handler: object) -> None:
    """A handler is called as ``handler(ctx)``: one positional argument. Checked now, so a
    wrong signature fails at import naming the schedule, not as a TypeError at each firing."""
    if _callable_once[0] is handler:
        return
    try:
        signature = inspect.signature(handler)  # type: ignore[arg-type]
    except (TypeError, ValueError):  # a builtin or C callable without a signature: trust it
        return
    try:
        signature.bind(object())
    except TypeError as exc:
        raise ScheduleDefinitionError(
            f"{_prefix(name)}: handler {getattr(handler, '__qualname__', handler)!r} cannot "
            f"be called with exactly one argument ({exc}; its signature is {signature}) — a "
            "handler takes the ScheduleContext as its only positional argument: "
            "`async def handler(ctx: ScheduleContext) -> None`"
        ) from None
    _callable_once[0] = handler


def _validate(
    *,
    name: object,
    cron: object,
    timezone: object,
    handler: object,
    workflow: object,
    trigger: object,
    on_overlap: object,
    backfill: object,
    max_runtime_ms: object,
    description: object,
) -> dict[str, Any]:
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ScheduleDefinitionError(
            f"{_prefix(name)}: name={name!r} is not a valid schedule name — use 1–200 letters, "
            'digits, "_", "-", "." or ":", starting with a letter or digit (e.g. "dailyDigest"); '
            "it is the claim key and a URL segment"
        )
    if not isinstance(cron, str) or not cron.strip():
        raise ScheduleDefinitionError(
            f"{_prefix(name)}: cron={cron!r} is required — pass a five-field expression such as "
            '"0 9 * * *" or a six-field one with leading seconds such as "*/30 * * * * *"'
        )
    tz = _validate_timezone(name, timezone)
    try:
        spec = CronSpec.parse(cron, tz)
    except InvalidCronError as exc:
        raise InvalidCronError(f"{_prefix(name)}: {exc}") from None
    if handler is not None and workflow is not None:
        raise ScheduleDefinitionError(
            f"{_prefix(name)}: both handler and workflow are set — a schedule has exactly one "
            "target; keep handler= (and call ctx.workflows.start(...) from it) or keep workflow="
        )
    if handler is not None and not callable(handler):
        raise ScheduleDefinitionError(
            f"{_prefix(name)}: handler={handler!r} is not callable — pass an `async def` or "
            "`def` taking a ScheduleContext"
        )
    if handler is not None:
        _check_arity(name, handler)
    if workflow is not None and not isinstance(workflow, WorkflowTarget):
        raise ScheduleDefinitionError(
            f"{_prefix(name)}: workflow={workflow!r} must be a WorkflowTarget(name=..., "
            "payload=...)"
        )
    if isinstance(workflow, WorkflowTarget) and (
        not isinstance(workflow.name, str) or not workflow.name
    ):
        raise ScheduleDefinitionError(
            f"{_prefix(name)}: workflow name {workflow.name!r} is empty — name the workflow to "
            'start, e.g. WorkflowTarget(name="billing.dailyRollup")'
        )
    trigger_mode = None if trigger is None else _choice(name, "trigger", trigger, TriggerMode)
    if trigger_mode is TriggerMode.EXTERNAL and spec.has_seconds:
        raise ScheduleDefinitionError(
            f'{_prefix(name)}: cron "{cron}" has a seconds field, but trigger="external" — '
            "platform schedulers (Kubernetes CronJob, EventBridge, Cloud Scheduler) are "
            'minute-granular; use a five-field cron or trigger="self"'
        )
    overlap = _choice(name, "on_overlap", on_overlap, OverlapPolicy)
    backfill_policy = _choice(name, "backfill", backfill, BackfillPolicy)
    if (
        isinstance(max_runtime_ms, bool)
        or not isinstance(max_runtime_ms, int)
        or max_runtime_ms <= 0
    ):
        raise ScheduleDefinitionError(
            f"{_prefix(name)}: max_runtime_ms={max_runtime_ms!r} must be a positive integer "
            f"number of milliseconds (default {DEFAULT_MAX_RUNTIME_MS:_} = 30 min)"
        )
    if description is not None and not isinstance(description, str):
        raise ScheduleDefinitionError(
            f"{_prefix(name)}: description={description!r} must be a string or None"
        )
    return {
        "name": name,
        "cron": cron,
        "timezone": tz,
        "spec": spec,
        "workflow": workflow,
        "trigger": trigger_mode,
        "on_overlap": overlap,
        "backfill": backfill_policy,
        "max_runtime_ms": max_runtime_ms,
        "description": description,
    }


JITTER_PROBE = 100
"""Occurrences looked at to find a schedule's shortest gap (``jitter_ms`` must stay under it)."""
JITTER_PROBE_FROM = datetime(2026, 1, 1, tzinfo=UTC)


def _validate_jitter(name: object, jitter_ms: object, spec: CronSpec) -> int:
    if isinstance(jitter_ms, bool) or not isinstance(jitter_ms, int) or jitter_ms < 0:
        raise ScheduleDefinitionError(
            f"{_prefix(name)}: jitter_ms={jitter_ms!r} must be a non-negative integer number "
            "of milliseconds (0, the default, fires on the cron instant)"
        )
    if jitter_ms == 0:
        return 0
    horizon = JITTER_PROBE_FROM + timedelta(days=800)
    slots = spec.occurrences(JITTER_PROBE_FROM, horizon, JITTER_PROBE)
    gaps = [b - a for a, b in zip(slots, slots[1:], strict=False)]
    shortest = min(gaps) if gaps else timedelta(days=365)
    if timedelta(milliseconds=jitter_ms) >= shortest:
        raise ScheduleDefinitionError(
            f"{_prefix(name)}: jitter_ms={jitter_ms} is not shorter than the schedule's "
            f"shortest gap between occurrences ({int(shortest.total_seconds() * 1000)} ms) — "
            "a delayed slot would land on the next one; pass a smaller jitter_ms"
        )
    return jitter_ms


def check_retry(prefix: str, retry: object) -> RetryPolicy | None:
    """``retry`` if it is a :class:`RetryPolicy` (or ``None``); a clear error otherwise."""
    if retry is None or isinstance(retry, RetryPolicy):
        return retry
    raise ScheduleDefinitionError(
        f"{prefix}: retry={retry!r} is not a RetryPolicy — pass "
        "retry=RetryPolicy(attempts=3, backoff_ms=1000, max_backoff_ms=60000) or None"
    )


def check_exclude(prefix: str, exclude: object) -> Exclusions | None:
    """``exclude`` read (:func:`.exclusions.parse_exclude`); a clear error naming the item."""
    try:
        return parse_exclude(exclude)
    except ExcludeError as exc:
        raise ScheduleDefinitionError(f"{prefix}: {exc.path} — {exc}") from None


def _validate_fallback(
    name: object, fallback: object, trigger: TriggerMode | None
) -> TriggerMode | None:
    if fallback is None:
        return None
    if not isinstance(fallback, str) or fallback != TriggerMode.SELF.value:
        raise ScheduleDefinitionError(
            f'{_prefix(name)}: fallback={fallback!r} is not a fallback — pass fallback="self" '
            "(the in-app timer fires a slot the platform did not trigger in time) or None"
        )
    if trigger is TriggerMode.SELF:
        raise ScheduleDefinitionError(
            f'{_prefix(name)}: fallback="self" needs trigger="external" — a trigger="self" '
            "schedule is already fired by the in-app timer; drop fallback= or set "
            'trigger="external"'
        )
    # trigger=None inherits the app default: Scheduling.validate checks it at boot.
    return TriggerMode.SELF


def _caller_module() -> str | None:
    frame = sys._getframe(2)
    return frame.f_globals.get("__name__") if frame is not None else None


@overload
def define_schedule(
    *,
    name: str,
    cron: str,
    timezone: str,
    handler: Handler,
    trigger: TriggerMode | str | None = None,
    on_overlap: OverlapPolicy | str = OverlapPolicy.SKIP,
    backfill: BackfillPolicy | str = BackfillPolicy.SKIP,
    max_runtime_ms: int = DEFAULT_MAX_RUNTIME_MS,
    description: str | None = None,
    jitter_ms: int = 0,
    fallback: TriggerMode | str | None = None,
    retry: RetryPolicy | None = None,
    exclude: object = None,
    record: RecordPolicy | str = RecordPolicy.ALL,
) -> Schedule: ...


@overload
def define_schedule(
    *,
    name: str,
    cron: str,
    timezone: str,
    workflow: WorkflowTarget,
    trigger: TriggerMode | str | None = None,
    on_overlap: OverlapPolicy | str = OverlapPolicy.SKIP,
    backfill: BackfillPolicy | str = BackfillPolicy.SKIP,
    max_runtime_ms: int = DEFAULT_MAX_RUNTIME_MS,
    description: str | None = None,
    jitter_ms: int = 0,
    fallback: TriggerMode | str | None = None,
    retry: RetryPolicy | None = None,
    exclude: object = None,
    record: RecordPolicy | str = RecordPolicy.ALL,
) -> Schedule: ...


@overload
def define_schedule(
    *,
    name: str,
    cron: str,
    timezone: str,
    trigger: TriggerMode | str | None = None,
    on_overlap: OverlapPolicy | str = OverlapPolicy.SKIP,
    backfill: BackfillPolicy | str = BackfillPolicy.SKIP,
    max_runtime_ms: int = DEFAULT_MAX_RUNTIME_MS,
    description: str | None = None,
    jitter_ms: int = 0,
    fallback: TriggerMode | str | None = None,
    retry: RetryPolicy | None = None,
    exclude: object = None,
    record: RecordPolicy | str = RecordPolicy.ALL,
) -> Callable[[Handler], Schedule]: ...


def define_schedule(
    *,
    name: str | None = None,
    cron: str | None = None,
    timezone: str | None = None,
    handler: Handler | None = None,
    workflow: WorkflowTarget | None = None,
    trigger: TriggerMode | str | None = None,
    on_overlap: OverlapPolicy | str = OverlapPolicy.SKIP,
    backfill: BackfillPolicy | str = BackfillPolicy.SKIP,
    max_runtime_ms: int = DEFAULT_MAX_RUNTIME_MS,
    description: str | None = None,
    jitter_ms: int = 0,
    fallback: TriggerMode | str | None = None,
    retry: RetryPolicy | None = None,
    exclude: object = None,
    record: RecordPolicy | str = RecordPolicy.ALL,
) -> Schedule | Callable[[Handler], Schedule]:
    """Define a schedule; every argument is validated now.

    With ``handler=`` or ``workflow=`` it returns the :class:`Schedule`. With neither it returns
    a decorator taking the handler (an ``async def`` or a plain ``def``, which runs in a worker
    thread)::

        @define_schedule(name="dailyRollup", cron="0 2 * * *", timezone="UTC")
        async def daily_rollup(ctx: ScheduleContext) -> None: ...

    ``retry=RetryPolicy(...)`` retries a failed run within its slot (see :mod:`.retries`).
    ``exclude=`` names days it does not run — dates, ``holidays.country_holidays("DE")``, a
    ``{"country": "DE"}`` spec, or a list of them (see :mod:`.exclusions`).
    ``record="failures"`` keeps a ledger row only for the runs that did not succeed: the
    successes are counted per hour (see :class:`~.enums.RecordPolicy`).
    """
    fields = _validate(
        name=name,
        cron=cron,
        timezone=timezone,
        handler=handler,
        workflow=workflow,
        trigger=trigger,
        on_overlap=on_overlap,
        backfill=backfill,
        max_runtime_ms=max_runtime_ms,
        description=description,
    )
    fields["jitter_ms"] = _validate_jitter(name, jitter_ms, fields["spec"])
    fields["fallback"] = _validate_fallback(name, fallback, fields["trigger"])
    fields["retry"] = check_retry(_prefix(name), retry)
    fields["exclude"] = check_exclude(_prefix(name), exclude)
    fields["record"] = _choice(name, "record", record, RecordPolicy)
    module = _caller_module()
    if handler is not None or workflow is not None:
        return Schedule(handler=handler, module=module, **fields)

    def decorate(fn: Handler) -> Schedule:
        if isinstance(fn, Schedule) or not callable(fn) or inspect.isclass(fn):
            raise ScheduleDefinitionError(
                f"{_prefix(name)}: @define_schedule(...) was applied to {fn!r}, which is not a "
                "handler — decorate an `async def` or `def` function taking a ScheduleContext"
            )
        _check_arity(name, fn)
        return Schedule(handler=fn, module=getattr(fn, "__module__", None) or module, **fields)

    return decorate
