"""The example app under a real uvicorn on 127.0.0.1, on the real clock (a few seconds)."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from support.servers import uvicorn_server
from support.waiting import wait_for

pytestmark = pytest.mark.slow


def succeeded_heartbeats(db: Path) -> list[datetime]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT scheduled_at FROM _voltro_schedule_runs "
            "WHERE name = 'heartbeat' AND status = 'succeeded' ORDER BY scheduled_at"
        ).fetchall()
    return [datetime.fromisoformat(r[0]) for r in rows]


def longest_consecutive_run(slots: list[datetime]) -> int:
    best = current = 1 if slots else 0
    for a, b in zip(slots, slots[1:], strict=False):
        current = current + 1 if b - a == timedelta(seconds=1) else 1
        best = max(best, current)
    return best


def test_example_app_fires_every_second_under_uvicorn(tmp_path: Path) -> None:
    db = tmp_path / "voltro.db"
    env = {
        "VOLTRO_DATABASE_URL": f"sqlite+aiosqlite:///{db}",
        "EXAMPLE_HEARTBEAT_CRON": "* * * * * *",
        "VOLTRO_SHUTDOWN_GRACE_MS": "1000",  # slowReindex runs 15 s: don't wait for it
    }
    with uvicorn_server("example_app.main:app", tmp_path, env) as server:
        wait_for(
            lambda: db.exists() and longest_consecutive_run(succeeded_heartbeats(db)) >= 3,
            interval=0.25,
            what=f"three heartbeats in a row (log: {server.log_path})",
        )
        log = server.log()
    slots = succeeded_heartbeats(db)
    assert longest_consecutive_run(slots) >= 3, (slots, log)
    assert len(set(slots)) == len(slots)  # distinct: no slot ran twice
    assert all(s.microsecond == 0 for s in slots)  # cron-derived, not now()
    # What the user sees under a plain `uvicorn app:app`.
    assert "scheduler: starting  total=6 self=5 external=1 coordinator=single" in log
    assert "heartbeat" in log and "dailyDigest" in log
