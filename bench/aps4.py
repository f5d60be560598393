"""Worker: APScheduler 4 (pre-release) ``AsyncScheduler`` with ``SQLAlchemyDataStore`` on
SQLite (aiosqlite), in ``bench/.venvs/aps4``.

    bench/.venvs/aps4/bin/python -m bench.aps4 steady '{"n": 1000, "seconds": 20, "url": …}'

Defaults kept, and they match ours: ``coalesce=latest``, ``misfire_grace_time=None``,
``max_running_jobs=1`` per task; ``max_concurrent_jobs=100`` per scheduler (its default). The
handler reads the slot from ``current_job.get().scheduled_fire_time``.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from bench.common import (
    boot_figures,
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
from apscheduler import AsyncScheduler  # noqa: E402
from apscheduler.datastores.sqlalchemy import SQLAlchemyDataStore  # noqa: E402
from apscheduler.triggers.cron import CronTrigger  # noqa: E402
from sqlalchemy.ext.asyncio import create_async_engine  # noqa: E402

from bench.aps4_task import FIRINGS, handler  # noqa: E402


async def arm(scheduler: AsyncScheduler, n: int, **cron: Any) -> None:
    for i in range(n):
        key = f"s{i}"
        await scheduler.add_schedule(
            handler, CronTrigger(timezone=UTC, **cron), id=key, kwargs={"key": key}
        )
    await scheduler.start_in_background()


def scheduler_for(url: str) -> AsyncScheduler:
    return AsyncScheduler(SQLAlchemyDataStore(create_async_engine(url)))


async def steady(p: dict[str, Any]) -> dict[str, Any]:
    n, seconds = p["n"], p["seconds"]
    async with scheduler_for(p["url"]) as scheduler:
        await arm(scheduler, n, second="*")
        armed = time.time()
        first, last, cpu = await steady_window(armed, seconds)
        result = steady_figures(FIRINGS, n, first, last, cpu, len(FIRINGS.starts))
        return result | {"boot_s": armed - p["launch"]}


async def herd(p: dict[str, Any]) -> dict[str, Any]:
    n, at = p["n"], p["at"]
    instant = datetime.fromtimestamp(at, UTC)
    async with scheduler_for(p["url"]) as scheduler:
        await arm(scheduler, n, second=instant.second, minute=instant.minute, hour=instant.hour)
        armed = time.time()
        await wait_herd(FIRINGS, at, n, p)
        return herd_figures(FIRINGS, n, at) | {"armed_before_s": at - armed}


async def idle(p: dict[str, Any]) -> dict[str, Any]:
    n, seconds = p["n"], p["seconds"]
    second = int(time.time() + p.get("boot_guess_s", 3.0) + seconds + 3) % 60
    async with scheduler_for(p["url"]) as scheduler:
        await arm(scheduler, n, second=second)
        armed = time.time()
        start, end = idle_window(armed, next_minute_slot(second, armed), seconds)
        result = await measure_idle(start, end)
        return result | {"fired_in_window": len(FIRINGS.starts)}


async def boot(p: dict[str, Any]) -> dict[str, Any]:
    schedules_start = time.time()
    async with scheduler_for(p["url"]) as scheduler:
        t_defined = time.time()  # data store initialised (tables created)
        await arm(scheduler, p["n"], second=0, minute=0)
        armed = time.time()
        return boot_figures(p["launch"], T_IMPORT0, schedules_start, t_defined, armed)


WORKLOADS = {"steady": steady, "herd": herd, "idle": idle, "boot": boot}


def main() -> None:
    worker_main(WORKLOADS)


if __name__ == "__main__":
    main()
