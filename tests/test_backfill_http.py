"""Range backfill over HTTP, against a real uvicorn on 127.0.0.1 (``tests/apps/backfill_app.py``).

``POST /_voltro/inspect/schedules/{name}/backfill`` with ``{"from","to","confirm","limit"}``:
refusals answer 409 with the count, the reason and how many slots already succeeded, and fire
nothing (checked in the ledger and in the handler's own log); an accepted range streams one
NDJSON ``progress`` line per slot and a ``summary``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import clean_server, run_async
from support.servers import Server, uvicorn_server

from fastapi_voltro_schedules.enums import RunStatus, Trigger
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.store import RunRecord, create_store

pytestmark = pytest.mark.slow

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
    async def read() -> list[RunRecord]:
        store = create_store(url)
        try:
            return await store.list_runs(NAME, limit=20_000)
        finally:
            await store.dispose()

    return sorted(run_async(read()), key=lambda r: (r.fired_at or BASE, r.scheduled_at))


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
            timeout=60,
        )

    def stream(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        response = self.post(body)
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("application/x-ndjson")
        return [json.loads(line) for line in response.text.splitlines() if line.strip()]


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
        **env,
    }
    with uvicorn_server("apps.backfill_app:app", tmp_path, full_env, name=name) as server:
        yield App(server, database_url, log)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'voltro.db'}"
        return
    with clean_server("postgres") as url:
        run_async(upgrade_to_head(url))  # a server database is migrated by `voltro migrate`
        yield url


@pytest.fixture
def sqlite_app(tmp_path: Path) -> Iterator[App]:
    with start_app(tmp_path, f"sqlite+aiosqlite:///{tmp_path / 'voltro.db'}") as app:
        yield app


def test_25_run_26_need_confirmation_and_each_slot_gets_its_own_scheduled_at(
    tmp_path: Path, database: str
) -> None:
    with start_app(tmp_path, database) as app:
        # 26 occurrences without confirmation: 409 with the count; nothing fired.
        refused = app.post({"from": FROM, "to": hours(26)})
        assert refused.status_code == 409
        body = refused.json()
        assert body["code"] == "backfill_refused"
        assert (body["reason"], body["count"], body["alreadySucceeded"]) == (
            "needs-confirmation",
            26,
            0,
        )
        assert "26 occurrences" in body["detail"] and "--yes" in body["detail"]
        assert ledger(app.url) == [] and handler_log(app.log) == []

        # 25 occurrences: no confirmation needed.
        events = app.stream({"from": FROM, "to": hours(25)})
        assert [e["event"] for e in events] == ["progress"] * 25 + ["summary"]
        assert [e["fired"] for e in events[:-1]] == list(range(1, 26))
        assert events[-1] == {
            "event": "summary",
            "name": NAME,
            "count": 25,
            "alreadySucceeded": 0,
            "fired": 25,
            "succeeded": 25,
            "failed": 0,
        }

        # 26 again: the refusal now says 25 of them already succeeded (they would run again).
        refused = app.post({"from": FROM, "to": hours(26)})
        assert refused.status_code == 409
        assert (refused.json()["count"], refused.json()["alreadySucceeded"]) == (26, 25)
        assert "25 of them already succeeded" in refused.json()["detail"]
        assert len(ledger(app.url)) == 25 and len(handler_log(app.log)) == 25

        # Confirmed: 26 progress lines and the summary.
        events = app.stream({"from": FROM, "to": hours(26), "confirm": True})
        assert [e["event"] for e in events] == ["progress"] * 26 + ["summary"]
        assert all(e["count"] == 26 and e["alreadySucceeded"] == 25 for e in events)
        assert (events[-1]["fired"], events[-1]["succeeded"], events[-1]["failed"]) == (26, 26, 0)

        # The handler saw every slot in order, each with its own scheduled_at, trigger manual.
        seen = handler_log(app.log)
        expected = [slot(n) for n in range(1, 26)] + [slot(n) for n in range(1, 27)]
        assert [datetime.fromisoformat(s["scheduledAt"]) for s in seen] == expected
        assert {s["trigger"] for s in seen} == {"manual"}
        # The app's clock is frozen at 2026-08-12T12:00Z: fired "now", computed for its slot.
        assert {s["firedAt"] for s in seen} == {"2026-08-12T12:00:00+00:00"}
        runs = ledger(app.url)
        assert len(runs) == 51
        assert {r.id for r in runs} == {s["runId"] for s in seen}
        assert {(r.status, r.trigger, r.replica_id) for r in runs} == {
            (RunStatus.SUCCEEDED, Trigger.MANUAL, "web-1")
        }


def test_a_failing_slot_is_recorded_and_the_next_still_fires(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'voltro.db'}"
    with start_app(tmp_path, url, BACKFILL_FAIL_AT=slot(3).isoformat()) as app:
        events = app.stream({"from": FROM, "to": hours(5)})
        assert [(e["fired"], e["succeeded"], e["failed"]) for e in events[:-1]] == [
            (1, 1, 0),
            (2, 2, 0),
            (3, 2, 1),
            (4, 3, 1),
            (5, 4, 1),
        ]
        assert events[-1]["event"] == "summary"
        assert (events[-1]["fired"], events[-1]["succeeded"], events[-1]["failed"]) == (5, 4, 1)
        runs = sorted(ledger(url), key=lambda r: r.scheduled_at)
        assert [(r.scheduled_at, r.status) for r in runs] == [
            (slot(1), RunStatus.SUCCEEDED),
            (slot(2), RunStatus.SUCCEEDED),
            (slot(3), RunStatus.FAILED),
            (slot(4), RunStatus.SUCCEEDED),
            (slot(5), RunStatus.SUCCEEDED),
        ]
        assert runs[2].error_tag == "RuntimeError"
        seen = [datetime.fromisoformat(s["scheduledAt"]) for s in handler_log(app.log)]
        assert seen == [slot(n) for n in range(1, 6)]


def test_limits_bad_input_unknown_names_and_tokens(sqlite_app: App) -> None:
    app = sqlite_app

    def refusal(response: httpx.Response) -> tuple[int, str, str, int]:
        body = response.json()
        return response.status_code, body["code"], body["reason"], body["count"]

    # Over the limit: refused even when confirmed, firing nothing.
    over = app.post({"from": FROM, "to": hours(30), "confirm": True, "limit": 28})
    assert refusal(over) == (409, "backfill_refused", "over-limit", 30)
    assert "above the limit of 28" in over.json()["detail"]
    assert "nothing fired" in over.json()["detail"]
    assert over.json()["alreadySucceeded"] == 0
    default = app.post({"from": FROM, "to": hours(1001), "confirm": True})
    assert refusal(default) == (409, "backfill_refused", "over-limit", 1001)
    assert "above the limit of 1,000" in default.json()["detail"]
    # A limit above the hard ceiling is bad input, not a refusal.
    ceiling = app.post({"from": FROM, "to": hours(5), "limit": 10_001})
    assert ceiling.status_code == 422 and ceiling.json()["code"] == "invalid_backfill"
    assert "hard ceiling of 10,000" in ceiling.json()["detail"]
    assert app.post({"from": FROM, "to": hours(5), "limit": 0}).status_code == 422

    # Bad ranges: 422 with the reason.
    for start, end, words in [
        (hours(5), hours(5), "is not before"),
        (hours(6), hours(5), "is not before"),
        ("yesterday", hours(5), "is not an ISO-8601 instant"),
        ("2026-08-10T00:00:00", hours(5), "has no zone"),
    ]:
        bad = app.post({"from": start, "to": end})
        assert bad.status_code == 422, bad.text
        assert bad.json()["code"] == "invalid_backfill" and words in bad.json()["detail"]
    assert app.post({"from": FROM}).status_code == 422  # FastAPI's body validation
    assert app.post({"from": FROM, "to": hours(1), "confirmed": True}).status_code == 422

    unknown = app.post({"from": FROM, "to": hours(1)}, name="nope")
    assert unknown.status_code == 404 and unknown.json()["code"] == "schedule_not_found"

    # The inspect token is required; the trigger token does not open the route.
    missing = app.post({"from": FROM, "to": hours(1)}, headers={})
    assert missing.status_code == 401 and "VOLTRO_INSPECT_TOKEN" in missing.json()["detail"]
    wrong = app.post(
        {"from": FROM, "to": hours(1)}, headers={"Authorization": f"Bearer {TRIGGER_TOKEN}"}
    )
    assert wrong.status_code == 401 and wrong.json()["code"] == "unauthorized"

    assert ledger(app.url) == [] and handler_log(app.log) == []


def test_unset_inspect_token_answers_503(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'voltro.db'}"
    with start_app(tmp_path, url, VOLTRO_INSPECT_TOKEN="") as app:
        response = app.post({"from": FROM, "to": hours(1)})
        assert response.status_code == 503
        assert response.json()["code"] == "token_not_configured"
        assert handler_log(app.log) == []


def test_a_second_range_of_the_schedule_is_refused_while_one_runs(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'voltro.db'}"
    with start_app(tmp_path, url, BACKFILL_SLEEP="0.4") as app:
        first: dict[str, list[dict[str, Any]]] = {}
        thread = threading.Thread(
            target=lambda: first.setdefault("events", app.stream({"from": FROM, "to": hours(4)}))
        )
        thread.start()
        deadline = time.monotonic() + 10
        while not handler_log(app.log) and time.monotonic() < deadline:
            time.sleep(0.02)
        second = app.post({"from": FROM, "to": hours(2)})
        thread.join(30)
        assert second.status_code == 409, second.text
        body = second.json()
        assert (body["reason"], body["count"]) == ("in-progress", 2)
        assert "already running" in body["detail"]
        assert first["events"][-1]["event"] == "summary"
        assert first["events"][-1]["fired"] == 4
        # Only the first range fired; the lock is released afterwards.
        assert len(ledger(url)) == 4
        assert app.stream({"from": FROM, "to": hours(1)})[-1]["fired"] == 1
