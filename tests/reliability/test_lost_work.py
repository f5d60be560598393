"""Nothing lost when the ledger blinks: the defects of issue 13 ("Losing work", "Holes in the
ledger", Run now's bound), each reproduced against a real database cut through
:class:`support.tcp_proxy.TcpProxy` at the exact statement that matters.

Where a test needs the cut *between* two statements (the claim committed, the run row not), it
wraps the real store's method so that the proxy is cut just before the real statement is sent:
the statement then really fails in the real driver, as it would on a real partition.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import anyio
import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy.engine import make_url
from support.tcp_proxy import TcpProxy

from fastapi_voltro_schedules import (
    RunStatus,
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    Trigger,
    define_schedule,
    schedules_router,
)
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.store import RunRecord, SQLStore
from fastapi_voltro_schedules.testing import ManualClock

TOKEN = "trigger-0c1d2e3f-not-a-real-secret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SERVERS = [
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("mariadb", marks=pytest.mark.mariadb),
]


def inner_store(s: Scheduling) -> SQLStore:
    store: Any = s.store
    while not isinstance(store, SQLStore):
        store = store.inner
    return store


def cut_before(
    store: SQLStore, method: str, proxy: TcpProxy, when: Callable[..., bool], times: int = 1
) -> list[int]:
    """Cut ``proxy`` right before the real ``store.method`` runs, for the first ``times`` calls
    ``when(*args)`` accepts. Returns a one-item counter of the cuts made."""
    real: Callable[..., Awaitable[Any]] = getattr(store, method)
    cuts = [0]

    async def wrapped(*args: Any, **kwargs: Any) -> Any:
        if cuts[0] < times and when(*args):
            cuts[0] += 1
            proxy.cut()
        return await real(*args, **kwargs)

    setattr(store, method, wrapped)
    return cuts


@asynccontextmanager
async def proxied(url: str) -> AsyncIterator[tuple[TcpProxy, str]]:
    await upgrade_to_head(url)
    db = make_url(url)
    default_port = 5432 if db.get_backend_name() == "postgresql" else 3306
    with TcpProxy(db.host or "127.0.0.1", db.port or default_port) as proxy:
        yield proxy, db.set(port=proxy.port).render_as_string(hide_password=False)


async def rows_of(s: Scheduling, name: str) -> list[RunRecord]:
    assert s.store is not None
    return sorted(await s.store.list_runs(name, limit=1000), key=lambda r: (r.scheduled_at, r.id))


async def until(check: Callable[[], Awaitable[bool]], timeout: float = 15) -> None:
    with anyio.fail_after(timeout):
        while not await check():
            await anyio.sleep(0.02)


# -- 1. a 503 "retry" must not lose the slot -------------------------------------------------


@pytest.mark.parametrize("server", SERVERS)
async def test_a_503_retry_after_a_failed_run_insert_runs_the_slot(
    server: str, request: pytest.FixtureRequest
) -> None:
    """The claim commits, the run-row insert fails (the link is cut between the two): the route
    answers 503 "retry". Before the fix every retry answered ``200 duplicate, runId: null`` and
    the slot never ran. Now the retry, once the store is back, runs it — exactly once."""
    url: str = request.getfixturevalue(f"{server}_url")
    ran: list[datetime] = []

    async def handler(ctx: ScheduleContext) -> None:
        ran.append(ctx.scheduled_at)

    ext = define_schedule(
        name="ext", cron="* * * * *", timezone="UTC", trigger="external", handler=handler
    )
    t0 = datetime(2031, 3, 1, 12, 0, 5, tzinfo=UTC)
    async with proxied(url) as (proxy, through):
        config = SchedulingConfig(
            database_url=through,
            replica_id="r1",
            schedule_trigger_token=TOKEN,
            external_missed_policy="off",
        )
        s = Scheduling([ext], config=config, clock=ManualClock(t0))
        app = FastAPI()
        app.include_router(schedules_router)
        async with (
            s.run(app),
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http,
        ):
            cuts = cut_before(
                inner_store(s), "insert_runs", proxy, lambda runs: runs[0].name == "ext"
            )
            first = await http.post("/_voltro/schedules/ext/trigger", headers=AUTH)
            assert cuts[0] == 1
            assert first.status_code == 503, first.text
            still_down = await http.post("/_voltro/schedules/ext/trigger", headers=AUTH)
            assert still_down.status_code == 503, still_down.text  # still "retry", not lost
            proxy.restore()
            retry = await http.post("/_voltro/schedules/ext/trigger", headers=AUTH)
            assert retry.status_code == 202, retry.text
            body = retry.json()
            assert body["status"] == "accepted" and body["runId"], body
            again = await http.post("/_voltro/schedules/ext/trigger", headers=AUTH)
            assert (again.status_code, again.json()["runId"]) == (200, body["runId"])

            async def done() -> bool:
                return any(r.status is RunStatus.SUCCEEDED for r in await rows_of(s, "ext"))

            await until(done)
            rows = await rows_of(s, "ext")
    assert ran == [datetime(2031, 3, 1, 12, 0, tzinfo=UTC)]
    assert [(r.status, r.trigger) for r in rows] == [(RunStatus.SUCCEEDED, Trigger.EXTERNAL)]


@pytest.mark.parametrize("server", SERVERS)
async def test_slots_that_fired_nothing_in_an_outage_are_recorded_missed_once_back(
    server: str, request: pytest.FixtureRequest
) -> None:
    """The herd path: 12:00's claim commits and its run insert fails; 12:01's claim itself
    fails. Both fired nothing (fail-closed, correctly) — and before the fix left no row, and
    12:00 a claim that made it unrecoverable. Once the store is back each is recorded
    ``missed``/``store-unavailable``, once, under this replica's claim."""
    url: str = request.getfixturevalue(f"{server}_url")
    ran: list[datetime] = []

    async def handler(ctx: ScheduleContext) -> None:
        ran.append(ctx.scheduled_at)

    tick = define_schedule(name="tick", cron="* * * * *", timezone="UTC", handler=handler)
    t0 = datetime(2031, 3, 1, 11, 59, 30, tzinfo=UTC)
    noon, one = datetime(2031, 3, 1, 12, 0, tzinfo=UTC), datetime(2031, 3, 1, 12, 1, tzinfo=UTC)
    clock = ManualClock(t0)
    async with proxied(url) as (proxy, through):
        config = SchedulingConfig(database_url=through, replica_id="r1", shutdown_grace_ms=0)
        s = Scheduling([tick], config=config, clock=clock)
        async with s.run():
            store = inner_store(s)
            inserts = cut_before(store, "insert_runs", proxy, lambda runs: runs[0].name == "tick")
            await clock.advance(30)  # 12:00: claimed, the insert fails
            await until(lambda: _true(inserts[0] == 1))
            proxy.restore()
            claims = cut_before(
                store, "claim_many", proxy, lambda keys, *_: keys[0].startswith("tick@")
            )
            await clock.advance(60)  # 12:01: the claim fails
            await until(lambda: _true(claims[0] == 1))
            await anyio.sleep(0.3)
            proxy.restore()

            async def recorded() -> bool:
                return len(await rows_of(s, "tick")) >= 2

            await until(recorded)
            await anyio.sleep(0.5)  # a second repair would show up as a third row
            rows = await rows_of(s, "tick")
            holders = [await store.claim_holder(f"tick@{t:%Y-%m-%dT%H:%M:%S}") for t in (noon, one)]
    assert ran == []
    assert [(r.scheduled_at, r.status, r.error_tag) for r in rows] == [
        (noon, RunStatus.MISSED, "store-unavailable"),
        (one, RunStatus.MISSED, "store-unavailable"),
    ]
    assert [h and h[0] for h in holders] == ["r1", "r1"]


async def _true(value: bool) -> bool:
    return value


@pytest.mark.postgres
async def test_a_terminal_write_cut_for_seconds_is_retried_and_never_reaped(
    postgres_url: str,
) -> None:
    """A run succeeds; its terminal write meets a 3 s database cut. Before the fix the write was
    not retried and this replica's own reaper then marked its own run ``failed/abandoned``. Now
    the write is retried (the row beating meanwhile) and the reaper leaves a run this process
    still holds alone: the row ends ``succeeded``."""
    done = anyio.Event()

    async def handler(ctx: ScheduleContext) -> None:
        done.set()

    job = define_schedule(name="job", cron="* * * * *", timezone="UTC", handler=handler)
    t0 = datetime(2031, 3, 1, 11, 59, 30, tzinfo=UTC)
    clock = ManualClock(t0)
    async with proxied(postgres_url) as (proxy, through):
        config = SchedulingConfig(
            database_url=through, replica_id="r1", shutdown_grace_ms=0, schedule_heartbeat_ms=1000
        )
        s = Scheduling([job], config=config, clock=clock)
        async with s.run():
            assert s.engine is not None
            cuts = cut_before(inner_store(s), "finish_runs", proxy, lambda outcomes, *_: True)
            await clock.advance(30)  # 12:00 fires; its terminal write meets the cut
            with anyio.fail_after(5):
                await done.wait()
            await until(lambda: _true(cuts[0] == 1))
            await anyio.sleep(3)
            proxy.restore()
            await clock.advance(10)  # ten beats later by the scheduler's clock: reads dead
            reaped = await s.engine.reap()

            async def terminal() -> bool:
                return all(r.status.terminal for r in await rows_of(s, "job"))

            await until(terminal)
            rows = await rows_of(s, "job")
    assert reaped == 0
    assert [(r.status, r.error_tag) for r in rows] == [(RunStatus.SUCCEEDED, None)]
