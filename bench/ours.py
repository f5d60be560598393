"""Worker: our engine, in the main venv, ledger on SQLite or Postgres.

    python -m bench.ours steady '{"n": 1000, "seconds": 20, "url": "sqlite+aiosqlite:///…"}'

The handler records its own start (``time.time()``) against ``ctx.scheduled_at``, exactly as
the APScheduler workers do, so lag means "handler started − slot" in every column. After the
window the ledger is read back for the status breakdown (and, in smoke mode, exactly-once).
Boot logs one INFO line per schedule to stderr, as in production; the harness keeps stderr in
a log file.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from datetime import UTC, datetime
from typing import Any

from bench.common import (
    Firings,
    boot_figures,
    emit,
    herd_figures,
    idle_window,
    measure_idle,
    next_minute_slot,
    steady_figures,
    steady_window,
    wait_herd,
    worker_main,
)

T_IMPORT0 = time.time()
from sqlalchemy import func, select  # noqa: E402
from sqlalchemy.ext.asyncio import create_async_engine  # noqa: E402

from fastapi_voltro_schedules import (  # noqa: E402
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    define_handler,
    define_schedule,
    schedules_router,
)
from fastapi_voltro_schedules.models import runs_table  # noqa: E402

FIRINGS = Firings()


async def handler(ctx: ScheduleContext) -> None:
    FIRINGS.record(ctx.name, ctx.scheduled_at.timestamp())


@define_handler(name="benchHerd")
async def written_handler(ctx: ScheduleContext) -> None:
    """The run-time schedules' handler (``bench.runtime_herd``): the same record as
    :func:`handler`, so a written herd and a declared one are measured alike."""
    FIRINGS.record(ctx.name, ctx.scheduled_at.timestamp())


def build(
    n: int, cron: str, url: str, coordination: str | None = None, heartbeat_ms: int = 2000
) -> Scheduling:
    schedules = [
        define_schedule(name=f"s{i}", cron=cron, timezone="UTC", handler=handler) for i in range(n)
    ]
    extra: dict[str, Any] = {}
    if coordination:
        # cluster: a 2 s beat by default (leases of 4 s), so ownership settles among the three
        # within the lead, and a beat renewing 10,000 leases on a loaded box stays inside its
        # lease (``bench.scale --cluster-heartbeat-ms`` for more schedules)
        extra = {"coordination": coordination, "schedule_heartbeat_ms": heartbeat_ms}
    config = SchedulingConfig(
        database_url=url, run_retention_ms=None, shutdown_grace_ms=2000, **extra
    )
    return Scheduling(schedules, config=config)


async def ledger(url: str, first: float, last: float) -> dict[str, Any]:
    """Rows per status for slots in ``first..last``, and slots holding more than one run."""
    engine = create_async_engine(url)
    lo = datetime.fromtimestamp(first, UTC)
    hi = datetime.fromtimestamp(last, UTC)
    window = runs_table.c.scheduled_at.between(lo, hi)
    try:
        async with engine.connect() as conn:
            by_status = dict(
                (
                    await conn.execute(
                        select(runs_table.c.status, func.count())
                        .where(window)
                        .group_by(runs_table.c.status)
                    )
                ).all()
            )
            ran = runs_table.c.status.in_(["succeeded", "running", "failed"])
            doubled = (
                select(runs_table.c.name)
                .where(window, ran)
                .group_by(runs_table.c.name, runs_table.c.scheduled_at)
                .having(func.count() > 1)
                .subquery()
            )
            duplicates = (await conn.execute(select(func.count()).select_from(doubled))).scalar()
    finally:
        await engine.dispose()
    return {
        "ledger": {str(k): int(v) for k, v in by_status.items()},
        "ledger_duplicates": int(duplicates or 0),
    }


async def finish(result: dict[str, Any], graceful: bool) -> None:
    if graceful:
        return  # the caller leaves the `async with` and shuts the scheduler down
    emit(result)
    # A backlog of thousands of runs would be cancelled one shielded UPDATE at a time; the
    # figures are taken, so leave without the drain.
    sys.stderr.flush()
    os._exit(0)


async def steady(p: dict[str, Any]) -> dict[str, Any]:
    n, seconds, url = p["n"], p["seconds"], p["url"]
    scheduling = build(n, "* * * * * *", url)
    async with scheduling.run():
        armed = time.time()
        if p.get("gc_freeze"):
            gc.collect()
            gc.freeze()
        first, last, cpu = await steady_window(armed, seconds)
        result = steady_figures(FIRINGS, n, first, last, cpu, len(FIRINGS.starts))
        result |= {"boot_s": armed - p["launch"]}
        result |= await ledger(url, first, last)
        await finish(result, p.get("graceful", False))
    # graceful: the ledger after shutdown is final — every slot ended one way or another
    return result | await ledger(url, first, last)


async def herd(p: dict[str, Any]) -> dict[str, Any]:
    n, at, url = p["n"], p["at"], p["url"]
    instant = datetime.fromtimestamp(at, UTC)
    cron = f"{instant.second} {instant.minute} {instant.hour} * * *"
    scheduling = build(n, cron, url, p.get("coordination"), p.get("heartbeat_ms", 2000))
    async with scheduling.run():
        armed = time.time()
        claim_statements = count_claim_statements(scheduling)
        await wait_herd(FIRINGS, at, n, p)
        result = herd_figures(FIRINGS, n, at) | {
            "armed_before_s": at - armed,
            "claim_round_trips": claim_statements[0],
            "fence_round_trips": claim_statements[1],
        }
        result |= await ledger(url, at, at)
        await finish(result, p.get("graceful", False))
    return result | await ledger(url, at, at)


def count_claim_statements(scheduling: Scheduling) -> list[int]:
    """Count, from now on, the claim INSERTs this replica sends (a round trip each) and, under
    ``cluster``, the lease-fence reads that replace them (``[claims, fences]``)."""
    from sqlalchemy import event

    from fastapi_voltro_schedules.models import CLAIMS_TABLE, LEASES_TABLE
    from fastapi_voltro_schedules.store.instrumented import sql_store_behind

    counter = [0, 0]
    # past the metrics seam (InstrumentedStore) to the SQL store and its engine
    store = sql_store_behind(scheduling.store) if scheduling.store is not None else None
    if store is not None:

        @event.listens_for(store.engine.sync_engine, "before_cursor_execute")
        def _count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            head = statement.lstrip().upper()
            if head.startswith("INSERT") and CLAIMS_TABLE in statement:
                counter[0] += 1
            elif head.startswith("SELECT") and LEASES_TABLE in statement and "SHARE" in head:
                counter[1] += 1

    return counter


async def idle(p: dict[str, Any]) -> dict[str, Any]:
    n, seconds, url = p["n"], p["seconds"], p["url"]
    second = int(time.time() + p.get("boot_guess_s", 3.0) + seconds + 3) % 60
    scheduling = build(n, f"{second} * * * * *", url)
    async with scheduling.run():
        armed = time.time()
        start, end = idle_window(armed, next_minute_slot(second, armed), seconds)
        result = await measure_idle(start, end)
        result |= {"fired_in_window": len(FIRINGS.starts)}
        await finish(result, p.get("graceful", False))
    return result


async def boot(p: dict[str, Any]) -> dict[str, Any]:
    schedules_start = time.time()
    scheduling = build(p["n"], "0 0 * * * *", p["url"])
    t_defined = time.time()
    async with scheduling.run():
        armed = time.time()
        result = boot_figures(p["launch"], T_IMPORT0, schedules_start, t_defined, armed)
        # Always leave hard: boot measures arming only, and a stop within the first moments
        # (the first retention sweep still on its connection) once hung asyncio.run's exit on
        # a pending aiosqlite graceful close — reported, not worked around in the package.
        await finish(result, graceful=False)
    return result


async def written_herd(p: dict[str, Any]) -> dict[str, Any]:
    """A replica with no declared schedule: ``p["n"]`` run-time schedules are written while it
    runs (by ``bench.runtime_herd``, over HTTP on the replica given ``serve_port``), all due at
    ``p["at"]``. Figures: when this replica had every one armed (``has_all_at``), and the herd.

    ``p["declared"]``: the yardstick — the same replica (config, app, routes served, handler),
    its ``n`` schedules declared in code instead; nothing is written to it."""
    import anyio
    import uvicorn
    from fastapi import FastAPI

    n, at, url = p["n"], p["at"], p["url"]
    declared = []
    if p.get("declared"):
        instant = datetime.fromtimestamp(at, UTC)
        cron = f"{instant.second} {instant.minute} {instant.hour} * * *"
        declared = [
            define_schedule(name=f"w{i}", cron=cron, timezone="UTC", handler=written_handler)
            for i in range(n)
        ]
    extra: dict[str, Any] = {
        key: p[key] for key in ("coordination", "change_strategy", "inspect_token") if p.get(key)
    }
    config = SchedulingConfig(
        database_url=url,
        run_retention_ms=None,
        shutdown_grace_ms=2000,
        replica_id=p["replica_id"],
        schedule_heartbeat_ms=p.get("heartbeat_ms", 2000),
        **extra,
    )
    scheduling = Scheduling(declared, config=config, handlers=[written_handler])
    app = FastAPI()
    app.include_router(schedules_router)
    async with scheduling.run(app), anyio.create_task_group() as tg:
        server = None
        if p.get("serve_port"):
            server = uvicorn.Server(
                uvicorn.Config(
                    app,
                    port=p["serve_port"],
                    log_level="warning",
                    lifespan="off",
                    access_log=False,
                )
            )
            tg.start_soon(server.serve)
        engine = scheduling.running_engine()
        while engine.schedule_count < n and time.time() < at:
            await anyio.sleep(0.02)
        has_all_at = time.time() if engine.schedule_count >= n else None
        await wait_herd(FIRINGS, at, n, p)
        result = herd_figures(FIRINGS, n, at) | {
            "has_all_at": has_all_at,
            "armed_before_s": at - (has_all_at or at + 1),
        }
        result |= await ledger(url, at, at)
        if server is not None:
            server.should_exit = True
        await finish(result, p.get("graceful", False))
    return result


WORKLOADS = {
    "steady": steady,
    "herd": herd,
    "idle": idle,
    "boot": boot,
    "written_herd": written_herd,
}


def main() -> None:
    worker_main(WORKLOADS)


if __name__ == "__main__":
    main()
