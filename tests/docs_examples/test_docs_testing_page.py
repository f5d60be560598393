# The examples of docs/testing.md, verbatim (tests/test_docs.py checks the page quotes them).
# Each block between "# --- doc: NAME" and "# --- end" is one ```python block of the page.

# --- doc: direct
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from fastapi_voltro_schedules import ScheduleContext, define_schedule
from fastapi_voltro_schedules.testing import make_context

sent: list[str] = []


@define_schedule(name="dailyDigest", cron="0 9 * * *", timezone="Europe/Berlin")
async def daily_digest(ctx: ScheduleContext) -> None:
    sent.append(f"digest for {ctx.scheduled_at.astimezone(ZoneInfo('Europe/Berlin')):%a %H:%M}")


async def test_the_digest_names_its_slot() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    ctx = make_context(daily_digest, at=datetime(2026, 3, 2, 9, 0, tzinfo=berlin))
    await daily_digest(ctx)  # the Schedule is awaitable with a context: no ledger, no clock
    assert sent == ["digest for Mon 09:00"]
    assert ctx.scheduled_at == datetime(2026, 3, 2, 8, 0, tzinfo=UTC)  # slots are UTC
# --- end

# --- doc: run-once
import anyio

from fastapi_voltro_schedules import RunStatus
from fastapi_voltro_schedules.testing import run_once


@define_schedule(name="export", cron="*/15 * * * *", timezone="UTC")
async def export(ctx: ScheduleContext) -> None:
    raise ConnectionRefusedError("export target refused the connection")


@define_schedule(name="reindex", cron="0 * * * *", timezone="UTC", max_runtime_ms=60_000)
async def reindex(ctx: ScheduleContext) -> None:
    await anyio.sleep(3600)  # hangs


async def test_a_refused_export_is_recorded_failed() -> None:
    run = await run_once(export, at=datetime(2026, 3, 2, 8, 15, tzinfo=UTC))
    assert run.status is RunStatus.FAILED
    assert run.error_tag == "ConnectionRefusedError"
    assert run.error_message == "export target refused the connection"
    assert run.scheduled_at == datetime(2026, 3, 2, 8, 15, tzinfo=UTC)


async def test_the_watchdog_ends_a_hanging_reindex() -> None:
    run = await run_once(reindex, elapse=61)  # the manual clock moves; nobody waits an hour
    assert (run.status, run.error_tag) == (RunStatus.FAILED, "timeout")
# --- end

# --- doc: fixture
from fastapi_voltro_schedules.testing import ManualClock, wait_for_runs


async def test_the_timer_fires_the_digest_at_nine_in_berlin(
    voltro_scheduling, voltro_clock: ManualClock
) -> None:
    sent.clear()
    voltro_clock.set(datetime(2026, 3, 2, 7, 59, 30, tzinfo=UTC))  # 08:59:30 in Berlin
    async with voltro_scheduling([daily_digest]) as scheduling:
        await voltro_clock.advance(29)
        assert sent == []  # 08:59:59: not yet
        await voltro_clock.advance(1)
        [run] = await wait_for_runs(scheduling, "dailyDigest")
    assert run.status is RunStatus.SUCCEEDED and run.trigger == "self"
    assert sent == ["digest for Mon 09:00"]
# --- end
