"""Sentry Crons through sentry-sdk's check-ins (``sentry_sdk.crons.capture_checkin``).

Each run is an ``in_progress`` check-in then an ``ok`` or ``error`` one with the same
``check_in_id`` (derived from the run id, so a corpse's ``error`` sent by the replica that
marked it ``abandoned`` closes the check-in its dead replica opened) and the run's duration. A
``missed`` row is an ``error`` check-in (the SDK sends ``in_progress``, ``ok`` and ``error``;
Sentry also flags a slot missed on its own clock when no check-in came within the margin).

Every check-in carries the monitor's config, so Sentry creates the monitor on its first
check-in and keeps it in step with the schedule (an upsert): the cron (a macro spelled out,
a seconds field of one value dropped — Sentry counts minutes), the time zone, the check-in
margin (the app's skew budget, ``external_trigger_skew_ms``, in whole minutes, at least 1) and
the max runtime (the schedule's ``max_runtime_ms``, likewise).

The app initialises the SDK (``sentry_sdk.init(dsn=...)``) as it would for errors; the SDK's
own transport sends the envelopes from its worker thread. sentry-sdk is the ``[sentry]`` extra:
``pip install 'fastapi-voltro-schedules[sentry]'``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import anyio.to_thread

from ..enums import Trigger
from ..errors import ConfigurationError
from ..logs import logger
from .base import DEFAULT_TRIGGERS, CheckIn, CheckInStatus, Monitor

if TYPE_CHECKING:
    from ..definition import Schedule

__all__ = ["SLUG_LIMIT", "SentryCronsMonitor", "monitor_config", "monitor_slug", "sentry_crontab"]

SLUG_LIMIT = 50
"""Characters of a Sentry monitor slug."""
FLUSH_SECONDS = 2.0
"""At shutdown, how long the SDK's transport may take to send what it still holds."""

_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_SENT_STATUS = {
    CheckInStatus.IN_PROGRESS: "in_progress",
    CheckInStatus.OK: "ok",
    CheckInStatus.ERROR: "error",
    CheckInStatus.MISSED: "error",
}


def _crons() -> Any:
    """``sentry_sdk.crons``, or a :class:`ConfigurationError` naming the extra."""
    try:
        import sentry_sdk.crons
    except ImportError:
        raise ConfigurationError(
            "SentryCronsMonitor needs sentry-sdk, which is not installed — "
            "pip install 'fastapi-voltro-schedules[sentry]'"
        ) from None
    return sentry_sdk.crons


def monitor_slug(name: str) -> str:
    """Sentry's slug for schedule ``name``: lower case, runs of anything but letters, digits,
    ``_`` and ``-`` as one ``-``, at most :data:`SLUG_LIMIT` characters."""
    slug = re.sub(r"[^a-z0-9_-]+", "-", name.lower()).strip("-")
    return slug[:SLUG_LIMIT].rstrip("-") or "schedule"


def sentry_crontab(cron: str) -> str | None:
    """``cron`` as a five-field crontab Sentry reads, or ``None`` when it fires more than once
    a minute (Sentry's schedules count minutes)."""
    fields = cron.split()
    if len(fields) == 1:
        return _MACROS.get(fields[0].lower())
    if len(fields) == 6:
        if not fields[0].isdigit():
            return None  # several seconds a minute: finer than Sentry can expect check-ins
        fields = fields[1:]
    return " ".join(fields) if len(fields) == 5 else None


def _minutes(span: timedelta) -> int:
    return max(1, math.ceil(span.total_seconds() / 60))


def monitor_config(
    schedule: Schedule,
    margin: timedelta,
    *,
    failure_issue_threshold: int | None = None,
    recovery_threshold: int | None = None,
) -> dict[str, Any] | None:
    """The monitor ``schedule`` upserts in Sentry, or ``None`` when its cron fires more than
    once a minute (then the check-ins go to a monitor created in Sentry by hand)."""
    crontab = sentry_crontab(schedule.cron)
    if crontab is None:
        return None
    config: dict[str, Any] = {
        "schedule": {"type": "crontab", "value": crontab},
        "timezone": schedule.timezone,
        "checkin_margin": _minutes(margin),
        "max_runtime": _minutes(schedule.max_runtime),
    }
    if failure_issue_threshold is not None:
        config["failure_issue_threshold"] = failure_issue_threshold
    if recovery_threshold is not None:
        config["recovery_threshold"] = recovery_threshold
    return config


class SentryCronsMonitor(Monitor):
    """Check every monitored schedule's runs in to Sentry Crons.

    ``slug_for``: each schedule's monitor slug — ``None`` (the default) monitors every schedule
    as :func:`monitor_slug` of its name; a mapping monitors only the schedules it names; a
    function of the name returns the slug or ``None`` (not monitored). ``upsert=False`` sends
    no monitor config (the monitors are managed in Sentry). ``failure_issue_threshold`` /
    ``recovery_threshold``: passed to Sentry's monitor config. ``triggers``: which runs check in
    (default: the schedule's own cadence).

    sentry-sdk must be installed (the ``[sentry]`` extra) and initialised by the app.
    """

    def __init__(
        self,
        slug_for: Callable[[str], str | None] | Mapping[str, str] | None = None,
        *,
        upsert: bool = True,
        failure_issue_threshold: int | None = None,
        recovery_threshold: int | None = None,
        triggers: Iterable[Trigger] = DEFAULT_TRIGGERS,
    ) -> None:
        self._crons = _crons()
        if slug_for is None:
            self._slug_for: Callable[[str], str | None] = monitor_slug
        elif isinstance(slug_for, Mapping):
            self._slug_for = dict(slug_for).get
        elif callable(slug_for):
            self._slug_for = slug_for
        else:
            raise ConfigurationError(
                "SentryCronsMonitor(slug_for=...) must be None (every schedule), a mapping of "
                "schedule name to monitor slug or a function of the name returning one, got "
                f"{type(slug_for).__name__}"
            )
        self.upsert = upsert
        self.failure_issue_threshold = failure_issue_threshold
        self.recovery_threshold = recovery_threshold
        self.triggers = frozenset(Trigger(t) for t in triggers)
        self._warned_unsent = False
        self._warned_fine: set[str] = set()

    @property
    def label(self) -> str:
        return "sentry-crons"

    def watches(self, name: str) -> bool:
        return self._slug_for(name) is not None

    def config_for(self, check_in: CheckIn) -> dict[str, Any] | None:
        """The monitor config ``check_in`` carries (``None``: none)."""
        if not self.upsert or check_in.schedule is None:
            return None
        config = monitor_config(
            check_in.schedule,
            check_in.margin,
            failure_issue_threshold=self.failure_issue_threshold,
            recovery_threshold=self.recovery_threshold,
        )
        if config is None and check_in.name not in self._warned_fine:
            self._warned_fine.add(check_in.name)
            logger.warning(
                "schedule: sentry-crons: %s fires more than once a minute (cron %r) — no "
                "monitor config is sent; create its monitor in Sentry by hand",
                check_in.name,
                check_in.schedule.cron,
            )
        return config

    async def send(self, check_in: CheckIn) -> None:
        slug = self._slug_for(check_in.name)
        if slug is None:
            return
        config = self.config_for(check_in)
        # A queue put for the SDK's transport thread: no network wait on the loop.
        sent = self._crons.capture_checkin(
            monitor_slug=slug,
            check_in_id=check_in.check_in_id,
            status=_SENT_STATUS[check_in.status],
            duration=check_in.duration,
            monitor_config=config,
        )
        if sent is None and not self._warned_unsent:
            self._warned_unsent = True
            logger.warning(
                "schedule: sentry-crons: sentry-sdk did not take the check-in of %s — is "
                "sentry_sdk.init(dsn=...) called in this process? (said once)",
                check_in.name,
            )

    async def aclose(self) -> None:
        import sentry_sdk

        # What the SDK's worker still holds leaves before the process does.
        await anyio.to_thread.run_sync(lambda: sentry_sdk.flush(timeout=FLUSH_SECONDS))
