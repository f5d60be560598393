"""The external snap, as a table: where an arrival lands, or why it is refused. Pure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fastapi_voltro_schedules.cron import CronSpec
from fastapi_voltro_schedules.external import (
    FUTURE_TOLERANCE,
    SnapVerdict,
    closes_at,
    snap,
)

FIVE_MIN = 300_000
A = SnapVerdict.ACCEPTED
OFF = SnapVerdict.OFF_CADENCE
FUT = SnapVerdict.FUTURE
LATE = SnapVerdict.TOO_LATE


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


SNAP_TABLE = [
    # cron, zone, arrival (stated or arrived), now, skew_ms, verdict, scheduled_at
    ("0 * * * *", "UTC", "2026-03-04T09:00:00", None, FIVE_MIN, A, "2026-03-04T09:00:00"),
    ("0 * * * *", "UTC", "2026-03-04T09:00:00.500", None, FIVE_MIN, A, "2026-03-04T09:00:00"),
    ("0 * * * *", "UTC", "2026-03-04T09:04:59.999", None, FIVE_MIN, A, "2026-03-04T09:00:00"),
    # the budget is inclusive: exactly skew late is in, one millisecond more is out
    ("0 * * * *", "UTC", "2026-03-04T09:05:00", None, FIVE_MIN, A, "2026-03-04T09:00:00"),
    ("0 * * * *", "UTC", "2026-03-04T09:05:00.001", None, FIVE_MIN, OFF, None),
    ("0 * * * *", "UTC", "2026-03-04T09:30:00", None, FIVE_MIN, OFF, None),
    # early is not "nearest": 08:59:59 belongs to 08:00, an hour late
    ("0 * * * *", "UTC", "2026-03-04T08:59:59", None, FIVE_MIN, OFF, None),
    # a one-minute cadence: the budget is the period, so a late arrival lands on the newest
    # minute — never back on an older one, whatever the skew
    ("* * * * *", "UTC", "2026-03-04T09:01:30", None, FIVE_MIN, A, "2026-03-04T09:01:00"),
    ("* * * * *", "UTC", "2026-03-04T09:00:59.999", None, FIVE_MIN, A, "2026-03-04T09:00:00"),
    ("* * * * *", "UTC", "2026-03-04T09:00:59.999", None, 3_600_000, A, "2026-03-04T09:00:00"),
    # a small skew on a minute cadence: the skew binds
    ("* * * * *", "UTC", "2026-03-04T09:00:10", None, 10_000, A, "2026-03-04T09:00:00"),
    ("* * * * *", "UTC", "2026-03-04T09:00:10.001", None, 10_000, OFF, None),
    # skew 0: only an exact arrival
    ("0 * * * *", "UTC", "2026-03-04T09:00:00", None, 0, A, "2026-03-04T09:00:00"),
    ("0 * * * *", "UTC", "2026-03-04T09:00:00.001", None, 0, OFF, None),
    # a zone: 09:00 Berlin on a weekday is 08:00 UTC in winter
    ("0 9 * * 1-5", "Europe/Berlin", "2026-03-04T08:03:00", None, FIVE_MIN, A,
     "2026-03-04T08:00:00"),
    # Saturday: the newest occurrence is Friday's
    ("0 9 * * 1-5", "Europe/Berlin", "2026-03-07T08:03:00", None, FIVE_MIN, OFF, None),
    # spring forward (Berlin, 2026-03-29): 02:30 does not exist, the fixed-time job fires at
    # 03:00 CEST = 01:00 UTC, and a CronJob late by 2 minutes snaps there
    ("30 2 * * *", "Europe/Berlin", "2026-03-29T01:02:00", None, FIVE_MIN, A,
     "2026-03-29T01:00:00"),
    # stated times in the future: within the tolerance they are "now" (hosts' clocks differ a
    # little); beyond it they are refused even when they would snap to a past occurrence
    ("0 * * * *", "UTC", "2026-03-04T09:00:00", "2026-03-04T08:59:59.500", FIVE_MIN, A,
     "2026-03-04T09:00:00"),
    ("0 * * * *", "UTC", "2026-03-04T09:00:02", "2026-03-04T09:00:00", FIVE_MIN, A,
     "2026-03-04T09:00:00"),
    ("0 * * * *", "UTC", "2026-03-04T09:00:02.001", "2026-03-04T09:00:00", FIVE_MIN, FUT, None),
    ("0 * * * *", "UTC", "2026-03-04T09:03:00", "2026-03-04T09:01:00", FIVE_MIN, FUT, None),
    ("0 * * * *", "UTC", "2026-03-04T10:00:00", "2026-03-04T09:00:00", FIVE_MIN, FUT, None),
    # a stated time long past, exactly on an occurrence: too late (it used to be accepted, and
    # a replay after the claims were pruned ran the slot a second time)
    ("0 * * * *", "UTC", "2026-03-04T06:00:00", "2026-03-04T09:00:00", FIVE_MIN, LATE, None),
    # a stated time may be at most the skew before the app's clock, inclusive
    ("0 * * * *", "UTC", "2026-03-04T09:00:00", "2026-03-04T09:05:00", FIVE_MIN, A,
     "2026-03-04T09:00:00"),
    ("0 * * * *", "UTC", "2026-03-04T09:00:00", "2026-03-04T09:05:00.001", FIVE_MIN, LATE, None),
    ("0 * * * *", "UTC", "2026-03-04T09:02:00", "2026-03-04T09:23:00", FIVE_MIN, LATE, None),
    ("* * * * *", "UTC", "2026-03-04T09:00:59", "2026-03-04T09:01:30", FIVE_MIN, A,
     "2026-03-04T09:00:00"),
    ("0 * * * *", "UTC", "2026-03-04T09:00:00", "2026-03-04T09:00:00.001", 0, LATE, None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("cron", "zone", "arrival", "now", "skew_ms", "verdict", "expected"), SNAP_TABLE
)
def test_snap_table(
    cron: str,
    zone: str,
    arrival: str,
    now: str | None,
    skew_ms: int,
    verdict: SnapVerdict,
    expected: str | None,
) -> None:
    at = utc(arrival)
    result = snap(CronSpec.parse(cron, zone), at, utc(now) if now else at, skew_ms)
    assert result.verdict is verdict
    assert result.scheduled_at == (utc(expected) if expected else None)
    assert result.accepted is (verdict is A)
    assert result.reference == at


@pytest.mark.parametrize(
    ("cron", "arrival", "skew_ms", "budget"),
    [
        ("0 * * * *", "2026-03-04T09:10:00", FIVE_MIN, timedelta(minutes=5)),
        ("* * * * *", "2026-03-04T09:00:10", FIVE_MIN, timedelta(minutes=1)),
        ("*/2 * * * *", "2026-03-04T09:00:10", FIVE_MIN, timedelta(minutes=2)),
        ("* * * * *", "2026-03-04T09:00:10", 10_000, timedelta(seconds=10)),
    ],
)
def test_budget_is_min_of_skew_and_period(
    cron: str, arrival: str, skew_ms: int, budget: timedelta
) -> None:
    at = utc(arrival)
    assert snap(CronSpec.parse(cron, "UTC"), at, at, skew_ms).budget == budget


def test_off_cadence_reports_the_newest_occurrence_and_lateness() -> None:
    at = utc("2026-03-04T09:30:00")
    result = snap(CronSpec.parse("0 * * * *", "UTC"), at, at, FIVE_MIN)
    assert result.previous == utc("2026-03-04T09:00:00")
    assert result.lateness == timedelta(minutes=30)


def test_future_tolerance_is_two_seconds() -> None:
    assert FUTURE_TOLERANCE == timedelta(seconds=2)


def test_snap_refuses_naive_datetimes() -> None:
    spec = CronSpec.parse("0 * * * *", "UTC")
    with pytest.raises(ValueError, match="aware"):
        snap(spec, datetime(2026, 3, 4, 9), utc("2026-03-04T09:00:00"), FIVE_MIN)


@pytest.mark.parametrize(
    ("cron", "occurrence", "skew_ms", "closes"),
    [
        ("0 * * * *", "2026-03-04T09:00:00", FIVE_MIN, "2026-03-04T09:05:00"),
        ("* * * * *", "2026-03-04T09:00:00", FIVE_MIN, "2026-03-04T09:01:00"),
        ("* * * * *", "2026-03-04T09:00:00", 10_000, "2026-03-04T09:00:10"),
    ],
)
def test_closes_at(cron: str, occurrence: str, skew_ms: int, closes: str) -> None:
    assert closes_at(CronSpec.parse(cron, "UTC"), utc(occurrence), skew_ms) == utc(closes)
