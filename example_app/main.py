"""Run it: ``uvicorn example_app.main:app`` (SQLite ledger in ./voltro.db by default;
``VOLTRO_DATABASE_URL=postgresql+asyncpg://...`` for replicas, after ``voltro migrate``).

The app's own lifespan owns its database engine (``app.state.db``, which handlers reach as
``ctx.app.state.db``) and composes the scheduler into it with ``scheduling.run(app)``; the
scheduler shares that engine for its ledger. Once the scheduler runs, the lifespan reconciles
each tenant with its report schedule (``tenants/schedules.py``: what a crash between a
tenant's two writes left half done is finished before the first request).

``create_app`` is how the tests build the same app on their own database and clock.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from prometheus_fastapi_instrumentator import Instrumentator
from sqlalchemy.ext.asyncio import AsyncEngine

from fastapi_voltro_schedules import Scheduling, SchedulingConfig, schedules_router

from .billing.routes import router as billing_router
from .db import create_tables, make_engine
from .logging_config import configure_logging
from .tenants.routes import router as tenants_router
from .tenants.schedules import reconcile_tenants


def create_app(engine: AsyncEngine, scheduling: Scheduling) -> FastAPI:
    """The example app on ``engine`` (its tables and the ledger), run by ``scheduling``."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.db = engine
        await create_tables(engine)
        try:
            async with scheduling.run(app):  # boots the ledger, arms the timers; stops them on exit
                await reconcile_tenants(scheduling, engine)
                yield
        finally:
            await engine.dispose()  # shared: the scheduler leaves an engine it was given to us

    app = FastAPI(title="voltro example", lifespan=lifespan)
    app.include_router(schedules_router)
    app.include_router(billing_router)
    app.include_router(tenants_router)
    # HTTP series (requests, latency) on the default registry. No `.expose(app)`:
    # schedules_router already serves GET /metrics from that registry, so one scrape carries both.
    Instrumentator().instrument(app)
    return app


configure_logging()
engine = make_engine()
scheduling = Scheduling.from_package("example_app", config=SchedulingConfig(), engine=engine)
app = create_app(engine, scheduling)
