"""The edge of ``schedules_router`` (``api/edge.py``), in-process on every store: each case a
hostile probe of the routes found (issue 30) answers a 4xx in the one error shape
``{"detail", "code"}``, writes nothing, never reaches the store — so it raises no store-error
alert — and no answer carries a database driver's text. The body cap over real HTTP, with the
server's memory measured, is ``tests/test_edge_http.py``."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client import CollectorRegistry
from sqlalchemy import make_url
from support.tcp_proxy import CUT_LINK_WARNINGS, TcpProxy

from fastapi_voltro_schedules import (
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    define_schedule,
    schedules_router,
)
from fastapi_voltro_schedules.backfill import run_range
from fastapi_voltro_schedules.errors import BackfillStoppedError, StoreUnavailableError
from fastapi_voltro_schedules.metrics import SchedulerMetrics
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.testing import ManualClock

NOW = datetime(2026, 6, 1, 12, 0, 30, tzinfo=UTC)
TRIGGER_TOKEN = "trigger-secret-for-edge-tests"
INSPECT_TOKEN = "inspect-secret-for-edge-tests"
TRIGGER = {"Authorization": f"Bearer {TRIGGER_TOKEN}"}
INSPECT = {"Authorization": f"Bearer {INSPECT_TOKEN}"}
JSON = {"content-type": "application/json"}
PREFIX = "/_voltro/inspect/schedules"
RUN_ID = "sr_" + "0" * 32


async def noop(ctx: ScheduleContext) -> None:
    return None


@dataclass
class Served:
    client: httpx.AsyncClient
    scheduling: Scheduling
    metrics: SchedulerMetrics

    def store_errors(self) -> dict[str, float]:
        """``voltro_schedule_store_errors_total`` by operation (the store-error alert's
        series)."""
        assert self.metrics.registry is not None
        return {
            sample.labels["operation"]: sample.value
            for family in self.metrics.registry.collect()
            if family.name == "voltro_schedule_store_errors"
            for sample in family.samples
            if sample.name == "voltro_schedule_store_errors_total"
        }

    async def nothing_written(self) -> None:
        """No run recorded and no schedule paused (read from the ledger, not the copy)."""
        store = self.scheduling.store
        assert store is not None
        assert await store.list_runs(None, limit=10) == []
        assert [p for p in await store.pauses() if p.resumed_at is None] == []


@asynccontextmanager
async def served(database_url: str) -> AsyncIterator[Served]:
    if not database_url.startswith("sqlite"):
        await upgrade_to_head(database_url)
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
    metrics = SchedulerMetrics(CollectorRegistry())
    scheduling = Scheduling(schedules, config=config, clock=ManualClock(NOW), metrics=metrics)
    app = FastAPI()
    app.include_router(schedules_router)
    async with scheduling.run(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            yield Served(client, scheduling, metrics)


def one_shape(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """The answer is ``status`` in the package's one error shape with ``code``, bounded."""
    assert r.status_code == status, (r.request.url, r.status_code, r.text[:500])
    assert r.headers["content-type"] == "application/json", r.headers
    body: dict[str, Any] = r.json()
    assert isinstance(body["detail"], str) and body["detail"], body
    assert body["code"] == code, body
    assert len(r.content) < 4_000, len(r.content)
    return body


def cursor_of(raw: object) -> str:
    data = raw if isinstance(raw, bytes) else json.dumps(raw).encode()
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


# --------------------------------------------------------------------------- the runs cursor

HOSTILE_CURSORS = {
    # The base64 JSON pairs of earlier versions (each broke something then), and text of no
    # cursor's shape.
    "the shape, with a NUL": f"1780315200123456.{RUN_ID}\x00",
    "the shape, a negative instant": f"-1.{RUN_ID}",
    "the shape, a run id in capitals": f"1780315200123456.{RUN_ID.upper()}",
    # instants at the edges of datetime: the keyset query's conversion overflowed (a 500)
    "year 1, east of UTC": cursor_of(["0001-01-01T00:00:00+01:00", RUN_ID]),
    "year 9999, west of UTC": cursor_of(["9999-12-31T23:59:59-01:00", RUN_ID]),
    "year 1 UTC": cursor_of(["0001-01-01T00:00:00Z", RUN_ID]),
    "year 8999 is past the range": cursor_of(["9000-01-01T00:00:01Z", RUN_ID]),
    # JSON nested past the recursion limit (a 500), and nested within it
    "nested deeply": cursor_of(b"[" * 5_000 + b"]" * 5_000),
    "nested": cursor_of([[["2026-06-01T12:00:00+00:00"]], RUN_ID]),
    # fromisoformat stops reading at a NUL: this was taken for 12:00 UTC
    "NUL inside the instant": cursor_of(["2026-06-01T12:00:00\x00+00:00", RUN_ID]),
    "NUL after the instant": cursor_of(["2026-06-01T12:00:00+00:00\x00", RUN_ID]),
    # text no store holds in the run id: Postgres answered 503 with the driver's text
    "NUL in the run id": cursor_of(["2026-06-01T12:00:00+00:00", "sr_\x00abc"]),
    "lone surrogate in the run id": cursor_of(b'["2026-06-01T12:00:00+00:00", "\\ud800"]'),
    "not a minted run id": cursor_of(["2026-06-01T12:00:00+00:00", "x" * 40]),
    "no zone": cursor_of(["2026-06-01T12:00:00", RUN_ID]),
    "a third member": cursor_of(["2026-06-01T12:00:00+00:00", RUN_ID, 1]),
    "not UTF-8": cursor_of(b'["2026-06-01T12:00:00+00:00", "\xff"]'),
    "not base64": "not a cursor!",
    "huge": "A" * 20_000,
}


async def test_a_crafted_cursor_is_422_and_never_reaches_the_store(database_url: str) -> None:
    async with served(database_url) as s:
        store = s.scheduling.store
        assert store is not None
        asked: list[object] = []
        real_list_runs = store.list_runs

        async def counting_list_runs(*args: Any, **kwargs: Any) -> Any:
            asked.append(kwargs.get("before_id"))
            return await real_list_runs(*args, **kwargs)

        store.list_runs = counting_list_runs  # type: ignore[method-assign]
        for what, cursor in HOSTILE_CURSORS.items():
            r = await s.client.get(f"{PREFIX}/runs", params={"cursor": cursor}, headers=INSPECT)
            body = one_shape(r, 422, "invalid_query")
            assert "cursor" in body["detail"] and "nextCursor" in body["detail"], (what, body)
        assert asked == []
        assert s.store_errors() == {}
        # Every text of a cursor's shape pages — the schema publishes the shape, so a client
        # may send any of them: microseconds since 1970 (past 9000 read as 9000, 18 digits
        # overflow a datetime) and a run id; empty is the newest page.
        for cursor in ("0", "1780315200123456", "999999999999999999"):
            r = await s.client.get(
                f"{PREFIX}/runs", params={"cursor": f"{cursor}.{RUN_ID}"}, headers=INSPECT
            )
            assert r.status_code == 200, r.text
        r = await s.client.get(f"{PREFIX}/runs", params={"cursor": ""}, headers=INSPECT)
        assert r.status_code == 200, r.text
        assert len(asked) == 4


async def test_an_instant_query_holding_a_nul_is_422_naming_it(database_url: str) -> None:
    async with served(database_url) as s:
        for before in ("2026-06-01T12:00:00\x00+00:00", "2026-06-01T12:00:00Z\x00"):
            r = await s.client.get(f"{PREFIX}/runs", params={"before": before}, headers=INSPECT)
            body = one_shape(r, 422, "invalid_query")
            assert body["detail"].startswith("before="), body
        assert s.store_errors() == {}


# --------------------------------------------------------------------------- text no store holds

UNSTORABLE_REASONS = {
    "NUL": (b'{"reason": "ticket\\u0000 42"}', "NUL byte"),
    "lone high surrogate": (b'{"reason": "\\ud800"}', "lone surrogate (U+D800)"),
    "lone low surrogate": (b'{"reason": "x \\udfff y"}', "lone surrogate (U+DFFF)"),
    "reversed pair": (b'{"reason": "\\ude00\\ud83d"}', "lone surrogate (U+DE00)"),
}


async def test_a_pause_reason_no_store_can_hold_is_422_naming_it(database_url: str) -> None:
    async with served(database_url) as s:
        for what, (raw, why) in UNSTORABLE_REASONS.items():
            r = await s.client.post(f"{PREFIX}/digest/pause", content=raw, headers=INSPECT | JSON)
            body = one_shape(r, 422, "invalid_request")
            assert "body.reason" in body["detail"] and why in body["detail"], (what, body)
            assert body["errors"][0]["loc"] == ["body", "reason"], (what, body)
        await s.nothing_written()
        assert s.store_errors() == {}  # no store-error alert for a typo
        health = await s.client.get("/_voltro/health")
        assert health.status_code == 200, health.text
        # A pair that makes a character (and any other text) is still a reason.
        r = await s.client.post(
            f"{PREFIX}/digest/pause",
            content=b'{"reason": "\\ud83d\\ude00 INC-7 \\u00e9"}',
            headers=INSPECT | JSON,
        )
        assert r.status_code == 200, r.text
        assert r.json()["pause"]["reason"] == "\U0001f600 INC-7 é"


async def test_bodies_fastapi_cannot_parse_answer_in_the_one_shape(sqlite_url: str) -> None:
    async with served(sqlite_url) as s:
        url = f"{PREFIX}/digest/pause"
        # Nested past Python's recursion limit: FastAPI's bare 400 {"detail"} before.
        r = await s.client.post(url, content=b"[" * 10_000, headers=INSPECT | JSON)
        one_shape(r, 422, "invalid_request")
        r = await s.client.post(url, content=b'{"reason": "\xff"}', headers=INSPECT | JSON)
        one_shape(r, 422, "invalid_request")
        r = await s.client.post(url, content=b'{"reason": 7}', headers=INSPECT | JSON)
        assert "body.reason" in one_shape(r, 422, "invalid_request")["detail"]
        await s.nothing_written()


# --------------------------------------------------------------------------- bodies before tokens


class Chunked:
    """A chunked request body (no Content-Length) of ``total`` bytes that counts how much the
    server pulled."""

    def __init__(self, first: bytes, total: int = 50 * 1024 * 1024, size: int = 8 * 1024):
        self.first, self.chunks, self.size, self.pulled = first, total // size, size, 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for i in range(self.chunks):
            self.pulled += 1
            yield self.first if i == 0 else b"x" * self.size


async def test_a_body_past_the_cap_is_413_before_the_token_wherever_a_body_is_read(
    sqlite_url: str,
) -> None:
    # FastAPI reads the pause body before the token dependency runs; the sign-in route reads
    # its form before it knows who signs in; the backfill reads its body after the token.
    chunked = [
        (f"{PREFIX}/digest/pause", b'{"reason": "', {}),
        (f"{PREFIX}/digest/pause", b'{"reason": "', TRIGGER),  # the other family's token
        (f"{PREFIX}/digest/pause", b'{"reason": "', INSPECT),
        ("/_voltro/dashboard/session", b"token=", {}),
        (f"{PREFIX}/digest/backfill", b'{"from": "', INSPECT),
    ]
    declared = [
        f"{PREFIX}/digest/pause",
        f"{PREFIX}/digest/resume",
        f"{PREFIX}/digest/fire",
        f"{PREFIX}/digest/backfill",
        "/_voltro/dashboard/session",
        "/_voltro/dashboard/signout",
        "/_voltro/schedules/hourly/trigger",
    ]
    async with served(sqlite_url) as s:
        for url, first, headers in chunked:
            body = Chunked(first)
            r = await s.client.post(url, content=body, headers=headers | JSON)
            assert one_shape(r, 413, "payload_too_large")["limitBytes"] == 16_384
            assert body.pulled <= 3, (url, body.pulled)  # 16 KiB in 8 KiB chunks, not 50 MB
        # A declared size above the cap is refused without reading a byte, token or not.
        for url in declared:
            for headers in ({}, INSPECT):
                r = await s.client.post(url, content=b"x" * 20_000, headers=headers | JSON)
                assert "20,000 bytes" in one_shape(r, 413, "payload_too_large")["detail"]
        await s.nothing_written()
        # Under the cap, the routes work.
        r = await s.client.post(
            f"{PREFIX}/digest/pause", json={"reason": "x" * 500}, headers=INSPECT
        )
        assert r.status_code == 200 and r.json()["paused"], r.text


# --------------------------------------------------------------------------- outages


def _outage_checks(r: httpx.Response, host: str, port: int) -> None:
    body = one_shape(r, 503, "store_unavailable")
    # a fixed sentence with the remedy
    assert body["detail"].startswith("the scheduler's database did not answer"), body
    assert "retry" in body["detail"] and "/_voltro/health" in body["detail"], body
    assert r.headers["Retry-After"] == "5"
    for leak in (host, str(port), "Error", "errno", "Connect call", "store "):
        assert leak not in r.text, (leak, r.text)


@CUT_LINK_WARNINGS
@pytest.mark.parametrize("store", ["postgres", "mariadb"])
async def test_an_outage_answer_carries_no_driver_text(
    store: str, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    url: str = request.getfixturevalue(f"{store}_url")
    await upgrade_to_head(url)
    db = make_url(url)
    with TcpProxy(db.host or "127.0.0.1", db.port or 5432) as proxy:
        proxied = db.set(host="127.0.0.1", port=proxy.port)
        async with served(proxied.render_as_string(hide_password=False)) as s:
            r = await s.client.get(f"{PREFIX}/runs", headers=INSPECT)
            assert r.status_code == 200, r.text
            proxy.cut()
            caplog.set_level(logging.WARNING, logger="fastapi_voltro_schedules")
            answers = [
                await s.client.get(f"{PREFIX}/runs", headers=INSPECT),
                await s.client.get(f"{PREFIX}/digest", headers=INSPECT),
                await s.client.post(
                    f"{PREFIX}/digest/pause", json={"reason": "db down"}, headers=INSPECT
                ),
                await s.client.get(f"/_voltro/schedules/runs/{RUN_ID}", headers=TRIGGER),
            ]
            for r in answers:
                _outage_checks(r, "127.0.0.1", proxy.port)
            # The driver's own text is the operator's, in the log — never a token.
            logged = [m for m in caplog.messages if "answered 503 store_unavailable" in m]
            assert len(logged) == len(answers), caplog.messages
            assert any(str(proxy.port) in m or "Error" in m for m in logged), logged
            assert not any(INSPECT_TOKEN in m or TRIGGER_TOKEN in m for m in caplog.messages)
            proxy.restore()


DRIVER_TEXT = "ConnectionRefusedError: [Errno 111] Connect call failed ('10.20.30.40', 5432)"


class _StoreDownFirer:
    """A range backfill's firer whose every slot meets a database that went away."""

    def __init__(self, scheduling: Scheduling) -> None:
        assert scheduling.store is not None
        self.store, self.clock = scheduling.store, scheduling.clock
        self.replica_id = scheduling.config.replica_id

    async def fire(self, request: Any) -> Any:  # the one door: a Why.RANGE step
        raise StoreUnavailableError(f"store insert_runs: {DRIVER_TEXT}")


async def test_a_range_stopped_by_the_store_answers_without_the_drivers_text(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with served(sqlite_url) as s:
        schedule = s.scheduling.schedule("digest")
        plan = await s.scheduling.plan_backfill(
            "digest", "2026-05-28T00:00:00Z", "2026-05-31T00:00:00Z"
        )
        caplog.set_level(logging.WARNING, logger="fastapi_voltro_schedules")
        with pytest.raises(BackfillStoppedError) as stopped:
            await run_range(_StoreDownFirer(s.scheduling), schedule, plan, heartbeat_ms=1_000)
        # The stream's error line carries the stop and the remedy, not the driver's text.
        text = str(stopped.value)
        assert "10.20.30.40" not in text and "5432" not in text and "Errno" not in text, text
        assert stopped.value.reason == "store-unavailable"
        assert "resume from 2026-05-28T08:59:59.000Z" in str(stopped.value)
        assert any(DRIVER_TEXT in m for m in caplog.messages), caplog.messages  # logged
