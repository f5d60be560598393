"""Run-time schedules under ``change_strategy="cdc"`` (issue 31): a write reaches every
replica in milliseconds, not at its next heartbeat.

Three schedulers share one Postgres ledger and one manual clock whose heartbeat is only moved
where a step says so: ``a`` and ``b`` listen (``cdc``), ``c`` polls. A put, an edit and a
delete on one listening replica reach the other while the clock stands still — only the
``NOTIFY`` can have carried them — and each time ``c``, which heard nothing, still runs what
it knew until a heartbeat is moved; then it catches up. The store's announced insert is
checked on its own: a listener hears each inserted version's name at commit, and neither a
silent write nor a version a peer recorded first.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import replace
from datetime import UTC, datetime

import anyio
import pytest
from support.waiting import HANG, wait_until

from fastapi_voltro_schedules import (
    ChangeStrategy,
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    define_handler,
)
from fastapi_voltro_schedules.definition import Schedule
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.records import DefinitionRecord
from fastapi_voltro_schedules.store import create_store
from fastapi_voltro_schedules.testing import ManualClock

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

T0 = datetime(2026, 6, 1, 10, 0, 5, tzinfo=UTC)
NAME = "report.acme"
HEARTBEAT_MS = 10_000
YEARLY, EDITED = "0 0 1 1 *", "0 0 2 1 *"
"""Crons that fire nowhere near the test's clock: only the definitions move."""
LISTENING = "schedule: listening for ledger changes (change_strategy=cdc)"
WRITES = 50
"""Writes timed from one replica to the other (the bench figure)."""


@define_handler(name="tenantReport")
async def tenant_report(ctx: ScheduleContext) -> None:
    pass


class Heard:
    """When a replica's engine armed or disarmed each name (``time.perf_counter``): wraps
    the two calls its catalog makes, so the instant is the apply's, not a poll's."""

    def __init__(self, scheduling: Scheduling) -> None:
        engine = scheduling.running_engine()
        self.armed: dict[tuple[str, str], float] = {}
        self.disarmed: dict[str, float] = {}
        arm, disarm = engine.arm_written, engine.disarm_written

        def arm_written(schedule: Schedule, after: datetime) -> None:
            self.armed.setdefault((schedule.name, schedule.cron), time.perf_counter())
            arm(schedule, after)

        def disarm_written(name: str) -> bool:
            self.disarmed.setdefault(name, time.perf_counter())
            return disarm(name)

        engine.arm_written = arm_written  # type: ignore[method-assign]
        engine.disarm_written = disarm_written  # type: ignore[method-assign]


@asynccontextmanager
async def replicas(
    url: str, clock: ManualClock, strategies: dict[str, ChangeStrategy]
) -> AsyncIterator[list[Scheduling]]:
    await upgrade_to_head(url)
    async with AsyncExitStack() as stack:
        running = []
        for replica, strategy in strategies.items():
            config = SchedulingConfig(
                database_url=url,
                replica_id=replica,
                schedule_heartbeat_ms=HEARTBEAT_MS,
                change_strategy=strategy,
            )
            scheduling = Scheduling(config=config, clock=clock, handlers=[tenant_report])
            running.append(await stack.enter_async_context(scheduling.run()))
        yield running


def runs(scheduling: Scheduling, cron: str | None) -> Callable[[], bool]:
    """``scheduling`` lists ``NAME`` with ``cron`` (``None``: does not list it) and its
    engine agrees (armed, or not)."""

    def check() -> bool:
        schedule = scheduling.get(NAME)
        armed = scheduling.running_engine().next_firing(NAME) is not None
        if cron is None:
            return schedule is None and not armed
        return schedule is not None and schedule.cron == cron and armed

    return check


async def a_beat(clock: ManualClock) -> None:
    await clock.advance(HEARTBEAT_MS / 1000)


async def test_a_write_reaches_a_listening_replica_by_notify_and_a_polling_one_at_its_beat(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock(T0)
    strategies = {"pod-a": ChangeStrategy.CDC, "pod-b": ChangeStrategy.CDC}
    strategies["pod-c"] = ChangeStrategy.POLL
    with caplog.at_level(logging.INFO, logger="fastapi_voltro_schedules"):
        async with replicas(postgres_url, clock, strategies) as (a, b, c):
            await wait_until(lambda: caplog.text.count(LISTENING) == 2, what="a's and b's LISTEN")
            # a put on a: b arms it with the clock standing still; c, polling, does not
            await a.put_schedule(NAME, cron=YEARLY, timezone="UTC", handler="tenantReport")
            await wait_until(runs(b, YEARLY), what="b to arm the put")
            assert runs(c, None)(), "c heard a write it has no channel for"
            await a_beat(clock)
            await wait_until(runs(c, YEARLY), what="c to arm the put at its beat")
            # an edit on b reaches a the same way; c keeps the cron it read
            await b.put_schedule(NAME, cron=EDITED, timezone="UTC", handler="tenantReport")
            await wait_until(runs(a, EDITED), what="a to re-arm the edit")
            assert runs(c, YEARLY)()
            # a delete on a reaches b; c still runs it until its beat
            await a.delete_schedule(NAME)
            await wait_until(runs(b, None), what="b to disarm the delete")
            assert runs(c, YEARLY)()
            await a_beat(clock)
            await wait_until(runs(c, None), what="c to disarm the delete at its beat")

            # The bench figure: put returned on a → b's engine armed it, clock still.
            heard = Heard(b)
            since_return: list[float] = []
            since_call: list[float] = []
            for i in range(WRITES):
                name = f"{NAME}.{i}"
                called = time.perf_counter()
                await a.put_schedule(name, cron=YEARLY, timezone="UTC", handler="tenantReport")
                returned = time.perf_counter()
                with anyio.fail_after(HANG):
                    while (name, YEARLY) not in heard.armed:
                        await anyio.sleep(0.005)
                since_return.append(heard.armed[(name, YEARLY)] - returned)
                since_call.append(heard.armed[(name, YEARLY)] - called)
            assert all(c.get(f"{NAME}.{i}") is None for i in range(WRITES))
        assert caplog.text.count(LISTENING) == 2  # c never listened
    # b often arms before a's put returns (a reads its version back after the commit): the
    # figure from the call bounds it from above
    print(f"\nrun-time put on a → armed on b (cdc, Postgres, {WRITES} writes):")
    print(f"  from put returned: {summary(since_return)}")
    print(f"  from put called:   {summary(since_call)}")


def summary(seconds: list[float]) -> str:
    ms = sorted(x * 1000 for x in seconds)
    p99 = ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))]
    return f"p50={statistics.median(ms):.1f}ms p99={p99:.1f}ms max={ms[-1]:.1f}ms min={ms[0]:.1f}ms"


async def test_an_announced_definition_insert_notifies_each_inserted_version_at_commit(
    postgres_url: str,
) -> None:
    """``add_definitions(announce=True)`` carries the ``NOTIFY`` in the insert's own statement:
    the listener's ``on_definition`` hears the name of the versions each one inserted, on its
    own channel (``on_change`` hears nothing); a silent insert and a version already recorded
    (a peer wrote it first: nothing inserted) send nothing. Notifications arrive in commit order, so
    hearing the last write proves the ones before it sent none."""
    await upgrade_to_head(postgres_url)
    store, listener = create_store(postgres_url), create_store(postgres_url)

    def version(name: str, number: int = 1) -> DefinitionRecord:
        return DefinitionRecord(
            name=name,
            version=number,
            cron=YEARLY,
            timezone="UTC",
            trigger="self",
            on_overlap="skip",
            backfill="skip",
            handler="tenantReport",
            args="{}",
            source="runtime",
            effective_from=T0,
            recorded_by="pod-a",
        )

    changes: list[str] = []
    definitions: list[str] = []
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(
                lambda task_status: listener.listen_changed(
                    changes.append, on_definition=definitions.append, task_status=task_status
                )
            )
            await store.add_definitions([version("cdc.silent")])
            await store.add_definitions(
                [version("cdc.loud"), version("cdc.loud", 2)], announce=True
            )
            taken = replace(version("cdc.loud"), recorded_by="pod-b")
            await store.add_definitions([taken], announce=True)  # (cdc.loud, 1) is recorded
            await store.add_definitions([version("cdc.last")], announce=True)
            await wait_until(lambda: "cdc.last" in definitions, what="the last write's NOTIFY")
            tg.cancel_scope.cancel()
        # two versions of one name in one transaction: Postgres folds the equal notifications
        assert definitions == ["cdc.loud", "cdc.last"]
        assert changes == []
        stored = await store.definitions(["cdc.loud"])
        assert [v.recorded_by for v in stored["cdc.loud"]] == ["pod-a", "pod-a"]
    finally:
        await store.dispose()
        await listener.dispose()
