"""The APScheduler 4 job function. A module of its own: APScheduler 4 stores tasks by
reference (``module:function``), and the worker itself runs as ``__main__``."""

from __future__ import annotations

from apscheduler import current_job

from bench.common import Firings

FIRINGS = Firings()


async def handler(key: str) -> None:
    FIRINGS.record(key, current_job.get().scheduled_fire_time.timestamp())
