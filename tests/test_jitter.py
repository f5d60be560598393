"""``jitter_ms``: a slot fires a deterministic delay after its cron instant; ``scheduled_at``
stays the instant. Driven by the injected clock (SQLite ledger, one process)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from support.running import running, runs_of
from support.timer_passes import TimerPasses
from support.waiting import wait_until

from fastapi_voltro_schedules import ScheduleContext, ScheduleDefinitionError, define_schedule
from fastapi_voltro_schedules.testing import ManualClock

T0 = datetime(2026, 6, 1, 11, 59, 30, tzinfo=UTC)
NOON = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


async def _noop(ctx: ScheduleContext) -> None:
    return None


def test_the_delay_is_a_deterministic_draw_per_schedule_and_slot() -> None:
    a = define_schedule(
        name="warm", cron="* * * * *", timezone="UTC", handler=_noop, jitter_ms=20_000
    )
    again = define_schedule(
        name="warm", cron="* * * * *", timezone="UTC", handler=_noop, jitter_ms=20_000
    )
    slots = [NOON + timedelta(minutes=i) for i in range(50)]
    delays = [a.jitter_at(s) for s in slots]
    # another replica (another Schedule object, another process) draws the same delays
    assert delays == [again.jitter_at(s) for s in slots]
    assert all(timedelta(0) <= d <= timedelta(seconds=20) for d in delays)
    assert len(set(delays)) > 40  # spread, not one constant offset
    # a herd on one cron is spread across the window
    herd = [
        define_schedule(
            name=f"h{i}", cron="* * * * *", timezone="UTC", handler=_noop, jitter_ms=20_000
        ).jitter_at(NOON)
        for i in range(200)
    ]
    assert min(herd) < timedelta(seconds=2) and max(herd) > timedelta(seconds=18)
    plain = define_schedule(name="plain", cron="* * * * *", timezone="UTC", handler=_noop)
    assert plain.jitter_at(NOON) == timedelta(0)
    # the timer fires a slot at slot + its delay; without jitter at the slot itself
    assert [a.fires_at(s) for s in slots] == [s + d for s, d in zip(slots, delays, strict=True)]
    assert plain.fires_at(NOON) is NOON


@pytest.mark.parametrize(
    ("cron", "jitter", "fragment"),
    [
        ("* * * * *", -1, "jitter_ms=-1 must be a non-negative integer"),
        ("* * * * *", 60_000, "shortest gap between occurrences (60000 ms)"),
        ("0 9,10 * * *", 3_600_000, "(3600000 ms)"),
        ("*/5 * * * * *", 5_000, "(5000 ms)"),
    ],
)
def test_a_jitter_that_would_reach_the_next_slot_is_refused(
    cron: str, jitter: int, fragment: str
) -> None:
    with pytest.raises(ScheduleDefinitionError) as err:
        define_schedule(name="j", cron=cron, timezone="UTC", handler=_noop, jitter_ms=jitter)
    assert fragment in str(err.value) and 'define_schedule("j")' in str(err.value)


async def test_the_timer_fires_after_the_delay_with_scheduled_at_the_cron_instant(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[tuple[datetime, datetime]] = []
    passes = TimerPasses(monkeypatch)
    clock = ManualClock(T0)

    @define_schedule(name="spread", cron="* * * * *", timezone="UTC", jitter_ms=30_000)
    async def spread(ctx: ScheduleContext) -> None:
        started.append((ctx.scheduled_at, clock.now()))

    delay = spread.jitter_at(NOON)
    assert delay > timedelta(seconds=1)  # the draw for this (name, slot) is a real delay
    async with running([spread], sqlite_url, clock) as s:
        assert s.next_fire_times()["spread"] == NOON + delay
        await clock.advance(30 + delay.total_seconds() - 0.5)  # just before the delay ends
        await passes.reach(clock.now())  # the timer woke at 12:00 and looked again since
        assert passes.dispatched() == [] and started == []
        await clock.advance(0.5)

        async def fired() -> bool:
            rows = await runs_of(s, "spread")
            return len(rows) == 1 and rows[0].status.terminal

        await wait_until(fired)
        rows = await runs_of(s, "spread")
    assert rows[0].scheduled_at == NOON
    assert started == [(NOON, NOON + delay)]
