"""Run-time schedules over HTTP (SPEC §7): ``PUT``/``DELETE /_voltro/inspect/schedules/{name}``
— 201 created / 200 replaced with the schedule as the listing shows it, 204 deleted, 404 an
unknown name, 409 ``declared_in_code``, 422 naming the field, 403 for the read-only role — in
process over the ASGI transport, and once over real HTTP against uvicorn.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.running import runs_of, served
from support.servers import uvicorn_server
from support.waiting import wait_until

from fastapi_voltro_schedules import (
    RunStatus,
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    define_handler,
    define_schedule,
)
from fastapi_voltro_schedules.runtime_schedules import MAX_ARGS_BYTES
from fastapi_voltro_schedules.store.instrumented import InstrumentedStore
from fastapi_voltro_schedules.testing import ManualClock

OPERATOR = "operator-token-for-runtime-tests"
READER = "read-only-token-for-runtime-tests"
AS_OPERATOR = {"Authorization": f"Bearer {OPERATOR}"}
AS_READER = {"Authorization": f"Bearer {READER}"}
T0 = datetime(2026, 6, 1, 10, 0, 30, tzinfo=UTC)
URL = "/_voltro/inspect/schedules/report.acme"
BODY = {"cron": "* * * * *", "timezone": "UTC", "handler": "tenantReport"}

seen: list[tuple[datetime, dict[str, Any]]] = []


@define_handler(name="tenantReport")
async def tenant_report(ctx: ScheduleContext) -> None:
    seen.append((ctx.scheduled_at, dict(ctx.args)))


async def _noop(ctx: ScheduleContext) -> None:
    return None


def scheduling_on(url: str, clock: ManualClock) -> Scheduling:
    config = SchedulingConfig(
        database_url=url, replica_id="pod-1", inspect_token=OPERATOR, inspect_read_token=READER
    )
    daily = define_schedule(name="daily", cron="0 3 * * *", timezone="UTC", handler=_noop)
    return Scheduling([daily], config=config, clock=clock, handlers=[tenant_report])


def listed(listing: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in listing["schedules"]}


async def test_put_creates_then_replaces_and_the_listing_shows_the_source(sqlite_url: str) -> None:
    seen.clear()
    clock = ManualClock(T0)
    scheduling = scheduling_on(sqlite_url, clock)
    async with served(scheduling) as http:
        r = await http.put(URL, json={**BODY, "args": {"tenant": "acme"}}, headers=AS_OPERATOR)
        assert r.status_code == 201, r.text
        created = r.json()
        assert (created["name"], created["source"], created["cron"]) == (
            "report.acme",
            "runtime",
            "* * * * *",
        )
        assert (created["onOverlap"], created["backfill"], created["trigger"]) == (
            "skip",
            "skip",
            "self",
        )
        assert created["nextFiring"] == "2026-06-01T10:01:00.000Z"

        await clock.advance(30)  # 10:01 fires
        await wait_until(lambda: runs_of(scheduling, "report.acme"), what="the 10:01 row")

        r = await http.put(
            URL,
            json={**BODY, "cron": "*/5 * * * *", "onOverlap": "queue", "maxRuntimeMs": 60000},
            headers=AS_OPERATOR,
        )
        assert r.status_code == 200, r.text
        replaced = r.json()
        assert (replaced["cron"], replaced["onOverlap"], replaced["maxRuntimeMs"]) == (
            "*/5 * * * *",
            "queue",
            60000,
        )
        # JSON Schema's integer: 60000.0 is one too, the same bound (the fuzzer sends it).
        again = {**BODY, "cron": "*/5 * * * *", "onOverlap": "queue", "maxRuntimeMs": 60000.0}
        r = await http.put(URL, json=again, headers=AS_OPERATOR)
        assert (r.status_code, r.json()["maxRuntimeMs"]) == (200, 60000), r.text
        assert replaced["lastRun"]["scheduledAt"] == "2026-06-01T10:01:00.000Z"
        assert replaced["nextFiring"] == "2026-06-01T10:05:00.000Z"

        r = await http.get("/_voltro/inspect/schedules", headers=AS_READER)
        schedules = listed(r.json())
        assert schedules["report.acme"]["source"] == "runtime"
        assert schedules["daily"]["source"] == "code"

        r = await http.get(URL, headers=AS_READER)
        versions = r.json()["versions"]
        assert [(v["version"], v["cron"], v["source"], v["handler"]) for v in versions] == [
            (2, "*/5 * * * *", "runtime", "tenantReport"),
            (1, "* * * * *", "runtime", "tenantReport"),
        ]
    assert seen == [(datetime(2026, 6, 1, 10, 1, tzinfo=UTC), {"tenant": "acme"})]


async def test_delete_answers_204_then_404_and_the_schedule_leaves_the_listing(
    sqlite_url: str,
) -> None:
    clock = ManualClock(T0)
    scheduling = scheduling_on(sqlite_url, clock)
    async with served(scheduling) as http:
        assert (await http.put(URL, json=BODY, headers=AS_OPERATOR)).status_code == 201
        r = await http.delete(URL, headers=AS_OPERATOR)
        assert (r.status_code, r.content) == (204, b"")
        r = await http.delete(URL, headers=AS_OPERATOR)
        assert (r.status_code, r.json()["code"]) == (404, "schedule_not_found")
        r = await http.get("/_voltro/inspect/schedules", headers=AS_READER)
        assert "report.acme" not in listed(r.json())
        await clock.advance(90)
        assert await runs_of(scheduling, "report.acme") == []
        r = await http.get(URL, headers=AS_READER)
        assert r.status_code == 404


async def test_declared_names_and_the_read_role_are_refused(sqlite_url: str) -> None:
    scheduling = scheduling_on(sqlite_url, ManualClock(T0))
    async with served(scheduling) as http:
        r = await http.put("/_voltro/inspect/schedules/daily", json=BODY, headers=AS_OPERATOR)
        assert (r.status_code, r.json()["code"]) == (409, "declared_in_code"), r.text
        assert "declared in code" in r.json()["detail"]
        r = await http.delete("/_voltro/inspect/schedules/daily", headers=AS_OPERATOR)
        assert (r.status_code, r.json()["code"]) == (409, "declared_in_code")
        for method in ("PUT", "DELETE"):
            r = await http.request(method, URL, json=BODY, headers=AS_READER)
            assert (r.status_code, r.json()["code"]) == (403, "forbidden_role")
            r = await http.request(method, URL, json=BODY)
            assert r.status_code == 401
        assert await scheduling.running_store().definitions(["report.acme"]) == {}


@pytest.mark.parametrize(
    ("field", "body"),
    [
        ("cron", {**BODY, "cron": "0 25 * * *"}),
        ("timezone", {**BODY, "timezone": "Mars/Olympus"}),
        ("handler", {**BODY, "handler": "nope"}),
        ("args", {**BODY, "args": [1, 2]}),
        ("args", {**BODY, "args": {"blob": "x" * MAX_ARGS_BYTES}}),
        ("onOverlap", {**BODY, "onOverlap": "sometimes"}),
        ("backfill", {**BODY, "backfill": "never"}),
        ("maxRuntimeMs", {**BODY, "maxRuntimeMs": -1}),
        ("cron", {"timezone": "UTC", "handler": "tenantReport"}),
        ("surprise", {**BODY, "surprise": True}),
    ],
)
async def test_a_bad_body_is_422_naming_the_field(
    sqlite_url: str, field: str, body: dict[str, Any]
) -> None:
    scheduling = scheduling_on(sqlite_url, ManualClock(T0))
    async with served(scheduling) as http:
        r = await http.put(URL, json=body, headers=AS_OPERATOR)
        answer = r.json()
        assert (r.status_code, answer["code"], answer["field"]) == (
            422,
            "invalid_schedule",
            field,
        ), r.text
        assert (
            field.replace("onOverlap", "on_overlap").replace("maxRuntimeMs", "max_runtime_ms")
            in answer["detail"]
        )
        assert await scheduling.running_store().definitions(["report.acme"]) == {}


async def test_the_body_cap_leaves_room_for_the_largest_args_and_no_more(sqlite_url: str) -> None:
    scheduling = scheduling_on(sqlite_url, ManualClock(T0))
    async with served(scheduling) as http:
        fits = {**BODY, "args": {"blob": "x" * (MAX_ARGS_BYTES - 20)}}
        r = await http.put(URL, json=fits, headers=AS_OPERATOR)
        assert r.status_code == 201, r.text
        r = await http.put(URL, content=b"{" + b" " * 70_000 + b"}", headers=AS_OPERATOR)
        assert (r.status_code, r.json()["code"]) == (413, "payload_too_large")


@pytest.mark.slow
async def test_over_real_http(tmp_path: Path) -> None:
    env = {
        "VOLTRO_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'voltro.db'}",
        "VOLTRO_EXTERNAL_MISSED_POLICY": "off",
        "VOLTRO_INSPECT_TOKEN": OPERATOR,
        "VOLTRO_INSPECT_READ_TOKEN": READER,
        "EXT_CLOCK_START": "2026-06-01T10:00:30+00:00",
        "VOLTRO_DEV": "",
    }
    with uvicorn_server("apps.external_app:app", tmp_path, env, name="runtime") as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
            r = await http.put(URL, json=BODY, headers=AS_OPERATOR)
            assert (r.status_code, r.json()["source"]) == (201, "runtime"), r.text
            r = await http.post("/_test/clock/advance", params={"seconds": 30})
            assert r.status_code == 200

            async def ran() -> list[dict[str, Any]]:
                r = await http.get(
                    "/_voltro/inspect/schedules/runs",
                    params={"name": "report.acme"},
                    headers=AS_READER,
                )
                runs: list[dict[str, Any]] = r.json()["runs"]
                return [run for run in runs if run["status"] == RunStatus.SUCCEEDED.value]

            runs = await wait_until(ran, what="the 10:01 run over HTTP")
            assert [run["scheduledAt"] for run in runs] == ["2026-06-01T10:01:00.000Z"]
            assert (await http.delete(URL, headers=AS_OPERATOR)).status_code == 204
            r = await http.get("/_voltro/inspect/schedules", headers=AS_READER)
            assert "report.acme" not in listed(r.json())


async def test_a_puts_answer_reads_the_ledger_once(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``PUT`` is its insert and one read for its answer (the schedule's runs and outcome,
    as the listing shows them): three reads, each on its own connection, made a write over
    HTTP ~35% more CPU on SQLite (issue 31's bench). Counted are the store calls made by the
    request itself (the app runs in the test's task), not the maintenance running beside."""
    clock = ManualClock(T0)
    scheduling = scheduling_on(sqlite_url, clock)
    async with served(scheduling) as http:
        assert (await http.put(URL, json=BODY, headers=AS_OPERATOR)).status_code == 201
        calls: list[str] = []
        counted = InstrumentedStore._counted
        mine = asyncio.current_task()

        async def recorded(store: InstrumentedStore, op: str, *args: Any, **kw: Any) -> Any:
            if asyncio.current_task() is mine:
                calls.append(op)
            return await counted(store, op, *args, **kw)

        monkeypatch.setattr(InstrumentedStore, "_counted", recorded)
        r = await http.put(URL.replace("acme", "beta"), json=BODY, headers=AS_OPERATOR)
        monkeypatch.undo()
        assert r.status_code == 201, r.text
        assert calls == ["add_definitions", "latest"]  # the insert, the answer's read
