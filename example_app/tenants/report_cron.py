"""The work a tenant's schedule names: code names the work, the tenants table the cadence.

Found by discovery like a schedule (the module name ends in ``_cron``). Each tenant's run-time
schedule ``tenant-report.{id}`` (``schedules.py``) names ``tenantReport`` and carries
``{"tenant_id": id}`` as its args.
"""

from __future__ import annotations

import logging

from sqlalchemy import func, select

from fastapi_voltro_schedules import ScheduleContext, define_handler

from ..db import tenant_reports, tenants

log = logging.getLogger("example_app")


@define_handler(name="tenantReport")
async def tenant_report(ctx: ScheduleContext) -> None:
    """Write the report of ``ctx.args["tenant_id"]`` for the slot, once per slot."""
    assert ctx.app is not None, "runs inside the app (or make_context(..., app=app) in a test)"
    tenant_id = int(ctx.args["tenant_id"])
    async with ctx.app.state.db.begin() as conn:
        name = await conn.scalar(select(tenants.c.name).where(tenants.c.id == tenant_id))
        if name is None:
            # The tenant was deleted and its schedule not yet (a crash between the two
            # writes, or a replica that has not read the delete): nothing to report on. The
            # next boot's reconcile deletes the schedule (schedules.py).
            log.warning("tenant report: tenant %s is gone — nothing written", tenant_id)
            return
        done = await conn.scalar(
            select(func.count()).where(
                tenant_reports.c.tenant_id == tenant_id, tenant_reports.c.slot == ctx.scheduled_at
            )
        )
        if not done:
            await conn.execute(
                tenant_reports.insert().values(
                    tenant_id=tenant_id,
                    slot=ctx.scheduled_at,
                    tenant_name=name,
                    run_id=ctx.run_id,
                )
            )
    log.info("tenant report: %s (%s) for slot %s", name, tenant_id, ctx.scheduled_at.isoformat())
