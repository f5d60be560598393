"""``schedules_router``: include it in the app to expose the scheduler's routes.

Routes are added by the external-trigger and inspect features. The router also carries a
lifespan, so ``app.include_router(schedules_router)`` next to a module-level ``Scheduling`` is
the whole wiring: FastAPI's ``include_router`` merges the router's lifespan into the app's
(inside it), and it starts that ``Scheduling`` unless the app's own lifespan already did
(:mod:`fastapi_voltro_schedules.wiring` says which one, or refuses to guess).
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter

from ..logs import ensure_visible, logger
from ..wiring import scheduling_for

PUT_SCHEDULE = "putSchedule"


def describe_handlers(app: Any) -> None:
    """Publish the PUT body's ``handler`` as the handlers this app registered (an ``enum``):
    they are known only once its ``Scheduling`` booted, and a client — or a generator, or a
    fuzzer — then sends only names the route takes. Wraps ``app.openapi`` once; the schema is
    built on first request, after boot."""
    produce = getattr(app, "openapi", None)
    if produce is None or getattr(produce, "voltro_handlers", False):
        return

    def openapi() -> dict[str, Any]:
        schema: dict[str, Any] = produce()
        scheduling = getattr(getattr(app, "state", None), "scheduling", None)
        names = sorted(getattr(scheduling, "handlers", None) or ())
        for item in schema.get("paths", {}).values():
            operation = item.get("put")
            if not names or not operation or operation.get("operationId") != PUT_SCHEDULE:
                continue
            # A copy: FastAPI put the route's own openapi_extra dict here, shared by every app.
            body = copy.deepcopy(operation["requestBody"])
            body["content"]["application/json"]["schema"]["properties"]["handler"]["enum"] = names
            operation["requestBody"] = body
        return schema

    openapi.voltro_handlers = True  # type: ignore[attr-defined]
    app.openapi = openapi


@asynccontextmanager
async def router_lifespan(app: Any) -> AsyncIterator[None]:
    """Start the process's module-level ``Scheduling`` when the app's lifespan did not."""
    describe_handlers(app)
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


TAG = "voltro schedules"
"""The one OpenAPI tag of every route the package adds: a client generator groups them into one
class (``VoltroSchedulesApi``), apart from the app's own."""

schedules_router = APIRouter(tags=[TAG], lifespan=router_lifespan)
