"""Range backfill over HTTP, against a real uvicorn on 127.0.0.1 (``tests/apps/backfill_app.py``).

``POST /_voltro/inspect/schedules/{name}/backfill`` with ``{"from","to","confirm","limit"}``:
refusals answer 409 with the count, the reason and how many slots already succeeded, and fire
nothing (checked in the ledger and in the handler's own log); an accepted range streams one
NDJSON ``progress`` line per slot and a ``summary``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import clean_server, run_async
from support.backfill import (
    FROM,
    NAME,
    TRIGGER_TOKEN,
    App,
    handler_log,
    hours,
    ledger,
    slot,
    start_app,
)
from support.waiting import HANG, wait_for

from fastapi_voltro_schedules.enums import RunStatus, Trigger
from fastapi_voltro_schedules.migrations import upgrade_to_head

pytestmark = pytest.mark.slow


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
            "reprocess": "none",
            "toRun": 25,
            "kept": 0,
            "taken": 0,
        }

        # 26 again, re-running every slot: the refusal says 25 of them already succeeded (and
        # would run again under reprocess=all).
        refused = app.post({"from": FROM, "to": hours(26), "reprocess": "all"})
        assert refused.status_code == 409
        assert (refused.json()["count"], refused.json()["alreadySucceeded"]) == (26, 25)
        assert "25 of them already succeeded and would run again" in refused.json()["detail"]
        assert len(ledger(app.url)) == 25 and len(handler_log(app.log)) == 25

        # Confirmed: 26 progress lines and the summary.
        events = app.stream({"from": FROM, "to": hours(26), "confirm": True, "reprocess": "all"})
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

    # (from, to] with `to` not after `from` holds no occurrence: the summary alone, counting 0.
    for start, end in [(hours(5), hours(5)), (hours(6), hours(5))]:
        empty = app.post({"from": start, "to": end})
        assert empty.status_code == 200, empty.text
        assert [json.loads(line) for line in empty.text.splitlines()] == [
            {"event": "summary", "name": NAME, "count": 0, "alreadySucceeded": 0,
             "fired": 0, "succeeded": 0, "failed": 0, "reprocess": "none", "toRun": 0,
             "kept": 0, "taken": 0}
        ]  # fmt: skip
    # Bad ranges: 422 with the reason.
    for start, end, words in [
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
    with start_app(tmp_path, url) as app:
        first: dict[str, list[dict[str, Any]]] = {}
        thread = threading.Thread(
            target=lambda: first.setdefault("events", app.stream({"from": FROM, "to": hours(4)}))
        )
        with app.held():  # the first range is inside its first slot until the second answered
            thread.start()
            wait_for(lambda: handler_log(app.log), what="the first range's first slot")
            second = app.post({"from": FROM, "to": hours(2)})
        thread.join(HANG)
        assert not thread.is_alive(), "the first range never ended"
        assert second.status_code == 409, second.text
        body = second.json()
        assert (body["reason"], body["count"]) == ("in-progress", 2)
        assert "already running" in body["detail"]
        assert first["events"][-1]["event"] == "summary"
        assert first["events"][-1]["fired"] == 4
        # Only the first range fired; the lock is released afterwards.
        assert len(ledger(url)) == 4
        assert app.stream({"from": FROM, "to": hours(1), "reprocess": "all"})[-1]["fired"] == 1


def test_dry_run_and_reprocess_in_the_body(tmp_path: Path, database: str) -> None:
    with start_app(tmp_path, database, BACKFILL_FAIL_AT=slot(2).isoformat()) as app:
        first = app.stream({"from": FROM, "to": hours(3)})
        assert (first[-1]["fired"], first[-1]["failed"]) == (3, 1)
        before = ledger(app.url)

        # A dry run: one JSON object, each slot with its current status; nothing written.
        dry = app.post({"from": FROM, "to": hours(5), "reprocess": "failed", "dryRun": True})
        assert dry.status_code == 200, dry.text
        answer = dry.json()
        assert {k: answer[k] for k in ("dryRun", "reprocess", "count", "toRun", "kept")} == {
            "dryRun": True,
            "reprocess": "failed",
            "count": 5,
            "toRun": 3,
            "kept": 2,
        }
        assert answer["alreadySucceeded"] == 2
        assert [(s["status"], s["action"]) for s in answer["slots"]] == [
            ("succeeded", "keep"),
            ("failed", "rerun"),
            ("succeeded", "keep"),
            (None, "run"),
            (None, "run"),
        ]
        assert answer["slots"][1]["runId"] in {r.id for r in before}
        assert sorted(r.id for r in ledger(app.url)) == sorted(r.id for r in before)
        assert len(handler_log(app.log)) == 3

        # Unknown policy: 422 naming the field, nothing fired.
        bad = app.post({"from": FROM, "to": hours(5), "reprocess": "everything"})
        assert bad.status_code == 422 and "reprocess" in bad.json()["detail"]

        # reprocess=failed runs the failed slot 2 (it fails again: the app fails it always)
        # and the two with nothing recorded; the succeeded ones are kept.
        events = app.stream({"from": FROM, "to": hours(5), "reprocess": "failed"})
        summary = events[-1]
        assert summary["event"] == "summary"
        assert (summary["fired"], summary["failed"], summary["kept"], summary["toRun"]) == (
            3,
            1,
            2,
            3,
        )
        seen = [datetime.fromisoformat(s["scheduledAt"]) for s in handler_log(app.log)[3:]]
        assert seen == [slot(2), slot(4), slot(5)]
        assert len(ledger(app.url)) == 6
