"""The inspect and boot queries stay flat as the ledger grows: on a generated 1 M-row ledger
each store call reads through an index and touches a bounded number of rows, on SQLite,
Postgres and MariaDB.

What is checked is the SQL the store really sends: every statement on the runs table is
captured as it goes to the driver (``before_cursor_execute``), then explained with its own
parameters — ``EXPLAIN (ANALYZE, FORMAT JSON)`` on Postgres and ``ANALYZE FORMAT=JSON`` on
MariaDB (rows actually read, per table access), ``EXPLAIN QUERY PLAN`` plus a count of the
virtual machine's instructions on SQLite. A scan of the table reads ~1 M rows (tens of millions
of SQLite instructions); every bound below is a few thousand at most.

The ledger comes from ``bench.ledger_scale.fill_ledger`` (the same one the benchmark times).
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import STORES, clean_server
from sqlalchemy import event, make_url
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine
from sqlalchemy.pool import NullPool

from bench.ledger_scale import HOT, LIVE, OTHERS, fill_ledger, queries
from fastapi_voltro_schedules.models import RUNS_TABLE
from fastapi_voltro_schedules.store import Store, create_store

pytestmark = pytest.mark.slow

ROWS = 1_000_000


@dataclass(frozen=True)
class Case:
    query: str
    """A key of ``bench.ledger_scale.queries``."""
    max_rows: int
    """Rows the database may read from the runs table for the whole call (Postgres, MariaDB)."""
    max_steps: int
    """SQLite virtual-machine instructions the call's statements may execute."""
    ordered_walk: bool = False
    """An index walked in order from one end, stopped by ``LIMIT`` (SQLite says ``SCAN …
    USING INDEX``); otherwise every access must be an index search."""


CASES = [
    # 51 schedules: per name the newest rows down to the first clock-driven one, then the row
    Case("list", max_rows=600, max_steps=60_000),
    # the listing's read: both picks per name, then each picked row once
    Case("latest", max_rows=1_200, max_steps=120_000),
    Case("runs", max_rows=400, max_steps=60_000),
    Case("runs all", max_rows=400, max_steps=60_000, ordered_walk=True),
    Case("runs page", max_rows=400, max_steps=60_000),
    Case("boot", max_rows=800, max_steps=100_000),
    Case("dead rows", max_rows=200, max_steps=40_000),
    Case("silent", max_rows=200, max_steps=40_000),
    Case("queued", max_rows=50, max_steps=10_000),
    Case("slot", max_rows=50, max_steps=10_000),
    # 3,600 slots of the hot schedule (the answer itself), nothing else
    Case("succeeded 1 h", max_rows=8_000, max_steps=400_000),
    # the audit's read: one 1,000-row page of an hour (the page itself, nothing else)
    Case("audit page", max_rows=2_500, max_steps=400_000),
]


# --------------------------------------------------------------------------- capture


@dataclass(frozen=True)
class Sent:
    sql: str
    params: Any


@pytest.fixture
def sent() -> list[Sent]:
    return []


def capture(store: Store, into: list[Sent]) -> Callable[[], None]:
    """Record every statement on the runs table the store's engine sends; returns the undo."""
    engine = store.engine.sync_engine  # type: ignore[attr-defined]

    def record(
        _conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, _many: bool
    ) -> None:
        if RUNS_TABLE in statement:
            into.append(Sent(statement, parameters))

    event.listen(engine, "before_cursor_execute", record)
    return lambda: event.remove(engine, "before_cursor_execute", record)


# --------------------------------------------------------------------------- plans


def _walk(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


async def postgres_rows_read(conn: AsyncConnection, sent: Sent) -> tuple[int, list[str]]:
    """(rows read from the runs table, the access nodes) of one statement, by running it
    under ``EXPLAIN ANALYZE``."""
    result = await conn.exec_driver_sql("EXPLAIN (ANALYZE, FORMAT JSON) " + sent.sql, sent.params)
    plan = result.scalar_one()
    plan = json.loads(plan) if isinstance(plan, str) else plan
    total, nodes = 0, []
    for node in _walk(plan):
        if node.get("Relation Name") != RUNS_TABLE:
            continue
        nodes.append(f"{node['Node Type']} {node.get('Index Name', '')}".strip())
        read = (
            node["Actual Rows"]
            + node.get("Rows Removed by Filter", 0)
            + node.get("Rows Removed by Index Recheck", 0)
        )
        total += int(read * node["Actual Loops"])
    return total, nodes


async def mariadb_rows_read(conn: AsyncConnection, sent: Sent) -> tuple[int, list[str]]:
    """The same from ``ANALYZE FORMAT=JSON`` (``r_rows`` is the average rows read per loop)."""
    result = await conn.exec_driver_sql("ANALYZE FORMAT=JSON " + sent.sql, sent.params)
    plan = json.loads(result.scalar_one())
    total, nodes = 0, []
    for node in _walk(plan):
        table = node.get("table")
        if not isinstance(table, dict) or "access_type" not in table:
            continue
        name = table.get("table_name", "")
        if name.startswith("<") or "json_table" in str(table.get("message", "")) or name == "n":
            continue  # a derived table or the JSON_TABLE of names, not the ledger
        access = f"{table['access_type']} {table.get('key', '')}".strip()
        checked = node.get("r_keys")
        if isinstance(checked, dict) and checked.get("full_scan") == 0:
            # "range checked for each record": MariaDB shows ALL, and says per key what each
            # outer row did — never a scan here, a range of the named key
            access = "range-checked " + ",".join(checked.get("range", {}))
        nodes.append(access)
        total += int(float(table.get("r_rows") or 0) * float(table.get("r_loops") or 0))
    return total, nodes


def sqlite_plan_and_steps(path: Path, sent: Sent) -> tuple[list[str], int]:
    """``EXPLAIN QUERY PLAN`` lines of one statement, and the VM instructions it executes."""
    steps = [0]

    def tick() -> int:
        steps[0] += 100
        return 0

    with contextlib.closing(sqlite3.connect(path)) as conn:
        plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sent.sql, sent.params)]
        conn.set_progress_handler(tick, 100)
        conn.execute(sent.sql, sent.params).fetchall()
    return plan, steps[0]


_FULL_SCAN = re.compile(rf"^SCAN {RUNS_TABLE}(?! USING)|^SCAN \w+$")


def assert_sqlite_plan(case: Case, plan: list[str]) -> None:
    for line in plan:
        assert not _FULL_SCAN.search(line), (case.query, plan)
        if line.startswith("SCAN") and "json_each" not in line and "USING" in line:
            assert case.ordered_walk, (case.query, plan)
    if case.ordered_walk:
        # ordered by the index; only ties of scheduled_at are sorted (by id)
        assert "USE TEMP B-TREE FOR ORDER BY" not in plan, (case.query, plan)


# --------------------------------------------------------------------------- the test


@pytest.fixture(params=STORES)
def big_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'big.db'}"
        return
    with clean_server(request.param) as url:
        yield url


async def test_every_inspect_and_boot_query_reads_through_an_index(
    big_url: str, sent: list[Sent]
) -> None:
    engine = create_async_engine(big_url, poolclass=NullPool)
    try:
        await fill_ledger(engine, ROWS)
    finally:
        await engine.dispose()
    store = create_store(big_url)
    stop = capture(store, sent)
    calls: dict[str, Callable[[], Awaitable[Any]]] = queries(store, ROWS)
    try:
        answers = {}
        per_case: dict[str, list[Sent]] = {}
        for case in CASES:
            sent.clear()
            answers[case.query] = await calls[case.query]()
            per_case[case.query] = list(sent)
    finally:
        stop()
        await store.dispose()

    # the calls answered what a 1 M-row ledger holds (so the plans below are of real work)
    assert {r.name for r in answers["list"].values()} == {HOT, *OTHERS}
    assert answers["latest"].last == answers["list"]
    assert set(answers["latest"].newest) == {HOT, *OTHERS}
    assert len(answers["runs"]) == len(answers["runs all"]) == len(answers["runs page"]) == 100
    assert len(answers["dead rows"]) == LIVE
    assert len(answers["queued"]) == 3
    assert answers["slot"] is not None
    assert 3000 < len(answers["succeeded 1 h"]) <= 3600
    assert len(answers["audit page"]) == 1000
    # the live rows last beat at the generated ledger's end, months before the database's now
    assert len(answers["silent"]) == LIVE

    dialect = make_url(big_url).get_backend_name()
    failures = []
    if dialect == "sqlite":
        path = Path(make_url(big_url).database or "")
        for case in CASES:
            total = 0
            for one in per_case[case.query]:
                plan, steps = sqlite_plan_and_steps(path, one)
                assert_sqlite_plan(case, plan)
                total += steps
            if total > case.max_steps:
                failures.append((case.query, total, per_case[case.query]))
    else:
        engine = create_async_engine(big_url, poolclass=NullPool)
        read = postgres_rows_read if dialect == "postgresql" else mariadb_rows_read
        try:
            async with engine.connect() as conn:
                for case in CASES:
                    total = 0
                    for one in per_case[case.query]:
                        rows, nodes = await read(conn, one)
                        assert nodes, (case.query, one.sql)  # the runs table was read at all
                        full = ("Seq Scan", "ALL", *(() if case.ordered_walk else ("index ",)))
                        assert not any(n.startswith(full) for n in nodes), (case.query, nodes)
                        total += rows
                    if total > case.max_rows:
                        failures.append((case.query, total, per_case[case.query]))
        finally:
            await engine.dispose()
    assert not failures, failures
