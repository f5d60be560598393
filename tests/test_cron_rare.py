"""Expressions that fire once in decades: previous_occurrence finds the last firing however
far back it lies (it looked back only five years, so a 29-February-on-a-Sunday schedule had
"no previous occurrence" in 23 years out of 28 and its slot length was wrong)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fastapi_voltro_schedules.cron import CronSpec
from fastapi_voltro_schedules.external import SnapVerdict, snap


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


@pytest.mark.parametrize(
    ("expression", "at", "expected"),
    [
        # Vixie: a '*'-led day field ANDs the two day fields, so this is 29 February that is a
        # Sunday (*/7 of 0-7 is Sunday): 2004, 2032, 2060, 2088, then 2128 (2100 is no leap year)
        ("0 0 29 2 */7", utc(2031, 6, 1), utc(2004, 2, 29)),
        ("0 0 29 2 */7", utc(2127, 12, 31), utc(2088, 2, 29)),
        ("0 0 0 29 2 */7", utc(2031, 6, 1), utc(2004, 2, 29)),  # six fields, same days
        # day 1 or 29 of February, AND a Monday: 2027-02-01, then 2038-02-01 (11 years)
        ("0 0 */28 2 1", utc(2037, 12, 1), utc(2027, 2, 1)),
        # the common path, unchanged
        ("*/5 * * * *", utc(2026, 5, 28, 9, 7, 30), utc(2026, 5, 28, 9, 5)),
    ],
)
def test_previous_occurrence_reaches_back_decades(
    expression: str, at: datetime, expected: datetime
) -> None:
    spec = CronSpec.parse(expression, "UTC")
    assert spec.previous_occurrence(at) == expected
    assert spec.next_occurrence(expected - timedelta(seconds=1)) == expected


def test_rare_expression_in_a_zone_with_dst() -> None:
    spec = CronSpec.parse("30 2 29 2 */7", "America/New_York")  # EST in February
    assert spec.previous_occurrence(utc(2030, 1, 1)) == utc(2004, 2, 29, 7, 30)


def test_period_of_a_28_year_schedule_is_the_gap_between_its_firings() -> None:
    spec = CronSpec.parse("0 0 29 2 */7", "UTC")
    assert spec.period_at(utc(2020, 1, 1)) == utc(2032, 2, 29) - utc(2004, 2, 29)
    # across 2100 (no leap day) the gap is 40 years, not the 28 of the next pair
    assert spec.period_at(utc(2100, 1, 1)) == utc(2128, 2, 29) - utc(2088, 2, 29)


def test_snap_budget_uses_the_real_period() -> None:
    """An arrival years after the 2032 firing is off-cadence, and says which occurrence it
    was late for and by how much (it said "no previous occurrence" before)."""
    spec = CronSpec.parse("0 0 29 2 */7", "UTC")
    late = snap(spec, utc(2040, 3, 1), now=utc(2040, 3, 1), skew_ms=60_000)
    assert late.verdict is SnapVerdict.OFF_CADENCE
    assert late.previous == utc(2032, 2, 29)
    assert late.lateness == utc(2040, 3, 1) - utc(2032, 2, 29)
    on_time = snap(spec, utc(2032, 2, 29, 0, 0, 5), now=utc(2032, 2, 29, 0, 0, 5), skew_ms=60_000)
    assert on_time.accepted and on_time.scheduled_at == utc(2032, 2, 29)


def test_nothing_before_year_one() -> None:
    spec = CronSpec.parse("0 0 29 2 */7", "UTC")
    assert spec.previous_occurrence(utc(3, 1, 1)) is None
