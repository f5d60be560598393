"""Worker: APScheduler 3.11 ``AsyncIOScheduler``, memory job store, in ``bench/.venvs/aps3``.

    bench/.venvs/aps3/bin/python -m bench.aps3 steady '{"n": 1000, "seconds": 20}'

Job defaults match our schedules' defaults: ``max_instances=1`` (our ``on_overlap="skip"``),
``coalesce=True`` (we run the newest of several due slots), ``misfire_grace_time=None`` (we run
a dispatched slot however late). APScheduler 3 hands the scheduled time to events only, so the
handler records its start and the ``EVENT_JOB_EXECUTED`` listener pairs it with
``scheduled_run_time`` (first in, first out per job: ``max_instances=1`` keeps them in order).
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict, deque
from datetime import UTC, datetime
from typing import Any

from bench.common import (
    Firings,
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
from apscheduler.events import EVENT_JOB_EXECUTED, JobExecutionEvent  # noqa: E402
from apscheduler.schedulers.asyncio import AsyncIOScheduler  # noqa: E402
from apscheduler.triggers.cron import CronTrigger  # noqa: E402

FIRINGS = Firings()
_started: dict[str, deque[float]] = defaultdict(deque)


async def handler(key: str) -> None:
    _started[key].append(time.time())


def _executed(event: JobExecutionEvent) -> None:
    queue = _started.get(event.job_id)
    if queue:
        FIRINGS.starts.append((event.job_id, event.scheduled_run_time.timestamp(), queue.popleft()))


def build(n: int, **cron: Any) -> AsyncIOScheduler:
    scheduler = AsyncIOScheduler(
        timezone=UTC,
        job_defaults={"coalesce": True, "misfire_grace_time": None, "max_instances": 1},
    )
    scheduler.add_listener(_executed, EVENT_JOB_EXECUTED)
    for i in range(n):
        key = f"s{i}"
        scheduler.add_job(handler, CronTrigger(timezone=UTC, **cron), args=[key], id=key)
    return scheduler


async def steady(p: dict[str, Any]) -> dict[str, Any]:
    n, seconds = p["n"], p["seconds"]
    scheduler = build(n, second="*")
    scheduler.start()
    armed = time.time()
    first, last, cpu = await steady_window(armed, seconds)
    fired = sum(len(q) for q in _started.values()) + len(FIRINGS.starts)
    result = steady_figures(FIRINGS, n, first, last, cpu, fired)
    scheduler.shutdown(wait=False)
    return result | {"boot_s": armed - p["launch"]}


async def herd(p: dict[str, Any]) -> dict[str, Any]:
    n, at = p["n"], p["at"]
    instant = datetime.fromtimestamp(at, UTC)
    scheduler = build(n, second=instant.second, minute=instant.minute, hour=instant.hour)
    scheduler.start()
    armed = time.time()
    await wait_herd(FIRINGS, at, n, p)
    scheduler.shutdown(wait=False)
    return herd_figures(FIRINGS, n, at) | {"armed_before_s": at - armed}


async def idle(p: dict[str, Any]) -> dict[str, Any]:
    n, seconds = p["n"], p["seconds"]
    second = int(time.time() + p.get("boot_guess_s", 3.0) + seconds + 3) % 60
    scheduler = build(n, second=second)
    scheduler.start()
    armed = time.time()
    start, end = idle_window(armed, next_minute_slot(second, armed), seconds)
    result = await measure_idle(start, end)
    scheduler.shutdown(wait=False)
    return result | {"fired_in_window": len(FIRINGS.starts)}


async def boot(p: dict[str, Any]) -> dict[str, Any]:
    schedules_start = time.time()
    scheduler = build(p["n"], second=0, minute=0)
    t_defined = time.time()
    scheduler.start()
    # start() only queues the wake-up; armed means the first pass over the store has run
    await asyncio.sleep(0)
    armed = time.time()
    scheduler.shutdown(wait=False)
    return boot_figures(p["launch"], T_IMPORT0, schedules_start, t_defined, armed)


WORKLOADS = {"steady": steady, "herd": herd, "idle": idle, "boot": boot}


def main() -> None:
    worker_main(WORKLOADS)


if __name__ == "__main__":
    main()
