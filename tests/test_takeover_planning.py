"""``planning.plan_takeover`` as a pure rule, by a table: what a ``cluster`` replica that just
took a schedule over catches up (issue 30: the planner moved out of the effectful catch-up
room, beside the other pure planners)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fastapi_voltro_schedules.enums import BackfillPolicy
from fastapi_voltro_schedules.planning import TAKEOVER_REACH, plan_takeover

BOUNDARY = datetime(2026, 6, 1, 12, 0, 30, tzinfo=UTC)
HANDOVER = timedelta(seconds=3)


def every_10s(after: datetime | None, until: datetime) -> tuple[list[datetime], bool]:
    """A ``*/10 * * * * *`` walk of ``(after, until]`` (``after`` is always given here)."""
    assert after is not None
    at = after.replace(second=after.second - after.second % 10, microsecond=0)
    slots = []
    while (at := at + timedelta(seconds=10)) <= until:
        slots.append(at)
    return slots, False


def s(second: int) -> datetime:
    return BOUNDARY.replace(second=0) + timedelta(seconds=second)


CASES = [
    # (last slot, backfill, versions recorded, fire, missed)
    pytest.param(
        s(0), BackfillPolicy.SKIP, True, [s(30)], [s(10), s(20)], id="skip-handover-fires"
    ),
    pytest.param(s(0), BackfillPolicy.LATEST, True, [s(20), s(30)], [s(10)], id="latest"),
    pytest.param(s(0), BackfillPolicy.ALL, True, [s(10), s(20), s(30)], [], id="all"),
    pytest.param(s(30), BackfillPolicy.ALL, True, [], [], id="nothing-left"),
    # never ran, no versions recorded: only the handover slots (a first boot fires no past slot)
    pytest.param(None, BackfillPolicy.ALL, False, [s(30)], [], id="never-ran-unrecorded"),
]


@pytest.mark.parametrize(("last", "backfill", "recorded", "fire", "missed"), CASES)
def test_plan_takeover_table(
    last: datetime | None,
    backfill: BackfillPolicy,
    recorded: bool,
    fire: list[datetime],
    missed: list[datetime],
) -> None:
    plan = plan_takeover(
        last, BOUNDARY, HANDOVER, backfill=backfill, recorded=recorded, owed=every_10s
    )
    assert (plan.fire, plan.missed) == (fire, missed)


def test_plan_takeover_reaches_back_no_further_than_a_day() -> None:
    asked: list[datetime | None] = []

    def owed(after: datetime | None, until: datetime) -> tuple[list[datetime], bool]:
        asked.append(after)
        return [], False

    last = BOUNDARY - timedelta(days=3)
    plan_takeover(last, BOUNDARY, HANDOVER, backfill=BackfillPolicy.ALL, recorded=True, owed=owed)
    # recorded versions, never ran: the walk starts at the reach, the versions say what is owed
    plan_takeover(None, BOUNDARY, HANDOVER, backfill=BackfillPolicy.ALL, recorded=True, owed=owed)
    assert asked == [BOUNDARY - TAKEOVER_REACH, BOUNDARY - TAKEOVER_REACH]
