"""Every error the package raises on purpose.

::

    VoltroError
    ├── ScheduleDefinitionError   a define_schedule() argument is wrong (also a ValueError)
    │   └── InvalidCronError      the cron expression or its zone cannot be used
    ├── DiscoveryError            two schedules share a name, or a module cannot be imported
    ├── ScheduleNotFoundError     no schedule has that name (also a LookupError)
    ├── ConfigurationError        SchedulingConfig / boot-time wiring is wrong
    ├── SchemaError               the ledger tables are missing or behind head
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
