"""Start 3 replicas of the example app on one Postgres ledger and show each slot ran once.

    python example_app/replicas.py --database-url postgresql+asyncpg://postgres@127.0.0.1:5432/app

Runs ``voltro migrate``, starts three ``uvicorn example_app.main:app`` processes (ports 8001-
8003) for ``--seconds``, stops them (SIGTERM: a graceful shutdown), then reads
``_voltro_schedule_runs``: per schedule, how many slots ran, on which replicas, and how many ran
more than once (exit 1 if any, or if nothing ran).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

REPO = Path(__file__).resolve().parent.parent

PER_SCHEDULE = text(
    "SELECT name, COUNT(DISTINCT scheduled_at), COUNT(*), COUNT(DISTINCT replica_id) "
    "FROM _voltro_schedule_runs WHERE trigger = 'self' AND status NOT IN ('skipped', 'missed') "
    "AND scheduled_at >= :since GROUP BY name ORDER BY name"
)
DUPLICATES = text(
    "SELECT name, scheduled_at, COUNT(*) FROM _voltro_schedule_runs "
    "WHERE trigger = 'self' AND status NOT IN ('skipped', 'missed') AND scheduled_at >= :since "
    "GROUP BY name, scheduled_at HAVING COUNT(*) > 1"
)


def start(port: int, env: dict[str, str], logs: Path) -> subprocess.Popen[bytes]:
    log = (logs / f"replica-{port}.log").open("wb")
    return subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "example_app.main:app", "--port", str(port)],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def log_tail(logs: Path, port: int, lines: int = 40) -> str:
    """The end of a replica's log, so a replica that died says why where the caller looks."""
    text = (logs / f"replica-{port}.log").read_text(errors="replace").splitlines()
    return "\n".join(text[-lines:])


def wait_ready(ports: list[int], procs: list[subprocess.Popen[bytes]], logs: Path) -> None:
    """Until every replica's ``GET /_voltro/health`` answers 200 (boot takes seconds)."""
    deadline = time.monotonic() + 60
    for port, proc in zip(ports, procs, strict=True):
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"replica on port {port} exited with {proc.returncode}; "
                                 f"the end of its log:\n{log_tail(logs, port)}")  # fmt: skip
            try:
                if httpx.get(f"http://127.0.0.1:{port}/_voltro/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"replica on port {port} not healthy after 60 s; "
                                 f"the end of its log:\n{log_tail(logs, port)}")  # fmt: skip
            time.sleep(0.2)


async def report(url: str, since: datetime) -> int:
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            per_schedule = (await conn.execute(PER_SCHEDULE, {"since": since})).all()
            duplicates = (await conn.execute(DUPLICATES, {"since": since})).all()
    finally:
        await engine.dispose()
    print(f"{'schedule':<14}{'slots':>7}{'runs':>7}{'replicas':>10}")
    for name, slots, runs, replicas in per_schedule:
        print(f"{name:<14}{slots:>7}{runs:>7}{replicas:>10}")
    for name, slot, count in duplicates:
        print(f"DUPLICATE: {name} at {slot} ran {count} times")
    total = sum(row[1] for row in per_schedule)
    if duplicates or not total:
        print("FAIL: " + ("a slot ran twice" if duplicates else "nothing ran"))
        return 1
    print(f"exactly once: {total} slots, each run by one of the replicas")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=os.environ.get("VOLTRO_DATABASE_URL"))
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--base-port", type=int, default=8001)
    parser.add_argument("--logs", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")))
    args = parser.parse_args(argv)
    if not args.database_url or not args.database_url.startswith("postgresql"):
        parser.error("--database-url postgresql+asyncpg://USER@HOST:5432/DB is required")
    env = {**os.environ, "VOLTRO_DATABASE_URL": args.database_url,
           "VOLTRO_SHUTDOWN_GRACE_MS": "1000"}  # fmt: skip
    env.pop("VOLTRO_REPLICA_ID", None)  # each process gets <hostname>-<pid>
    subprocess.run([sys.executable, "-m", "fastapi_voltro_schedules", "migrate"],
                   cwd=REPO, env=env, check=True)  # fmt: skip
    ports = [args.base_port + i for i in range(3)]
    replicas = [start(port, env, args.logs) for port in ports]
    try:
        wait_ready(ports, replicas, args.logs)
        since = datetime.now(UTC)
        print(f"replicas ready on ports {ports} (logs: {args.logs}/replica-*.log); "
              f"running {args.seconds:g} s", flush=True)  # fmt: skip
        time.sleep(args.seconds)
    finally:
        for proc in replicas:
            proc.send_signal(signal.SIGTERM)
        for proc in replicas:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
    return asyncio.run(report(args.database_url, since))


if __name__ == "__main__":
    sys.exit(main())
