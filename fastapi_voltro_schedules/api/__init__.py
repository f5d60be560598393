"""HTTP surface: ``schedules_router`` (trigger, runs, inspect, run-time
schedule writes, backfill, dashboard, metrics)."""

from __future__ import annotations

from .dashboard import router as _dashboard_router
from .health import router as _health_router
from .inspect import router as _inspect_router
from .metrics import router as _metrics_router
from .router import schedules_router
from .trigger import router as _trigger_router
from .writes import router as _writes_router

# The feature routers are included once, at import: an app that includes schedules_router
# gets every route, whatever order it imported things in.
schedules_router.include_router(_trigger_router)
schedules_router.include_router(_inspect_router)
schedules_router.include_router(_writes_router)
schedules_router.include_router(_health_router)
schedules_router.include_router(_metrics_router)
schedules_router.include_router(_dashboard_router)

__all__ = ["schedules_router"]
