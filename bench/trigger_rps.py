"""External trigger throughput against a bare FastAPI route on the same server.

    python -m bench.trigger_rps [--seconds 10] [--concurrency 32] [--postgres-url URL]

Starts ``uvicorn bench.trigger_app:app`` on 127.0.0.1 (SQLite ledger in a temp dir), then, from
this process, keeps ``concurrency`` requests in flight for ``seconds`` against each of:

- ``POST /bare`` — a route that returns ``{"ok": true}``: the server's own ceiling;
- ``POST /_voltro/schedules/hourly/trigger`` stating the current hour's occurrence — the first
  answer is ``accepted``, every later one ``duplicate`` (the retry path a CronJob produces):
  bearer check, snap, claim conflict, lookup of the first run.

Then the duplicate storm: 200 concurrent POSTs for a fresh occurrence — wall time, and that
exactly one was accepted. With ``--postgres-url`` the storm again over two replicas sharing that
ledger (its tables are reset), alternating between them, with the ledger's rows for the slot.
Prints req/s and the ratio trigger / bare.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

TOKEN = "bench-trigger-token"
REPO = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _load(
    base: str, path: str, headers: dict[str, str], seconds: float, concurrency: int
) -> tuple[float, Counter[int]]:
    """``concurrency`` keep-alive connections, each sending POSTs one after another for
    ``seconds``: requests/s and the status codes.

    Plain HTTP/1.1 on asyncio streams rather than an httpx client: httpx spent ~3 ms of this
    process's CPU per request (its pool checks every open connection on each assignment), so
    both routes measured the client at 250–330 req/s and their ratio was noise."""
    url = httpx.URL(base)
    host, port = url.host, url.port or 80
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}:{port}", "Content-Length: 0"]
    request = ("\r\n".join(lines + [f"{k}: {v}" for k, v in headers.items()]) + "\r\n\r\n").encode()
    codes: Counter[int] = Counter()
    stop = time.perf_counter() + seconds

    async def worker() -> None:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            while time.perf_counter() < stop:
                writer.write(request)
                status = await reader.readline()
                length = 0
                while (line := await reader.readline()) not in (b"\r\n", b""):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                await reader.readexactly(length)
                codes[int(status.split()[1])] += 1
        finally:
            writer.close()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return sum(codes.values()) / (time.perf_counter() - start), codes


async def _burst(urls: list[str], headers: dict[str, str]) -> tuple[float, list[httpx.Response]]:
    """200 concurrent POSTs, the i-th to ``urls[i % len(urls)]``, each from a client of its own,
    as 200 CronJob pods or retrying callers send them: wall time and the answers.

    Not one shared client: its pool assigns every request by scanning every open connection
    (httpcore's ``_assign_requests_to_connections``, a readability check per connection), so
    with 200 open at once that client, not the server, set the wall time — 60% of its CPU was
    there, and the server saw the 200 requests arrive over 1.2 s while answering each in 1 ms.
    """
    tls = ssl.create_default_context()  # one for all: httpx would build one per client
    clients = [httpx.AsyncClient(timeout=30, verify=tls) for _ in range(200)]
    try:
        start = time.perf_counter()
        answers = await asyncio.gather(
            *(c.post(urls[i % len(urls)], headers=headers) for i, c in enumerate(clients))
        )
        return time.perf_counter() - start, answers
    finally:
        await asyncio.gather(*(c.aclose() for c in clients))


async def _storm(base: str, slot: datetime) -> tuple[float, Counter[str]]:
    headers = {"Authorization": f"Bearer {TOKEN}", "X-Voltro-Scheduled-At": slot.isoformat()}
    wall, answers = await _burst([base + "/_voltro/schedules/hourly/trigger"], headers)
    return wall, Counter(a.json()["status"] for a in answers)


async def measure(base: str, seconds: float, concurrency: int) -> dict[str, object]:
    now = datetime.now(UTC)
    this_hour = now.replace(minute=0, second=0, microsecond=0)
    bare_rps, bare_codes = await _load(base, "/bare", {}, seconds, concurrency)
    trig_headers = {
        "Authorization": f"Bearer {TOKEN}",
        "X-Voltro-Scheduled-At": this_hour.isoformat(),
    }
    trig_rps, trig_codes = await _load(
        base, "/_voltro/schedules/hourly/trigger", trig_headers, seconds, concurrency
    )
    # The same burst against the bare route first: these clients' and the server's own floor.
    bare_storm_wall, _ = await _burst([base + "/bare"], {})
    # The previous hour: a fresh occurrence (stated times snap like arrivals).
    storm_wall, storm = await _storm(base, this_hour - timedelta(hours=1))
    return {
        "bare_rps": bare_rps,
        "bare_codes": dict(bare_codes),
        "trigger_rps": trig_rps,
        "trigger_codes": dict(trig_codes),
        "ratio": trig_rps / bare_rps,
        "storm_wall_ms": storm_wall * 1000,
        "bare_storm_wall_ms": bare_storm_wall * 1000,
        "storm_answers": dict(sorted(storm.items())),  # printed in one order, whoever won
    }


@contextlib.contextmanager
def server(env: dict[str, str], cwd: str) -> Iterator[str]:
    """``uvicorn bench.trigger_app:app`` on a free local port, until the block ends."""
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "bench.trigger_app:app",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        env=env,
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                httpx.get(base + "/openapi.json", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        proc.wait(20)


async def replica_storm(bases: list[str], url: str) -> dict[str, object]:
    """200 concurrent POSTs for one fresh occurrence, alternating between the replicas; then
    the ledger's rows for that slot (exactly one run is the claim's whole point)."""
    from sqlalchemy import func, select
    from sqlalchemy.ext.asyncio import create_async_engine

    from fastapi_voltro_schedules.models import runs_table

    slot = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    headers = {"Authorization": f"Bearer {TOKEN}", "X-Voltro-Scheduled-At": slot.isoformat()}
    walls = []
    # The bare route first: the same 200 callers' floor.
    for route, route_headers in (("/bare", {}), ("/_voltro/schedules/hourly/trigger", headers)):
        wall, answers = await _burst([base + route for base in bases], route_headers)
        walls.append(wall)
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            for _ in range(50):  # the accepted run finishes in the background
                rows = (
                    await conn.execute(
                        select(runs_table.c.status, func.count())
                        .where(runs_table.c.name == "hourly", runs_table.c.scheduled_at == slot)
                        .group_by(runs_table.c.status)
                    )
                ).all()
                if rows and all(status != "running" for status, _ in rows):
                    break
                await asyncio.sleep(0.1)
    finally:
        await engine.dispose()
    return {
        "storm_wall_ms": walls[1] * 1000,
        "bare_storm_wall_ms": walls[0] * 1000,
        "storm_answers": dict(sorted(Counter(a.json()["status"] for a in answers).items())),
        "ledger": {str(status): int(n) for status, n in rows},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument(
        "--postgres-url", help="also the storm over 2 replicas on this ledger (tables reset!)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "VOLTRO_DATABASE_URL": f"sqlite+aiosqlite:///{tmp}/trigger.db",
            "VOLTRO_SCHEDULE_TRIGGER_TOKEN": TOKEN,
            # The storm states the previous hour, up to two hours ago: a stated time must lie
            # within the skew of the server's clock (else 409 too_late).
            "VOLTRO_EXTERNAL_TRIGGER_SKEW_MS": str(3 * 3_600_000),
        }
        with server(env, tmp) as base:
            result = asyncio.run(measure(base, args.seconds, args.concurrency))
        replicas: dict[str, object] | None = None
        if args.postgres_url:
            from bench.harness import reset_postgres

            reset_postgres(args.postgres_url)
            pg_env = env | {"VOLTRO_DATABASE_URL": args.postgres_url}
            with (
                server(pg_env | {"VOLTRO_REPLICA_ID": "storm-a"}, tmp) as a,
                server(pg_env | {"VOLTRO_REPLICA_ID": "storm-b"}, tmp) as b,
            ):
                replicas = asyncio.run(replica_storm([a, b], args.postgres_url))
    print(f"trigger route vs bare route, {args.concurrency} in flight, {args.seconds:g} s each")
    print(f"  bare route        : {result['bare_rps']:8,.0f} req/s  {result['bare_codes']}")
    print(f"  trigger (dupes)   : {result['trigger_rps']:8,.0f} req/s  {result['trigger_codes']}")
    print(f"  ratio trigger/bare: {result['ratio']:.2f}")
    print(
        f"  200-POST storm    : {result['storm_wall_ms']:,.0f} ms wall "
        f"(bare route: {result['bare_storm_wall_ms']:,.0f} ms), "
        f"answers {result['storm_answers']}"
    )
    if replicas is not None:
        print(
            f"  200-POST storm, 2 replicas on Postgres: {replicas['storm_wall_ms']:,.0f} ms wall "
            f"(bare route: {replicas['bare_storm_wall_ms']:,.0f} ms), "
            f"answers {replicas['storm_answers']}, ledger rows for the slot {replicas['ledger']}"
        )


if __name__ == "__main__":
    main()
