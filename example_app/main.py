"""Run it: ``uvicorn example_app.main:app`` (SQLite ledger in ./voltro.db by default)."""

from __future__ import annotations

from fastapi import FastAPI
from prometheus_fastapi_instrumentator import Instrumentator

from fastapi_voltro_schedules import Scheduling, SchedulingConfig, schedules_router

from .billing.routes import router as billing_router

scheduling = Scheduling.from_package("example_app", config=SchedulingConfig())
app = FastAPI(title="voltro example", lifespan=scheduling.lifespan)
app.include_router(schedules_router)
app.include_router(billing_router)

# HTTP series (requests, latency) on the default registry. No `.expose(app)`: schedules_router
# already serves GET /metrics from that registry, so one scrape carries both.
Instrumentator().instrument(app)
