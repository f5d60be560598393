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

from sqlalchemy.ext.asyncio import create_async_engine

from bench.ours import build
from fastapi_voltro_schedules.enums import RunStatus, Trigger
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.store import statements as q
from fastapi_voltro_schedules.store.records import RunRecord, new_run_ids


async def floor(n: int, repeat: int, directory: Path) -> list[dict[str, Any]]:
    url = f"sqlite+aiosqlite:///{directory / 'floor.db'}"
    scheduling = build(n, "0 0 0 * * *", url)  # the heap of a herd worker: n schedules defined
    engine = create_async_engine(url)
    await upgrade_to_head(engine)
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
            now = datetime.now(UTC).replace(microsecond=0)
            rows = [
                RunRecord(
                    id=run_id,
                    name=schedule.name,
                    scheduled_at=now,
                    status=RunStatus.RUNNING,
                    trigger=Trigger.SELF,
                    fired_at=now,
                    replica_id="floor",
                ).to_row()
                for schedule, run_id in zip(scheduling.schedules, new_run_ids(n), strict=True)
            ]
            tuples = insert.rows(rows, "sqlite")
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
