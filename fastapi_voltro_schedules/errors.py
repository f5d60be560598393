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
    │   └── FutureArrivalError    the arrival states a time that has not come yet
    ├── InvalidArrivalTimeError   a stated-time header is not an ISO-8601 instant (ValueError)
    ├── TokenNotConfiguredError   a route's bearer token is unset: the route stays shut
    ├── AuthenticationError       a bearer token is missing or wrong
    ├── SchedulerNotRunningError  the app's scheduler has not started (or has stopped)
    ├── SchedulerDisabledError    VOLTRO_SCHEDULER_ENABLED=false: the scheduler is off on purpose
    ├── ConfigurationError        SchedulingConfig / boot-time wiring is wrong
    ├── SchemaError               the ledger tables are missing or behind head
    ├── BackfillRequestError      a range backfill request is malformed (also a ValueError)
    ├── BackfillRefusedError      a range backfill was refused, nothing fired (count, reason)
    └── StoreUnavailableError     the database could not be reached (fail closed)

Messages name the schedule, the field, the bad value and the fix: they end up in boot logs
read by someone who did not write the code.
"""

from __future__ import annotations


class VoltroError(Exception):
    """Base class of every error raised by fastapi-voltro-schedules."""


class ScheduleDefinitionError(VoltroError, ValueError):
    """A schedule definition is invalid; raised at definition time (import)."""


class InvalidCronError(ScheduleDefinitionError):
    """The cron expression does not parse, or its values are out of range."""


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
        super().__init__(f'no schedule named "{name}" — check the name (it is case-sensitive)')
        self.name = name


class RunNotFoundError(VoltroError, LookupError):
    """No run with this id is in the ledger (or it was swept by retention)."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f'no run with id "{run_id}" — it never existed or retention swept it')
        self.run_id = run_id


class SchedulerNotRunningError(VoltroError):
    """The scheduler of the app is not running: its lifespan never started, or it stopped."""


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


class InvalidArrivalTimeError(VoltroError, ValueError):
    """A stated-time header (``X-Voltro-Scheduled-At``, ``X-CloudScheduler-ScheduleTime``) is
    not an ISO-8601 instant with a UTC offset."""

    def __init__(self, header: str, value: str) -> None:
        shown = value if len(value) <= 64 else value[:64] + "…"
        super().__init__(
            f"{header}: {shown!r} is not an ISO-8601 instant with an offset — send e.g. "
            "2026-03-04T09:00:00Z"
        )
        self.header = header


class TokenNotConfiguredError(VoltroError):
    """The bearer token of a route family is unset. The absence of a secret is not consent:
    the routes stay shut (503) until an operator sets ``variable``."""

    def __init__(self, message: str, variable: str) -> None:
        super().__init__(message)
        self.variable = variable


class AuthenticationError(VoltroError):
    """The request carried no bearer token, or not the one this route family accepts."""


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
