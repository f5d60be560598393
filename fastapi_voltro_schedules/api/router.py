"""``schedules_router``: include it in the app to expose the scheduler's routes.

Routes are added by the external-trigger and inspect features. The router also carries a
lifespan, so ``app.include_router(schedules_router)`` next to a module-level ``Scheduling`` is
the whole wiring: FastAPI's ``include_router`` merges the router's lifespan into the app's
(inside it), and it starts that ``Scheduling`` unless the app's own lifespan already did
(:mod:`fastapi_voltro_schedules.wiring` says which one, or refuses to guess).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter

from ..logs import ensure_visible, logger
from ..wiring import scheduling_for


@asynccontextmanager
async def router_lifespan(app: Any) -> AsyncIterator[None]:
    """Start the process's module-level ``Scheduling`` when the app's lifespan did not."""
    scheduling = scheduling_for(app)
    if scheduling is None:
        current = getattr(getattr(app, "state", None), "scheduling", None)
        if current is None:
            ensure_visible()
            logger.warning(
                "schedules_router: no Scheduling runs in this app — define one at module "
                "level (scheduling = Scheduling.from_package(...)) or pass "
                "lifespan=scheduling.lifespan; until then its routes answer 503"
            )
        yield
        return
    async with scheduling.run(app):
        yield


schedules_router = APIRouter(tags=["voltro schedules"], lifespan=router_lifespan)
