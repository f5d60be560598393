"""The floor under the steady bench's cost: what one second's firings cost the process on this
box when nothing of the scheduler runs — only the two ledger writes every firing needs and the
asyncio task its handler runs in.

    python -m bench.steady_floor [--n 1000] [--rounds 20]

In one process holding the heap a steady bench worker holds (the package imported, ``n``
schedules defined), ``rounds`` rounds back to back, each one second's work at ``n`` firings a
second: build the ``running`` rows, insert them in one SQLite transaction (the statement and
tuples our store sends), start ``n`` tasks of a handler like the bench's (it appends its start
to a list) and wait until all have run, then write every row's terminal status in one
transaction (our finish statement, a ``finished_at`` per row). A second series runs only the
tasks. Prints the process CPU (every thread, as the bench measures it) per 1,000 firings of
each, a round's wall time (the second's work done back to back: at ``n`` a second it must fit
in the second, and the last handler of a slot cannot start before its rows are in) and the
full collections CPython ran: ``python -m bench steady``'s "CPU-s/1k firings" of
ours minus the first is what the scheduler adds; the tasks alone are what any asyncio
scheduler pays. bench/README.md ("Where we stand") reads it.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import resource
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.herd_floor import prepared, running_rows
from fastapi_voltro_schedules.records import RUN_COLUMNS
from fastapi_voltro_schedules.store import statements as q


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def floor(n: int, rounds: int, directory: Path) -> dict[str, dict[str, Any]]:
    scheduling, engine = await prepared(n, directory)
    insert = q.driver_statement(q.insert_runs(), engine.dialect)
    finish = q.driver_statement(q.finish_update(), engine.dialect)
    fired: list[tuple[str, float, float]] = []
    slot = datetime.now(UTC).replace(microsecond=0)

    async def start_all(names: list[str], at: float) -> None:
        left = len(names)
        over = asyncio.Event()

        async def handler(name: str) -> None:
            nonlocal left
            fired.append((name, at, time.time()))  # what the bench's handler does
            left -= 1
            if not left:
                over.set()

        loop = asyncio.get_running_loop()
        tasks = [loop.create_task(handler(name)) for name in names]  # held, as a scheduler does
        await over.wait()
        del tasks

    async def ledger_round(slot: datetime) -> None:
        rows = running_rows(scheduling, slot)
        async with engine.begin() as conn:
            tuples = insert.tuples(RUN_COLUMNS, [r.values() for r in rows], "sqlite")
            await conn.exec_driver_sql(insert.sql, tuples)
        await start_all([r.name for r in rows], slot.timestamp())
        ended = [(r.id, "succeeded", datetime.now(UTC), None, None, None) for r in rows]
        async with engine.begin() as conn:
            await conn.exec_driver_sql(
                finish.sql, finish.tuples(q.FINISH_KEYS, ended, "sqlite", {"b_replica": "floor"})
            )

    names = [s.name for s in scheduling.schedules]

    async def tasks_round(slot: datetime) -> None:
        await start_all(names, slot.timestamp())

    results: dict[str, dict[str, Any]] = {}
    try:
        for label, one_round in (("tasks only", tasks_round), ("ledger", ledger_round)):
            gc.collect()
            fired.clear()
            full_before = gc.get_stats()[2]["collections"]
            cpu0 = cpu_seconds()
            walls = []
            for _ in range(rounds):
                slot += timedelta(seconds=1)
                began = time.perf_counter()
                await one_round(slot)
                walls.append(time.perf_counter() - began)
            cpu = cpu_seconds() - cpu0
            results[label] = {
                "round_ms": statistics.median(walls) * 1000,
                "cpu_s_per_1000": cpu / len(fired) * 1000,
                "firings": len(fired),
                "full_collections": gc.get_stats()[2]["collections"] - full_before,
            }
        async with engine.connect() as conn:
            counted: Any = await conn.exec_driver_sql(
                "SELECT status, count(*) FROM _voltro_schedule_runs GROUP BY status"
            )
            results["ledger"]["rows"] = {row[0]: row[1] for row in counted.all()}
    finally:
        await engine.dispose()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        results = asyncio.run(floor(args.n, args.rounds, Path(tmp)))
    print(
        f"steady floor  n={args.n:,} firings a round, {args.rounds} rounds back to back "
        "(process CPU, every thread)"
    )
    for label, r in results.items():
        print(
            f"{label:12s} {r['cpu_s_per_1000']:.3f} CPU-s per 1,000 firings   "
            f"a round {r['round_ms']:.0f} ms (median)   "
            f"firings {r['firings']:,}   full collections {r['full_collections']}"
        )
    print(f"ledger rows by status: {results['ledger']['rows']}")
    writes = results["ledger"]["cpu_s_per_1000"] - results["tasks only"]["cpu_s_per_1000"]
    print(f"the ledger's rows and two writes: {writes:.3f} CPU-s per 1,000 firings")


if __name__ == "__main__":
    main()
