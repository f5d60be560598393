"""``GET /_voltro/health``: the probe for a Deployment's readiness and liveness checks.

No token (a kubelet probe carries none) and nothing secret in the body: only whether the
scheduler is armed (its lifespan booted an engine) and whether the ledger answers a round trip
within :data:`PING_TIMEOUT_SECONDS`. ``200`` when both hold, else ``503`` with which one failed.
"""

from __future__ import annotations

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from ..errors import SchedulerDisabledError, StoreUnavailableError
from .errors import VoltroRoute

router = APIRouter(route_class=VoltroRoute, tags=["voltro schedules"])

PING_TIMEOUT_SECONDS = 2.0


@router.get("/_voltro/health", summary="Scheduler armed and ledger reachable (no token)")
async def health(request: Request) -> JSONResponse:
    scheduling = getattr(request.app.state, "scheduling", None)
    if scheduling is not None and not scheduling.config.scheduler_enabled:
        # Switched off on purpose: say so like every other route (a probe then reads 503).
        raise SchedulerDisabledError(scheduling.disabled_message())
    armed = scheduling is not None and scheduling.engine is not None
    store = None if scheduling is None else scheduling.store
    reachable = False
    if store is not None:
        with anyio.move_on_after(PING_TIMEOUT_SECONDS):
            try:
                await store.ping()
                reachable = True
            except StoreUnavailableError:
                reachable = False
    ok = armed and reachable
    body = {
        "status": "ok" if ok else "unavailable",
        "scheduler": "armed" if armed else "not running",
        "ledger": "reachable" if reachable else "unreachable",
    }
    return JSONResponse(body, status_code=200 if ok else 503)
