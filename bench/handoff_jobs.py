"""The worker side of ``bench/handoff.py``: one trivial job per engine that writes the wall-clock
instant it started into ``BENCH_HANDOFF_MARKS/<key>`` (the key comes in the payload).

- arq:           ``arq bench.handoff_jobs.ArqWorker``
- Celery:        ``celery -A bench.handoff_jobs.celery_app worker --pool=threads``
- procrastinate: ``procrastinate --app bench.handoff_jobs.procrastinate_app worker``

Connections from ``BENCH_HANDOFF_REDIS_URL``, ``BENCH_HANDOFF_QUEUE`` and
``BENCH_HANDOFF_PROCRASTINATE_DSN``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import procrastinate
from arq.connections import RedisSettings
from celery import Celery

from fastapi_voltro_schedules.handoff.celery import OncePerJob

REDIS_URL = os.environ.get("BENCH_HANDOFF_REDIS_URL", "redis://127.0.0.1:6379/5")
QUEUE = os.environ.get("BENCH_HANDOFF_QUEUE", "voltro-bench:handoff")


def mark(payload: dict[str, Any]) -> None:
    started = time.time()
    (Path(os.environ["BENCH_HANDOFF_MARKS"]) / payload["key"]).write_text(repr(started))


async def bench_job(ctx: dict[str, Any], payload: dict[str, Any]) -> None:
    mark(payload)


class ArqWorker:
    functions = [bench_job]  # noqa: RUF012 - arq reads a class attribute
    redis_settings = RedisSettings.from_dsn(REDIS_URL)
    queue_name = QUEUE
    poll_delay = 0.05
    max_jobs = 50


celery_app = Celery("voltro-bench", broker=REDIS_URL, backend=REDIS_URL)
celery_app.conf.update(
    task_default_queue=QUEUE,
    task_track_started=True,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


@celery_app.task(base=OncePerJob, name="bench_job")
def celery_bench_job(payload: dict[str, Any]) -> None:
    mark(payload)


procrastinate_app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(
        conninfo=os.environ.get("BENCH_HANDOFF_PROCRASTINATE_DSN", ""), min_size=1, max_size=8
    )
)


@procrastinate_app.task(name="bench_job")
async def procrastinate_bench_job(payload: dict[str, Any]) -> None:
    mark(payload)
