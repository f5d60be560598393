"""The probes, no token (a kubelet carries none) and nothing secret in a body:

* ``GET /_voltro/health/live`` — liveness: ``200`` whenever the process answers HTTP. It asks
  nothing of the database: a liveness probe that failed with the ledger would have the kubelet
  restart every replica because the database blinked, which brings nothing back.
* ``GET /_voltro/health/ready`` — readiness: ``200`` only when the scheduler is armed, the
  ledger answers a round trip within :data:`PING_TIMEOUT_SECONDS` and its schema is the one
  this version runs on (Alembic head); else ``503`` naming what is not ready and the remedy
  (``run `voltro migrate```, say). The schema is read on every call: a ``voltro migrate`` of
  another release, or a restored database, changes it while the process runs.
* ``GET /_voltro/health`` — the combined probe of earlier versions (armed and reachable), kept
  for the Deployments that point at it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from ..errors import SchedulerDisabledError, StoreUnavailableError
from ..logs import logger
from .errors import STORE_UNAVAILABLE, VoltroRoute

if TYPE_CHECKING:
    from ..scheduling import Scheduling

router = APIRouter(route_class=VoltroRoute)

PING_TIMEOUT_SECONDS = 2.0
"""How long a probe waits for the ledger (each of the round trip and the schema read)."""

HEALTH = "/_voltro/health"
LIVE = f"{HEALTH}/live"
READY = f"{HEALTH}/ready"


class HealthView(BaseModel):
    """``GET /_voltro/health``: the scheduler armed and the ledger reachable."""

    status: Literal["ok", "unavailable"]
    scheduler: Literal["armed", "not running"]
    ledger: Literal["reachable", "unreachable"]


class LiveView(BaseModel):
    """``GET /_voltro/health/live``: the process serves."""

    status: Literal["alive"]


class ReadyView(BaseModel):
    """``GET /_voltro/health/ready``: each part readiness needs, and (503) what is not ready
    with its remedy."""

    status: Literal["ready", "not ready"]
    scheduler: Literal["armed", "not running", "disabled"]
    ledger: Literal["reachable", "unreachable", "unchecked"] = Field(
        description="unchecked: the scheduler is not running, so there is no ledger to ask."
    )
    ledger_schema: Literal["at head", "not at head", "unchecked"] = Field(
        alias="schema",
        description="Whether the ledger's tables are at the newest migration this version "
        "ships (what boot checks); unchecked when the ledger was not reached.",
    )
    code: (
        Literal["scheduler_not_running", "scheduler_disabled", "store_unavailable", "schema"] | None
    ) = Field(description="What is not ready (stable, for machines); null when ready.")
    detail: str | None = Field(description="What is not ready and the remedy; null when ready.")


def _ready(
    scheduler: str,
    ledger: str = "unchecked",
    schema: str = "unchecked",
    code: str | None = None,
    detail: str | None = None,
) -> JSONResponse:
    view = ReadyView.model_validate(
        {
            "status": "ready" if code is None else "not ready",
            "scheduler": scheduler,
            "ledger": ledger,
            "schema": schema,
            "code": code,
            "detail": detail,
        }
    )
    return JSONResponse(view.model_dump(by_alias=True), status_code=200 if code is None else 503)


async def _reachable(scheduling: Scheduling) -> bool:
    store = scheduling.store
    if store is None:
        return False
    with anyio.move_on_after(PING_TIMEOUT_SECONDS):
        try:
            await store.ping()
            return True
        except StoreUnavailableError:
            return False
    return False


@router.get(
    LIVE,
    operation_id="getLiveness",
    summary="Liveness: 200 while the process serves (no token, no database)",
    response_model=LiveView,
)
async def live() -> LiveView:
    return LiveView(status="alive")


@router.get(
    READY,
    operation_id="getReadiness",
    summary="Readiness: scheduler armed, ledger answering, schema at head (no token)",
    response_model=ReadyView,
    responses={503: {"model": ReadyView, "description": "Not ready: `code` and `detail` say "
                     "what, and the remedy."}},
)  # fmt: skip
async def ready(request: Request) -> JSONResponse:
    scheduling: Scheduling | None = getattr(request.app.state, "scheduling", None)
    if scheduling is not None and not scheduling.config.scheduler_enabled:
        return _ready("disabled", code="scheduler_disabled", detail=scheduling.disabled_message())
    if scheduling is None or scheduling.engine is None:
        return _ready(
            "not running",
            code="scheduler_not_running",
            detail="the scheduler is not running in this app (booting, stopping, or never "
            "started) — include schedules_router with a module-level Scheduling(...), or pass "
            "lifespan=scheduling.lifespan to FastAPI(); the app's log says why a boot failed",
        )
    if not await _reachable(scheduling):
        return _ready("armed", "unreachable", code="store_unavailable", detail=STORE_UNAVAILABLE)
    pending: str | None = None
    with anyio.move_on_after(PING_TIMEOUT_SECONDS) as scope:
        try:
            pending = await scheduling.schema_pending()
        except StoreUnavailableError as error:
            logger.warning("readiness: the ledger's schema could not be read — %s", error)
            return _ready(
                "armed", "unreachable", code="store_unavailable", detail=STORE_UNAVAILABLE
            )
    if scope.cancelled_caught:
        return _ready("armed", "unreachable", code="store_unavailable", detail=STORE_UNAVAILABLE)
    if pending is not None:
        return _ready(
            "armed",
            "reachable",
            "not at head",
            code="schema",
            detail=f"the ledger's schema is not the one this version runs on: it {pending} — "
            "run `voltro migrate` (with this release's package; it reads "
            "VOLTRO_DATABASE_URL) and the probe turns ready on its next call",
        )
    return _ready("armed", "reachable", "at head")


@router.get(
    HEALTH,
    operation_id="getHealth",
    summary="Scheduler armed and ledger reachable (no token; prefer /live and /ready)",
    response_model=HealthView,
    responses={
        503: {
            "description": "The scheduler or the ledger is down (HealthView), or the "
            "scheduler is switched off (scheduler_disabled, ErrorBody).",
            "content": {
                "application/json": {
                    "schema": {
                        "anyOf": [
                            {"$ref": "#/components/schemas/HealthView"},
                            {"$ref": "#/components/schemas/ErrorBody"},
                        ]
                    }
                }
            },
        },
    },
)
async def health(request: Request) -> JSONResponse:
    scheduling: Scheduling | None = getattr(request.app.state, "scheduling", None)
    if scheduling is not None and not scheduling.config.scheduler_enabled:
        # Switched off on purpose: say so like every other route (a probe then reads 503).
        raise SchedulerDisabledError(scheduling.disabled_message())
    armed = scheduling is not None and scheduling.engine is not None
    reachable = scheduling is not None and await _reachable(scheduling)
    ok = armed and reachable
    body = HealthView(
        status="ok" if ok else "unavailable",
        scheduler="armed" if armed else "not running",
        ledger="reachable" if reachable else "unreachable",
    )
    return JSONResponse(body.model_dump(), status_code=200 if ok else 503)


__all__ = ["HEALTH", "LIVE", "PING_TIMEOUT_SECONDS", "READY", "router"]
