"""Cron monitors fed from the ledger: Sentry Crons and Healthchecks.io-style ping URLs.

::

    scheduling = Scheduling.from_package(
        "app",
        monitors=[
            SentryCronsMonitor(),  # every schedule, slug = its name
            HealthchecksMonitor({"nightly-export": "https://hc-ping.com/<uuid>"}),
        ],
    )

Each run of a monitored schedule is one ``in_progress`` check-in when its ``running`` row is
written and one ``ok``/``error`` when its terminal row is; a ``missed`` row is one ``missed``
check-in. The replica that writes the row sends its check-in: once across the cluster.
``docs/operating.md`` ("Cron monitors") has the rules; :class:`Monitor` is the seam for a
service of your own.
"""

from __future__ import annotations

from .base import CheckIn, CheckInError, CheckInStatus, Monitor
from .healthchecks import HealthchecksMonitor
from .sentry import SentryCronsMonitor

__all__ = [
    "CheckIn",
    "CheckInError",
    "CheckInStatus",
    "HealthchecksMonitor",
    "Monitor",
    "SentryCronsMonitor",
]
