"""An app whose schedules are paused and resumed over the inspect API (``test_pauses``,
``test_inspect_typed``): three every-minute schedules on a SQLite ledger and a manual clock."""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi_voltro_schedules import (
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    define_schedule,
)
from fastapi_voltro_schedules.testing import ManualClock

OPERATOR = "operator-token-for-pause-tests"
READ = "viewer-token-for-pause-tests"
TRIGGER = "trigger-token-for-pause-tests"
AUTH = {"Authorization": f"Bearer {OPERATOR}"}
TRIGGER_AUTH = {"Authorization": f"Bearer {TRIGGER}"}
BASE = "/_voltro/inspect/schedules"


def at(minute: int, second: int = 0) -> datetime:
    return datetime(2026, 6, 1, 12, minute, second, tzinfo=UTC)


async def noop(ctx: ScheduleContext) -> None:
    return None


def pause_scheduling(sqlite_url: str, clock: ManualClock) -> Scheduling:
    """``minutely`` (backfill ``all``), ``latest`` (backfill ``latest``) and ``ext``
    (external, missed occurrences recorded), with operator, viewer and trigger tokens."""
    schedules = [
        define_schedule(
            name="minutely", cron="* * * * *", timezone="UTC", handler=noop, backfill="all"
        ),
        define_schedule(
            name="latest", cron="* * * * *", timezone="UTC", handler=noop, backfill="latest"
        ),
        define_schedule(
            name="ext", cron="* * * * *", timezone="UTC", handler=noop, trigger="external"
        ),
    ]
    config = SchedulingConfig(
        database_url=sqlite_url,
        replica_id="pod-1",
        inspect_token=OPERATOR,
        inspect_read_token=READ,
        schedule_trigger_token=TRIGGER,
        external_missed_policy="record",
    )
    return Scheduling(schedules, config=config, clock=clock)
