"""A test app for the operator CLI: ``uvicorn apps.operate_app:app`` or ``--app
apps.operate_app:app`` (``tests/`` on the path). Config from ``VOLTRO_*``.

Schedules (all far from firing during a test): ``ok`` succeeds, ``boom`` raises, ``berlin``
(``30 2 * * *`` Europe/Berlin) crosses the spring-forward gap on 2026-03-29, and
``brokenExportToTheDataWarehouse`` has a name longer than a narrow table's column (the CLI
must print it whole). Handler for run-time schedules: ``tenantReport``.
"""

from __future__ import annotations

from fastapi import FastAPI

from fastapi_voltro_schedules import (
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    define_handler,
    define_schedule,
    schedules_router,
)


async def ok(ctx: ScheduleContext) -> None:
    return None


async def boom(ctx: ScheduleContext) -> None:
    raise RuntimeError("boom on purpose")


scheduling = Scheduling(
    [
        define_schedule(name="ok", cron="0 3 1 1 *", timezone="UTC", handler=ok),
        define_schedule(name="boom", cron="0 3 1 1 *", timezone="UTC", handler=boom),
        define_schedule(name="berlin", cron="30 2 * * *", timezone="Europe/Berlin", handler=ok),
        define_schedule(
            name="brokenExportToTheDataWarehouse", cron="0 3 1 1 *", timezone="UTC", handler=boom
        ),
    ],
    config=SchedulingConfig(),
    handlers=[define_handler(name="tenantReport")(ok)],
)
app = FastAPI(lifespan=scheduling.lifespan)
app.include_router(schedules_router)
