"""The inspect listing and one schedule's runs at many schedules and a big ledger (issue 35).

    python -m bench.listing --postgres-url URL [--schedules 100000] [--rows 10000000]
                            [--concurrency 6] [--seconds 10] [--reuse] [--dashboard]

1. Fills ``_voltro_schedule_runs`` at URL with ``--rows`` rows generated in the database
   (``INSERT … SELECT FROM generate_series``, in chunks of 1 M, the secondary indexes dropped
   during the load and built after it, then ``ANALYZE``): ``--schedules`` schedules
   ``tenant-000000`` …, one row a minute each from a week ago, round-robin (so each has
   rows ÷ schedules rows), about 2 % ``failed``, 1 % ``skipped``, the rest ``succeeded``. Then fills
   ``_voltro_schedule_state`` with migration 0012's own statement, and times it (what that
   migration costs on such a ledger). ``--reuse`` keeps a ledger of the same size from a
   previous run.
2. Serves ``bench.listing_app`` (``--schedules`` declared schedules on that ledger) under
   uvicorn, waits for its boot, and from this process keeps ``--concurrency`` requests in
   flight for ``--seconds`` per scenario — a page of the listing (the first, one at a random
   cursor, ``status=failed``, a name prefix) and one schedule's runs (a random schedule's, and
   ``runs?status=failed`` without a name): p50 / p99 / max latency, requests, non-200 answers.
3. ``--dashboard``: the dashboard's first page in headless Chromium (sign-in done): from
   navigation to the first page of schedules drawn, median of 5.

**It drops and refills our tables at URL**: give it a database of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from fastapi_voltro_schedules.listing import Walk, encode_cursor
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.models import CLAIMS_TABLE, RUNS_TABLE, STATE_TABLE, runs_table

from .common import percentile
from .trigger_rps import _free_port

REPO = Path(__file__).resolve().parent.parent
TOKEN = "bench-listing-token"
LIST = "/_voltro/inspect/schedules"
CHUNK = 1_000_000
BASE = "(date_trunc('minute', now()) - interval '7 days')"
"""Where the generated slots start: recent enough that the app's retention sweep (30 days by
default) leaves the ledger alone while the figures are taken (a ledger dated months back was
being deleted under the first measurements)."""


def _name(i: int) -> str:
    return f"tenant-{i:06d}"


def _listed_cursor(i: int) -> str:
    """The cursor of the page after schedule ``i`` (the app lists them in order)."""
    return encode_cursor(_name(i), Walk.LISTED, i)


def _fill_statement(schedules: int, start: int, stop: int) -> str:
    return (
        f"INSERT INTO {RUNS_TABLE} (id, name, scheduled_at, fired_at, finished_at, status, "
        '"trigger", coordination_outcome, replica_id) '
        "SELECT 'sr_' || lpad(to_hex(i), 32, '0'), "
        f"'tenant-' || lpad((i % {schedules})::text, 6, '0'), "
        f"{BASE} + (i / {schedules}) * interval '1 minute', "
        f"{BASE} + (i / {schedules}) * interval '1 minute', "
        f"{BASE} + (i / {schedules}) * interval '1 minute' + interval '20 milliseconds', "
        "CASE WHEN i % 53 = 0 THEN 'failed' WHEN i % 97 = 0 THEN 'skipped' "
        "ELSE 'succeeded' END, 'self', 'wonLock', 'bench-replica' "
        f"FROM generate_series({start}, {stop - 1}) AS i"
    )


def _migration_fill_sql() -> str:
    path = REPO / "alembic" / "versions" / "0012_scale_listing_state.py"
    spec = importlib.util.spec_from_file_location("m0012", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.FILL_STATE_SQL)


async def fill(engine: AsyncEngine, schedules: int, rows: int, reuse: bool) -> dict[str, float]:
    await upgrade_to_head(engine)
    async with engine.connect() as conn:
        have = (await conn.execute(text(f"SELECT count(*) FROM {RUNS_TABLE}"))).scalar_one()
    figures: dict[str, float] = {}
    if not (reuse and have == rows):
        t0 = time.perf_counter()
        async with engine.begin() as conn:
            for table in (RUNS_TABLE, CLAIMS_TABLE, STATE_TABLE):
                await conn.execute(text(f"TRUNCATE {table}"))
            for index in runs_table.indexes:
                await conn.execute(text(f"DROP INDEX IF EXISTS {index.name}"))
        for start in range(0, rows, CHUNK):
            async with engine.begin() as conn:
                await conn.exec_driver_sql(
                    _fill_statement(schedules, start, min(start + CHUNK, rows))
                )
            print(f"  {min(start + CHUNK, rows):,} rows", flush=True)
        figures["load s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        async with engine.begin() as conn:
            for index in runs_table.indexes:
                await conn.run_sync(lambda sync, index=index: index.create(sync))
        figures["indexes s"] = time.perf_counter() - t0
        async with engine.connect() as conn:
            await conn.execute(text(f"ANALYZE {RUNS_TABLE}"))
            await conn.commit()
    t0 = time.perf_counter()
    async with engine.begin() as conn:
        await conn.execute(text(f"TRUNCATE {STATE_TABLE}"))
        await conn.exec_driver_sql(_migration_fill_sql())
    figures["state fill s"] = time.perf_counter() - t0
    async with engine.connect() as conn:
        await conn.execute(text(f"ANALYZE {STATE_TABLE}"))
        await conn.commit()
    return figures


@contextmanager
def served(url: str, schedules: int, log: Path, workers: int = 1) -> Iterator[tuple[str, float]]:
    port = _free_port()
    env = {
        **os.environ,
        "VOLTRO_DATABASE_URL": url,
        "VOLTRO_INSPECT_TOKEN": TOKEN,
        "VOLTRO_BENCH_SCHEDULES": str(schedules),
    }
    if workers == 1:
        env["VOLTRO_REPLICA_ID"] = "bench-listing"
    # else each worker process is a replica of its own (the default id: host and pid)
    started = time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "bench.listing_app:app", "--host", "127.0.0.1",
             "--port", str(port), "--log-level", "warning", "--workers", str(workers)],
            env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
        base = f"http://127.0.0.1:{port}"
        try:
            for _ in range(3000):
                if proc.poll() is not None:
                    tail = log.read_text()[-3000:]
                    raise RuntimeError(f"the app exited ({proc.returncode}):\n{tail}")
                try:
                    if httpx.get(base + "/_voltro/health/ready", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.2)
            # every worker booted: each answers with its own replica id (a worker accepts
            # connections once its lifespan has started)
            seen: set[str] = set()
            headers = {"Authorization": f"Bearer {TOKEN}"}
            for _ in range(3000):
                if len(seen) >= workers:
                    break
                with httpx.Client(base_url=base, headers=headers, timeout=30) as client:
                    answer = client.get(f"{LIST}?limit=1")
                    if answer.status_code == 200:
                        seen.add(answer.json()["replicaId"])
                time.sleep(0.05)
            yield base, time.perf_counter() - started
        finally:
            proc.terminate()
            proc.wait(60)


async def load(
    base: str, make_path: Callable[[], str], seconds: float, concurrency: int
) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    latencies: list[float] = []
    bad: dict[int, int] = {}
    end = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base, headers=headers, limits=limits, timeout=60) as c:
        await c.get(make_path())  # warm

        async def worker() -> None:
            while time.perf_counter() < end:
                path = make_path()
                t0 = time.perf_counter()
                r = await c.get(path)
                latencies.append((time.perf_counter() - t0) * 1000)
                if r.status_code != 200:
                    bad[r.status_code] = bad.get(r.status_code, 0) + 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return {
        "requests": len(latencies),
        "p50": percentile(latencies, 0.5),
        "p99": percentile(latencies, 0.99),
        "max": max(latencies),
        "non-200": bad,
    }


def dashboard_load(base: str, repeat: int = 5) -> float | None:
    """Median ms from navigation to the first page of schedules drawn, signed in."""
    sys.path.insert(0, str(REPO / "tests"))
    try:
        from support.browser import chromium, missing
    except ImportError:
        return None
    if missing() is not None:
        print(f"  dashboard: {missing()}", flush=True)
        return None
    from selenium.webdriver.common.by import By

    samples = []
    with chromium(1280, 1000) as driver:
        driver.get(base + "/_voltro/dashboard")
        driver.find_element(By.CSS_SELECTOR, "form.signin-form input[name=token]").send_keys(TOKEN)
        driver.find_element(By.CSS_SELECTOR, "form.signin-form button[type=submit]").click()
        for _ in range(repeat + 1):
            driver.get(base + "/_voltro/dashboard")
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                drawn = driver.execute_script(
                    "const c = document.querySelectorAll('li.card').length;"
                    "return c ? performance.now() : null"
                )
                if drawn:
                    samples.append(float(drawn))
                    break
                time.sleep(0.01)
    return statistics.median(samples[1:]) if len(samples) > 1 else None


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.listing", description=__doc__)
    parser.add_argument("--postgres-url", required=True)
    parser.add_argument("--schedules", type=int, default=100_000)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--concurrency", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--reuse", action="store_true", help="keep a ledger of --rows rows")
    parser.add_argument("--dashboard", action="store_true", help="also time the dashboard")
    parser.add_argument("--limit", type=int, default=100, help="schedules / runs per page")
    parser.add_argument("--fill-only", action="store_true", help="fill the ledger and stop")
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="uvicorn worker processes (each a replica of the app on the one ledger)",
    )
    args = parser.parse_args(argv)
    n = args.schedules
    engine = create_async_engine(args.postgres_url, poolclass=NullPool)
    try:
        print(f"filling {args.rows:,} rows for {n:,} schedules…", flush=True)
        figures = await fill(engine, n, args.rows, args.reuse)
    finally:
        await engine.dispose()
    print("  " + ", ".join(f"{k} {v:.1f}" for k, v in figures.items()), flush=True)
    if args.fill_only:
        return
    rand = random.Random(35)
    lim = args.limit
    scenarios: dict[str, Callable[[], str]] = {
        f"listing: first page (limit={lim})": lambda: f"{LIST}?limit={lim}",
        "listing: a page at a random cursor": lambda: (
            f"{LIST}?limit={lim}&cursor={_listed_cursor(rand.randrange(n))}"
        ),
        "listing: status=failed, one page": lambda: f"{LIST}?limit={lim}&status=failed",
        "listing: prefix (~100 names)": lambda: (
            f"{LIST}?limit={lim}&prefix=tenant-{rand.randrange(max(n // 100, 1)):04d}"
        ),
        f"runs of one schedule (limit={lim})": lambda: (
            f"{LIST}/runs?name={_name(rand.randrange(n))}&limit={lim}"
        ),
        "runs?status=failed, no name": lambda: f"{LIST}/runs?status=failed&limit={lim}",
    }
    with (
        tempfile.TemporaryDirectory() as tmp,
        served(args.postgres_url, n, Path(tmp) / "app.log", args.workers) as (base, boot),
    ):
        print(f"app booted with {n:,} schedules in {boot:.1f} s", flush=True)
        rows = []
        for label, make in scenarios.items():
            result = await load(base, make, args.seconds, args.concurrency)
            rows.append((label, result))
            print(f"  {label}: {result}", flush=True)
        dash = dashboard_load(base) if args.dashboard else None
    print(
        f"\n## listing  {n:,} schedules, {args.rows:,} ledger rows, Postgres, "
        f"{args.concurrency} concurrent, {args.seconds:g} s each, "
        f"{args.workers} worker process{'es' if args.workers > 1 else ''}\n"
    )
    print("| request | requests | p50 ms | p99 ms | max ms | non-200 |")
    print("|---|---|---|---|---|---|")
    for label, r in rows:
        print(
            f"| {label} | {r['requests']} | {r['p50']:.1f} | {r['p99']:.1f} | {r['max']:.1f} "
            f"| {sum(r['non-200'].values()) or 0} |"
        )
    if dash is not None:
        print(f"\ndashboard first page drawn (Chromium, median of 5): {dash:.0f} ms")


if __name__ == "__main__":
    asyncio.run(main())
