"""Queue handoff latency across replicas: blocking run ends → next queued run starts.

    python -m bench.queue_handoff --postgres-url URL [--handoffs 30] [--strategy cdc]

Two replicas (two ``Scheduling`` instances, each with its own connection pool, in one process)
share one Postgres ledger. One ``on_overlap="queue"`` schedule gets ``--handoffs + 1`` firings,
alternately on replica A and B, submitted while the first run holds the line — so every turn
passes to the *other* replica, which learns of it only through the database: a ``NOTIFY`` on
its ``LISTEN`` connection under ``change_strategy="cdc"``, its 1 s poll under ``poll``. The gap
of each handoff is measured from the handlers' own timestamps: the previous handler returned
→ the next one started (the terminal write, the notification or poll, the turn-taking
transaction and the start are all inside it). Prints p50/p99/max per strategy.

The tables are migrated, then emptied with DELETE, and the test suite's machine-wide Postgres
lock is held meanwhile, so a concurrent pytest run is not disturbed.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from datetime import UTC, datetime, timedelta

import anyio

from bench.range_backfill import clean, postgres_lock
from fastapi_voltro_schedules import (
    ChangeStrategy,
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    define_schedule,
)
from fastapi_voltro_schedules.fire_requests import FireRequest, Why

NAME = "bench-handoff"
START = datetime(2026, 1, 1, tzinfo=UTC)
HOLD_SECONDS = 0.05
"""How long each run after the first holds the line."""


async def handoffs(
    url: str,
    count: int,
    strategy: ChangeStrategy,
    *,
    poll_seconds: float | None = None,
    first_hold: float | None = None,
    clean_first: bool = True,
) -> list[float]:
    """The ``count`` handoff gaps in seconds (previous handler returned → next one started),
    every one from one replica to the other. ``poll_seconds`` overrides the waiters' poll
    interval (a long one proves a cdc handoff came from the notification); ``first_hold`` how
    long the first run holds the line while the others are submitted behind it."""
    if clean_first:
        await clean(url)
    starts: dict[datetime, float] = {}
    ends: dict[datetime, float] = {}
    if first_hold is None:
        first_hold = 1.0 + 0.05 * count  # long enough to submit every other firing behind it

    hold_first = first_hold

    async def handler(ctx: ScheduleContext) -> None:
        starts[ctx.scheduled_at] = time.perf_counter()
        await anyio.sleep(hold_first if ctx.scheduled_at == START else HOLD_SECONDS)
        ends[ctx.scheduled_at] = time.perf_counter()

    def replica(name: str) -> Scheduling:
        schedule = define_schedule(
            name=NAME, cron="0 0 1 1 *", timezone="UTC", handler=handler, on_overlap="queue"
        )
        config = SchedulingConfig(
            database_url=url, replica_id=name, change_strategy=strategy, shutdown_grace_ms=200
        )
        return Scheduling([schedule], config=config)

    a, b = replica("bench-a"), replica("bench-b")
    async with a.run(), b.run():
        replicas = [a.running_engine(), b.running_engine()]
        if poll_seconds is not None:
            for engine in replicas:
                line = engine.admitter.line
                assert line is not None, "the durable line needs a multi-instance store"
                line.poll_seconds = poll_seconds
        await anyio.sleep(0.5)  # both LISTEN sessions in place (cdc)
        firings = []
        for i in range(count + 1):
            engine = replicas[i % 2]
            slot = START + timedelta(minutes=i)
            firings.append(await engine.fire(FireRequest(engine.schedules[0], slot, Why.TIMER)))
        for firing in firings:
            await firing.finished()
    slots = [START + timedelta(minutes=i) for i in range(count + 1)]
    missing = [s for s in slots if s not in starts or s not in ends]
    if missing:
        raise RuntimeError(f"{len(missing)} firings did not run, first {missing[0]}")
    return [starts[after] - ends[before] for before, after in zip(slots, slots[1:], strict=False)]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def report(strategy: ChangeStrategy, gaps: list[float]) -> None:
    ms = [g * 1000 for g in gaps]
    print(
        f"{strategy.value:<5} handoffs={len(ms)}  p50={statistics.median(ms):.1f}ms "
        f"p99={percentile(ms, 0.99):.1f}ms max={max(ms):.1f}ms min={min(ms):.1f}ms",
        flush=True,
    )


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.queue_handoff", description=__doc__)
    parser.add_argument("--postgres-url", required=True, help="postgresql+asyncpg://…")
    parser.add_argument("--handoffs", type=int, default=30)
    parser.add_argument(
        "--strategy", action="append", choices=[s.value for s in ChangeStrategy], default=None
    )
    args = parser.parse_args(argv)
    strategies = [ChangeStrategy(s) for s in args.strategy or ["cdc", "poll"]]
    with postgres_lock(args.postgres_url):
        try:
            for strategy in strategies:
                report(strategy, await handoffs(args.postgres_url, args.handoffs, strategy))
        finally:
            await clean(args.postgres_url)


if __name__ == "__main__":
    asyncio.run(main())
