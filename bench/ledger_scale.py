"""Inspect and boot queries against a big ledger: do they stay flat as the ledger grows?

    python -m bench.ledger_scale [--rows 1000000] [--postgres-url URL] [--mysql-url URL]

For each store (a fresh SQLite file always; Postgres / MariaDB with their URL) the ledger is
filled twice — empty, then ``--rows`` rows generated inside the database (``INSERT … SELECT``
from ``generate_series`` / MariaDB's ``seq_0_to_N`` / a recursive CTE: seconds, not minutes) —
and each time the store calls behind these are timed (median of ``--repeat``, after one warm-up):

- **list**: ``GET /_voltro/inspect/schedules`` — ``last_runs`` of every schedule;
- **runs** / **runs all**: ``GET /_voltro/inspect/runs?name=hot`` and without ``name``
  (``list_runs``, 100 rows, newest first) — and **runs page**, the same with ``before``;
- **boot**: what ``Scheduling`` reads before arming — ``last_runs`` and ``live_runs`` of every
  schedule — plus the reaper's reads: ``live_runs(…, running+queued)`` and ``silent_runs``;
- **slot**: ``run_for_slot`` (the external trigger's duplicate answer) and ``succeeded_slots``
  over one hour (a range backfill's plan: 3,600 slots), and one 1,000-row page of
  ``runs_between`` (what ``voltro schedule audit`` reads).

The generated ledger (see :func:`fill_ledger`): 99 % of the rows are one every-second schedule
``hot`` (12 days of it at 1 M rows), the rest spread over 50 others; mostly ``succeeded``, some
``skipped``/``missed``, one in 1,000 ``manual``; a few ``running``/``queued`` rows at the end.

**``--postgres-url`` / ``--mysql-url`` drop our tables there** and leave them empty at the end:
point them at a database of their own, never at one a test run is using.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from fastapi_voltro_schedules.enums import RunStatus, Trigger
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.models import CLAIMS_TABLE, RUNS_TABLE, STATE_TABLE
from fastapi_voltro_schedules.store import RunRecord, Store, create_store, new_run_ids

BASE = datetime(2026, 6, 1, tzinfo=UTC)
"""The first generated row's ``scheduled_at``; row ``i`` is ``BASE + i`` seconds."""
HOT = "hot"
OTHERS = [f"s{k}" for k in range(0, 5000, 100)]
"""The 50 other schedules: row ``i`` with ``i % 100 == 0`` belongs to ``s{i % 5000}``."""
LIVE = 5
"""Rows appended after the generated ones: 2 ``running`` and 3 ``queued`` rows of ``hot``."""


def names() -> list[str]:
    return [HOT, *OTHERS]


def _fill_sql(dialect: str, rows: int) -> list[str]:
    """The statements that generate ``rows`` rows (ids ``sr_`` + the row number in hex, so
    they sort like the store's own time-ordered ids)."""
    base = int(BASE.timestamp())
    last = rows - 1
    if dialect == "postgresql":
        source = f"generate_series(0, {last}) AS g(i)"
        ident = "'sr_' || lpad(to_hex(i), 32, '0')"
        name = "'s' || (i % 5000)"

        def at(offset_ms: int) -> str:
            return f"to_timestamp({base} + i + {offset_ms / 1000})"

        prefix: list[str] = []
    elif dialect in ("mysql", "mariadb"):
        source = f"(SELECT seq AS i FROM seq_0_to_{last}) AS g"
        ident = "CONCAT('sr_', LPAD(LOWER(HEX(i)), 32, '0'))"
        name = "CONCAT('s', MOD(i, 5000))"

        def at(offset_ms: int) -> str:
            return f"FROM_UNIXTIME({base} + i + {offset_ms / 1000:.3f})"

        prefix = ["SET time_zone = '+00:00'"]  # FROM_UNIXTIME answers in the session's zone
    elif dialect == "sqlite":
        source = "g"
        ident = "printf('sr_%032x', i)"
        name = "'s' || (i % 5000)"

        def at(offset_ms: int) -> str:
            return (
                f"strftime('%Y-%m-%dT%H:%M:%S', {base} + i, 'unixepoch') "
                f"|| '.{offset_ms * 1000:06d}+00:00'"
            )

        prefix = []
    else:
        raise ValueError(f"no ledger generator for {dialect!r}")
    quote = "`" if dialect in ("mysql", "mariadb") else '"'
    columns = (
        "id, name, scheduled_at, fired_at, finished_at, status, "
        f"{quote}trigger{quote}, coordination_outcome, replica_id, heartbeat_at, error_tag, "
        "error_message"
    )

    def mod(k: int) -> str:
        # MOD(), not %: the MySQL drivers read % as a placeholder
        return f"MOD(i, {k})" if quote == "`" else f"(i % {k})"

    select = (
        f"SELECT {ident}, CASE WHEN {mod(100)} = 0 THEN {name} ELSE '{HOT}' END, {at(0)}, "
        f"{at(1)}, {at(20)}, "
        f"CASE WHEN {mod(97)} = 0 THEN 'skipped' WHEN {mod(89)} = 0 THEN 'missed' "
        "ELSE 'succeeded' END, "
        f"CASE WHEN {mod(1000)} = 7 THEN 'manual' ELSE 'self' END, "
        "'wonLock', 'bench-replica', NULL, NULL, NULL "
        f"FROM {source}"
    )
    insert = f"INSERT INTO {RUNS_TABLE} ({columns}) {select}"
    if dialect == "sqlite":
        insert = (
            f"WITH RECURSIVE g(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM g WHERE i < {last}) "
            + insert
        )
    return [*prefix, insert]


async def fill_ledger(engine: AsyncEngine, rows: int, *, analyze: bool = True) -> None:
    """Empty our tables on ``engine`` (migrated to head first), then generate ``rows`` rows
    and the ``LIVE`` live ones. ``analyze`` refreshes the planner's statistics on the server
    databases, as autovacuum / InnoDB's auto-recalculation would after such a load (SQLite is
    left without statistics: nothing runs ``ANALYZE`` on an application's ledger file)."""
    await upgrade_to_head(engine)
    dialect = engine.dialect.name
    async with engine.begin() as conn:
        await conn.execute(text(f"DELETE FROM {RUNS_TABLE}"))
        await conn.execute(text(f"DELETE FROM {CLAIMS_TABLE}"))
        await conn.execute(text(f"DELETE FROM {STATE_TABLE}"))
        if rows:
            for sql in _fill_sql(dialect, rows):
                await conn.exec_driver_sql(sql)
    store = create_store(engine=engine)
    newest = BASE + timedelta(seconds=rows)
    ids = new_run_ids(LIVE)
    await store.insert_runs(
        [
            RunRecord(
                id=ids[k],
                name=HOT,
                scheduled_at=newest + timedelta(seconds=k),
                status=RunStatus.RUNNING if k < 2 else RunStatus.QUEUED,
                trigger=Trigger.SELF,
                replica_id="bench-replica",
                heartbeat_at=newest,
            )
            for k in range(LIVE)
        ]
    )
    if analyze and dialect == "postgresql":
        async with engine.connect() as conn:
            await conn.execute(text(f"ANALYZE {RUNS_TABLE}"))
            await conn.commit()
    elif analyze and dialect in ("mysql", "mariadb"):
        async with engine.connect() as conn:
            await conn.exec_driver_sql(f"ANALYZE TABLE {RUNS_TABLE}")
            await conn.commit()


def queries(store: Store, rows: int) -> dict[str, Callable[[], Awaitable[Any]]]:
    """The store calls behind each figure, on a ledger of ``rows`` generated rows."""
    everyone = names()
    middle = BASE + timedelta(seconds=rows // 2)
    return {
        "list": lambda: store.last_runs(everyone),
        "latest": lambda: store.latest(everyone),
        "runs": lambda: store.list_runs(HOT, limit=100),
        "runs all": lambda: store.list_runs(None, limit=100),
        "runs page": lambda: store.list_runs(HOT, limit=100, before=middle),
        "boot": lambda: asyncio.gather(store.last_runs(everyone), store.live_runs(everyone)),
        "dead rows": lambda: store.live_runs(everyone, (RunStatus.RUNNING, RunStatus.QUEUED)),
        "silent": lambda: store.silent_runs(
            everyone, timedelta(seconds=90), (RunStatus.RUNNING, RunStatus.QUEUED)
        ),
        "queued": lambda: store.queued_runs(HOT),
        "slot": lambda: store.run_for_slot(HOT, middle + timedelta(seconds=1), Trigger.SELF),
        "succeeded 1 h": lambda: store.succeeded_slots(HOT, middle, middle + timedelta(hours=1)),
        "audit page": lambda: store.runs_between(middle, middle + timedelta(hours=1), limit=1000),
    }


async def measure(store: Store, rows: int, repeat: int) -> dict[str, float]:
    """Median milliseconds of each query, after one warm-up call."""
    figures: dict[str, float] = {}
    for label, call in queries(store, rows).items():
        await call()
        samples = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            await call()
            samples.append((time.perf_counter() - t0) * 1000)
        figures[label] = statistics.median(samples)
    return figures


async def one_store(label: str, url: str, rows: int, repeat: int) -> None:
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        results: dict[int, dict[str, float]] = {}
        for size in (0, rows):
            t0 = time.perf_counter()
            await fill_ledger(engine, size)
            fill = time.perf_counter() - t0
            store = create_store(url)
            try:
                results[size] = await measure(store, size, repeat)
            finally:
                await store.dispose()
            print(f"{label}: {size:,} rows generated in {fill:.1f} s", flush=True)
        print(f"\n{label:<10} {'query':<16} {'0 rows':>10} {f'{rows:,} rows':>14}")
        for query in results[0]:
            print(
                f"{'':<10} {query:<16} {results[0][query]:>8.2f}ms {results[rows][query]:>12.2f}ms"
            )
        print(flush=True)
        if url.startswith(("postgresql", "mysql")):
            await fill_ledger(engine, 0, analyze=False)
    finally:
        await engine.dispose()


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ledger_scale", description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--postgres-url", help="e.g. postgresql+asyncpg://postgres@127.0.0.1/b")
    parser.add_argument("--mysql-url", help="e.g. mysql+asyncmy://root@127.0.0.1/b")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        await one_store(
            "sqlite", f"sqlite+aiosqlite:///{Path(tmp) / 'ledger.db'}", args.rows, args.repeat
        )
    if args.postgres_url:
        await one_store("postgres", args.postgres_url, args.rows, args.repeat)
    if args.mysql_url:
        await one_store("mariadb", args.mysql_url, args.rows, args.repeat)


if __name__ == "__main__":
    asyncio.run(main())
