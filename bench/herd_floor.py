"""The floor under a herd on SQLite: what writing its rows and starting its tasks cost on this
box, with none of the scheduler's logic.

    python -m bench.herd_floor [--n 10000] [--repeat 3]

In one process holding the heap a herd bench worker holds (the package imported, ``n``
schedules defined on a ``Scheduling``), each round: one SQLite transaction inserting ``n``
``running`` rows of the runs table (its indexes included; the statement and tuples our store
sends), then asyncio creating ``n`` tasks of a trivial coroutine and waiting until the last
has started. Prints both times and when CPython's full collections began inside the second.
The herd's p99 (``python -m bench herd``) minus these two is what the scheduler itself adds;
bench/README.md ("Where we stand", evening) reads it.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from bench.ours import build
from fastapi_voltro_schedules import Scheduling
from fastapi_voltro_schedules.enums import RunStatus, Trigger
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.records import RUN_COLUMNS, RunRecord, new_run_ids
from fastapi_voltro_schedules.store import statements as q
from fastapi_voltro_schedules.store.engines import make_engine


async def prepared(n: int, directory: Path) -> tuple[Scheduling, AsyncEngine]:
    """The heap of a bench worker (the package imported, ``n`` schedules defined) and a fresh
    SQLite ledger at head in ``directory``, on the engine our store opens."""
    url = f"sqlite+aiosqlite:///{directory / 'floor.db'}"
    scheduling = build(n, "0 0 0 * * *", url)
    engine = make_engine(url)  # our store's engine: WAL, synchronous=NORMAL, BEGIN IMMEDIATE
    await upgrade_to_head(engine)
    return scheduling, engine


def running_rows(scheduling: Scheduling, slot: datetime) -> list[RunRecord]:
    """One ``running`` row per schedule for ``slot``, as admission writes them."""
    ids = new_run_ids(len(scheduling.schedules))
    return [
        RunRecord(
            id=run_id,
            name=schedule.name,
            scheduled_at=slot,
            status=RunStatus.RUNNING,
            trigger=Trigger.SELF,
            fired_at=slot,
            replica_id="floor",
        )
        for schedule, run_id in zip(scheduling.schedules, ids, strict=True)
    ]


async def floor(n: int, repeat: int, directory: Path) -> list[dict[str, Any]]:
    scheduling, engine = await prepared(n, directory)
    insert = q.driver_statement(q.insert_runs(), engine.dialect)
    started: list[float] = []

    async def trivial() -> None:
        started.append(time.perf_counter())

    full: list[float] = []

    def observe(phase: str, info: dict[str, Any]) -> None:
        if phase == "start" and info["generation"] == 2:
            full.append(time.perf_counter())

    gc.collect()
    gc.callbacks.append(observe)
    rounds = []
    try:
        for _ in range(repeat):
            rows = running_rows(scheduling, datetime.now(UTC).replace(microsecond=0))
            tuples = insert.tuples(RUN_COLUMNS, [r.values() for r in rows], "sqlite")
            t0 = time.perf_counter()
            async with engine.begin() as conn:
                await conn.exec_driver_sql(insert.sql, tuples)
            t1 = time.perf_counter()
            started.clear()
            full.clear()
            loop = asyncio.get_running_loop()
            tasks = [loop.create_task(trivial()) for _ in range(n)]
            await asyncio.gather(*tasks)
            t2 = max(started)
            rounds.append(
                {
                    "insert_ms": (t1 - t0) * 1000,
                    "tasks_ms": (t2 - t1) * 1000,
                    "full_collections_at_ms": [(t - t1) * 1000 for t in full if t <= t2],
                    "started": len(started),
                }
            )
            del tasks
    finally:
        gc.callbacks.remove(observe)
        await engine.dispose()
    return rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rounds = asyncio.run(floor(args.n, args.repeat, Path(tmp)))
    print(f"herd floor  n={args.n:,}  (SQLite insert of the rows, then asyncio starting tasks)")
    for r in rounds:
        fulls = ", ".join(f"{at:.0f}" for at in r["full_collections_at_ms"]) or "none"
        print(
            f"insert {r['insert_ms']:6.0f} ms   tasks {r['tasks_ms']:6.0f} ms   "
            f"started {r['started']:,}   full collections at ms: {fulls}"
        )


if __name__ == "__main__":
    main()
