"""A range backfill survives a blip, stops cleanly when it must, and never breaks its stream
silently (issue 13, "A range backfill aborted by one blip")."""

from __future__ import annotations

import json
import logging
import socket
from datetime import UTC, datetime
from typing import Any

import anyio
import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from support.cuts import client, count_calls, cut_before, inner_store, proxied
from support.running import runs_of
from support.waiting import HANG, wait_until

from fastapi_voltro_schedules import (
    RunStatus,
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    Trigger,
    define_schedule,
    schedules_router,
)
from fastapi_voltro_schedules.testing import ManualClock

INSPECT = "inspect-9e8d7c6b-not-a-real-secret"
AUTH = {"Authorization": f"Bearer {INSPECT}"}
NOW = datetime(2031, 4, 1, 12, 0, 30, tzinfo=UTC)


def hour(n: int) -> datetime:
    return datetime(2031, 4, 1, n, 0, tzinfo=UTC)


class Steps:
    """A handler whose behaviour per slot the test sets (``on[slot]``)."""

    def __init__(self) -> None:
        self.ran: list[datetime] = []
        self.on: dict[datetime, Any] = {}

    async def __call__(self, ctx: ScheduleContext) -> None:
        self.ran.append(ctx.scheduled_at)
        step = self.on.get(ctx.scheduled_at)
        if step is not None:
            await step()


def scheduling(url: str, steps: Steps, clock: ManualClock) -> Scheduling:
    job = define_schedule(name="job", cron="0 * * * *", timezone="UTC", handler=steps)
    config = SchedulingConfig(
        database_url=url,
        replica_id="r1",
        inspect_token=INSPECT,
        schedule_heartbeat_ms=1000,
        shutdown_grace_ms=0,
    )
    return Scheduling([job], config=config, clock=clock)


@pytest.mark.postgres
async def test_a_failed_lock_refresh_and_a_failed_insert_do_not_abort_the_range(
    postgres_url: str,
) -> None:
    """Slot 1's handler sees the range lock's refresh fail (the link cut until the refresh
    really failed); slot 2's row insert fails the same way. Before the fix the refresh failure
    cancelled slot 1 (recorded failed/shutdown — the wrong reason) and nothing after it fired.
    Now both are retried: every slot runs once and succeeds."""
    steps = Steps()
    clock = ManualClock(NOW)
    async with proxied(postgres_url) as (proxy, through):
        s = scheduling(through, steps, clock)
        async with s.run():
            store = inner_store(s)
            touches = cut_before(store, "touch_claim", proxy, lambda *_: True)
            touched = count_calls(store, "touch_claim")
            # a backfill step writes its slot's claim and row together (one door's claims)
            inserts = cut_before(
                store, "claim_and_insert", proxy, lambda runs, *_: runs[0].scheduled_at == hour(2)
            )
            inserted = count_calls(store, "claim_and_insert")

            async def refresh_fails() -> None:
                await clock.advance(1.1)  # the lock's refresh is due: it meets the cut
                await wait_until(lambda: touched.failed >= 1, what="the refresh to fail")
                assert touches[0] == 1
                proxy.restore()
                # the retried refresh lands while the slot still runs
                await wait_until(lambda: touched.ok >= 1, what="the retried refresh")

            async def insert_failed() -> None:
                assert inserts[0] == 1

            steps.on[hour(1)] = refresh_fails
            steps.on[hour(2)] = insert_failed

            async def restore_after_insert_cut() -> None:
                await wait_until(lambda: inserted.failed >= 1, what="slot 2's insert to fail")
                assert inserts[0] == 1
                proxy.restore()

            async with anyio.create_task_group() as tg:
                tg.start_soon(restore_after_insert_cut)
                summary = await s.backfill("job", hour(0).isoformat(), hour(3).isoformat())
            rows = await runs_of(s, "job")
    assert (summary.fired, summary.succeeded, summary.failed) == (3, 3, 0)
    assert steps.ran == [hour(1), hour(2), hour(3)]
    assert [(r.scheduled_at, r.status, r.trigger) for r in rows] == [
        (hour(n), RunStatus.SUCCEEDED, Trigger.MANUAL) for n in (1, 2, 3)
    ]


def ndjson(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


async def test_a_lost_range_lock_stops_the_range_after_its_slot_with_an_error_event(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """While slot 1 runs, another process takes the range lock (the range's beats went stale
    for it). Before the fix the loss was ignored and both ranges interleaved; now the range
    stops after slot 1 and says so in an ``error`` line."""
    caplog.set_level(logging.WARNING, "fastapi_voltro_schedules")
    steps = Steps()
    clock = ManualClock(NOW)
    s = scheduling(sqlite_url, steps, clock)
    app = FastAPI()
    app.include_router(schedules_router)

    def lost() -> bool:
        return any("range lock lost" in r.getMessage() for r in caplog.records)

    async def taken_over() -> None:
        assert s.store is not None
        key = "job@range-backfill"
        assert await s.store.release_claim(key)
        assert await s.store.claim(key, "other-process", clock.now())
        await clock.advance(1.1)  # our refresh finds the lock held by someone else
        await wait_until(lost, what="the refresh to find the lock lost")

    steps.on[hour(1)] = taken_over
    async with s.run(app), client(app) as http:
        r = await http.post(
            "/_voltro/inspect/schedules/job/backfill",
            headers=AUTH,
            json={"from": hour(0).isoformat(), "to": hour(3).isoformat()},
        )
        rows = await runs_of(s, "job")
    events = ndjson(r.text)
    assert [e["event"] for e in events] == ["progress", "error"], events
    assert events[-1]["code"] == "backfill_stopped" and events[-1]["reason"] == "lock-lost"
    assert "other-process" in events[-1]["detail"]
    assert (events[-1]["fired"], events[-1]["remaining"]) == (1, 2)
    assert steps.ran == [hour(1)]
    assert [(r.scheduled_at, r.status) for r in rows] == [(hour(1), RunStatus.SUCCEEDED)]


async def test_a_range_ending_in_the_future_is_refused(sqlite_url: str) -> None:
    steps = Steps()
    s = scheduling(sqlite_url, steps, ManualClock(NOW))
    app = FastAPI()
    app.include_router(schedules_router)
    async with s.run(app), client(app) as http:
        r = await http.post(
            "/_voltro/inspect/schedules/job/backfill",
            headers=AUTH,
            json={"from": hour(10).isoformat(), "to": hour(14).isoformat()},
        )
        rows = await runs_of(s, "job")
    assert r.status_code == 409, r.text
    assert (r.json()["code"], r.json()["reason"]) == ("backfill_refused", "future")
    assert "2031-04-01T14:00:00.000Z is in the future" in r.json()["detail"]
    assert steps.ran == [] and rows == []


async def test_a_client_that_disconnects_mid_range_does_not_fail_its_slot(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Over real HTTP (uvicorn): the client reads the first progress line and hangs up while
    slot 2 runs. Before the fix slot 2 was cancelled and recorded failed/shutdown while the app
    ran on. Now slot 2 finishes (succeeded) and the range stops cleanly after it."""
    caplog.set_level(logging.WARNING, "fastapi_voltro_schedules")
    steps = Steps()
    release = anyio.Event()
    inside = anyio.Event()

    async def hold() -> None:
        inside.set()
        await release.wait()

    steps.on[hour(2)] = hold
    s = scheduling(sqlite_url, steps, ManualClock(NOW))
    app = FastAPI(lifespan=s.lifespan)
    app.include_router(schedules_router)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve)
        await wait_until(lambda: server.started, what="uvicorn to start")
        async with (
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http,
            http.stream(
                "POST",
                "/_voltro/inspect/schedules/job/backfill",
                headers=AUTH,
                json={"from": hour(0).isoformat(), "to": hour(3).isoformat()},
            ) as r,
        ):
            lines = r.aiter_lines()
            first = json.loads(await lines.__anext__())
            assert first["event"] == "progress" and first["fired"] == 1
            with anyio.fail_after(HANG):
                await inside.wait()
        # The client is gone; slot 2 still runs. Its request ends once the server saw it go
        # (the range's stop is set then): only now may slot 2 end.
        await wait_until(lambda: not server.server_state.tasks, what="the request to end")
        release.set()

        def stopped() -> bool:
            return any("went away" in r.getMessage() for r in caplog.records)

        # The range said it stopped: it fires nothing more, and slot 2's outcome is written.
        await wait_until(stopped, what="the range to stop")

        async def settled() -> bool:
            rows = await runs_of(s, "job")
            return len(rows) == 2 and all(r.status.terminal for r in rows)

        await wait_until(settled, what="slot 2's outcome")
        rows = await runs_of(s, "job")
        server.should_exit = True
    assert [(r.scheduled_at, r.status, r.error_tag) for r in rows] == [
        (hour(1), RunStatus.SUCCEEDED, None),
        (hour(2), RunStatus.SUCCEEDED, None),
    ]
    assert steps.ran == [hour(1), hour(2)]
    assert "range backfill stopped (its client went away)  name=job fired=2 of 3" in caplog.text
