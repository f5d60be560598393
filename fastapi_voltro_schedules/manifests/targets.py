"""What a manifest is generated from: the app's external schedules and the generator options."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import quote

from ..cron import CronSpec
from ..enums import OverlapPolicy, TriggerMode

if TYPE_CHECKING:
    from ..scheduling import Scheduling

__all__ = [
    "DEFAULT_IMAGE",
    "DEFAULT_SECRET_KEY",
    "DEFAULT_SECRET_NAME",
    "ManifestOptions",
    "Target",
    "targets_of",
]

DEFAULT_IMAGE = "curlimages/curl:8.11.1"
DEFAULT_SECRET_NAME = "voltro-schedule-trigger"
DEFAULT_SECRET_KEY = "token"


@dataclass(frozen=True, slots=True)
class Target:
    """One ``trigger="external"`` schedule, as the generators need it."""

    name: str
    cron: str
    timezone: str
    description: str | None
    max_runtime_ms: int
    spec: CronSpec
    on_overlap: OverlapPolicy = OverlapPolicy.SKIP
    """The schedule's ``on_overlap``: the CronJob's ``concurrencyPolicy`` follows it."""


@dataclass(frozen=True, slots=True)
class ManifestOptions:
    """The generator's flags (``voltro schedule-manifest``)."""

    base_url: str
    app_name: str
    skew_ms: int
    namespace: str | None = None
    secret_name: str = DEFAULT_SECRET_NAME
    secret_key: str = DEFAULT_SECRET_KEY
    image: str = DEFAULT_IMAGE

    def trigger_url(self, name: str) -> str:
        return f"{self.base_url.rstrip('/')}/_voltro/schedules/{quote(name, safe='')}/trigger"

    @property
    def runs_url(self) -> str:
        return f"{self.base_url.rstrip('/')}/_voltro/schedules/runs"


def targets_of(scheduling: Scheduling) -> list[Target]:
    """The schedules a platform must fire — every one whose effective trigger is external —
    sorted by name, so the output is the same whatever the declaration order."""
    found = [
        Target(
            name=s.name,
            cron=s.cron,
            timezone=s.timezone,
            description=s.description,
            max_runtime_ms=s.max_runtime_ms,
            spec=s.spec,
            on_overlap=s.on_overlap,
        )
        for s in scheduling.schedules
        if scheduling.trigger_of(s) is TriggerMode.EXTERNAL
    ]
    return sorted(found, key=lambda t: t.name)
