"""Hostile and unlucky input to the package's routes, in-process: every refusal is a clear 4xx
(or a 503 that says why), never a 500, and no error body echoes unbounded input."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx
import pytest
from fastapi import FastAPI

from fastapi_voltro_schedules import (
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    define_schedule,
    schedules_router,
)
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.testing import ManualClock

NOW = datetime(2026, 6, 1, 12, 0, 30, tzinfo=UTC)
TRIGGER_TOKEN = "trigger-secret-for-bad-input-tests"
INSPECT_TOKEN = "inspect-secret-for-bad-input-tests"
TRIGGER = {"Authorization": f"Bearer {TRIGGER_TOKEN}"}
INSPECT = {"Authorization": f"Bearer {INSPECT_TOKEN}"}
INSPECT_PREFIX = "/_voltro/inspect/schedules"


async def noop(ctx: ScheduleContext) -> None:
    return None


@dataclass
class Served:
    client: httpx.AsyncClient
    scheduling: Scheduling
    clock: ManualClock


def _scheduling(database_url: str, clock: ManualClock) -> Scheduling:
    schedules = [
        define_schedule(
            name="hourly", cron="0 * * * *", timezone="UTC", trigger="external", handler=noop
        ),
        define_schedule(name="digest", cron="0 9 * * *", timezone="UTC", handler=noop),
    ]
    config = SchedulingConfig(
        database_url=database_url,
        replica_id="pod-1",
        inspect_token=INSPECT_TOKEN,
        schedule_trigger_token=TRIGGER_TOKEN,
    )
    return Scheduling(schedules, config=config, clock=clock)


@asynccontextmanager
async def served(database_url: str) -> AsyncIterator[Served]:
    if not database_url.startswith("sqlite"):
        await upgrade_to_head(database_url)  # a server database starts empty in the tests
    clock = ManualClock(NOW)
    scheduling = _scheduling(database_url, clock)
    app = FastAPI()
    app.include_router(schedules_router)
    async with scheduling.run(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            yield Served(client, scheduling, clock)


# --------------------------------------------------------------------------- stopped scheduler


async def test_routes_answer_503_after_the_scheduler_stops(sqlite_url: str) -> None:
    app = FastAPI()
    app.include_router(schedules_router)
    scheduling = _scheduling(sqlite_url, ManualClock(NOW))
    async with scheduling.run(app):
        pass
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        answers = [
            await client.get(f"{INSPECT_PREFIX}/runs", headers=INSPECT),
            await client.get(f"{INSPECT_PREFIX}/runs?name=digest", headers=INSPECT),
            await client.get(f"{INSPECT_PREFIX}/digest", headers=INSPECT),
            await client.post(
                f"{INSPECT_PREFIX}/digest/backfill",
                json={"from": "2026-05-01T00:00:00Z", "to": "2026-05-02T00:00:00Z"},
                headers=INSPECT,
            ),
            await client.post(f"{INSPECT_PREFIX}/digest/fire", headers=INSPECT),
            await client.post("/_voltro/schedules/hourly/trigger", headers=TRIGGER),
            await client.get(f"/_voltro/schedules/runs/sr_{'0' * 32}", headers=TRIGGER),
        ]
    for r in answers:
        assert r.status_code == 503, (r.request.url, r.text)
        assert r.json()["code"] == "scheduler_not_running", r.text
        assert r.headers["Retry-After"] == "5"


# --------------------------------------------------------------------------- run ids


MALFORMED_RUN_IDS = [
    "sr_%00abc",  # a NUL byte: Postgres' driver refused it with a 503 and its own text
    f"sr_{'0' * 31}%00",
    f"sr_{'A' * 32}",  # minted ids are lower-case hex
    f"sr_{'0' * 33}",
    "x" * 10_000,
    "%E2%9C%93",
]


@pytest.mark.postgres
async def test_a_malformed_run_id_is_404_without_asking_the_database(postgres_url: str) -> None:
    async with served(postgres_url) as s:
        store = s.scheduling.store
        assert store is not None
        asked: list[str] = []
        real_get_run = store.get_run

        async def counting_get_run(run_id: str):  # type: ignore[no-untyped-def]
            asked.append(run_id)
            return await real_get_run(run_id)

        store.get_run = counting_get_run  # type: ignore[method-assign]
        for run_id in MALFORMED_RUN_IDS:
            r = await s.client.get(f"/_voltro/schedules/runs/{run_id}", headers=TRIGGER)
            assert r.status_code == 404, (run_id, r.text)
            body = r.json()
            assert body["code"] == "run_not_found"
            assert "sr_ followed by 32 hex digits" in body["detail"]
            assert len(r.content) < 1_000
        assert asked == []
        # A well-formed id that does not exist still goes to the database, and is a 404 too.
        r = await s.client.get(f"/_voltro/schedules/runs/sr_{'0' * 32}", headers=TRIGGER)
        assert r.status_code == 404 and r.json()["code"] == "run_not_found"
        assert asked == [f"sr_{'0' * 32}"]


# --------------------------------------------------------------------------- bounded echo


async def test_error_bodies_never_echo_unbounded_input(sqlite_url: str) -> None:
    long = "x" * 10_000
    runs = f"{INSPECT_PREFIX}/runs"
    async with served(sqlite_url) as s:
        c = s.client
        answers = {
            "trigger name": await c.post(f"/_voltro/schedules/{long}/trigger", headers=TRIGGER),
            "fire name": await c.post(f"{INSPECT_PREFIX}/{long}/fire", headers=INSPECT),
            "backfill name": await c.post(
                f"{INSPECT_PREFIX}/{long}/backfill",
                json={"from": "2026-05-01T00:00:00Z", "to": "2026-05-02T00:00:00Z"},
                headers=INSPECT,
            ),
            "runs name": await c.get(runs, params={"name": long}, headers=INSPECT),
            "runs before": await c.get(runs, params={"before": long}, headers=INSPECT),
            "runs limit": await c.get(runs, params={"limit": "9" * 10_000}, headers=INSPECT),
            "stated time": await c.post(
                "/_voltro/schedules/hourly/trigger",
                headers={**TRIGGER, "X-Voltro-Scheduled-At": long},
            ),
            "backfill from": await c.post(
                f"{INSPECT_PREFIX}/digest/backfill",
                json={"from": long, "to": "2026-05-02T00:00:00Z"},
                headers=INSPECT,
            ),
            "backfill to type": await c.post(
                f"{INSPECT_PREFIX}/digest/backfill",
                json={"from": "2026-05-01T00:00:00Z", "to": [long]},
                headers=INSPECT,
            ),
            "backfill extra key": await c.post(
                f"{INSPECT_PREFIX}/digest/backfill",
                json={"from": "2026-05-01T00:00:00Z", "to": "2026-05-02T00:00:00Z", long: 1},
                headers=INSPECT,
            ),
        }
    for what, r in answers.items():
        assert 400 <= r.status_code < 500, (what, r.status_code, r.text[:300])
        assert len(r.content) < 2_000, (what, len(r.content), r.text[:300])
        assert "characters)" in r.text, (what, r.text)  # it says how long the value was
        assert isinstance(r.json()["detail"], str) and r.json()["code"], (what, r.text)


# --------------------------------------------------------------------------- instants at the edges

EDGE_INSTANTS = [
    "0001-01-01T00:00:00Z",
    "0001-01-01T00:00:00+01:00",  # year 0 in UTC: datetime overflowed
    "9999-12-31T23:59:59Z",
    "9999-12-31T23:59:59-01:00",  # year 10000 in UTC
    "1969-12-31T23:59:59Z",
    "9000-01-01T00:00:01Z",
]


async def test_instants_near_year_1_or_9999_read_as_the_nearer_bound(sqlite_url: str) -> None:
    """Every RFC 3339 instant is a valid ``date-time`` (the schema's promise): one outside
    1970–9000 is read as that bound — a stated time too late or in the future, a page before
    everything or after it, a range refused or empty — and never overflows the arithmetic."""
    async with served(sqlite_url) as s:
        c = s.client
        for instant in EDGE_INSTANTS:
            early = instant < "1970"
            for header in ("X-Voltro-Scheduled-At", "X-CloudScheduler-ScheduleTime"):
                r = await c.post(
                    "/_voltro/schedules/hourly/trigger", headers={**TRIGGER, header: instant}
                )
                assert r.status_code == 409, (header, instant, r.text)
                assert r.json()["code"] == ("too_late" if early else "future"), r.text
            r = await c.get(f"{INSPECT_PREFIX}/runs", params={"before": instant}, headers=INSPECT)
            assert r.status_code == 200, (instant, r.text)
            for field, body in (
                ("from", {"from": instant, "to": "2026-05-02T00:00:00Z"}),
                ("to", {"from": "2026-05-01T00:00:00Z", "to": instant}),
            ):
                r = await c.post(f"{INSPECT_PREFIX}/digest/backfill", json=body, headers=INSPECT)
                if early == (field == "to"):  # (9000, 2026] or (2026, 1970]: empty
                    assert r.status_code == 200, (field, instant, r.text)
                    assert json.loads(r.text.splitlines()[-1])["count"] == 0, r.text
                else:  # from 1970, or to 9000: tens of thousands of slots, refused
                    assert r.status_code == 409, (field, instant, r.text)
                    assert r.json()["code"] == "backfill_refused", r.text
        # Nothing was claimed or fired by any of it.
        assert await s.scheduling.running_store().list_runs(None, limit=10) == []


# --------------------------------------------------------------------------- too late


async def test_a_stated_time_older_than_the_skew_budget_is_409_too_late(sqlite_url: str) -> None:
    async with served(sqlite_url) as s:
        c = s.client
        # 23 minutes before the app's clock, and exactly on an occurrence: it used to be fired.
        for stated in ("2026-06-01T11:37:00Z", "2026-06-01T11:00:00Z", "1999-01-01T00:00:00Z"):
            r = await c.post(
                "/_voltro/schedules/hourly/trigger",
                headers={**TRIGGER, "X-Voltro-Scheduled-At": stated},
            )
            assert r.status_code == 409, (stated, r.text)
            body = r.json()
            assert body["code"] == "too_late"
            assert body["skewBudgetMs"] == 300_000
            assert body["now"] == "2026-06-01T12:00:30.000Z"
            assert "VOLTRO_EXTERNAL_TRIGGER_SKEW_MS" in body["detail"]  # the remedy
        assert s.scheduling.store is not None
        assert await s.scheduling.store.list_runs("hourly", limit=10) == []
        # Within the budget of the app's clock, inclusive: fired.
        s.clock.set(datetime(2026, 6, 1, 12, 5, 0, tzinfo=UTC))
        r = await c.post(
            "/_voltro/schedules/hourly/trigger",
            headers={**TRIGGER, "X-CloudScheduler-ScheduleTime": "2026-06-01T12:00:00Z"},
        )
        assert r.status_code == 202, r.text
        assert r.json()["scheduledAt"] == "2026-06-01T12:00:00.000Z"


# --------------------------------------------------------------------------- bodies


class CountingBody:
    """A chunked request body (no Content-Length) that counts how much the server pulled."""

    def __init__(self, chunks: int, size: int = 8 * 1024, first: bytes = b"") -> None:
        self.chunks, self.size, self.first, self.pulled = chunks, size, first, 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for i in range(self.chunks):
            self.pulled += 1
            yield self.first if i == 0 and self.first else b" " * self.size


async def test_the_backfill_token_is_checked_before_the_body_is_read(sqlite_url: str) -> None:
    async with served(sqlite_url) as s:
        url = f"{INSPECT_PREFIX}/digest/backfill"
        # Malformed JSON without a token: 401, not a parse error (the body was parsed first).
        r = await s.client.post(url, content=b"{not json")
        assert r.status_code == 401, r.text
        r = await s.client.post(url, content=b"{not json", headers=TRIGGER)  # the other token
        assert r.status_code == 401, r.text
        # A 50 MB chunked upload without a token: refused without reading it.
        body = CountingBody(chunks=6_400)
        r = await s.client.post(url, content=body)
        assert r.status_code == 401, r.text
        assert body.pulled <= 1
        # With the token, a bad body is a 422 naming the field, bounded.
        r = await s.client.post(url, content=b"{not json", headers=INSPECT)
        assert r.status_code == 422 and r.json()["code"] == "invalid_backfill", r.text
        r = await s.client.post(url, json={"from": "2026-05-01T00:00:00Z"}, headers=INSPECT)
        assert r.status_code == 422 and "to: Field required" in r.json()["detail"], r.text
        r = await s.client.post(url, headers=INSPECT)  # no body at all
        assert r.status_code == 422 and r.json()["code"] == "invalid_backfill", r.text


async def test_bodies_above_the_cap_are_413_on_every_route(sqlite_url: str) -> None:
    big = b"{" + b" " * (20 * 1024) + b"}"
    async with served(sqlite_url) as s:
        c = s.client
        declared = [
            await c.post(f"{INSPECT_PREFIX}/digest/backfill", content=big, headers=INSPECT),
            await c.post(f"{INSPECT_PREFIX}/digest/fire", content=big, headers=INSPECT),
            await c.request("GET", INSPECT_PREFIX, content=big, headers=INSPECT),
            await c.request("GET", f"{INSPECT_PREFIX}/runs", content=big, headers=INSPECT),
            await c.post("/_voltro/schedules/hourly/trigger", content=big, headers=TRIGGER),
            await c.request(
                "GET", f"/_voltro/schedules/runs/sr_{'0' * 32}", content=big, headers=TRIGGER
            ),
        ]
        for r in declared:
            assert r.status_code == 413, (r.request.url, r.text)
            assert r.json()["code"] == "payload_too_large" and r.json()["limitBytes"] == 16_384
            assert "20,482 bytes" in r.json()["detail"]
        assert await s.scheduling.store.list_runs(None, limit=10) == []  # type: ignore[union-attr]
        # A chunked body (no Content-Length) is cut as soon as it passes the cap.
        body = CountingBody(chunks=6_400, first=b'{"from": "2026-05-01T00:00:00Z", ')
        r = await c.post(f"{INSPECT_PREFIX}/digest/backfill", content=body, headers=INSPECT)
        assert r.status_code == 413, r.text
        assert r.json()["code"] == "payload_too_large"
        assert body.pulled <= 4  # 16 KiB in 8 KiB chunks, not 50 MB
        # A body under the cap still works.
        r = await c.post(
            f"{INSPECT_PREFIX}/digest/backfill",
            json={"from": "2026-05-01T00:00:00Z", "to": "2026-05-02T00:00:00Z"},
            headers=INSPECT,
        )
        assert r.status_code == 200, r.text
        assert r.text.splitlines()[-1].startswith('{"event": "summary"'), r.text
