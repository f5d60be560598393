"""Run-time schedule propagation: ``put_schedule`` on replica A → replica B has armed it.

    python -m bench.runtime_cdc --postgres-url URL [--writes 50] [--strategy cdc]
        [--heartbeat-ms 2000]

Two replicas (two ``Scheduling`` instances, each with its own pool, in one process) share one
Postgres ledger on the system clock. A writes ``--writes`` new run-time schedules one after
the other; each is timed from A's ``put_schedule`` returning (and from its call) to B's engine
arming it (``Engine.arm_written``, wrapped). Under ``cdc`` B hears the write's ``NOTIFY``;
under ``poll`` it reads at its next heartbeat (``--heartbeat-ms``), so the figure is spread
over one heartbeat. Prints p50/p99/max per strategy. A arms its own write before the put
returns, so the figures are B's.

The tables are migrated, then emptied with DELETE, and the test suite's machine-wide Postgres
lock is held meanwhile, so a concurrent pytest run is not disturbed.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from datetime import datetime

import anyio
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from bench.queue_handoff import percentile
from bench.range_backfill import clean, postgres_lock
from fastapi_voltro_schedules import (
    ChangeStrategy,
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    define_handler,
)
from fastapi_voltro_schedules.definition import Schedule
from fastapi_voltro_schedules.models import definitions_table

PREFIX = "bench-rt"
YEARLY = "0 0 1 1 *"
"""Fires nowhere near the run: only the definitions move."""


@define_handler(name="benchRuntime")
async def bench_runtime(ctx: ScheduleContext) -> None:
    pass


async def clean_definitions(url: str) -> None:
    await clean(url)
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with engine.begin() as conn:
            await conn.execute(text(f"DELETE FROM {definitions_table.name}"))
    finally:
        await engine.dispose()


async def propagation(
    url: str, writes: int, strategy: ChangeStrategy, heartbeat_ms: int
) -> tuple[list[float], list[float]]:
    """Seconds from each put returning, and from each put called, to B arming it."""
    await clean_definitions(url)

    def replica(name: str) -> Scheduling:
        config = SchedulingConfig(
            database_url=url,
            replica_id=name,
            change_strategy=strategy,
            schedule_heartbeat_ms=heartbeat_ms,
            shutdown_grace_ms=200,
        )
        return Scheduling(config=config, handlers=[bench_runtime])

    a, b = replica("bench-a"), replica("bench-b")
    armed: dict[str, float] = {}
    since_return: list[float] = []
    since_call: list[float] = []
    async with a.run(), b.run():
        engine = b.running_engine()
        arm = engine.arm_written

        def arm_written(schedule: Schedule, after: datetime) -> None:
            armed.setdefault(schedule.name, time.perf_counter())
            arm(schedule, after)

        engine.arm_written = arm_written  # type: ignore[method-assign]
        await anyio.sleep(0.5)  # both LISTEN sessions in place (cdc)
        for i in range(writes):
            name = f"{PREFIX}.{i}"
            called = time.perf_counter()
            await a.put_schedule(name, cron=YEARLY, timezone="UTC", handler="benchRuntime")
            returned = time.perf_counter()
            with anyio.fail_after(10 + 3 * heartbeat_ms / 1000):
                while name not in armed:
                    await anyio.sleep(0.001)
            since_return.append(armed[name] - returned)
            since_call.append(armed[name] - called)
    return since_return, since_call


def summary(seconds: list[float]) -> str:
    ms = sorted(s * 1000 for s in seconds)
    return (
        f"p50={percentile(ms, 0.5):.1f}ms p99={percentile(ms, 0.99):.1f}ms "
        f"max={ms[-1]:.1f}ms min={ms[0]:.1f}ms"
    )


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.runtime_cdc", description=__doc__)
    parser.add_argument("--postgres-url", required=True, help="postgresql+asyncpg://…")
    parser.add_argument("--writes", type=int, default=50)
    parser.add_argument("--heartbeat-ms", type=int, default=2000)
    parser.add_argument(
        "--strategy", action="append", choices=[s.value for s in ChangeStrategy], default=None
    )
    args = parser.parse_args(argv)
    strategies = [ChangeStrategy(s) for s in args.strategy or ["cdc", "poll"]]
    with postgres_lock(args.postgres_url):
        try:
            for strategy in strategies:
                returned, called = await propagation(
                    args.postgres_url, args.writes, strategy, args.heartbeat_ms
                )
                print(
                    f"{strategy.value:<5} writes={len(returned)} heartbeat={args.heartbeat_ms}ms"
                    f"\n  from put returned: {summary(returned)}"
                    f"\n  from put called:   {summary(called)}",
                    flush=True,
                )
        finally:
            await clean_definitions(args.postgres_url)


if __name__ == "__main__":
    asyncio.run(main())
