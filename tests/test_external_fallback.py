"""The hybrid trigger: ``trigger="external", fallback="self"``.

A platform scheduler drives the schedule; when it has not triggered an occurrence by the close
of its arrival window (``closes_at`` + the watcher's 2 s grace), the app fires it itself,
``trigger="self"``, claimed as an arrival is. Driven on a ManualClock inside a running
``Scheduling`` on each store (SQLite: ``single``; Postgres and MariaDB: ``advisoryLock`` and
``cluster``), with arrivals made through the trigger route's own entry (:func:`arrive`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import clean_server, run_async
from prometheus_client import CollectorRegistry
from support.waiting import wait_until

from fastapi_voltro_schedules import (
    RunStatus,
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    Trigger,
    define_schedule,
)
from fastapi_voltro_schedules.api.trigger import arrive
from fastapi_voltro_schedules.enums import CoordinationOutcome
from fastapi_voltro_schedules.errors import ConfigurationError, ScheduleDefinitionError
from fastapi_voltro_schedules.metrics import SchedulerMetrics
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.models import claim_key
from fastapi_voltro_schedules.store import RunRecord
from fastapi_voltro_schedules.testing import ManualClock

T0 = datetime(2026, 6, 1, 12, 0, 30, tzinfo=UTC)


def minute(n: int, s: int = 0) -> datetime:
    return datetime(2026, 6, 1, 12, n, s, tzinfo=UTC)


async def noop(ctx: ScheduleContext) -> None:
    return None


# -- definition and boot validation ---------------------------------------------------------


def test_fallback_needs_an_external_trigger() -> None:
    with pytest.raises(ScheduleDefinitionError) as exc:
        define_schedule(
            name="r",
            cron="* * * * *",
            timezone="UTC",
            trigger="self",
            fallback="self",
            handler=noop,
        )
    assert 'define_schedule("r"): fallback="self" needs trigger="external"' in str(exc.value)
    with pytest.raises(ScheduleDefinitionError) as exc:
        define_schedule(
            name="r",
            cron="* * * * *",
            timezone="UTC",
            trigger="external",
            fallback="external",
            handler=noop,
        )
    assert "fallback='external' is not a fallback — pass fallback=\"self\"" in str(exc.value)
    ok = define_schedule(
        name="r",
        cron="* * * * *",
        timezone="UTC",
        trigger="external",
        fallback="self",
        handler=noop,
    )
    assert ok.fallback == "self"
    assert (
        define_schedule(name="n", cron="* * * * *", timezone="UTC", handler=noop).fallback is None
    )


def test_an_inherited_trigger_is_checked_at_boot() -> None:
    inherits = define_schedule(
        name="inherits", cron="* * * * *", timezone="UTC", fallback="self", handler=noop
    )
    with pytest.raises(ConfigurationError) as exc:
        Scheduling([inherits], config=SchedulingConfig(trigger="self")).validate()
    assert (
        f'schedule "inherits" (module {__name__}) sets fallback="self" but '
        'inherits trigger="self" from VOLTRO_TRIGGER'
    ) in str(exc.value)
    assert 'set trigger="external" on the schedule' in str(exc.value)
    # VOLTRO_TRIGGER=external: the inherited trigger is external, the fallback stands
    Scheduling([inherits], config=SchedulingConfig(trigger="external")).validate()


# -- the fallback, in a running scheduler ---------------------------------------------------


async def rows_at(s: Scheduling, slot: datetime) -> list[RunRecord]:
    assert s.store is not None
    return [r for r in await s.store.list_runs("report", limit=1000) if r.scheduled_at == slot]


def counted(metrics: SchedulerMetrics, counter: str) -> float:
    value: float = getattr(metrics, counter).labels(name="report")._value.get()
    return value


STORES = [
    pytest.param("sqlite", None, id="sqlite-single"),
    pytest.param(
        "postgres", "advisoryLock", id="postgres-advisoryLock", marks=pytest.mark.postgres
    ),
    pytest.param("postgres", "cluster", id="postgres-cluster", marks=pytest.mark.postgres),
    pytest.param("mariadb", "advisoryLock", id="mariadb-advisoryLock", marks=pytest.mark.mariadb),
    pytest.param("mariadb", "cluster", id="mariadb-cluster", marks=pytest.mark.mariadb),
]


@pytest.fixture
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    backend: str = request.param
    if backend == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'voltro.db'}"
        return
    with clean_server(backend) as url:
        run_async(upgrade_to_head(url))  # a server database is migrated by `voltro migrate`
        yield url


@pytest.mark.parametrize(("store_url", "coordination"), STORES, indirect=["store_url"])
async def test_on_time_silent_and_late_arrival(
    store_url: str, coordination: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    fired: list[tuple[datetime, Trigger]] = []

    async def report(ctx: ScheduleContext) -> None:
        fired.append((ctx.scheduled_at, ctx.trigger))

    job = define_schedule(
        name="report",
        cron="* * * * *",
        timezone="UTC",
        trigger="external",
        fallback="self",
        handler=report,
    )
    clock = ManualClock(T0)
    config = SchedulingConfig(
        database_url=store_url,
        replica_id="r1",
        coordination=coordination,
        # the default skew (5 min) is longer than the period: an occurrence's window closes
        # when the next one begins, so a retry stating its time can still arrive after it
    )
    metrics = SchedulerMetrics(CollectorRegistry())
    s = Scheduling([job], config=config, clock=clock, metrics=metrics)
    caplog.set_level(logging.INFO, logger="fastapi_voltro_schedules")
    async with s.run():
        # every loop parked on the clock, the definitions follower (run-time schedules) too
        await wait_until(lambda: _true(clock.sleepers >= 5))

        # 1. on time: the platform triggers 12:01; its window closes at 12:02 — no fallback
        clock.set(minute(1, 2))
        answer = await arrive(s, "report")
        assert (answer.status, answer.scheduled_at) == ("accepted", minute(1))
        await clock.advance(61)  # 12:02:03: the watcher looks at 12:01 (window + grace)

        # 2. silent: nobody triggers 12:02; at 12:03:02 the app fires it itself
        await clock.advance(60)  # 12:03:03

        async def fallback_done() -> bool:
            rows = await rows_at(s, minute(2))
            return len(rows) == 1 and rows[0].status is RunStatus.SUCCEEDED

        await wait_until(fallback_done)
        (row,) = await rows_at(s, minute(2))
        assert (row.trigger, row.coordination_outcome, row.replica_id) == (
            Trigger.SELF,
            CoordinationOutcome.EXTERNAL,
            "r1",
        )
        assert s.store is not None
        holder = await s.store.claim_holder(claim_key("report", minute(2)))
        assert holder is not None and holder[0] == "r1"

        # 3. a late arrival (a retry stating 12:02) after the fallback: duplicate, no run
        late = await arrive(s, "report", minute(2))
        assert late.status == "duplicate"
        assert late.run is not None and late.run.id == row.id

        # 12:01 — the platform's run — holds its one external row, no fallback, no missed
        async def on_time_done() -> bool:
            return all(r.status.terminal for r in await rows_at(s, minute(1)))

        await wait_until(on_time_done, what="12:01's run to end")
        (on_time,) = await rows_at(s, minute(1))
        assert (on_time.trigger, on_time.status) == (Trigger.EXTERNAL, RunStatus.SUCCEEDED)
    assert fired == [(minute(1), Trigger.EXTERNAL), (minute(2), Trigger.SELF)]
    lines = [r for r in caplog.records if "platform trigger late" in r.getMessage()]
    assert [r.levelno for r in lines] == [logging.WARNING]
    assert (
        "fired by the in-app fallback  name=report slot=2026-06-01T12:02:00.000Z lateByMs=63000 "
        "skewBudgetMs=300000"
    ) in lines[0].getMessage()
    assert counted(metrics, "external_fallback") == 1
    assert counted(metrics, "external_missed") == 0  # the missed policy recorded nothing
    bad = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not bad, [r.getMessage() for r in bad]


async def _true(value: bool) -> bool:
    return value


async def test_missed_policy_off_keeps_the_fallback_and_backfill_applies_after_boot(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``external_missed_policy="off"`` does not stop a fallback; slots found closed at once
    (the watcher fell behind) follow ``backfill`` as the timer's would: ``skip`` fires the
    newest and records the older ``missed``; a plain external schedule records nothing."""
    fired: list[datetime] = []

    async def report(ctx: ScheduleContext) -> None:
        fired.append(ctx.scheduled_at)

    job = define_schedule(
        name="report",
        cron="* * * * *",
        timezone="UTC",
        trigger="external",
        fallback="self",
        handler=report,
    )
    plain = define_schedule(
        name="plain", cron="* * * * *", timezone="UTC", trigger="external", handler=noop
    )
    clock = ManualClock(T0)
    config = SchedulingConfig(
        database_url=sqlite_url, external_missed_policy="off", external_trigger_skew_ms=10_000
    )
    metrics = SchedulerMetrics(CollectorRegistry())
    s = Scheduling([job, plain], config=config, clock=clock, metrics=metrics)
    caplog.set_level(logging.INFO, logger="fastapi_voltro_schedules")
    async with s.run():
        # every loop parked on the clock, the definitions follower (run-time schedules) too
        await wait_until(lambda: _true(clock.sleepers >= 5))
        # one jump over three windows (12:01, 12:02, 12:03 close at :10 past): fell behind
        clock.set(minute(3, 13))

        async def done() -> bool:
            assert s.store is not None
            rows = await s.store.list_runs("report", limit=100)
            return len(rows) == 3 and all(r.status is not RunStatus.RUNNING for r in rows)

        await wait_until(done)
        assert s.store is not None
        rows = sorted(await s.store.list_runs("report"), key=lambda r: r.scheduled_at)
        assert [(r.scheduled_at, r.status, r.trigger) for r in rows] == [
            (minute(1), RunStatus.MISSED, Trigger.EXTERNAL),
            (minute(2), RunStatus.MISSED, Trigger.EXTERNAL),
            (minute(3), RunStatus.SUCCEEDED, Trigger.SELF),
        ]
        assert await s.store.list_runs("plain") == []
    assert fired == [minute(3)]
    assert counted(metrics, "external_fallback") == 1
    assert counted(metrics, "external_missed") == 2
    assert "recorded missed  name=report slots=2 first=2026-06-01T12:01:00.000Z" in caplog.text
    assert "fired by the in-app fallback  name=report slot=2026-06-01T12:03:00.000Z" in caplog.text
