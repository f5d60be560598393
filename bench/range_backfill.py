"""Range backfill throughput: a 1,000-slot range with a no-op handler.

    python -m bench.range_backfill [--postgres-url URL] [--slots 1000] [--repeat 3]

Runs ``Scheduling.backfill`` in-process (what ``voltro schedule backfill --app`` does) on a
fresh SQLite file and, with ``--postgres-url``, on Postgres (our tables migrated, then emptied
with DELETE; the test suite's machine-wide Postgres lock is held meanwhile so a concurrent
pytest run is not disturbed). The handler does nothing, so the time is all overhead: planning
(counting the slots and the ones that already succeeded), the lock, and per slot one ``running``
row insert plus its terminal update. Prints total seconds and milliseconds per slot.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import statistics
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import make_url, text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from fastapi_voltro_schedules import ScheduleContext, Scheduling, SchedulingConfig, define_schedule
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.models import CLAIMS_TABLE, RUNS_TABLE

NAME = "bench-range"
START = datetime(2026, 1, 1, tzinfo=UTC)


async def noop(ctx: ScheduleContext) -> None:
    return None


def scheduling(url: str) -> Scheduling:
    schedule = define_schedule(name=NAME, cron="0 * * * *", timezone="UTC", handler=noop)
    return Scheduling([schedule], config=SchedulingConfig(database_url=url, replica_id="bench"))


async def clean(url: str) -> None:
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        await upgrade_to_head(engine)
        async with engine.begin() as conn:
            await conn.execute(text(f"DELETE FROM {RUNS_TABLE}"))
            await conn.execute(text(f"DELETE FROM {CLAIMS_TABLE}"))
    finally:
        await engine.dispose()


async def one_range(url: str, slots: int) -> tuple[float, float]:
    """(plan seconds, total seconds) of one range of ``slots`` hourly occurrences."""
    await clean(url)
    end = START + timedelta(hours=slots)
    async with scheduling(url).run(arm=False) as s:
        # Warm the connection pool and the statement caches outside the measurement.
        await s.plan_backfill(NAME, START - timedelta(hours=2), START)
        t0 = time.perf_counter()
        await s.plan_backfill(NAME, START, end, confirm=True, limit=slots)
        plan = time.perf_counter() - t0
        t0 = time.perf_counter()
        summary = await s.backfill(NAME, START, end, confirm=True, limit=slots)
        total = time.perf_counter() - t0
    assert (summary.fired, summary.succeeded) == (slots, slots), summary
    return plan, total


@contextlib.contextmanager
def postgres_lock(url: str) -> Iterator[None]:
    """The lock tests/conftest.py holds around every test on this Postgres database."""
    database = make_url(url).database
    path = Path(tempfile.gettempdir()) / f"voltro-tests-postgres-{database}.lock"
    with path.open("a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def report(label: str, slots: int, runs: list[tuple[float, float]]) -> None:
    totals = [t for _, t in runs]
    best = min(totals)
    median = statistics.median(totals)
    plan = statistics.median(p for p, _ in runs)
    print(
        f"{label:<9} slots={slots}  total median={median:.3f}s best={best:.3f}s  "
        f"per-slot median={median / slots * 1000:.2f}ms best={best / slots * 1000:.2f}ms  "
        f"(plan {plan * 1000:.1f}ms, runs={len(runs)})",
        flush=True,
    )


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.range_backfill", description=__doc__)
    parser.add_argument("--postgres-url", help="e.g. postgresql+asyncpg://postgres@127.0.0.1/test")
    parser.add_argument("--slots", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite+aiosqlite:///{Path(tmp) / 'bench.db'}"
        runs = [await one_range(url, args.slots) for _ in range(args.repeat)]
        report("sqlite", args.slots, runs)
    if args.postgres_url:
        with postgres_lock(args.postgres_url):
            try:
                runs = [await one_range(args.postgres_url, args.slots) for _ in range(args.repeat)]
            finally:
                await clean(args.postgres_url)
        report("postgres", args.slots, runs)


if __name__ == "__main__":
    asyncio.run(main())
