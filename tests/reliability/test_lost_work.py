"""Nothing lost when the ledger blinks: the defects of issue 13 ("Losing work", "Holes in the
ledger", Run now's bound), each reproduced against a real database cut through
:class:`support.tcp_proxy.TcpProxy` at the exact statement that matters.

Where a test needs the cut *between* two statements (the claim committed, the run row not), it
wraps the real store's method so that the proxy is cut just before the real statement is sent:
the statement then really fails in the real driver, as it would on a real partition.
"""

from __future__ import annotations

from datetime import UTC, datetime

import anyio
import httpx
import pytest
from fastapi import FastAPI
from support.cuts import client, count_calls, cut_before, inner_store, proxied
from support.running import runs_of
from support.tcp_proxy import CUT_LINK_WARNINGS
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
from fastapi_voltro_schedules.models import claim_key
from fastapi_voltro_schedules.testing import ManualClock

TOKEN = "trigger-0c1d2e3f-not-a-real-secret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SERVERS = [
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("mariadb", marks=pytest.mark.mariadb),
]

pytestmark = CUT_LINK_WARNINGS


# -- 1. a 503 "retry" must not lose the slot -------------------------------------------------


@pytest.mark.parametrize("server", SERVERS)
async def test_a_503_retry_after_a_failed_run_insert_runs_the_slot(
    server: str, request: pytest.FixtureRequest
) -> None:
    """The write of the arrival's claim and row meets a cut link: the route answers 503
    "retry". Once the claim committed apart from its row, and every retry answered ``200
    duplicate, runId: null`` — the slot never ran; now the two are one transaction, so the
    cut leaves neither, and the retry, once the store is back, runs the slot — exactly once."""
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
                inner_store(s), "claim_and_insert", proxy, lambda runs, *_: runs[0].name == "ext"
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
                return any(r.status is RunStatus.SUCCEEDED for r in await runs_of(s, "ext"))

            await wait_until(done, what="the retried slot's run")
            rows = await runs_of(s, "ext")
    assert ran == [datetime(2031, 3, 1, 12, 0, tzinfo=UTC)]
    assert [(r.status, r.trigger) for r in rows] == [(RunStatus.SUCCEEDED, Trigger.EXTERNAL)]


@pytest.mark.parametrize("server", SERVERS)
async def test_slots_that_fired_nothing_in_an_outage_are_recorded_missed_once_back(
    server: str, request: pytest.FixtureRequest
) -> None:
    """The herd path: 12:00's overlap read fails; 12:01's claims-with-rows write fails. Both
    fired nothing (fail-closed, correctly) — and before the fix left no row (and, when a claim
    committed apart from its row, a claim that made the slot unrecoverable). Once the store is
    back each is recorded ``missed``/``store-unavailable``, once, under this replica's claim."""
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
            assert s.engine is not None
            store, holes = inner_store(s), s.engine.runner.ledger.holes
            reads = cut_before(store, "live_runs", proxy, lambda names, *_: "tick" in names)
            await clock.advance(30)  # 12:00: the overlap read fails
            # The link comes back once the slot is a hole: the insert really failed (restored
            # any sooner, the driver's reconnect could still carry it through).
            await wait_until(lambda: holes.pending(claim_key("tick", noon)), what="12:00's hole")
            assert reads[0] == 1
            proxy.restore()
            claims = cut_before(
                store, "claim_and_insert", proxy, lambda runs, *_: runs[0].name == "tick"
            )
            await clock.advance(60)  # 12:01: the claims with their rows fail
            await wait_until(lambda: holes.pending(claim_key("tick", one)), what="12:01's hole")
            assert claims[0] == 1
            proxy.restore()
            # Every hole repaired: nothing is left pending that could write a third row.
            await wait_until(
                lambda: not len(holes) and holes.recorded >= 2, what="both holes repaired"
            )
            rows = await runs_of(s, "tick")
            holders = [await store.claim_holder(claim_key("tick", t)) for t in (noon, one)]
    assert ran == []
    assert [(r.scheduled_at, r.status, r.error_tag) for r in rows] == [
        (noon, RunStatus.MISSED, "store-unavailable"),
        (one, RunStatus.MISSED, "store-unavailable"),
    ]
    assert [h and h[0] for h in holders] == ["r1", "r1"]


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
            finish = count_calls(inner_store(s), "finish_runs")
            await clock.advance(30)  # 12:00 fires; its terminal write meets the cut
            with anyio.fail_after(HANG):
                await done.wait()
            await wait_until(lambda: finish.failed >= 1, what="the terminal write to fail")
            assert cuts[0] == 1
            # why this sleep is safe: it only makes the outage last (the write is retried
            # meanwhile); the write is retried for 120 s, so a longer sleep changes nothing
            await anyio.sleep(3)
            proxy.restore()
            await clock.advance(10)  # ten beats later by the scheduler's clock: reads dead
            reaped = await s.engine.maintenance.reap()

            async def terminal() -> bool:
                return all(r.status.terminal for r in await runs_of(s, "job"))

            await wait_until(terminal, what="the retried terminal write")
            rows = await runs_of(s, "job")
    assert reaped == 0
    assert [(r.status, r.error_tag) for r in rows] == [(RunStatus.SUCCEEDED, None)]


# -- 4b. nothing admitted once shutdown began; 5. Run now is bounded ---------------------------

INSPECT = "inspect-5a6b7c8d-not-a-real-secret"
INSPECT_AUTH = {"Authorization": f"Bearer {INSPECT}"}


class Gate:
    """A handler that holds until released, counting how many are inside at once."""

    def __init__(self) -> None:
        self.release = anyio.Event()
        self.inside = 0
        self.most = 0
        self.entered = 0

    async def __call__(self, ctx: ScheduleContext) -> None:
        self.entered += 1
        self.inside += 1
        self.most = max(self.most, self.inside)
        try:
            await self.release.wait()
        finally:
            self.inside -= 1


async def test_nothing_is_admitted_once_shutdown_began(sqlite_url: str) -> None:
    """While the app drains (a run in flight holds it within its grace period), a Run now and
    an external arrival used to write ``running`` rows whose handlers never started. Now both
    answer 503 ``shutting_down`` and write nothing."""
    gate = Gate()
    held = define_schedule(name="held", cron="0 0 1 1 *", timezone="UTC", handler=gate)
    other = define_schedule(name="other", cron="0 0 1 1 *", timezone="UTC", handler=gate)
    ext = define_schedule(
        name="ext", cron="* * * * *", timezone="UTC", trigger="external", handler=gate
    )
    config = SchedulingConfig(
        database_url=sqlite_url,
        replica_id="solo",
        shutdown_grace_ms=10_000,
        schedule_trigger_token=TOKEN,
        inspect_token=INSPECT,
        external_missed_policy="off",
    )
    s = Scheduling([held, other, ext], config=config, clock=ManualClock(T1))
    app = FastAPI()
    app.include_router(schedules_router)
    stop = anyio.Event()
    booted = anyio.Event()
    answers: dict[str, httpx.Response] = {}

    async def serve() -> None:
        async with s.run(app):
            booted.set()  # what a server's lifespan waits for before it takes requests
            await stop.wait()

    async with (
        anyio.create_task_group() as tg,
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http,
    ):
        tg.start_soon(serve)
        with anyio.fail_after(HANG):
            await booted.wait()
        first = await http.post("/_voltro/inspect/schedules/held/fire", headers=INSPECT_AUTH)
        assert first.status_code == 202, first.text
        await wait_until(lambda: gate.inside == 1, what="the held run's handler")
        stop.set()  # shutdown begins; the held run keeps it draining
        assert s.engine is not None
        await wait_until(
            lambda: s.engine is not None and s.engine.dispatcher.closing, what="the drain"
        )
        answers["fire"] = await http.post(
            "/_voltro/inspect/schedules/other/fire", headers=INSPECT_AUTH
        )
        answers["trigger"] = await http.post("/_voltro/schedules/ext/trigger", headers=AUTH)
        gate.release.set()
    for answer in answers.values():
        assert answer.status_code == 503, answer.text
        assert answer.json()["code"] == "shutting_down", answer.text
    async with s.run(arm=False):
        assert s.store is not None
        rows = await s.store.list_runs(None, limit=100)
    assert [(r.name, r.status) for r in rows] == [("held", RunStatus.SUCCEEDED)]
    assert gate.entered == 1


T1 = datetime(2031, 3, 1, 12, 0, 5, tzinfo=UTC)


async def test_run_now_allows_one_in_flight_per_schedule_and_process(sqlite_url: str) -> None:
    """Concurrent Run now calls used to start a handler each, without bound. Now a second one
    while the first is in flight answers 409 ``busy`` naming the run in flight; once it
    finished, Run now runs again. Other schedules are not held up."""
    gate = Gate()
    job = define_schedule(name="job", cron="0 0 1 1 *", timezone="UTC", handler=gate)
    side = define_schedule(name="side", cron="0 0 1 1 *", timezone="UTC", handler=gate)
    config = SchedulingConfig(
        database_url=sqlite_url, replica_id="solo", inspect_token=INSPECT, shutdown_grace_ms=0
    )
    s = Scheduling([job, side], config=config, clock=ManualClock(T1))
    app = FastAPI()
    app.include_router(schedules_router)
    async with (
        s.run(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http,
    ):
        fire = "/_voltro/inspect/schedules/{}/fire"
        burst = [await http.post(fire.format("job"), headers=INSPECT_AUTH) for _ in range(5)]
        assert [r.status_code for r in burst] == [202, 409, 409, 409, 409], burst
        first_id = burst[0].json()["runId"]
        assert {r.json()["code"] for r in burst[1:]} == {"busy"}
        assert {r.json()["runId"] for r in burst[1:]} == {first_id}
        assert (await http.post(fire.format("side"), headers=INSPECT_AUTH)).status_code == 202
        await wait_until(lambda: gate.inside == 2, what="both handlers")
        gate.release.set()

        async def finished() -> bool:
            assert s.store is not None
            run = await s.store.get_run(first_id)
            return run is not None and run.terminal

        await wait_until(finished, what="the first Run now to end")
        # The process lets go of its Run now once the run's outcome is written (its firing
        # reported finished): until then a second one is still "busy".
        engine = s.engine
        assert engine is not None
        await wait_until(lambda: "job" not in engine.dispatcher._manual, what="Run now let go")
        again = await http.post(fire.format("job"), headers=INSPECT_AUTH)
        assert again.status_code == 202, again.text
        assert gate.most == 2


@pytest.mark.postgres
async def test_a_retry_on_another_replica_runs_the_slot_the_first_could_not_record(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replica A cannot record an external arrival (its link is cut as it writes the claim
    with the row): 503. The platform's retry lands on replica B. Once A's claim could commit
    apart from its row and B answered ``200 duplicate, runId: null`` — the slot never ran; now
    A's failed write left no claim, so B runs the slot at once, and A's repair, once its link
    is back, finds the slot B's and writes nothing."""
    ran: list[str] = []

    async def handler(ctx: ScheduleContext) -> None:
        ran.append(ctx.run_id)

    ext = define_schedule(
        name="ext", cron="* * * * *", timezone="UTC", trigger="external", handler=handler
    )
    async with proxied(postgres_url) as (proxy, through):
        apps: list[FastAPI] = []
        replicas: list[Scheduling] = []
        for replica, url in (("a", through), ("b", postgres_url)):
            config = SchedulingConfig(
                database_url=url,
                replica_id=replica,
                schedule_trigger_token=TOKEN,
                external_missed_policy="off",
            )
            replicas.append(Scheduling([ext], config=config, clock=ManualClock(T1)))
            apps.append(FastAPI())
            apps[-1].include_router(schedules_router)
        a, b = replicas
        async with (
            a.run(apps[0]),
            b.run(apps[1]),
            client(apps[0]) as ha,
            client(apps[1]) as hb,
        ):
            cut_before(
                inner_store(a), "claim_and_insert", proxy, lambda runs, *_: runs[0].name == "ext"
            )
            first = await ha.post("/_voltro/schedules/ext/trigger", headers=AUTH)
            assert first.status_code == 503, first.text
            retry = await hb.post("/_voltro/schedules/ext/trigger", headers=AUTH)
            assert retry.status_code == 202, retry.text
            proxy.restore()
            holes = a.running_engine().runner.ledger.holes
            await wait_until(lambda: not len(holes), what="A's hole settled")
            run_id = retry.json()["runId"]

            async def done() -> bool:
                return any(r.status is RunStatus.SUCCEEDED for r in await runs_of(b, "ext"))

            await wait_until(done, what="B's run of the slot")
            rows = await runs_of(b, "ext")
    assert ran == [run_id]
    assert [(r.status, r.replica_id) for r in rows] == [(RunStatus.SUCCEEDED, "b")]
