"""A ``trigger="external"`` schedule: the platform's scheduler (a Kubernetes CronJob, see
``example_app/deploy/``) owns the clock; the app owns the ledger and runs the handler when the
CronJob POSTs ``/_voltro/schedules/weeklyReport/trigger``.

Regenerate its CronJob after changing the cron or zone::

    voltro schedule-manifest --app example_app.main:app --provider kubernetes \\
        --base-url http://voltro-example:8000 --out example_app/deploy/cronjobs
"""

from __future__ import annotations

import logging

from fastapi_voltro_schedules import ScheduleContext, define_schedule

log = logging.getLogger("example_app")


@define_schedule(
    name="weeklyReport",
    cron="0 6 * * 1",
    timezone="Europe/Berlin",
    trigger="external",
    max_runtime_ms=600_000,
    description="Mondays 06:00 Berlin: build the weekly billing report.",
)
async def weekly_report(ctx: ScheduleContext) -> None:
    # ctx.scheduled_at is the Monday 06:00 slot the CronJob stated, even when its pod was late.
    log.info("weekly report for the week ending %s", ctx.scheduled_at.date().isoformat())
