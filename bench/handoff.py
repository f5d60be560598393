"""Hand-off cost: throughput and the lag each firing gains when its work runs on a job engine's
worker instead of in the web process.

    python -m bench.handoff --postgres-url URL --redis-url URL [--firings 200]
                            [--engine in-process --engine arq ...]

One process holds the scheduler (a ``Scheduling`` on the Postgres ledger, a ``ManualClock``);
``--firings`` schedules (``0 * * * * *``) fire as one herd when the clock is moved to the next
minute. In process, each handler writes down when it started; handed off (``workflow=`` with
``Handoff(engine, poll_interval=0.1)``), each job does the same on a real worker process. Per
engine, two herds: the first warms pools, worker and caches; the second is measured:

- ``lag`` — from the clock's move (the herd coming due) to each firing's work starting: the
  handler, or the job on the worker (p50 / p95 / max, ms);
- ``final`` — from the move to each run row being final (the hand-off's row follows the job:
  it includes the follower's poll);
- ``throughput`` — firings whose work started per second over the herd (firings / the last
  start's lag).

Workers: arq ``max_jobs=50``, Celery ``--pool=threads --concurrency 8``, procrastinate
``--concurrency 8``. The ledger tables are emptied (DELETE) first; the suite's machine-wide
Postgres and Redis locks are held meanwhile; Redis database of ``--redis-url`` is flushed.
procrastinate's schema goes to a Postgres schema of its own (``voltro_bench_jobs``), dropped
after.
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import redis
from sqlalchemy.engine import make_url

from bench.range_backfill import clean, postgres_lock
from fastapi_voltro_schedules import (
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    WorkflowTarget,
    define_schedule,
)
from fastapi_voltro_schedules.handoff import Handoff, JobEngine
from fastapi_voltro_schedules.store import create_store
from fastapi_voltro_schedules.testing import ManualClock

REPO = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 3, 4, 8, 30, 30, tzinfo=UTC)
ENGINES = ("in-process", "arq", "celery", "procrastinate")
JOBS_SCHEMA = "voltro_bench_jobs"
HANG = 120.0


@dataclass
class Figures:
    engine: str
    firings: int
    lag_ms: list[float]
    final_ms: list[float]

    def line(self) -> str:
        lag = sorted(self.lag_ms)
        final = sorted(self.final_ms)

        def pct(values: list[float], q: float) -> float:
            return values[min(len(values) - 1, int(q * len(values)))]

        throughput = self.firings / (lag[-1] / 1000) if lag[-1] > 0 else float("inf")
        return (
            f"{self.engine:<14} firings={self.firings}  lag p50={statistics.median(lag):7.1f} "
            f"p95={pct(lag, 0.95):7.1f} max={lag[-1]:7.1f} ms  final p50="
            f"{statistics.median(final):7.1f} max={final[-1]:7.1f} ms  "
            f"throughput={throughput:8.0f}/s"
        )


@contextmanager
def redis_lock(url: str) -> Iterator[None]:
    """The lock tests/conftest.py holds around every test on this Redis database."""
    client = redis.Redis.from_url(url)
    database = client.connection_pool.connection_kwargs.get("db", 0)
    client.close()
    path = Path(tempfile.gettempdir()) / f"voltro-tests-redis-{database}.lock"
    with path.open("a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


@contextmanager
def worker(engine: str, env: dict[str, str], log: Path) -> Iterator[None]:
    if engine == "in-process":
        yield
        return
    commands = {
        "arq": ["-m", "arq", "bench.handoff_jobs.ArqWorker"],
        "celery": ["-m", "celery", "-A", "bench.handoff_jobs.celery_app", "worker",
                   "--pool=threads", "--concurrency", "8", "--loglevel=WARNING",
                   "--without-gossip", "--without-mingle", "--without-heartbeat"],
        "procrastinate": ["-m", "procrastinate", "--app", "bench.handoff_jobs.procrastinate_app",
                          "worker", "--concurrency", "8", "--fetch-job-polling-interval", "0.2"],
    }  # fmt: skip
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, *commands[engine]],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO), **env},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def engine_for(name: str) -> JobEngine:
    from bench import handoff_jobs

    if name == "arq":
        from fastapi_voltro_schedules.handoff.arq import ArqEngine

        return ArqEngine.from_url(handoff_jobs.REDIS_URL, queue_name=handoff_jobs.QUEUE)
    if name == "celery":
        from fastapi_voltro_schedules.handoff.celery import CeleryEngine

        return CeleryEngine(handoff_jobs.celery_app)
    from fastapi_voltro_schedules.handoff.procrastinate import ProcrastinateEngine

    return ProcrastinateEngine(handoff_jobs.procrastinate_app)


async def one_engine(name: str, url: str, firings: int, marks: Path) -> Figures:
    await clean(url)
    started: dict[str, float] = {}

    def key(ctx: ScheduleContext) -> str:
        return f"{ctx.name}@{ctx.scheduled_at:%H%M}"

    async def in_process(ctx: ScheduleContext) -> None:
        started[key(ctx)] = time.time()

    def payload(ctx: ScheduleContext) -> dict[str, Any]:
        return {"key": key(ctx)}

    schedules = [
        define_schedule(
            name=f"bench-{i}",
            cron="0 * * * * *",
            timezone="UTC",
            **(
                {"handler": in_process}
                if name == "in-process"
                else {"workflow": WorkflowTarget(name="bench_job", payload=payload)}
            ),
        )
        for i in range(firings)
    ]
    engine = None if name == "in-process" else engine_for(name)
    workflows = None if engine is None else Handoff(engine, poll_interval=0.1)
    clock = ManualClock(T0)
    config = SchedulingConfig(database_url=url, replica_id="bench")
    scheduling = Scheduling(schedules, config=config, clock=clock, workflows=workflows)
    store = create_store(url)
    figures: Figures | None = None
    try:
        async with scheduling.run():
            for herd in (1, 2):  # the first herd warms up; the second is measured
                minute = f"{T0.minute + herd:02d}"
                t0 = time.time()
                await clock.advance(30 if herd == 1 else 60)
                finals: dict[str, float] = {}
                give_up = time.monotonic() + HANG
                while len(finals) < firings:
                    rows = await store.list_runs(None, limit=10 * firings)
                    now = time.time()
                    for row in rows:
                        if row.status.terminal and row.scheduled_at.minute == T0.minute + herd:
                            finals.setdefault(row.name, now)
                    if time.monotonic() > give_up:
                        raise TimeoutError(f"{name}: {len(finals)}/{firings} runs final")
                    await asyncio.sleep(0.01)
                if herd == 2:
                    wanted = [f"bench-{i}@{T0.hour:02d}{minute}" for i in range(firings)]
                    if name != "in-process":
                        started = {k: float((marks / k).read_text()) for k in wanted}
                    figures = Figures(
                        name,
                        firings,
                        [(started[k] - t0) * 1000 for k in wanted],
                        [(v - t0) * 1000 for v in finals.values()],
                    )
    finally:
        await store.dispose()
        close = getattr(engine, "close", None)
        if close is not None:
            await close()
    assert figures is not None
    return figures


@contextmanager
def procrastinate_schema(url: str) -> Iterator[str]:
    from procrastinate.schema import SchemaManager

    plain = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    dsn = f"{plain}?options=-csearch_path%3D{JOBS_SCHEMA},public"
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {JOBS_SCHEMA} CASCADE")  # type: ignore[arg-type]
        conn.execute(f"CREATE SCHEMA {JOBS_SCHEMA}")  # type: ignore[arg-type]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SchemaManager.get_schema())  # type: ignore[arg-type]
    try:
        yield dsn
    finally:
        with psycopg.connect(plain, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {JOBS_SCHEMA} CASCADE")  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.handoff", description=__doc__)
    parser.add_argument("--postgres-url", required=True)
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--firings", type=int, default=200)
    parser.add_argument("--engine", action="append", choices=ENGINES)
    args = parser.parse_args(argv)
    # one "handed off" line per firing would be most of what the bench measures
    logging.getLogger("fastapi_voltro_schedules").setLevel(logging.WARNING)
    engines = args.engine or list(ENGINES)
    with (
        postgres_lock(args.postgres_url),
        redis_lock(args.redis_url),
        tempfile.TemporaryDirectory() as tmp,
        procrastinate_schema(args.postgres_url) as dsn,
    ):
        marks = Path(tmp)
        env = {
            "BENCH_HANDOFF_REDIS_URL": args.redis_url,
            "BENCH_HANDOFF_MARKS": str(marks),
            "BENCH_HANDOFF_PROCRASTINATE_DSN": dsn,
        }
        os.environ.update(env)  # the engines built here read the same settings
        for name in engines:
            redis.Redis.from_url(args.redis_url).flushdb()
            with worker(name, env, marks / f"{name}.log"):
                figures = asyncio.run(one_engine(name, args.postgres_url, args.firings, marks))
            print(figures.line(), flush=True)


if __name__ == "__main__":
    main()
