"""CronSpec: parsing, validation messages, the Vixie day rule and the occurrence queries.

DST behaviour is in ``test_cron_dst.py``; the comparison with cronsim in
``test_cron_property.py``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from fastapi_voltro_schedules.cron import CronSpec
from fastapi_voltro_schedules.errors import InvalidCronError, ScheduleDefinitionError


def Z(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def prefix(expr: str, tz: str = "UTC") -> str:
    return f'invalid cron expression "{expr}" (tz="{tz}") — '


# --------------------------------------------------------------------------- parse errors

ERRORS = [
    ("0 25 * * *", "hour value 25 is out of range 0–23"),
    ("60 * * * *", "minute value 60 is out of range 0–59"),
    ("60 * * * * *", "second value 60 is out of range 0–59"),
    ("0 0 32 * *", "day-of-month value 32 is out of range 1–31"),
    ("0 0 0 * *", "day-of-month value 0 is out of range 1–31"),
    ("0 0 * 13 *", "month value 13 is out of range 1–12"),
    ("0 0 * * 8", "day-of-week value 8 is out of range 0–7 (0 and 7 are both Sunday)"),
    ("0 0 * * 1-9", "day-of-week value 9 is out of range 0–7 (0 and 7 are both Sunday)"),
    (
        "1 2 3 4 5 6 7",
        "expected 5 fields (minute hour day month weekday) or 6 (second first), got 7",
    ),
    ("0 0 * *", "expected 5 fields (minute hour day month weekday) or 6 (second first), got 4"),
    (
        "",
        "the expression is empty — write five fields (minute hour day month weekday), "
        'e.g. "0 9 * * *"',
    ),
    (
        "0 0 ? * *",
        'day-of-month field "?" uses "?", a Quartz extension that is not supported — '
        "write * instead",
    ),
    (
        "H 0 * * *",
        'minute field "H" uses "H" (hashed value), a Jenkins extension that is not supported — '
        "pick a fixed value",
    ),
    (
        "H(0-29) 0 * * *",
        'minute field "H(0-29)" uses "H" (hashed value), a Jenkins extension that is not '
        "supported — pick a fixed value",
    ),
    (
        "*/0 * * * *",
        "minute step 0 is invalid — a step must be at least 1",
    ),
    (
        "0 */25 * * *",
        'hour step 25 in "*/25" is larger than the field\'s range 0–23 — use a step of at most 24',
    ),
    (
        "*/x * * * *",
        'minute step "x" in "*/x" is not a number — write e.g. */15',
    ),
    (
        "0 22-2 * * *",
        'hour range "22-2" runs backwards — cron ranges do not wrap around; write it as two '
        "ranges, e.g. 22-23,0-2",
    ),
    (
        "0 0 * * FRI-SUN",
        'day-of-week range "FRI-SUN" runs backwards — cron ranges do not wrap around; write '
        "FRI-7 (7 is Sunday too)",
    ),
    (
        # the hint used to drop the step ("4-12,1-3": every month from April)
        "0 0 * APR-MAR/3 *",
        'month range "APR-MAR/3" runs backwards — cron ranges do not wrap around; write it as '
        "two ranges that keep the step, e.g. 4-12/3,1-3/3 (4,7,10,1)",
    ),
    (
        "0 0 * APR-MAR/5 *",
        'month range "APR-MAR/5" runs backwards — cron ranges do not wrap around; write it as '
        "two ranges that keep the step, e.g. 4-12/5,2-3/5 (4,9,2)",
    ),
    (
        "0 22-2/3 * * *",
        'hour range "22-2/3" runs backwards — cron ranges do not wrap around; write it as two '
        "ranges that keep the step, e.g. 22-23/3,1-2/3 (22,1)",
    ),
    (
        "0 0 * NOV-JAN/4 *",
        'month range "NOV-JAN/4" runs backwards — cron ranges do not wrap around; write '
        "11-12/4 (11): the step does not reach past the wrap",
    ),
    (
        "0 0 * * SAT-MON/2",
        'day-of-week range "SAT-MON/2" runs backwards — cron ranges do not wrap around; write '
        "it as two ranges that keep the step, e.g. 6,1",
    ),
    (
        "0 0 * * FRI-SUN/2",
        'day-of-week range "FRI-SUN/2" runs backwards — cron ranges do not wrap around; write '
        "FRI-7/2 (7 is Sunday too)",
    ),
    (
        "0 0 12 * * 2026",
        "day-of-week value 2026 is out of range 0–7 (0 and 7 are both Sunday) — \"2026\" looks "
        "like a year, but six fields are second minute hour day month weekday (the seconds "
        'come first) and there is no year field: drop the year, e.g. "0 0 12 * *"',
    ),
    (
        "0 30 9 1 * 1970-2099",
        "day-of-week value 1970 is out of range 0–7 (0 and 7 are both Sunday) — \"1970-2099\" "
        "looks like a year, but six fields are second minute hour day month weekday (the "
        'seconds come first) and there is no year field: drop the year, e.g. "0 30 9 1 *"',
    ),
    (
        "0 0 * * 2026",  # five fields: no year hint, the field is plainly day-of-week
        "day-of-week value 2026 is out of range 0–7 (0 and 7 are both Sunday)",
    ),
    (
        "0\u00a00 * * *",
        "U+00A0 NO-BREAK SPACE at position 1 is not allowed — a cron expression is plain ASCII: "
        "separate the fields with ordinary spaces and write values with the digits 0-9 (this "
        "whitespace usually comes from a copy-paste)",
    ),
    (
        "\u0663 0 * * *",
        "U+0663 ARABIC-INDIC DIGIT THREE at position 0 is not allowed — a cron expression is "
        "plain ASCII: separate the fields with ordinary spaces and write values with the digits "
        "0-9 (this character usually comes from a copy-paste)",
    ),
    (
        "abc * * * *",
        'minute field "abc": "abc" is not a number — use a value, a range (1-5), a list (1,3,5) '
        "or a step (*/15)",
    ),
    (
        "0 0 * JANUARY *",
        'month field "JANUARY": "JANUARY" is not a number or a month name (JAN–DEC) — use a '
        "value, a range (1-5), a list (1,3,5) or a step (*/15)",
    ),
    (
        "0 0 * * JUL",
        'day-of-week field "JUL": "JUL" is not a number or a day name (SUN–SAT) — use a value, '
        "a range (1-5), a list (1,3,5) or a step (*/15)",
    ),
    (
        "0 MON * * *",
        'hour field "MON": "MON" is not a number — use a value, a range (1-5), a list (1,3,5) '
        "or a step (*/15)",
    ),
    (
        "0 0 1,,2 * *",
        'day-of-month field "1,,2" has an empty list item — remove the extra comma',
    ),
    (
        "0 0 1- * *",
        'day-of-month field "1-" has an empty value — write a number, a range (1-5), a list '
        "(1,3,5) or a step (*/15)",
    ),
    (
        "-5 * * * *",
        'minute field "-5" has an empty value — write a number, a range (1-5), a list (1,3,5) '
        "or a step (*/15)",
    ),
    ("*/5/2 * * * *", 'minute field "*/5/2": "*/5/2" has two steps — write one, e.g. */15'),
    ("0 0 1-2-3 * *", 'day-of-month field "1-2-3": "1-2-3" is not a range — write a-b'),
    (
        "0 0 30 2 *",
        "day-of-month 30 never occurs in February — the schedule would never fire",
    ),
    (
        "0 0 31 4,jun *",
        "day-of-month 31 never occurs in April or June — the schedule would never fire",
    ),
    (
        "@reboot",
        "@reboot is not a schedule — run start-up work in the app's lifespan instead",
    ),
    (
        "@every 5m",
        "a macro (@daily, …) must be the whole expression — write either the macro or the fields",
    ),
    (
        "@fortnightly",
        'unknown macro "@fortnightly" — use @yearly, @annually, @monthly, @weekly, @daily, '
        "@midnight or @hourly, or write the five fields",
    ),
]


@pytest.mark.parametrize(
    ("expr", "why"),
    ERRORS,
    ids=[e.encode("unicode_escape").decode() or "<empty>" for e, _ in ERRORS],
)
def test_invalid_expressions_say_why(expr: str, why: str) -> None:
    with pytest.raises(InvalidCronError) as info:
        CronSpec.parse(expr, "UTC")
    assert str(info.value) == prefix(expr) + why
    assert isinstance(info.value, ScheduleDefinitionError)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("char", "label"),
    [
        ("\u00a0", "U+00A0 NO-BREAK SPACE"),
        ("\u3000", "U+3000 IDEOGRAPHIC SPACE"),
        ("\u2003", "U+2003 EM SPACE"),
        ("\u0085", "U+0085 (a control character)"),
        ("\x1f", "U+001F (a control character)"),  # str.split() separates on it too
        ("\x00", "U+0000 (a control character)"),
    ],
)
def test_non_ascii_whitespace_is_not_a_separator(char: str, label: str) -> None:
    # Each of these split the fields before: "0\u00a09 * * *" parsed as "0 9 * * *".
    expr = f"0 9{char}* * *"
    with pytest.raises(InvalidCronError) as info:
        CronSpec.parse(expr, "UTC")
    assert f"{label} at position 3 is not allowed" in str(info.value)
    # ASCII whitespace still separates (a tab, a trailing newline from a file).
    assert CronSpec.parse("0\t9 * * *\n", "UTC").next_occurrence(
        Z("2026-01-01T00:00:00Z")
    ) == Z("2026-01-01T09:00:00Z")


def test_unknown_timezone() -> None:
    with pytest.raises(InvalidCronError) as info:
        CronSpec.parse("0 0 * * *", "Mars/Base")
    assert str(info.value) == (
        prefix("0 0 * * *", "Mars/Base")
        + 'unknown timezone "Mars/Base" — use an IANA name such as "Europe/Berlin"'
    )


def test_timezone_with_wrong_case_gets_a_suggestion() -> None:
    with pytest.raises(InvalidCronError) as info:
        CronSpec.parse("0 0 * * *", "europe/berlin")
    assert str(info.value).endswith(
        'unknown timezone "europe/berlin" — did you mean "Europe/Berlin"?'
    )


@pytest.mark.parametrize("tz", ["", "Europe", "../etc/passwd", "/etc/localtime"])
def test_malformed_timezones(tz: str) -> None:
    with pytest.raises(InvalidCronError, match="timezone"):
        CronSpec.parse("0 0 * * *", tz)


def test_the_define_schedule_prefix_composes() -> None:
    # define_schedule prefixes `define_schedule("name"): ` — the seed's full shape.
    with pytest.raises(InvalidCronError) as info:
        CronSpec.parse("0 25 * * *", "UTC")
    assert f'define_schedule("dailyDigest"): {info.value}' == (
        'define_schedule("dailyDigest"): invalid cron expression "0 25 * * *" (tz="UTC") — '
        "hour value 25 is out of range 0–23"
    )


# --------------------------------------------------------------------------- accepted forms


def first(expr: str, after: str = "2026-01-01T00:00:00Z", n: int = 5, tz: str = "UTC") -> list[str]:
    spec = CronSpec.parse(expr, tz)
    out, cursor = [], Z(after)
    for _ in range(n):
        cursor = spec.next_occurrence(cursor)
        out.append(cursor.strftime("%Y-%m-%dT%H:%M:%SZ"))
    return out


def test_five_and_six_fields() -> None:
    five = CronSpec.parse("*/15 * * * *", "UTC")
    six = CronSpec.parse("*/15 * * * * *", "UTC")
    assert not five.has_seconds
    assert six.has_seconds
    assert first("*/15 * * * *", n=3) == [
        "2026-01-01T00:15:00Z",
        "2026-01-01T00:30:00Z",
        "2026-01-01T00:45:00Z",
    ]
    assert first("*/15 * * * * *", n=3) == [
        "2026-01-01T00:00:15Z",
        "2026-01-01T00:00:30Z",
        "2026-01-01T00:00:45Z",
    ]
    assert first("30 0 9 * * *", n=2) == ["2026-01-01T09:00:30Z", "2026-01-02T09:00:30Z"]


def test_extra_whitespace_is_fine_and_expression_kept_verbatim() -> None:
    spec = CronSpec.parse("  0   9 * *\t*  ", "Europe/Berlin")
    assert spec.expression == "  0   9 * *\t*  "
    assert spec.timezone == "Europe/Berlin"
    assert spec.zone == ZoneInfo("Europe/Berlin")
    assert first("  0   9 * *\t*  ", n=1) == ["2026-01-01T09:00:00Z"]


def test_names_any_case() -> None:
    # 2026-01-01 is a Thursday.
    assert first("0 0 * * mon,Wed,FRI", n=3) == [
        "2026-01-02T00:00:00Z",
        "2026-01-05T00:00:00Z",
        "2026-01-07T00:00:00Z",
    ]
    assert first("0 0 1 feb-Apr,DEC *", n=4) == [
        "2026-02-01T00:00:00Z",
        "2026-03-01T00:00:00Z",
        "2026-04-01T00:00:00Z",
        "2026-12-01T00:00:00Z",
    ]
    assert first("0 0 * * SAT-7", n=2) == [
        "2026-01-03T00:00:00Z",
        "2026-01-04T00:00:00Z",
    ]


def test_sunday_is_0_and_7() -> None:
    assert first("0 0 * * 0", n=2) == first("0 0 * * 7", n=2) == first("0 0 * * SUN", n=2)
    assert first("0 0 * * 0", n=1) == ["2026-01-04T00:00:00Z"]
    assert first("0 0 * * 5-7", n=3) == [
        "2026-01-02T00:00:00Z",
        "2026-01-03T00:00:00Z",
        "2026-01-04T00:00:00Z",
    ]


@pytest.mark.parametrize(
    ("macro", "equivalent"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
        ("@DAILY", "0 0 * * *"),
    ],
)
def test_macros(macro: str, equivalent: str) -> None:
    spec = CronSpec.parse(macro, "UTC")
    assert spec.expression == macro
    assert not spec.has_seconds
    assert spec.is_wildcard == CronSpec.parse(equivalent, "UTC").is_wildcard
    assert first(macro, after="2026-05-05T05:05:05Z") == first(
        equivalent, after="2026-05-05T05:05:05Z"
    )


def test_step_forms() -> None:
    assert first("*/20 0 * * *", n=4) == [
        "2026-01-01T00:20:00Z",
        "2026-01-01T00:40:00Z",
        "2026-01-02T00:00:00Z",
        "2026-01-02T00:20:00Z",
    ]
    assert first("1-30/10 0 * * *", n=4) == [
        "2026-01-01T00:01:00Z",
        "2026-01-01T00:11:00Z",
        "2026-01-01T00:21:00Z",
        "2026-01-02T00:01:00Z",
    ]
    # a/n = from a to the field's maximum, every n.
    assert first("5/20 0 * * *", n=4) == [
        "2026-01-01T00:05:00Z",
        "2026-01-01T00:25:00Z",
        "2026-01-01T00:45:00Z",
        "2026-01-02T00:05:00Z",
    ]
    assert first("0 0 */10 * *", n=4) == [
        "2026-01-11T00:00:00Z",
        "2026-01-21T00:00:00Z",
        "2026-01-31T00:00:00Z",
        "2026-02-01T00:00:00Z",
    ]
    # lists mixing all of them
    assert first("0,10-12,50/5 0 * * *", n=7) == [
        "2026-01-01T00:10:00Z",
        "2026-01-01T00:11:00Z",
        "2026-01-01T00:12:00Z",
        "2026-01-01T00:50:00Z",
        "2026-01-01T00:55:00Z",
        "2026-01-02T00:00:00Z",
        "2026-01-02T00:10:00Z",
    ]
    assert first("*/60 * * * *", n=2) == ["2026-01-01T01:00:00Z", "2026-01-01T02:00:00Z"]


def test_is_wildcard_follows_cronie() -> None:
    wild = ["* * * * *", "*/5 3 * * *", "0 * * * *", "0 */2 * * *", "0 0 * * * *", "@hourly"]
    fixed = ["0 3 * * *", "0-59 3 * * *", "0,30 2 * * *", "30 1-3 * * *", "* 0 3 * * *", "@daily"]
    assert all(CronSpec.parse(e, "UTC").is_wildcard for e in wild)
    # The seconds field does not change the kind: "* 0 3 * * *" is fixed-time.
    assert not any(CronSpec.parse(e, "UTC").is_wildcard for e in fixed)


# --------------------------------------------------------------------------- Vixie day rule


def test_vixie_both_restricted_means_or() -> None:
    # "0 0 1 * 1": the 1st of the month OR any Monday. Jan 2026: Thu 1st, Mondays 5, 12, …
    assert first("0 0 1 * 1", after="2025-12-31T12:00:00Z", n=4) == [
        "2026-01-01T00:00:00Z",
        "2026-01-05T00:00:00Z",
        "2026-01-12T00:00:00Z",
        "2026-01-19T00:00:00Z",
    ]


def test_vixie_star_step_day_means_and() -> None:
    # "0 0 */2 * 1": day field starts with '*', so odd days AND Monday (croniter >= 6.1 ORs).
    assert first("0 0 */2 * 1", after="2025-12-31T12:00:00Z", n=4) == [
        "2026-01-05T00:00:00Z",
        "2026-01-19T00:00:00Z",
        "2026-02-09T00:00:00Z",
        "2026-02-23T00:00:00Z",
    ]


def test_vixie_star_day_only_mondays() -> None:
    assert first("0 0 * * 1", after="2025-12-31T12:00:00Z", n=3) == [
        "2026-01-05T00:00:00Z",
        "2026-01-12T00:00:00Z",
        "2026-01-19T00:00:00Z",
    ]
    # and the dom-only form: the 13th, whatever the weekday
    assert first("0 0 13 * *", n=2) == ["2026-01-13T00:00:00Z", "2026-02-13T00:00:00Z"]


def test_day_31_skips_short_months_and_feb_29_waits_for_a_leap_year() -> None:
    assert first("0 0 31 * *", n=3) == [
        "2026-01-31T00:00:00Z",
        "2026-03-31T00:00:00Z",
        "2026-05-31T00:00:00Z",
    ]
    assert first("0 0 29 2 *", n=2) == ["2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"]
    # Feb 30 with a weekday is fine under OR: every Monday in February.
    assert first("0 0 30 2 1", n=1) == ["2026-02-02T00:00:00Z"]


# --------------------------------------------------------------------------- queries


def test_next_is_strictly_after_and_previous_is_at_or_before() -> None:
    spec = CronSpec.parse("0 9 * * *", "UTC")
    nine = Z("2026-05-04T09:00:00Z")
    assert spec.next_occurrence(nine) == Z("2026-05-05T09:00:00Z")
    assert spec.next_occurrence(nine - timedelta(microseconds=1)) == nine
    assert spec.previous_occurrence(nine) == nine
    assert spec.previous_occurrence(nine - timedelta(microseconds=1)) == Z("2026-05-03T09:00:00Z")


def test_any_aware_input_zone_and_utc_output() -> None:
    spec = CronSpec.parse("0 9 * * *", "Europe/Berlin")
    expected = Z("2026-05-04T07:00:00Z")  # 09:00 CEST
    for after in (
        Z("2026-05-04T06:00:00Z"),
        datetime(2026, 5, 4, 8, 0, tzinfo=ZoneInfo("Europe/Berlin")),
        datetime(2026, 5, 4, 2, 0, tzinfo=ZoneInfo("America/New_York")),
        datetime(2026, 5, 4, 15, 0, tzinfo=timezone(timedelta(hours=9))),
    ):
        got = spec.next_occurrence(after)
        assert got == expected
        assert got.tzinfo is UTC
    prev = spec.previous_occurrence(datetime(2026, 5, 4, 12, 0, tzinfo=ZoneInfo("Asia/Tokyo")))
    assert prev == Z("2026-05-03T07:00:00Z")
    assert prev is not None and prev.tzinfo is UTC
    assert all(
        o.tzinfo is UTC for o in spec.occurrences(Z("2026-05-01T00:00Z"), Z("2026-05-03T00:00Z"))
    )


def test_naive_inputs_are_rejected() -> None:
    spec = CronSpec.parse("0 9 * * *", "UTC")
    naive = datetime(2026, 5, 4, 9, 0)
    aware = Z("2026-05-04T09:00:00Z")
    with pytest.raises(ValueError, match="naive"):
        spec.next_occurrence(naive)
    with pytest.raises(ValueError, match="naive"):
        spec.previous_occurrence(naive)
    with pytest.raises(ValueError, match="naive"):
        spec.occurrences(naive, aware)
    with pytest.raises(ValueError, match="naive"):
        spec.occurrences(aware, naive)
    with pytest.raises(ValueError, match="naive"):
        spec.iter_occurrences(naive)
    with pytest.raises(ValueError, match="naive"):
        spec.period_at(naive)


def test_occurrences_window_is_start_exclusive_end_inclusive() -> None:
    spec = CronSpec.parse("0 * * * *", "UTC")
    start, end = Z("2026-05-04T01:00:00Z"), Z("2026-05-04T04:00:00Z")
    assert spec.occurrences(start, end) == [
        Z("2026-05-04T02:00:00Z"),
        Z("2026-05-04T03:00:00Z"),
        Z("2026-05-04T04:00:00Z"),
    ]
    assert spec.occurrences(start, start) == []
    assert spec.occurrences(end, start) == []
    assert spec.occurrences(start, start + timedelta(minutes=59)) == []


def test_occurrences_limit() -> None:
    spec = CronSpec.parse("*/5 * * * *", "UTC")
    start, end = Z("2026-05-04T00:00:00Z"), Z("2026-05-05T00:00:00Z")
    everything = spec.occurrences(start, end)
    assert len(everything) == 288
    assert spec.occurrences(start, end, limit=10) == everything[:10]
    # callers detect overflow by asking for cap + 1
    assert len(spec.occurrences(start, end, limit=1001)) == 288
    assert spec.occurrences(start, end, limit=0) == []


def test_iter_occurrences() -> None:
    spec = CronSpec.parse("0 0 * * *", "UTC")
    it = spec.iter_occurrences(Z("2026-01-01T00:00:00Z"))
    assert [next(it) for _ in range(3)] == [
        Z("2026-01-02T00:00:00Z"),
        Z("2026-01-03T00:00:00Z"),
        Z("2026-01-04T00:00:00Z"),
    ]
    bounded = list(spec.iter_occurrences(Z("2026-01-01T00:00:00Z"), Z("2026-01-03T00:00:00Z")))
    assert bounded == [Z("2026-01-02T00:00:00Z"), Z("2026-01-03T00:00:00Z")]


def test_period_of_a_weekday_job_across_the_weekend() -> None:
    spec = CronSpec.parse("0 9 * * 1-5", "UTC")
    # Friday 2026-05-08 09:00 → Monday 2026-05-11 09:00
    assert spec.period_at(Z("2026-05-09T12:00:00Z")) == timedelta(days=3)
    assert spec.period_at(Z("2026-05-08T09:00:00Z")) == timedelta(days=3)  # at the slot
    assert spec.period_at(Z("2026-05-06T12:00:00Z")) == timedelta(days=1)


def test_previous_looks_back_a_whole_gregorian_cycle() -> None:
    leap = CronSpec.parse("0 0 29 2 *", "UTC")
    assert leap.previous_occurrence(Z("2024-02-28T00:00:00Z")) == Z("2020-02-29T00:00:00Z")
    assert leap.previous_occurrence(Z("2020-02-28T00:00:00Z")) == Z("2016-02-29T00:00:00Z")
    # 1 February falling on a Monday: 2010, 2016, 2021, 2027. It used to look back five years
    # only (None for the last two); now 400 (see tests/test_cron_rare.py).
    rare = CronSpec.parse("0 0 */31 2 1", "UTC")
    assert rare.previous_occurrence(Z("2026-06-01T00:00:00Z")) == Z("2021-02-01T00:00:00Z")
    assert rare.previous_occurrence(Z("2021-01-01T00:00:00Z")) == Z("2016-02-01T00:00:00Z")
    assert rare.previous_occurrence(Z("2016-01-01T00:00:00Z")) == Z("2010-02-01T00:00:00Z")
    assert rare.previous_occurrence(Z("2027-01-01T00:00:00Z")) == Z("2021-02-01T00:00:00Z")
    assert rare.next_occurrence(Z("2021-02-02T00:00:00Z")) == Z("2027-02-01T00:00:00Z")


def test_period_when_nothing_came_before() -> None:
    # No earlier occurrence (only near year 1): the interval between the next two.
    rare = CronSpec.parse("0 0 */31 2 1", "UTC")
    at = datetime(1, 1, 15, tzinfo=UTC)
    assert rare.previous_occurrence(at) is None
    first_two = rare.occurrences(at, datetime(40, 1, 1, tzinfo=UTC), limit=2)
    assert rare.period_at(at) == first_two[1] - first_two[0]
    yearly = CronSpec.parse("0 0 1 1 *", "UTC")
    assert yearly.period_at(Z("2026-06-01T00:00:00Z")) == timedelta(days=365)


def test_year_and_month_rollover() -> None:
    assert first("59 23 31 12 *", after="2026-12-31T23:59:00Z", n=1) == ["2027-12-31T23:59:00Z"]
    assert first("0 0 1 * *", after="2026-12-15T00:00:00Z", n=2) == [
        "2027-01-01T00:00:00Z",
        "2027-02-01T00:00:00Z",
    ]
    spec = CronSpec.parse("59 59 23 31 12 *", "UTC")
    assert spec.previous_occurrence(Z("2027-01-01T00:00:00Z")) == Z("2026-12-31T23:59:59Z")


def test_microseconds_are_handled() -> None:
    spec = CronSpec.parse("* * * * * *", "UTC")
    t = Z("2026-05-04T09:00:00.500000Z")
    assert spec.next_occurrence(t) == Z("2026-05-04T09:00:01Z")
    assert spec.previous_occurrence(t) == Z("2026-05-04T09:00:00Z")


# --------------------------------------------------------------------------- cache


def test_parse_is_cached_and_shared() -> None:
    a = CronSpec.parse("0 2 * * *", "Europe/Berlin")
    b = CronSpec.parse("0 2 * * *", "Europe/Berlin")
    assert a is b
    assert CronSpec.parse("0 2 * * *", "UTC") is not a
    assert CronSpec.parse("0 2  * * *", "Europe/Berlin") is not a  # verbatim key
    assert repr(a) == "CronSpec('0 2 * * *', 'Europe/Berlin')"


def test_errors_are_not_cached_as_specs() -> None:
    for _ in range(2):
        with pytest.raises(InvalidCronError):
            CronSpec.parse("0 25 * * *", "UTC")
