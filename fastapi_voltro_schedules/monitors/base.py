"""What a cron monitor is told, and the seam a monitor implements.

A slot's run is told to a monitor as check-ins read from the ledger: ``in_progress`` once its
``running`` row is committed, then ``ok`` or ``error`` once its terminal row is (a handler that
raised, a timeout, a shutdown, a corpse marked ``abandoned``); a slot nobody ran — a ``missed``
row — is one ``missed`` check-in. The replica that writes a row is the one that sends its
check-in, so each is sent once across the cluster (the same guarantee as the outcome hook).
"""

from __future__ import annotations

import abc
import uuid
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING

from ..enums import Trigger
from ..values import value

if TYPE_CHECKING:
    from ..definition import Schedule

__all__ = [
    "DEFAULT_TRIGGERS",
    "CheckIn",
    "CheckInError",
    "CheckInStatus",
    "Monitor",
    "check_in_uuid",
]

DEFAULT_TRIGGERS: frozenset[Trigger] = frozenset({Trigger.SELF, Trigger.EXTERNAL})
"""The runs a monitor is told about unless it says otherwise: the slots of the schedule's own
cadence. A manual run (Run now, a range backfill of last month) is off the cadence a monitor
watches: an early ``ok`` would read as the slot's."""


class CheckInStatus(StrEnum):
    """What a check-in says about a slot."""

    IN_PROGRESS = "in_progress"
    """The slot's ``running`` row is written: its handler starts now."""
    OK = "ok"
    """The run succeeded."""
    ERROR = "error"
    """The run failed: its handler raised, timed out, was cut by a shutdown or its replica
    died (``error_tag`` says which)."""
    MISSED = "missed"
    """Nobody ran the slot: a ``missed`` row (downtime under a backfill policy, an external
    trigger that never came, a queued firing written off)."""


@value
class CheckIn:
    """One check-in, as a monitor receives it."""

    name: str
    """The schedule."""
    run_id: str
    """The ledger row (``in_progress`` and its ``ok``/``error`` share it)."""
    status: CheckInStatus
    trigger: Trigger
    scheduled_at: datetime
    fired_at: datetime | None
    """When the handler started; ``None`` for a ``missed`` slot."""
    finished_at: datetime | None
    """When the row turned terminal; ``None`` for ``in_progress``."""
    schedule: Schedule | None
    """The definition the check-in's monitor is upserted from (cron, zone, max runtime);
    ``None`` when the schedule is gone (a run-time schedule deleted while its run was in
    flight)."""
    margin: timedelta
    """How late a slot may start and still count as on time: the app's skew budget
    (``external_trigger_skew_ms``)."""
    error_tag: str | None = None
    error_message: str | None = None

    @property
    def duration(self) -> float | None:
        """Seconds from the handler's start to the row's end (``ok``/``error``), else
        ``None``."""
        if self.fired_at is None or self.finished_at is None:
            return None
        return max(0.0, (self.finished_at - self.fired_at).total_seconds())

    @property
    def check_in_id(self) -> str:
        """A UUID (32 hex digits) derived from :attr:`run_id`: the same for a run's
        ``in_progress`` and its outcome, whichever replica sends each (a corpse's ``error``
        comes from the replica that marked it ``abandoned``)."""
        return check_in_uuid(self.run_id)


def check_in_uuid(run_id: str) -> str:
    """The 32 hex digits of a run id (``sr_`` + a uuid7-like 128 bits), or a UUID5 of any
    other id: stable, so every replica names a run's check-ins alike."""
    digits = run_id.removeprefix("sr_")
    try:
        return uuid.UUID(hex=digits).hex
    except ValueError:
        return uuid.uuid5(uuid.NAMESPACE_URL, f"voltro-run:{run_id}").hex


class CheckInError(Exception):
    """A check-in could not be delivered. ``retry``: worth another attempt (the service was
    unreachable, or answered 5xx/429); otherwise the check-in is given up at once. The message
    is logged as is: it must not carry a secret (a ping URL's path, a token)."""

    def __init__(self, message: str, *, retry: bool) -> None:
        super().__init__(message)
        self.retry = retry


class Monitor(abc.ABC):
    """A cron monitor the ledger's check-ins are sent to (``Scheduling(monitors=[...])``).

    Each monitor has a queue and a task of its own: :meth:`send` is awaited one check-in at a
    time, in the order the rows were written, and never in the way of a firing or a ledger
    write. Subclass it for a service of your own.
    """

    triggers: frozenset[Trigger] = DEFAULT_TRIGGERS
    """The triggers whose runs are checked in (default: the schedule's own cadence)."""

    @property
    @abc.abstractmethod
    def label(self) -> str:
        """How logs name this monitor — never a secret (a ping URL's host at most)."""

    @abc.abstractmethod
    def watches(self, name: str) -> bool:
        """Whether schedule ``name`` is checked in here (asked on the event loop as rows are
        written: keep it cheap)."""

    @abc.abstractmethod
    async def send(self, check_in: CheckIn) -> None:
        """Deliver one check-in. Raise :class:`CheckInError` (``retry=True``) for a failure
        worth retrying; any other exception is logged with its traceback and the check-in is
        dropped."""

    async def aclose(self) -> None:  # noqa: B027 — optional: most monitors hold nothing
        """Release what :meth:`send` opened (the scheduler stopped); it may be sent to again
        by a later run of the scheduler."""
