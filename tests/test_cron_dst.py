"""The DST rule (SPEC §1 "Time rules", docs/time-rules.md), on the 2026 transitions.

Every expected instant below is derived by hand from the zone's offsets, not computed by the
code under test. Each window is the transition day's local 00:00–06:00 (half-open), given in UTC.

Wildcard job (minute or hour field starts with ``*``): fires on the wall clock — both passes of
a repeated hour, nothing inside a skipped one. Fixed-time job (anything else): a repeated time
fires once, on its first pass; missing times fire once, together, at the end of the gap.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from fastapi_voltro_schedules.cron import CronSpec


def Z(text: str) -> datetime:
    """``"2026-03-29T01:00Z"`` → an aware UTC datetime."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


# (zone, local transition day) → UTC window [start, end) = local 00:00 to 06:00 that day.
WINDOWS = {
    # Berlin, Sun 29 Mar: 02:00 CET (+1) → 03:00 CEST (+2) at 01:00Z; 02:00–02:59 missing.
    ("Europe/Berlin", "2026-03-29"): ("2026-03-28T23:00Z", "2026-03-29T04:00Z"),
    # Berlin, Sun 25 Oct: 03:00 CEST (+2) → 02:00 CET (+1) at 01:00Z; 02:00–02:59 twice.
    ("Europe/Berlin", "2026-10-25"): ("2026-10-24T22:00Z", "2026-10-25T05:00Z"),
    # New York, Sun 8 Mar: 02:00 EST (-5) → 03:00 EDT (-4) at 07:00Z; 02:00–02:59 missing.
    ("America/New_York", "2026-03-08"): ("2026-03-08T05:00Z", "2026-03-08T10:00Z"),
    # New York, Sun 1 Nov: 02:00 EDT (-4) → 01:00 EST (-5) at 06:00Z; 01:00–01:59 twice.
    ("America/New_York", "2026-11-01"): ("2026-11-01T04:00Z", "2026-11-01T11:00Z"),
    # Lord Howe, Sun 4 Oct: 02:00 (+10:30) → 02:30 (+11) at 15:30Z the day before.
    ("Australia/Lord_Howe", "2026-10-04"): ("2026-10-03T13:30Z", "2026-10-03T19:00Z"),
    # Lord Howe, Sun 5 Apr: 02:00 (+11) → 01:30 (+10:30) at 15:00Z the day before.
    ("Australia/Lord_Howe", "2026-04-05"): ("2026-04-04T13:00Z", "2026-04-04T19:30Z"),
    # Santiago, Sun 6 Sep: 00:00 (-4) → 01:00 (-3) at 04:00Z; midnight itself is missing.
    # (window: Sat 23:00 -04 to Sun 06:00 -03)
    ("America/Santiago", "2026-09-06"): ("2026-09-06T03:00Z", "2026-09-06T09:00Z"),
    # Santiago, Sun 5 Apr: Sat 24:00 (-3) → Sat 23:00 (-4) at 03:00Z; Sat 23:00–23:59 twice.
    # (window: Sat 22:00 -03 to Sun 02:00 -04)
    ("America/Santiago", "2026-04-05"): ("2026-04-05T01:00Z", "2026-04-05T06:00Z"),
}

BERLIN_SPRING = ("Europe/Berlin", "2026-03-29")
BERLIN_FALL = ("Europe/Berlin", "2026-10-25")
NY_SPRING = ("America/New_York", "2026-03-08")
NY_FALL = ("America/New_York", "2026-11-01")
LH_SPRING = ("Australia/Lord_Howe", "2026-10-04")
LH_FALL = ("Australia/Lord_Howe", "2026-04-05")
SCL_SPRING = ("America/Santiago", "2026-09-06")
SCL_FALL = ("America/Santiago", "2026-04-05")

# (transition, expression, expected UTC instants; comment = local wall time)
TABLE: list[tuple[tuple[str, str], str, list[str]]] = [
    # ---------------------------------------------------------------- Berlin, spring forward
    (BERLIN_SPRING, "30 2 * * *", ["2026-03-29T01:00Z"]),  # 02:30 missing → 03:00 CEST
    (BERLIN_SPRING, "30 1 * * *", ["2026-03-29T00:30Z"]),  # 01:30 CET
    (BERLIN_SPRING, "0,30 2 * * *", ["2026-03-29T01:00Z"]),  # both missing → one run at 03:00
    (BERLIN_SPRING, "*/30 2 * * *", []),  # wildcard: the skipped hour does not fire
    (
        BERLIN_SPRING,
        "30 1-3 * * *",
        ["2026-03-29T00:30Z", "2026-03-29T01:00Z", "2026-03-29T01:30Z"],
    ),  # 01:30 CET, 02:30 → 03:00 CEST, 03:30 CEST
    (
        BERLIN_SPRING,
        "0 * * * *",
        [
            "2026-03-28T23:00Z",  # 00:00 CET
            "2026-03-29T00:00Z",  # 01:00 CET
            "2026-03-29T01:00Z",  # 03:00 CEST (02:00 does not exist)
            "2026-03-29T02:00Z",  # 04:00 CEST
            "2026-03-29T03:00Z",  # 05:00 CEST
        ],
    ),
    (
        BERLIN_SPRING,
        "*/30 * * * *",
        [
            "2026-03-28T23:00Z",  # 00:00 CET
            "2026-03-28T23:30Z",  # 00:30 CET
            "2026-03-29T00:00Z",  # 01:00 CET
            "2026-03-29T00:30Z",  # 01:30 CET
            "2026-03-29T01:00Z",  # 03:00 CEST
            "2026-03-29T01:30Z",  # 03:30 CEST
            "2026-03-29T02:00Z",  # 04:00 CEST
            "2026-03-29T02:30Z",  # 04:30 CEST
            "2026-03-29T03:00Z",  # 05:00 CEST
            "2026-03-29T03:30Z",  # 05:30 CEST
        ],
    ),
    # ---------------------------------------------------------------- Berlin, fall back
    (BERLIN_FALL, "30 2 * * *", ["2026-10-25T00:30Z"]),  # 02:30 CEST only (first pass)
    (BERLIN_FALL, "30 1 * * *", ["2026-10-24T23:30Z"]),  # 01:30 CEST
    (BERLIN_FALL, "0,30 2 * * *", ["2026-10-25T00:00Z", "2026-10-25T00:30Z"]),  # CEST pass
    (
        BERLIN_FALL,
        "*/30 2 * * *",
        [
            "2026-10-25T00:00Z",  # 02:00 CEST
            "2026-10-25T00:30Z",  # 02:30 CEST
            "2026-10-25T01:00Z",  # 02:00 CET
            "2026-10-25T01:30Z",  # 02:30 CET
        ],
    ),
    (
        BERLIN_FALL,
        "30 1-3 * * *",
        ["2026-10-24T23:30Z", "2026-10-25T00:30Z", "2026-10-25T02:30Z"],
    ),  # 01:30 CEST, 02:30 CEST (once), 03:30 CET
    (
        BERLIN_FALL,
        "0 * * * *",
        [
            "2026-10-24T22:00Z",  # 00:00 CEST
            "2026-10-24T23:00Z",  # 01:00 CEST
            "2026-10-25T00:00Z",  # 02:00 CEST
            "2026-10-25T01:00Z",  # 02:00 CET
            "2026-10-25T02:00Z",  # 03:00 CET
            "2026-10-25T03:00Z",  # 04:00 CET
            "2026-10-25T04:00Z",  # 05:00 CET
        ],
    ),
    (
        BERLIN_FALL,
        "*/30 * * * *",
        [
            "2026-10-24T22:00Z",  # 00:00 CEST
            "2026-10-24T22:30Z",
            "2026-10-24T23:00Z",  # 01:00 CEST
            "2026-10-24T23:30Z",
            "2026-10-25T00:00Z",  # 02:00 CEST
            "2026-10-25T00:30Z",  # 02:30 CEST
            "2026-10-25T01:00Z",  # 02:00 CET
            "2026-10-25T01:30Z",  # 02:30 CET
            "2026-10-25T02:00Z",  # 03:00 CET
            "2026-10-25T02:30Z",
            "2026-10-25T03:00Z",  # 04:00 CET
            "2026-10-25T03:30Z",
            "2026-10-25T04:00Z",  # 05:00 CET
            "2026-10-25T04:30Z",
        ],
    ),
    # ---------------------------------------------------------------- New York, spring forward
    (NY_SPRING, "30 2 * * *", ["2026-03-08T07:00Z"]),  # 02:30 missing → 03:00 EDT
    (NY_SPRING, "30 1 * * *", ["2026-03-08T06:30Z"]),  # 01:30 EST
    (NY_SPRING, "0,30 2 * * *", ["2026-03-08T07:00Z"]),  # both missing → one run at 03:00
    (NY_SPRING, "*/30 2 * * *", []),
    (
        NY_SPRING,
        "30 1-3 * * *",
        ["2026-03-08T06:30Z", "2026-03-08T07:00Z", "2026-03-08T07:30Z"],
    ),  # 01:30 EST, 02:30 → 03:00 EDT, 03:30 EDT
    (
        NY_SPRING,
        "0 * * * *",
        [
            "2026-03-08T05:00Z",  # 00:00 EST
            "2026-03-08T06:00Z",  # 01:00 EST
            "2026-03-08T07:00Z",  # 03:00 EDT
            "2026-03-08T08:00Z",  # 04:00 EDT
            "2026-03-08T09:00Z",  # 05:00 EDT
        ],
    ),
    (
        NY_SPRING,
        "*/30 * * * *",
        [
            "2026-03-08T05:00Z",  # 00:00 EST
            "2026-03-08T05:30Z",
            "2026-03-08T06:00Z",  # 01:00 EST
            "2026-03-08T06:30Z",  # 01:30 EST
            "2026-03-08T07:00Z",  # 03:00 EDT
            "2026-03-08T07:30Z",
            "2026-03-08T08:00Z",  # 04:00 EDT
            "2026-03-08T08:30Z",
            "2026-03-08T09:00Z",  # 05:00 EDT
            "2026-03-08T09:30Z",
        ],
    ),
    # ---------------------------------------------------------------- New York, fall back
    # New York repeats 01:00–01:59, so here it is `30 1` that is ambiguous and `30 2` is plain.
    (NY_FALL, "30 2 * * *", ["2026-11-01T07:30Z"]),  # 02:30 EST
    (NY_FALL, "30 1 * * *", ["2026-11-01T05:30Z"]),  # 01:30 EDT only (first pass)
    (NY_FALL, "0,30 2 * * *", ["2026-11-01T07:00Z", "2026-11-01T07:30Z"]),  # 02:00, 02:30 EST
    (NY_FALL, "*/30 2 * * *", ["2026-11-01T07:00Z", "2026-11-01T07:30Z"]),
    (
        NY_FALL,
        "30 1-3 * * *",
        ["2026-11-01T05:30Z", "2026-11-01T07:30Z", "2026-11-01T08:30Z"],
    ),  # 01:30 EDT (once), 02:30 EST, 03:30 EST
    (
        NY_FALL,
        "*/30 1 * * *",
        [
            "2026-11-01T05:00Z",  # 01:00 EDT
            "2026-11-01T05:30Z",  # 01:30 EDT
            "2026-11-01T06:00Z",  # 01:00 EST
            "2026-11-01T06:30Z",  # 01:30 EST
        ],
    ),
    (
        NY_FALL,
        "0 * * * *",
        [
            "2026-11-01T04:00Z",  # 00:00 EDT
            "2026-11-01T05:00Z",  # 01:00 EDT
            "2026-11-01T06:00Z",  # 01:00 EST
            "2026-11-01T07:00Z",  # 02:00 EST
            "2026-11-01T08:00Z",  # 03:00 EST
            "2026-11-01T09:00Z",  # 04:00 EST
            "2026-11-01T10:00Z",  # 05:00 EST
        ],
    ),
    (
        NY_FALL,
        "*/30 * * * *",
        [
            "2026-11-01T04:00Z",  # 00:00 EDT
            "2026-11-01T04:30Z",
            "2026-11-01T05:00Z",  # 01:00 EDT
            "2026-11-01T05:30Z",  # 01:30 EDT
            "2026-11-01T06:00Z",  # 01:00 EST
            "2026-11-01T06:30Z",  # 01:30 EST
            "2026-11-01T07:00Z",  # 02:00 EST
            "2026-11-01T07:30Z",
            "2026-11-01T08:00Z",  # 03:00 EST
            "2026-11-01T08:30Z",
            "2026-11-01T09:00Z",  # 04:00 EST
            "2026-11-01T09:30Z",
            "2026-11-01T10:00Z",  # 05:00 EST
            "2026-11-01T10:30Z",
        ],
    ),
    # ---------------------------------------------------------------- six fields: same rule
    (BERLIN_SPRING, "0 30 2 * * *", ["2026-03-29T01:00Z"]),
    (BERLIN_SPRING, "15,45 0,30 2 * * *", ["2026-03-29T01:00Z"]),  # all missing → one run
    (BERLIN_FALL, "0 30 2 * * *", ["2026-10-25T00:30Z"]),
    (
        BERLIN_FALL,
        "0 */30 2 * * *",
        ["2026-10-25T00:00Z", "2026-10-25T00:30Z", "2026-10-25T01:00Z", "2026-10-25T01:30Z"],
    ),
    # ---------------------------------------------------------------- Lord Howe (30 min)
    (LH_SPRING, "15 2 * * *", ["2026-10-03T15:30Z"]),  # 02:15 missing → 02:30 (+11)
    (LH_SPRING, "0,30 2 * * *", ["2026-10-03T15:30Z"]),  # 02:00 → 02:30, and 02:30 itself
    (LH_SPRING, "*/15 2 * * *", ["2026-10-03T15:30Z", "2026-10-03T15:45Z"]),  # 02:30, 02:45
    (
        LH_SPRING,
        "*/15 3 * * *",
        ["2026-10-03T16:00Z", "2026-10-03T16:15Z", "2026-10-03T16:30Z", "2026-10-03T16:45Z"],
    ),  # 03:00–03:45 (+11) all exist
    (LH_FALL, "45 1 * * *", ["2026-04-04T14:45Z"]),  # 01:45 (+11), first pass only
    (
        LH_FALL,
        "*/15 1 * * *",
        [
            "2026-04-04T14:00Z",  # 01:00 +11
            "2026-04-04T14:15Z",  # 01:15 +11
            "2026-04-04T14:30Z",  # 01:30 +11
            "2026-04-04T14:45Z",  # 01:45 +11
            "2026-04-04T15:00Z",  # 01:30 +10:30
            "2026-04-04T15:15Z",  # 01:45 +10:30
        ],
    ),
    # ---------------------------------------------------------------- Santiago (midnight)
    (SCL_SPRING, "0 0 * * *", ["2026-09-06T04:00Z"]),  # 00:00 missing → 01:00 -03
    (SCL_SPRING, "30 0 * * *", ["2026-09-06T04:00Z"]),  # 00:30 missing → 01:00 -03
    (SCL_SPRING, "*/30 0 * * *", []),
    (
        SCL_SPRING,
        "0 * * * *",
        [
            "2026-09-06T03:00Z",  # Sat 23:00 -04
            "2026-09-06T04:00Z",  # 01:00 -03
            "2026-09-06T05:00Z",  # 02:00 -03
            "2026-09-06T06:00Z",
            "2026-09-06T07:00Z",
            "2026-09-06T08:00Z",  # 05:00 -03
        ],
    ),
    (SCL_FALL, "30 23 * * *", ["2026-04-05T02:30Z"]),  # Sat 23:30 -03, first pass only
    (
        SCL_FALL,
        "*/30 23 * * *",
        ["2026-04-05T02:00Z", "2026-04-05T02:30Z", "2026-04-05T03:00Z", "2026-04-05T03:30Z"],
    ),  # Sat 23:00, 23:30 at -03, then again at -04
    (SCL_FALL, "0 0 * * *", ["2026-04-05T04:00Z"]),  # Sun 00:00 -04
]


@pytest.mark.parametrize(
    ("transition", "expression", "expected"),
    TABLE,
    ids=[f"{t[0]}-{t[1]}-{e}" for t, e, _ in TABLE],
)
def test_transition_table(
    transition: tuple[str, str], expression: str, expected: list[str]
) -> None:
    zone, _ = transition
    start, end = (Z(x) for x in WINDOWS[transition])
    spec = CronSpec.parse(expression, zone)
    one = timedelta(microseconds=1)
    got = spec.occurrences(start - one, end - one)  # (start - 1µs, end - 1µs] = [start, end)
    assert got == [Z(x) for x in expected]
    # The single-step queries walk the same instants.
    walked, cursor = [], start - one
    while (cursor := spec.next_occurrence(cursor)) < end:
        walked.append(cursor)
    assert walked == got
    for a, b in itertools.pairwise(got):
        assert spec.previous_occurrence(b - one) == a
        assert spec.previous_occurrence(b) == b


@pytest.mark.parametrize(
    ("zone", "day_start", "day_end", "hourly", "half_hourly"),
    [
        ("Europe/Berlin", "2026-03-28T23:00Z", "2026-03-29T22:00Z", 23, 46),
        ("Europe/Berlin", "2026-10-24T22:00Z", "2026-10-25T23:00Z", 25, 50),
        ("America/New_York", "2026-03-08T05:00Z", "2026-03-09T04:00Z", 23, 46),
        ("America/New_York", "2026-11-01T04:00Z", "2026-11-02T05:00Z", 25, 50),
    ],
)
def test_whole_transition_day_counts(
    zone: str, day_start: str, day_end: str, hourly: int, half_hourly: int
) -> None:
    one = timedelta(microseconds=1)
    start, end = Z(day_start) - one, Z(day_end) - one
    assert len(CronSpec.parse("0 * * * *", zone).occurrences(start, end)) == hourly
    assert len(CronSpec.parse("*/30 * * * *", zone).occurrences(start, end)) == half_hourly
    # A fixed-time job fires exactly once on the day, whatever the transition did.
    for expr in ("30 2 * * *", "30 1 * * *", "0,30 2 * * *", "0 0 * * *", "59 23 * * *"):
        assert len(CronSpec.parse(expr, zone).occurrences(start, end)) == (
            2 if expr == "0,30 2 * * *" and hourly == 25 else 1
        ), expr


def test_queries_from_inside_a_repeated_hour() -> None:
    fixed = CronSpec.parse("30 2 * * *", "Europe/Berlin")
    wild = CronSpec.parse("*/30 2 * * *", "Europe/Berlin")
    first_pass = Z("2026-10-25T00:45Z")  # 02:45 CEST
    second_pass = Z("2026-10-25T01:45Z")  # 02:45 CET
    # Fixed: the second pass of 02:30 is not an occurrence.
    assert fixed.next_occurrence(Z("2026-10-25T00:30Z")) == Z("2026-10-26T01:30Z")
    assert fixed.next_occurrence(first_pass) == Z("2026-10-26T01:30Z")
    assert fixed.next_occurrence(Z("2026-10-25T01:15Z")) == Z("2026-10-26T01:30Z")
    assert fixed.previous_occurrence(second_pass) == Z("2026-10-25T00:30Z")
    assert fixed.previous_occurrence(Z("2026-10-25T01:35Z")) == Z("2026-10-25T00:30Z")
    # Wildcard: both passes, in UTC order.
    assert wild.next_occurrence(first_pass) == Z("2026-10-25T01:00Z")  # 02:00 CET
    assert wild.next_occurrence(Z("2026-10-25T01:10Z")) == Z("2026-10-25T01:30Z")
    assert wild.next_occurrence(second_pass) == Z("2026-10-26T01:00Z")
    assert wild.previous_occurrence(second_pass) == Z("2026-10-25T01:30Z")
    assert wild.previous_occurrence(Z("2026-10-25T01:10Z")) == Z("2026-10-25T01:00Z")
    assert wild.previous_occurrence(Z("2026-10-25T00:59Z")) == Z("2026-10-25T00:30Z")
    assert wild.previous_occurrence(Z("2026-10-25T03:00Z")) == Z("2026-10-25T01:30Z")
    # Missing times: nothing for the wildcard, the gap's end for the fixed job.
    spring_fixed = CronSpec.parse("30 2 * * *", "Europe/Berlin")
    spring_wild = CronSpec.parse("*/30 2 * * *", "Europe/Berlin")
    assert spring_fixed.previous_occurrence(Z("2026-03-29T01:00Z")) == Z("2026-03-29T01:00Z")
    assert spring_fixed.previous_occurrence(Z("2026-03-29T00:59:59Z")) == Z("2026-03-28T01:30Z")
    assert spring_wild.previous_occurrence(Z("2026-03-29T12:00Z")) == Z("2026-03-28T01:30Z")
    assert spring_wild.next_occurrence(Z("2026-03-28T01:30Z")) == Z("2026-03-30T00:00Z")


def test_period_across_dst() -> None:
    daily = CronSpec.parse("0 9 * * *", "Europe/Berlin")
    # 28 Mar 09:00 CET (08:00Z) → 29 Mar 09:00 CEST (07:00Z): 23 hours.
    assert daily.period_at(Z("2026-03-29T05:00Z")) == timedelta(hours=23)
    # 24 Oct 09:00 CEST (07:00Z) → 25 Oct 09:00 CET (08:00Z): 25 hours.
    assert daily.period_at(Z("2026-10-25T05:00Z")) == timedelta(hours=25)
    assert daily.period_at(Z("2026-06-01T05:00Z")) == timedelta(hours=24)
    # A wildcard hourly job's slot containing the skipped hour is still one real hour long.
    hourly = CronSpec.parse("0 * * * *", "Europe/Berlin")
    assert hourly.period_at(Z("2026-03-29T00:30Z")) == timedelta(hours=1)
    # A fixed job whose missing times collapse onto the gap's end: 01:30 CET → 03:00 CEST.
    both = CronSpec.parse("30 1,2 * * *", "Europe/Berlin")
    assert both.period_at(Z("2026-03-29T00:45Z")) == timedelta(minutes=30)


def test_utc_has_no_transitions() -> None:
    spec = CronSpec.parse("30 2 * * *", "UTC")
    assert spec.occurrences(Z("2026-03-28T12:00Z"), Z("2026-03-30T12:00Z")) == [
        Z("2026-03-29T02:30Z"),
        Z("2026-03-30T02:30Z"),
    ]


def test_the_last_answer_kept_tells_the_two_passes_of_a_repeated_hour_apart() -> None:
    """A spec keeps its last ``next_occurrence`` (schedules sharing a cron ask it the same
    question in a row): 02:30 of the first and of the second pass on the night clocks go back
    compare equal as wall times of one zone, yet are different instants with different next
    occurrences."""
    berlin = ZoneInfo("Europe/Berlin")
    first = datetime(2026, 10, 25, 2, 30, tzinfo=berlin)
    second = first.replace(fold=1)
    assert first == second and first.astimezone(UTC) != second.astimezone(UTC)
    for cron in ("*/15 * * * *", "45 2 * * *"):
        shared = CronSpec.parse(cron, "Europe/Berlin")
        asked = [shared.next_occurrence(first), shared.next_occurrence(second)]
        fresh = [
            CronSpec(cron, "Europe/Berlin").next_occurrence(first),
            CronSpec(cron, "Europe/Berlin").next_occurrence(second),
        ]
        assert asked == fresh, cron
    # the wildcard job: the first pass's 02:45, then the second pass's
    wild = CronSpec.parse("*/15 * * * *", "Europe/Berlin")
    assert wild.next_occurrence(first) == datetime(2026, 10, 25, 0, 45, tzinfo=UTC)
    assert wild.next_occurrence(second) == datetime(2026, 10, 25, 1, 45, tzinfo=UTC)
