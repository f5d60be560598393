"""Inspect routes in-process: schedules with next firing, history, Run now, auth."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime

import anyio
import httpx
import pytest
from support.running import served as running_served
from support.waiting import HANG

from fastapi_voltro_schedules import (
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    define_schedule,
)
from fastapi_voltro_schedules.testing import ManualClock

NOW = datetime(2026, 6, 1, 11, 59, 30, tzinfo=UTC)
INSPECT = {"Authorization": "Bearer inspect-secret-for-tests"}


async def noop(ctx: ScheduleContext) -> None:
    return None


@asynccontextmanager
async def served(sqlite_url: str) -> AsyncIterator[httpx.AsyncClient]:
    schedules = [
        define_schedule(name="digest", cron="0 9 * * *", timezone="Europe/Berlin", handler=noop),
        define_schedule(
            name="invoice", cron="0 3 1 * *", timezone="UTC", handler=noop, trigger="external"
        ),
    ]
    config = SchedulingConfig(
        database_url=sqlite_url,
        replica_id="pod-1",
        inspect_token="inspect-secret-for-tests",
        schedule_trigger_token="trigger-secret-for-tests",
    )
    async with running_served(Scheduling(schedules, config=config, clock=ManualClock(NOW))) as c:
        yield c


async def test_schedules_list_coordination_and_next_firing(sqlite_url: str) -> None:
    async with served(sqlite_url) as client:
        r = await client.get("/_voltro/inspect/schedules", headers=INSPECT)
        assert r.status_code == 200
        body = r.json()
        assert body["coordination"] == "single" and body["replicaId"] == "pod-1"
        assert body["firesHere"] is True  # the only process on its SQLite file
        by_name = {s["name"]: s for s in body["schedules"]}
        assert by_name["digest"]["nextFiring"] == "2026-06-02T07:00:00.000Z"
        assert by_name["digest"]["trigger"] == "self" and by_name["digest"]["onOverlap"] == "skip"
        assert by_name["invoice"]["trigger"] == "external"
        assert by_name["invoice"]["nextFiring"] == "2026-07-01T03:00:00.000Z"
        assert by_name["digest"]["lastRun"] is None


async def test_run_now_then_history(sqlite_url: str) -> None:
    async with served(sqlite_url) as client:
        r = await client.post("/_voltro/inspect/schedules/digest/fire", headers=INSPECT)
        assert r.status_code == 202
        run_id = r.json()["runId"]
        assert r.json()["scheduledAt"] == "2026-06-01T11:59:30.000Z"  # the instant of the click
        with anyio.fail_after(HANG):
            while True:
                runs = (
                    await client.get("/_voltro/inspect/schedules/runs?name=digest", headers=INSPECT)
                ).json()["runs"]
                if runs and runs[0]["terminal"]:
                    break
                await anyio.sleep(0.01)
        (run,) = runs
        assert run["runId"] == run_id and run["status"] == "succeeded"
        assert run["trigger"] == "manual" and run["coordinationOutcome"] == ""
        assert run["replicaId"] == "pod-1" and run["durationMs"] is not None
        listed = (await client.get("/_voltro/inspect/schedules", headers=INSPECT)).json()
        assert {s["name"]: s["lastRun"] for s in listed["schedules"]}["digest"] is None  # manual


async def test_unknown_names_are_404(sqlite_url: str) -> None:
    async with served(sqlite_url) as client:
        r = await client.post("/_voltro/inspect/schedules/nope/fire", headers=INSPECT)
        assert r.status_code == 404 and 'no schedule named "nope"' in r.json()["detail"]
        r = await client.get("/_voltro/inspect/schedules/runs?name=nope", headers=INSPECT)
        assert r.status_code == 404


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/_voltro/inspect/schedules"),
        ("GET", "/_voltro/inspect/schedules/runs"),
        ("POST", "/_voltro/inspect/schedules/digest/fire"),
        ("POST", "/_voltro/inspect/schedules/digest/backfill"),
    ],
)
async def test_inspect_routes_need_the_inspect_token(
    sqlite_url: str, method: str, path: str
) -> None:
    async with served(sqlite_url) as client:
        trigger = {"Authorization": "Bearer trigger-secret-for-tests"}
        wrong = ({}, trigger, {"Authorization": "Bearer x"})
        for headers in wrong:
            r = await client.request(method, path, headers=headers, json={})
            assert r.status_code == 401, (headers, r.text)
            assert r.headers["WWW-Authenticate"] == "Bearer"
