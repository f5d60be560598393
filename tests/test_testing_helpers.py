"""``fastapi_voltro_schedules.testing`` for users' tests: the awaitable Schedule,
``make_context``, ``run_once``, ``scheduling_for`` and the pytest plugin's fixtures."""

from __future__ import annotations

import inspect
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest
from fastapi import FastAPI
from support.waiting import HANG, wait_until

from fastapi_voltro_schedules import (
    ConfigurationError,
    RunStatus,
    ScheduleContext,
    Trigger,
    WorkflowTarget,
    define_handler,
    define_schedule,
)
from fastapi_voltro_schedules.testing import (
    REAL_TIME_LIMIT,
    ManualClock,
    make_context,
    run_once,
    scheduling_for,
    wait_for_runs,
)

AT = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
seen: list[ScheduleContext] = []


@define_schedule(name="hourly", cron="0 * * * *", timezone="UTC", max_runtime_ms=90_000)
async def hourly(ctx: ScheduleContext) -> None:
    seen.append(ctx)


@define_schedule(name="blocking", cron="0 * * * *", timezone="UTC")
def blocking(ctx: ScheduleContext) -> None:
    seen.append(ctx)
    assert threading.current_thread() is not threading.main_thread()


class Starter:
    def __init__(self) -> None:
        self.started: list[tuple[str, dict[str, Any]]] = []

    async def start(self, name: str, payload: dict[str, Any]) -> str:
        self.started.append((name, payload))
        return "wf-1"


rollup = define_schedule(
    name="rollup",
    cron="0 2 * * *",
    timezone="UTC",
    workflow=WorkflowTarget("billing.rollup", lambda ctx: {"day": ctx.scheduled_at.isoformat()}),
)


@pytest.fixture(autouse=True)
def _clear() -> None:
    seen.clear()


def test_make_context_fills_every_field() -> None:
    app = FastAPI()
    ctx = make_context(hourly, at=AT, trigger="external", app=app)
    assert (ctx.scheduled_at, ctx.fired_at, ctx.trigger) == (AT, AT, Trigger.EXTERNAL)
    assert ctx.deadline == AT + timedelta(seconds=90)
    assert ctx.schedule is hourly and ctx.name == "hourly" and ctx.app is app
    assert ctx.run_id.startswith("sr_")


def test_make_context_with_a_clock_is_late_and_defaults_to_the_last_slot() -> None:
    clock = ManualClock(AT + timedelta(minutes=7))
    late = make_context(hourly, at=AT, clock=clock)
    assert late.fired_at == AT + timedelta(minutes=7) and late.scheduled_at == AT
    assert make_context(hourly, clock=clock).scheduled_at == AT
    assert make_context(hourly).scheduled_at == datetime(2026, 1, 1, tzinfo=UTC)


def test_make_context_refuses_a_naive_instant() -> None:
    with pytest.raises(ValueError, match=r"at=.* is naive — pass an aware datetime"):
        make_context(hourly, at=datetime(2026, 3, 2, 9, 0))


async def test_an_awaited_schedule_runs_its_handler_a_def_in_a_thread() -> None:
    await hourly(make_context(hourly, at=AT))
    await blocking(make_context(blocking, at=AT))
    assert [c.name for c in seen] == ["hourly", "blocking"]


async def test_an_awaited_workflow_schedule_starts_it_and_needs_a_starter() -> None:
    starter = Starter()
    await rollup(make_context(rollup, at=AT, workflows=starter))
    assert starter.started == [("billing.rollup", {"day": AT.isoformat()})]
    with pytest.raises(ConfigurationError, match="no workflow starter"):
        await rollup(make_context(rollup, at=AT))


async def test_a_cancelled_awaited_def_abandons_its_thread_as_the_runner_does() -> None:
    # One way to call a target: cancelling `await schedule(ctx)` (a test's timeout, a
    # shutdown) leaves a plain def's worker thread to finish alone, exactly as a firing's
    # watchdog does, instead of holding the caller until the thread returns.
    entered, release, finished = threading.Event(), threading.Event(), threading.Event()

    def stuck(ctx: ScheduleContext) -> None:
        entered.set()
        release.wait(timeout=HANG)
        finished.set()

    schedule = define_schedule(name="stuck", cron="0 * * * *", timezone="UTC", handler=stuck)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(schedule, make_context(schedule, at=AT))
            await wait_until(entered.is_set, what="the handler's thread to start")
            tg.cancel_scope.cancel()
        assert not finished.is_set()  # the call returned while the thread still runs
    finally:
        release.set()
    await wait_until(finished.is_set, what="the abandoned thread to finish")


async def test_run_once_records_a_success_with_the_real_runner() -> None:
    run = await run_once(hourly, at=AT)
    assert (run.status, run.trigger, run.scheduled_at) == (RunStatus.SUCCEEDED, "manual", AT)
    assert run.error_tag is None and run.finished_at is not None
    [ctx] = seen
    assert ctx.scheduled_at == AT and ctx.run_id == run.id
    assert ctx.deadline == ctx.fired_at + timedelta(seconds=90)


async def test_run_once_refuses_an_instant_that_is_not_an_occurrence() -> None:
    with pytest.raises(ValueError, match=r'not an occurrence of schedule "hourly".*nearest'):
        await run_once(hourly, at=AT + timedelta(minutes=1))
    assert seen == []


async def test_run_once_hands_the_app_and_puts_its_state_back() -> None:
    app = FastAPI()
    app.state.scheduling = "the app's own"
    await run_once(hourly, at=AT, app=app)
    assert seen[0].app is app
    assert app.state.scheduling == "the app's own"


async def test_run_once_within_max_runtime_is_not_a_timeout() -> None:
    @define_schedule(name="slowish", cron="0 * * * *", timezone="UTC", max_runtime_ms=60_000)
    async def slowish(ctx: ScheduleContext) -> None:
        seen.append(ctx)

    run = await run_once(slowish, at=AT, elapse=59)
    assert run.status is RunStatus.SUCCEEDED


async def test_run_once_names_its_real_time_limit_when_a_handler_hangs() -> None:
    """A handler stuck on real I/O is not ended by the manual clock: ``timeout=`` (default
    ``REAL_TIME_LIMIT``) ends the wait, and the error says which limit it was."""
    never = anyio.Event()

    @define_schedule(name="stuck", cron="0 * * * *", timezone="UTC")
    async def stuck(ctx: ScheduleContext) -> None:
        await never.wait()

    assert inspect.signature(run_once).parameters["timeout"].default == REAL_TIME_LIMIT
    limit = r'run_once\("stuck"\).* after 0.2 s of real time.*timeout='
    with pytest.raises(TimeoutError, match=limit):
        await run_once(stuck, at=AT, timeout=0.2)


async def test_scheduling_for_fires_on_the_manual_clock() -> None:
    clock = ManualClock(AT - timedelta(seconds=1))
    async with scheduling_for([hourly], clock=clock) as scheduling:
        assert scheduling.config.database_url == "sqlite+aiosqlite:///:memory:"
        await clock.advance(1)
        [run] = await wait_for_runs(scheduling, "hourly")
    assert (run.scheduled_at, run.trigger, run.status) == (AT, "self", RunStatus.SUCCEEDED)


async def test_scheduling_for_takes_the_handlers_run_time_schedules_name() -> None:
    seen: list[dict[str, Any]] = []

    @define_handler(name="tenantReport")
    async def tenant_report(ctx: ScheduleContext) -> None:
        seen.append(dict(ctx.args))

    clock = ManualClock(AT - timedelta(seconds=1))
    async with scheduling_for([], clock=clock, handlers=[tenant_report]) as scheduling:
        await scheduling.put_schedule(
            "report.acme", cron="0 * * * *", timezone="UTC", handler="tenantReport",
            args={"tenant": "acme"},
        )  # fmt: skip
        await clock.advance(1)
        [run] = await wait_for_runs(scheduling, "report.acme")
    assert (run.scheduled_at, run.status, seen) == (AT, RunStatus.SUCCEEDED, [{"tenant": "acme"}])


def test_the_plugin_is_registered_by_its_entry_point(pytestconfig: pytest.Config) -> None:
    plugin = pytestconfig.pluginmanager.get_plugin("voltro")
    assert plugin is not None and plugin.__name__ == "fastapi_voltro_schedules.pytest_plugin"


async def test_the_fixtures_share_one_clock(
    voltro_scheduling: Any, voltro_clock: ManualClock
) -> None:
    async with voltro_scheduling([hourly]) as scheduling:
        assert scheduling.clock is voltro_clock
        await voltro_clock.advance(3600)
        [run] = await wait_for_runs(scheduling, "hourly")
    assert run.scheduled_at == datetime(2026, 1, 1, 1, tzinfo=UTC)
