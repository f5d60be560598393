"""``change_strategy="cdc"`` on Postgres: a waiter starts on the blocking run's NOTIFY.

Two replicas (two ``Scheduling`` instances with their own pools) share the Postgres ledger;
every handoff of the line passes from one to the other (as in ``bench/queue_handoff.py``, which
measures how fast). The waiters' poll is made far longer than a hang's bound
(:data:`LONG_POLL`): a run that ends within :data:`~support.waiting.HANG` never saw a waiter
poll, so each of its handoffs came from the notification. Losing the ``LISTEN`` connection is
noticed and logged (the poll is all that is left meanwhile), and the listener comes back on
its own.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import anyio
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool
from support.waiting import HANG, wait_until

from fastapi_voltro_schedules import (
    ChangeStrategy,
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    define_schedule,
)
from fastapi_voltro_schedules.fire_requests import FireRequest, Why
from fastapi_voltro_schedules.migrations import upgrade_to_head

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

LONG_POLL = 10 * HANG
"""The waiters' poll. Every wait below is bounded by HANG, so none of them ever reaches it."""
LISTENING = "schedule: listening for ledger changes (change_strategy=cdc)"
LOST = (
    "schedule: change notifications lost — polling: store listen_changed: the notification "
    "connection was closed by the server or the network"
)
NAME = "cdc-handoff"
START = datetime(2026, 1, 1, tzinfo=UTC)


async def handoffs(
    url: str, count: int, while_held: Callable[[], Awaitable[None]]
) -> list[tuple[datetime, str]]:
    """Fire ``count + 1`` occurrences of one ``on_overlap="queue"`` schedule, alternately on
    replicas ``a`` and ``b``: every one after the first is queued behind it while it holds the
    line, so each turn passes to the *other* replica, which hears of it only by ``NOTIFY``.
    The first run holds the line until every other firing is queued and ``while_held()``
    returned. Returns ``(slot, replica)`` of each run, in the order they started."""
    await upgrade_to_head(url)
    started: list[tuple[datetime, str]] = []
    first_in, release = anyio.Event(), anyio.Event()

    def replica(name: str) -> Scheduling:
        async def handler(ctx: ScheduleContext) -> None:
            started.append((ctx.scheduled_at, name))
            if ctx.scheduled_at == START:
                first_in.set()
                await release.wait()

        schedule = define_schedule(
            name=NAME, cron="0 0 1 1 *", timezone="UTC", handler=handler, on_overlap="queue"
        )
        config = SchedulingConfig(
            database_url=url,
            replica_id=name,
            change_strategy=ChangeStrategy.CDC,
            shutdown_grace_ms=200,
        )
        return Scheduling([schedule], config=config)

    a, b = replica("a"), replica("b")
    async with a.run(), b.run():
        engines = [a.running_engine(), b.running_engine()]
        for engine in engines:
            line = engine.admitter.line
            assert line is not None, "the durable line needs a multi-instance store"
            line.poll_seconds = LONG_POLL
        firings = []
        for i in range(count + 1):
            engine = engines[i % 2]
            slot = START + timedelta(minutes=i)
            firings.append(await engine.fire(FireRequest(engine.schedules[0], slot, Why.TIMER)))
            if i == 0:
                await first_in.wait()  # the line is held before anything queues behind it
        await while_held()
        release.set()
        for firing in firings:
            await firing.finished()
    return started


def alternating(count: int) -> list[tuple[datetime, str]]:
    return [(START + timedelta(minutes=i), "ab"[i % 2]) for i in range(count + 1)]


async def test_a_queued_waiter_on_another_replica_starts_on_the_notify(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def listening() -> None:
        await wait_until(lambda: caplog.text.count(LISTENING) == 2, what="both LISTENs")

    with caplog.at_level(logging.INFO, logger="fastapi_voltro_schedules"):
        with anyio.fail_after(HANG):  # one handoff left to the poll would take LONG_POLL
            order = await handoffs(postgres_url, 8, listening)
    assert order == alternating(8)
    assert caplog.text.count(LISTENING) == 2


LISTENERS = (
    "FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN %' "
    "AND pid <> pg_backend_pid()"
)


async def _terminate_listeners(url: str) -> int:
    """Once both replicas' ``LISTEN`` sessions exist, cut them both (as a server restart or
    a dropped link would); returns how many were cut."""
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with engine.connect() as conn:
            while (await conn.execute(text(f"SELECT count(*) {LISTENERS}"))).scalar_one() < 2:
                # pg_stat_activity is a snapshot held for the transaction: end it to look again
                await conn.rollback()
                await anyio.sleep(0.05)  # both replicas still booting
            result = await conn.execute(text(f"SELECT pg_terminate_backend(pid) {LISTENERS}"))
            return len(result.fetchall())
    finally:
        await engine.dispose()


async def test_losing_the_listen_connection_is_logged_and_the_listener_comes_back(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def cut_both() -> None:
        # While the first run holds the line: cut both LISTEN sessions, and wait until both
        # replicas said so and listen again.
        assert await _terminate_listeners(postgres_url) == 2
        await wait_until(
            lambda: caplog.text.count(LOST) >= 2 and caplog.text.count(LISTENING) >= 4,
            what="both replicas to lose and regain their LISTEN",
        )

    with caplog.at_level(logging.INFO, logger="fastapi_voltro_schedules"):
        with anyio.fail_after(HANG):  # one handoff left to the poll would take LONG_POLL
            order = await handoffs(postgres_url, 6, cut_both)
    # Both replicas said they lost it (and so poll), and re-listened: the handoffs after
    # that still came from the notification, not from the poll.
    assert caplog.text.count(LOST) == 2
    assert caplog.text.count(LISTENING) == 4
    assert order == alternating(6)


async def test_an_announced_terminal_write_notifies_at_commit_and_stays_a_compare_and_set(
    postgres_url: str,
) -> None:
    """``finish_runs(announce=True)`` carries the ``NOTIFY`` in the write's own statement: the
    listener hears each outcome's schedule once the row reads terminal, a write without
    ``announce`` stays silent, and another replica's row is still left alone."""
    from datetime import UTC, datetime

    from fastapi_voltro_schedules.enums import RunStatus, Trigger
    from fastapi_voltro_schedules.migrations import upgrade_to_head
    from fastapi_voltro_schedules.store import RunOutcome, RunRecord, create_store, new_run_id

    await upgrade_to_head(postgres_url)
    at = datetime(2026, 5, 6, 7, 0, tzinfo=UTC)

    def row(name: str, replica: str) -> RunRecord:
        return RunRecord(
            id=new_run_id(),
            name=name,
            scheduled_at=at,
            status=RunStatus.RUNNING,
            trigger=Trigger.SELF,
            fired_at=at,
            replica_id=replica,
        )

    store = create_store(postgres_url)
    listener = create_store(postgres_url)
    quiet, loud, theirs = row("cdc-quiet", "me"), row("cdc-loud", "me"), row("cdc-loud", "other")
    heard: list[str] = []
    got = anyio.Event()

    def on_change(name: str) -> None:
        heard.append(name)
        got.set()

    try:
        await store.insert_runs([quiet, loud, theirs])
        async with anyio.create_task_group() as tg:
            await tg.start(
                lambda task_status: listener.listen_changed(on_change, task_status=task_status)
            )
            done = at.replace(minute=1)
            await store.finish_runs(
                [RunOutcome(quiet.id, RunStatus.SUCCEEDED, done, name=quiet.name)], "me"
            )
            await store.finish_runs(
                [
                    RunOutcome(loud.id, RunStatus.SUCCEEDED, done, name=loud.name),
                    RunOutcome(theirs.id, RunStatus.SUCCEEDED, done, name=theirs.name),
                ],
                "me",
                announce=True,
            )
            with anyio.fail_after(HANG):
                await got.wait()
            tg.cancel_scope.cancel()
        # Notifications arrive in commit order: the silent write, committed first, sent none.
        assert heard == ["cdc-loud"]
        rows = {r.id: r.status for r in await store.list_runs("cdc-loud")}
        assert rows == {loud.id: RunStatus.SUCCEEDED, theirs.id: RunStatus.RUNNING}
        assert (await store.get_run(quiet.id)).status is RunStatus.SUCCEEDED  # type: ignore[union-attr]
    finally:
        await store.dispose()
        await listener.dispose()
