"""What a manifest is generated from: the app's external schedules and the generator options."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
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
    "route_prefix",
    "targets_of",
]

TRIGGER_ROUTE = "/_voltro/schedules/{name}/trigger"

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
    prefix: str = ""
    """Where the app mounts ``schedules_router`` (``app.include_router(..., prefix="/api")``):
    :func:`route_prefix` reads it off the app."""

    @property
    def _root(self) -> str:
        return f"{self.base_url.rstrip('/')}{self.prefix.rstrip('/')}"

    def trigger_url(self, name: str) -> str:
        return f"{self._root}/_voltro/schedules/{quote(name, safe='')}/trigger"

    @property
    def runs_url(self) -> str:
        return f"{self._root}/_voltro/schedules/runs"


def _route_paths(routes: list[Any], prefix: str = "") -> list[str]:
    """Every route path of an app, included routers walked with their include prefix (FastAPI
    keeps an included router nested in newer versions, flattened in older ones)."""
    found: list[str] = []
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            context = getattr(route, "include_context", None)
            found += _route_paths(inner.routes, prefix + (getattr(context, "prefix", "") or ""))
        elif isinstance(getattr(route, "path", None), str):
            found.append(prefix + route.path)
    return found


def route_prefix(app: Any) -> str:
    """The prefix the app serves the trigger route under (``""`` when it is at the root, or
    when ``app`` is not an app the routes can be read from)."""
    for path in _route_paths(list(getattr(app, "routes", None) or [])):
        if path.endswith(TRIGGER_ROUTE):
            return path[: -len(TRIGGER_ROUTE)]
    return ""


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
