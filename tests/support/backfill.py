"""Range backfill against a real server: ``apps.backfill_app`` served by uvicorn, its database
and the handler's own log (one JSON line per execution), for the HTTP and CLI tests.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from fastapi_voltro_schedules.store import RunRecord
from support.cluster import fetch_runs
from support.servers import Server, uvicorn_server
from support.waiting import HANG

NAME = "hourly-sync"
INSPECT_TOKEN = "inspect-secret-for-tests"
TRIGGER_TOKEN = "trigger-secret-for-tests"
AUTH = {"Authorization": f"Bearer {INSPECT_TOKEN}"}
BASE = datetime(2026, 8, 10, tzinfo=UTC)
FROM = "2026-08-10T00:00:00Z"


def slot(n: int) -> datetime:
    return BASE + timedelta(hours=n)


def hours(n: int) -> str:
    return slot(n).isoformat().replace("+00:00", "Z")


def ledger(url: str) -> list[RunRecord]:
    """The rows of ``NAME`` in the order they were fired."""
    return sorted(fetch_runs(url, NAME), key=lambda r: (r.fired_at or BASE, r.scheduled_at))


def handler_log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class App:
    """One backfill_app server, its database and the handler's log."""

    def __init__(self, server: Server, url: str, log: Path) -> None:
        self.server, self.url, self.log = server, url, log

    def post(
        self, body: dict[str, Any], *, name: str = NAME, headers: dict[str, str] | None = None
    ) -> httpx.Response:
        return httpx.post(
            f"{self.server.url}/_voltro/inspect/schedules/{name}/backfill",
            json=body,
            headers=AUTH if headers is None else headers,
            timeout=HANG,
        )

    def stream(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        response = self.post(body)
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("application/x-ndjson")
        return [json.loads(line) for line in response.text.splitlines() if line.strip()]

    @contextmanager
    def held(self) -> Iterator[None]:
        """Handlers started meanwhile do not finish until the block is left (the app's
        ``BACKFILL_HOLD`` file): a range is still running there, whatever the load."""
        hold = self.log.with_name(self.log.name + ".hold")
        hold.touch()
        try:
            yield
        finally:
            hold.unlink()


@contextmanager
def start_app(
    tmp_path: Path, database_url: str, *, name: str = "server", **env: str
) -> Iterator[App]:
    log = tmp_path / f"{name}-handler.jsonl"
    full_env = {
        "VOLTRO_DATABASE_URL": database_url,
        "VOLTRO_INSPECT_TOKEN": INSPECT_TOKEN,
        "VOLTRO_SCHEDULE_TRIGGER_TOKEN": TRIGGER_TOKEN,
        "VOLTRO_REPLICA_ID": "web-1",
        "BACKFILL_LOG": str(log),
        "BACKFILL_HOLD": str(log.with_name(log.name + ".hold")),
        **env,
    }
    with uvicorn_server("apps.backfill_app:app", tmp_path, full_env, name=name) as server:
        yield App(server, database_url, log)
