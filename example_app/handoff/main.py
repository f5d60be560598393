"""Run it: ``uvicorn example_app.handoff.main:app`` beside a Celery worker (see the package
docstring). The example app with one more schedule, ``ledgerExport``, whose firing is handed
to Celery: the run row names the Celery task (``job_id``) and ends with the task's outcome.
"""

from __future__ import annotations

from typing import Any

from fastapi_voltro_schedules import (
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    WorkflowTarget,
    define_schedule,
    discover_schedules,
)
from fastapi_voltro_schedules.handoff import Handoff
from fastapi_voltro_schedules.handoff.celery import CeleryEngine

from ..db import make_engine
from ..logging_config import configure_logging
from ..main import create_app
from .tasks import app as celery_app


def export_input(ctx: ScheduleContext) -> dict[str, Any]:
    return {"day": ctx.scheduled_at.date().isoformat()}


ledger_export = define_schedule(
    name="ledgerExport",
    cron="0 3 * * *",
    timezone="UTC",
    description="03:00 UTC: the ledger export, on a Celery worker.",
    workflow=WorkflowTarget(name="example.export_ledger", payload=export_input),
)


def create_scheduling(**kwargs: Any) -> Scheduling:
    """The example's schedules plus ``ledgerExport``, handing off to the Celery app."""
    schedules = [*discover_schedules("example_app"), ledger_export]
    return Scheduling(schedules, workflows=Handoff(CeleryEngine(celery_app)), **kwargs)


configure_logging()
engine = make_engine()
scheduling = create_scheduling(config=SchedulingConfig(), engine=engine)
app = create_app(engine, scheduling)
