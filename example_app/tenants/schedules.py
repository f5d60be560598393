"""Each tenant row and its run-time schedule ``tenant-report.{id}``, kept in step.

Why this shape. A tenant is two writes: its row in ``example_tenants`` (the app's table) and
its schedule (``put_schedule``, a version in ``_voltro_schedule_definitions``). They cannot be
one transaction — the scheduler writes its versions through its own store — so a crash can
fall between them. Rather than hope it does not, the row is the truth and the schedule is
derived from it:

1. **Row first, then the schedule**, in every route: a crash in between leaves a row whose
   schedule is missing or stale (create, edit) or a schedule whose row is gone (delete) —
   never a schedule the rows do not explain the next time anyone looks.
2. **The schedule write is idempotent by name.** :func:`sync_tenant` reads the row and puts
   the definition it implies (``put_schedule`` of the same definition writes nothing) or,
   with no row, deletes the schedule (already gone is fine). Running it again, or on two
   replicas at once, converges on the same state.
3. **Every boot reconciles** (:func:`reconcile_tenants`, in the app's lifespan): each tenant
   is synced, and so is each ``tenant-report.*`` schedule without a row. So whatever a crash
   left half done is finished before the app serves a request; meanwhile a stray firing for a
   deleted tenant finds no row and writes nothing (``report_cron.py``).

Two writers on one tenant (two requests, or a request beside a booting replica's reconcile)
could each put what they read, the older last. So :func:`sync_tenant` reads the row again
after its write and goes round once more if the row changed meanwhile: whoever writes the
schedule last has read the row after every row write but its own, and the last row wins.

Not chosen: writing the schedule first (an orphan schedule would fire before a row exists to
explain it), or a periodic sweep (one more declared schedule; the boot reconcile plus the
re-read cover a crash, and a failed request answers 503 so its caller retries).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from fastapi_voltro_schedules import InvalidScheduleError, Scheduling
from fastapi_voltro_schedules.errors import ScheduleNotFoundError

from ..db import tenants

log = logging.getLogger("example_app")

HANDLER = "tenantReport"
PREFIX = "tenant-report."
SYNC_ROUNDS = 5
"""How often :func:`sync_tenant` follows a row that keeps changing under it before giving up
(each round is one write; a row edited five times during one sync is a caller's loop)."""


def schedule_name(tenant_id: int) -> str:
    return f"{PREFIX}{tenant_id}"


def tenant_of(schedule: str) -> int | None:
    """The tenant id a schedule name stands for; ``None`` for any other schedule."""
    match = re.fullmatch(rf"{re.escape(PREFIX)}(\d+)", schedule)
    return int(match.group(1)) if match else None


@dataclass(frozen=True, slots=True)
class Wanted:
    """The run-time schedule a tenant row implies."""

    cron: str
    timezone: str
    args: dict[str, Any]


def wanted(row: Any) -> Wanted | None:
    """The schedule ``row`` implies (its report hour, every day, in its zone); ``None`` when
    there is no row — the schedule must not exist."""
    if row is None:
        return None
    return Wanted(f"0 {row.report_hour} * * *", row.timezone, {"tenant_id": row.id})


async def read_tenant(db: AsyncEngine, tenant_id: int) -> Any:
    async with db.connect() as conn:
        result = await conn.execute(select(tenants).where(tenants.c.id == tenant_id))
        return result.first()


async def sync_tenant(scheduling: Scheduling, db: AsyncEngine, tenant_id: int) -> Wanted | None:
    """Make ``tenant-report.{tenant_id}`` what the tenant's row says (see the module
    docstring); returns what it wrote. Raises what the scheduler raises
    (``StoreUnavailableError``, ``SchedulerDisabledError``): the row stays, and the next sync —
    a retry, or the next boot — finishes the job."""
    name = schedule_name(tenant_id)
    for _ in range(SYNC_ROUNDS):
        want = wanted(await read_tenant(db, tenant_id))
        if want is None:
            try:
                await scheduling.delete_schedule(name, by="example_app")
            except ScheduleNotFoundError:
                pass  # never written, or deleted already: what we want
        else:
            await scheduling.put_schedule(
                name,
                cron=want.cron,
                timezone=want.timezone,
                handler=HANDLER,
                args=want.args,
                by="example_app",
            )
        if wanted(await read_tenant(db, tenant_id)) == want:
            return want
    raise RuntimeError(
        f"tenant {tenant_id} changed {SYNC_ROUNDS} times while its schedule was written — "
        "retry; the next boot reconciles it too"
    )


async def reconcile_tenants(scheduling: Scheduling, db: AsyncEngine) -> int:
    """Boot: sync every tenant, and every ``tenant-report.*`` schedule without a tenant.
    Returns how many were synced. Skipped when the scheduler is switched off (nothing can be
    written; the next boot with it on reconciles)."""
    if not scheduling.config.scheduler_enabled:
        return 0
    # The schedules are read before the rows: a route writes the row before the schedule, so
    # a schedule seen here has its row committed already — unless it was deleted since, and
    # then deleting the schedule is right.
    written = {
        tenant
        for s in scheduling.schedules
        if s.source == "runtime" and (tenant := tenant_of(s.name)) is not None
    }
    async with db.connect() as conn:
        rows = set((await conn.execute(select(tenants.c.id))).scalars())
    ids = sorted(written | rows)
    for tenant_id in ids:
        try:
            await sync_tenant(scheduling, db, tenant_id)
        except InvalidScheduleError as exc:  # one bad row must not keep the app down
            log.warning("tenants: tenant %s has no schedule — %s; fix its row", tenant_id, exc)
    if ids:
        log.info(
            "tenants: %d tenant schedule(s) reconciled (%d had no tenant row)",
            len(ids),
            len(written - rows),
        )
    return len(ids)
