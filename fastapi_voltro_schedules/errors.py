"""Every error the package raises on purpose.

::

    VoltroError
    ├── ScheduleDefinitionError   a define_schedule() argument is wrong (also a ValueError)
    │   └── InvalidCronError      the cron expression or its zone cannot be used
    ├── DiscoveryError            two schedules share a name, or a module cannot be imported
    ├── ScheduleNotFoundError     no schedule has that name (also a LookupError)
    ├── RunNotFoundError          no run has that id (also a LookupError)
    ├── TriggerRefusedError       an external arrival was refused; nothing was claimed
    │   ├── NotExternallyTriggeredError   the schedule keeps its own time (trigger="self")
    │   ├── OffCadenceError       no occurrence within the skew budget before the arrival
    │   ├── FutureArrivalError    the arrival states a time that has not come yet
    │   └── TooLateArrivalError   the arrival states a time older than the skew budget
    ├── InvalidArrivalTimeError   a stated-time header is not an ISO-8601 instant (ValueError)
    ├── PayloadTooLargeError      a request body is above the routes' size cap (413)
    ├── TokenNotConfiguredError   a route's bearer token is unset: the route stays shut
    ├── AuthenticationError       a bearer token is missing or wrong
    ├── ForbiddenRoleError        a valid read-only token asked for an operator action
    ├── SchedulePausedError       Run now / range backfill of a paused schedule: nothing fired
    ├── SchedulerNotRunningError  the app's scheduler has not started (or has stopped)
    │   └── SchedulerShuttingDownError  shutdown began: nothing new is admitted
    ├── RunNowBusyError           a Run now of the schedule is still in flight in this process
    ├── SchedulerDisabledError    VOLTRO_SCHEDULER_ENABLED=false: the scheduler is off on purpose
    ├── ConfigurationError        SchedulingConfig / boot-time wiring is wrong
    ├── SchemaError               the ledger tables are missing or behind head
    ├── InvalidQueryError         an inspect query parameter is malformed (also a ValueError)
    ├── BackfillRequestError      a range backfill request is malformed (also a ValueError)
    ├── BackfillRefusedError      a range backfill was refused, nothing fired (count, reason)
    ├── BackfillStoppedError      a range backfill stopped part-way (reason, fired so far)
    ├── StoreUnavailableError     the database could not be reached (fail closed)
    └── HandoffError              a firing's hand-off to a job engine did not go through
        └── JobFailedError        the handed-off job ended failed (its error in the message)

Messages name the schedule, the field, the bad value and the fix: they end up in boot logs
read by someone who did not write the code.
"""

from __future__ import annotations

ECHO_LIMIT = 120
"""At most this many characters of a caller's value are repeated in an error message (and so
in a response body or a log line): a 10 kB name or a 50 MB field is cut, not echoed."""


def shown(value: object, limit: int = ECHO_LIMIT) -> str:
    """``value`` as text fit to echo: itself when short, else its first ``limit`` characters,
    an ellipsis and how long it was (``"xxxx…" (10,000 characters)``)."""
    try:
        text = value if isinstance(value, str) else repr(value)
    except ValueError:  # an int past Python's 4,300-digit str() limit
        return f"<{type(value).__name__} too large to show>"
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text):,} characters)"


class VoltroError(Exception):
    """Base class of every error raised by fastapi-voltro-schedules."""


class ScheduleDefinitionError(VoltroError, ValueError):
    """A schedule definition is invalid; raised at definition time (import)."""


class InvalidCronError(ScheduleDefinitionError):
    """The cron expression does not parse, or its values are out of range."""


class InvalidScheduleError(ScheduleDefinitionError):
    """A run-time schedule (``put_schedule``) was refused: ``field`` names what is wrong, the
    message says how to fix it. Nothing was written."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


class DeclaredInCodeError(VoltroError):
    """The name belongs to a schedule declared in code (``define_schedule``): run-time writes
    cannot replace or delete it."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f'schedule "{shown(name)}" is declared in code (define_schedule) — a run-time '
            "write cannot replace or delete it; change it in the code and deploy, or pick "
            "another name for the run-time schedule"
        )
        self.name = name


class DiscoveryError(VoltroError):
    """Schedule discovery found a conflict (two schedules named alike) or a broken module."""


class ConfigurationError(VoltroError, ValueError):
    """The scheduling configuration cannot be served."""


class SchemaError(VoltroError):
    """The ledger schema is missing or not at the newest migration."""


class StoreUnavailableError(VoltroError):
    """The store could not be reached or did not answer in time."""


class ScheduleNotFoundError(VoltroError, LookupError):
    """No schedule with this name is defined in the app."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f'no schedule named "{shown(name)}" — check the name (it is case-sensitive)'
        )
        self.name = name


class RunNotFoundError(VoltroError, LookupError):
    """No run with this id is in the ledger (or it was swept by retention)."""

    def __init__(self, run_id: str, *, malformed: bool = False) -> None:
        why = (
            "a run id is sr_ followed by 32 hex digits, as the trigger route answered it"
            if malformed
            else "it never existed or retention swept it"
        )
        super().__init__(f'no run with id "{shown(run_id)}" — {why}')
        self.run_id = run_id


NOT_RUNNING = "the scheduler is not running (starting or shutting down)"
"""What every route and room says when asked while the scheduler is not running."""


class SchedulerNotRunningError(VoltroError):
    """The scheduler of the app is not running: its lifespan never started, or it stopped."""

    def __init__(self, message: str = NOT_RUNNING) -> None:
        super().__init__(message)


class SchedulerShuttingDownError(SchedulerNotRunningError):
    """The app is shutting down: nothing new is admitted (no row is written), retry."""


class RunNowBusyError(VoltroError):
    """A Run now of this schedule is still in flight in this process (at most one at a time):
    nothing was fired."""

    def __init__(self, name: str, run_id: str | None) -> None:
        held = f" (run {run_id})" if run_id else ""
        super().__init__(
            f'schedule "{name}": a Run now is still in flight in this process{held} — '
            "nothing was fired; wait for it to finish (poll its run) and ask again"
        )
        self.name = name
        self.run_id = run_id


class SchedulerDisabledError(VoltroError):
    """The scheduler is switched off (``VOLTRO_SCHEDULER_ENABLED=false``): nothing is armed and
    no database is open, so the routes have nothing to answer with."""

    variable = "VOLTRO_SCHEDULER_ENABLED"


class TriggerRefusedError(VoltroError):
    """An external arrival was refused. Nothing was claimed and nothing ran.

    ``details`` holds the machine-readable facts of the refusal (for the response body).
    """

    def __init__(self, message: str, **details: object) -> None:
        super().__init__(message)
        self.details: dict[str, object] = details


class NotExternallyTriggeredError(TriggerRefusedError):
    """The schedule is driven by the in-app timer; the trigger route does not fire it."""


class OffCadenceError(TriggerRefusedError):
    """The arrival snaps to no occurrence within the skew budget: the caller's cadence is not
    the app's (usually a stale manifest)."""


class FutureArrivalError(TriggerRefusedError):
    """The arrival states a time that has not come yet; claiming it would swallow the real
    firing as a duplicate."""


class TooLateArrivalError(TriggerRefusedError):
    """The arrival states a time more than the skew budget before the app's clock: a replay of
    an old firing must not run its slot (again)."""


class InvalidArrivalTimeError(VoltroError, ValueError):
    """A stated-time header (``X-Voltro-Scheduled-At``, ``X-CloudScheduler-ScheduleTime``) is
    not an ISO-8601 instant with a UTC offset, or lies outside the instants the API takes."""

    def __init__(self, header: str, value: str, why: str | None = None) -> None:
        super().__init__(
            f"{header}: {shown(value)!r} "
            + (why or "is not an ISO-8601 instant with an offset")
            + " — send e.g. 2026-03-04T09:00:00Z"
        )
        self.header = header


class PayloadTooLargeError(VoltroError):
    """A request body is larger than the routes of ``schedules_router`` take (``limit`` bytes)."""

    def __init__(self, message: str, *, limit: int) -> None:
        super().__init__(message)
        self.limit = limit


class TokenNotConfiguredError(VoltroError):
    """The bearer token of a route family is unset. The absence of a secret is not consent:
    the routes stay shut (503) until an operator sets ``variable``."""

    def __init__(self, message: str, variable: str) -> None:
        super().__init__(message)
        self.variable = variable


class AuthenticationError(VoltroError):
    """The request carried no bearer token, or not the one this route family accepts."""


class ForbiddenRoleError(VoltroError):
    """A valid inspect credential whose role may not do this (a read-only token asking to fire
    or change state)."""

    def __init__(self, message: str, *, required: str, role: str) -> None:
        super().__init__(message)
        self.required = required
        self.role = role


class SchedulePausedError(VoltroError):
    """The schedule is paused: an operator instruction to fire it was refused, nothing ran."""

    def __init__(
        self,
        name: str,
        *,
        paused_at: str,
        paused_by: str,
        reason: str | None,
        every_schedule: bool = False,
    ) -> None:
        why = f" ({reason})" if reason else ""
        if every_schedule:
            super().__init__(
                f'schedule "{name}" is paused with every schedule since {paused_at} by the '
                f"{paused_by} token{why} — nothing was fired. Resume them all first (POST "
                "/_voltro/inspect/resume-all, or `voltro schedule resume --all`)"
            )
        else:
            super().__init__(
                f'schedule "{name}" is paused since {paused_at} by the {paused_by} token{why} — '
                "nothing was fired. Resume it first (POST /_voltro/inspect/schedules/"
                f"{name}/resume, or `voltro schedule resume {name}`)"
            )
        self.name = name
        self.paused_at = paused_at
        self.paused_by = paused_by
        self.reason = reason


class PauseRequestError(VoltroError, ValueError):
    """A pause request cannot be used (an ``until`` that is not a later instant)."""


class PauseUntilPassedError(PauseRequestError):
    """``until`` is not after the app's clock: the window named has already ended. A request
    that is well formed but conflicts with the present (409), like an arrival stating a time
    that has not come — a client cannot tell it from the schema."""


class InvalidQueryError(VoltroError, ValueError):
    """An inspect route's query parameter (``status``, ``cursor``) cannot be used."""


class BackfillRequestError(VoltroError, ValueError):
    """A range backfill request is malformed (times, order, limit)."""


class BackfillRefusedError(VoltroError):
    """A range backfill was refused before firing anything: too many slots without
    confirmation, more than the limit, or another range backfill of the schedule running."""

    def __init__(
        self,
        message: str,
        *,
        reason: str,
        count: int | None = None,
        already_succeeded: int | None = None,
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.count = count
        self.already_succeeded = already_succeeded


class BackfillStoppedError(VoltroError):
    """A range backfill stopped part-way, after its in-flight slot finished: its lock passed
    to someone else (``reason="lock-lost"``) or a slot could not be recorded
    (``"store-unavailable"``). The slots before it ran; none after it fired."""

    def __init__(self, message: str, *, reason: str, fired: int, remaining: int) -> None:
        super().__init__(message)
        self.reason = reason
        self.fired = fired
        self.remaining = remaining


class HandoffError(VoltroError):
    """A firing's hand-off to a job engine (:mod:`.handoff`) did not go through: the job could
    not be enqueued or followed. The run is recorded ``failed`` with this message."""


class JobFailedError(HandoffError):
    """The job a firing was handed to ended failed: the run's row is ``failed`` with the job's
    error (``error_type``: the job's exception class, when the engine reports it)."""

    def __init__(self, job_id: str, error: str, error_type: str | None = None) -> None:
        self.job_id = job_id
        self.error = error
        self.error_type = error_type
        kind = f"{error_type}: " if error_type else ""
        super().__init__(f"job {job_id!r} failed: {kind}{error}")
