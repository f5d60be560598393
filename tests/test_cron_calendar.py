"""Calendar terms in the day fields — ``L``, ``L-3``, ``15W``, ``LW``, ``1#2``, ``5L``/``FRIL``
(docs/time-rules.md "Calendar terms"): what they fire on, the eager errors, the DST rule they
keep, the pure functions agreeing with each other, and a property test against cronsim.

The peer suites' own cases are in ``test_cron_peer_calendar.py``.
"""

from __future__ import annotations

import calendar
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from fastapi_voltro_schedules import define_schedule
from fastapi_voltro_schedules.cron import CronSpec
from fastapi_voltro_schedules.errors import InvalidCronError, ScheduleDefinitionError

START = datetime(2025, 12, 31, 23, tzinfo=UTC)
END = datetime(2026, 12, 31, 12, tzinfo=UTC)


def _days(expr: str, tz: str = "UTC", limit: int = 12) -> list[str]:
    spec = CronSpec.parse(expr, tz)
    return [o.astimezone(spec.zone).date().isoformat() for o in spec.occurrences(START, END, limit)]


@pytest.mark.parametrize(
    ("expr", "first"),
    [
        # L: the last day, leap-aware
        ("0 2 L * *", ["2026-01-31", "2026-02-28", "2026-03-31", "2026-04-30"]),
        ("0 2 L 2 *", ["2026-02-28"]),
        ("0 2 L-3 * *", ["2026-01-28", "2026-02-25", "2026-03-28", "2026-04-27"]),
        ("0 2 L-0 * *", ["2026-01-31", "2026-02-28", "2026-03-31", "2026-04-30"]),
        # L-29: the 2nd of a 31-day month, the 1st of a 30-day one, nothing in February
        ("0 2 L-29 1-4 *", ["2026-01-02", "2026-03-02", "2026-04-01"]),
        # W: nearest weekday, never leaving the month
        ("0 9 15W * *", ["2026-01-15", "2026-02-16", "2026-03-16", "2026-04-15"]),
        ("0 9 15W 8 *", ["2026-08-14"]),  # the 15th is a Saturday
        ("0 9 1W 8 *", ["2026-08-03"]),  # Saturday the 1st: Monday the 3rd, not July 31
        ("0 9 31W 5 *", ["2026-05-29"]),  # Sunday the 31st: Friday the 29th, not June 1
        ("0 9 31W 4 *", ["2026-04-30"]),  # no 31st: the last day (Thursday) stands in
        ("0 9 30W 2 *", ["2026-02-27"]),  # no 30th: Saturday the 28th → Friday the 27th
        ("0 18 LW * *", ["2026-01-30", "2026-02-27", "2026-03-31", "2026-04-30", "2026-05-29"]),
        # ranges to L
        ("0 0 25-L 2 *", ["2026-02-25", "2026-02-26", "2026-02-27", "2026-02-28"]),
        ("0 0 1-L/10 1 *", ["2026-01-01", "2026-01-11", "2026-01-21", "2026-01-31"]),
        # #: the nth weekday
        ("0 9 * * MON#2", ["2026-01-12", "2026-02-09", "2026-03-09", "2026-04-13"]),
        ("0 9 * * 1#5", ["2026-03-30", "2026-06-29", "2026-08-31", "2026-11-30"]),
        ("0 9 * * 0#1", ["2026-01-04", "2026-02-01", "2026-03-01", "2026-04-05"]),
        ("0 9 * * 7#1", ["2026-01-04", "2026-02-01", "2026-03-01", "2026-04-05"]),
        # L in day-of-week: the last such weekday
        ("0 17 * * 5L", ["2026-01-30", "2026-02-27", "2026-03-27", "2026-04-24"]),
        ("0 17 * * FRIL", ["2026-01-30", "2026-02-27", "2026-03-27", "2026-04-24"]),
        ("0 17 * * fril", ["2026-01-30", "2026-02-27", "2026-03-27", "2026-04-24"]),
        ("0 17 * * 0L", ["2026-01-25", "2026-02-22", "2026-03-29", "2026-04-26"]),
        ("0 17 * * 7L", ["2026-01-25", "2026-02-22", "2026-03-29", "2026-04-26"]),
        # lists are unions
        ("0 0 1,L 1-2 *", ["2026-01-01", "2026-01-31", "2026-02-01", "2026-02-28"]),
        ("0 0 15W,L 2 *", ["2026-02-16", "2026-02-28"]),
        ("0 0 * 1 MON#1,FRIL", ["2026-01-05", "2026-01-30"]),
        ("0 0 * 1 5,6#3", ["2026-01-02", "2026-01-09", "2026-01-16", "2026-01-17", "2026-01-23",
                          "2026-01-30"]),
        # the Vixie rule: both fields restricted → OR; one '*'-led → AND
        ("0 0 L 1 5", ["2026-01-02", "2026-01-09", "2026-01-16", "2026-01-23", "2026-01-30",
                       "2026-01-31"]),
        ("0 0 */2 1-3 FRIL", ["2026-02-27", "2026-03-27"]),  # odd days AND the last Friday
        # six fields: the seconds lead, the day terms are the same
        ("30 0 0 L 2 *", ["2026-02-28"]),
    ],
)  # fmt: skip
def test_calendar_terms_fire_on(expr: str, first: list[str]) -> None:
    assert _days(expr, limit=len(first) + 3)[: len(first)] == first
    if len(first) < 4:  # the whole year's list is exactly these
        assert _days(expr, limit=50) == first


ERRORS = [
    ("0 0 32W * *", 'day-of-month field "32W" — day 32 is out of range 1–31'),
    ("0 0 0W * *", 'day-of-month field "0W" — day 0 is out of range 1–31'),
    ("0 0 * * 1#6", '"1#6" — the count after # runs 1–5 (no month has a 6th Monday)'),
    ("0 0 * * 1#0", '"1#0" — the count after # runs 1–5 (1#1 is the first)'),
    ("0 0 L-40 * *", '"L-40" is before the 1st of every month — the offset in L-n runs 0–30'),
    ("0 0 L-31 * *", 'day-of-month field "L-31" is before the 1st of every month'),
    ("0 0 1,L-40 * *", 'day-of-month field "1,L-40": "L-40" is before the 1st'),
    ("0 0 L/2 * *", 'day-of-month field "L/2" puts a step on a calendar term'),
    ("0 0 15W/2 * *", 'day-of-month field "15W/2" puts a step on a calendar term'),
    ("0 0 1-5W * *", '"1-5W" is not a day-of-month term — write L (the last day)'),
    ("0 0 W15 * *", 'day-of-month field "W15" is croniter\'s spelling — write 15W'),
    ("0 0 * * L5", 'day-of-week field "L5" is croniter\'s spelling — write 5L'),
    ("0 0 * * L", '"L" — L alone is ambiguous in day-of-week (Quartz reads it as Saturday)'),
    ("0 0 * * 5L#1", 'day-of-week field "5L#1" mixes # and L'),
    ("0 0 * * 5L-6", '"5L-6" — L takes one weekday and no range or step'),
    ("0 0 * * MON-FRI#1", "# takes one weekday and no range or step: list them instead"),
    ("0 0 * * 1#", 'day-of-week field "1#" needs a weekday and a count'),
    ("0 0 * * #2", 'day-of-week field "#2" needs a weekday and a count'),
    ("0 0 * * 8#1", "day-of-week value 8 is out of range 0–7"),
    ("0 0 * * 8L", "day-of-week value 8 is out of range 0–7"),
    ("0 L * * *", 'hour field "L" uses "L" (last), which only the day fields take'),
    ("0 0 * 1W *", 'month field "1W" uses "W" (the nearest weekday), which only'),
    ("0 0 1#2 * *", 'uses "#" (the nth weekday of the month), which only the day-of-week'),
    ("0 0 L-30 2 *", 'day-of-month "L-30" and day-of-week "*" never name the same day of'),
    ("0 0 */31 * MON#4", '"*/31" and day-of-week "MON#4" never name the same day — the'),
    ("0 0 ? * *", 'day-of-month field "?" uses "?", a Quartz extension that is not supported'),
]


@pytest.mark.parametrize(("expr", "why"), ERRORS, ids=[e for e, _ in ERRORS])
def test_bad_calendar_terms_say_what_is_wrong(expr: str, why: str) -> None:
    with pytest.raises(InvalidCronError) as info:
        CronSpec.parse(expr, "UTC")
    assert str(info.value).startswith(f'invalid cron expression "{expr}" (tz="UTC") — ')
    assert why in str(info.value)


def test_define_schedule_refuses_them_eagerly_with_its_name() -> None:
    with pytest.raises(ScheduleDefinitionError) as info:
        define_schedule(
            name="billing", cron="0 0 32W * *", timezone="UTC", handler=lambda ctx: None
        )
    assert str(info.value).startswith(
        'define_schedule("billing"): invalid cron expression "0 0 32W * *"'
    )
    ok = define_schedule(
        name="billing", cron="0 0 LW * *", timezone="UTC", handler=lambda ctx: None
    )
    assert ok.next_occurrence(START) == datetime(2026, 1, 30, tzinfo=UTC)


# ------------------------------------------------------------------------- DST: the same rule

BERLIN = "Europe/Berlin"


def test_fixed_time_on_a_spring_forward_last_sunday_fires_once_after_the_gap() -> None:
    # 29 March 2026 is March's last Sunday and Berlin's spring-forward night (02:00 → 03:00).
    spec = CronSpec.parse("0,30 2 * 3 0L", BERLIN)
    assert spec.occurrences(START, END) == [datetime(2026, 3, 29, 1, 0, tzinfo=UTC)]  # 03:00 CEST


def test_wildcard_on_a_spring_forward_last_sunday_does_not_fire_in_the_gap() -> None:
    assert CronSpec.parse("*/30 2 * 3,4 0L", BERLIN).occurrences(START, END) == [
        datetime(2026, 4, 26, 0, 0, tzinfo=UTC),  # April's last Sunday, 02:00 CEST
        datetime(2026, 4, 26, 0, 30, tzinfo=UTC),
    ]
    # March's last Sunday is always Berlin's spring-forward night: that one never fires, and
    # says so instead of searching to year 9999.
    with pytest.raises(ValueError, match="no occurrence within 100 years in Europe/Berlin"):
        CronSpec.parse("*/30 2 * 3 0L", BERLIN).next_occurrence(START)


def test_fixed_time_on_a_fall_back_last_sunday_fires_once_wildcard_twice() -> None:
    # 25 October 2026: October's last Sunday, 03:00 CEST → 02:00 CET; 02:xx happens twice.
    fixed = CronSpec.parse("30 2 * 10 SUNL", BERLIN).occurrences(START, END)
    assert fixed == [datetime(2026, 10, 25, 0, 30, tzinfo=UTC)]  # the first pass (CEST)
    wildcard = CronSpec.parse("*/30 2 * 10 SUNL", BERLIN).occurrences(START, END)
    assert wildcard == [
        datetime(2026, 10, 25, 0, 0, tzinfo=UTC),
        datetime(2026, 10, 25, 0, 30, tzinfo=UTC),
        datetime(2026, 10, 25, 1, 0, tzinfo=UTC),
        datetime(2026, 10, 25, 1, 30, tzinfo=UTC),
    ]


def test_new_york_last_day_of_month_keeps_its_wall_time_across_dst() -> None:
    spec = CronSpec.parse("0 23 L * *", "America/New_York")
    walls = [o.astimezone(spec.zone) for o in spec.occurrences(START, END)]
    assert len(walls) == 12
    assert all(w.hour == 23 and w.minute == 0 for w in walls)
    assert {w.utcoffset() for w in walls} == {timedelta(hours=-5), timedelta(hours=-4)}


# ------------------------------------------------------- the pure functions agree with each other


@pytest.mark.parametrize(
    "expr",
    ["0 2 L * *", "0 9 15W * *", "0 18 LW * *", "0 9 * * MON#2", "0 17 * * 5L", "0 0 L-3 2,3 *",
     "0 0 * 2 1#5", "*/30 2 * 10 0L"],
)  # fmt: skip
def test_previous_next_and_occurrences_agree(expr: str) -> None:
    spec = CronSpec.parse(expr, BERLIN)
    every = spec.occurrences(datetime(2015, 1, 1, tzinfo=UTC), datetime(2045, 1, 1, tzinfo=UTC))
    assert every, expr
    for a, b in zip(every, every[1:], strict=False):
        assert spec.next_occurrence(a) == b
        assert spec.previous_occurrence(b - timedelta(seconds=1)) == a
        assert spec.period_at(a + timedelta(seconds=1)) == b - a
        assert list(spec.iter_occurrences(a, b)) == [b]


def test_the_fifth_monday_of_february_recurs_only_with_a_leap_monday_start() -> None:
    spec = CronSpec.parse("0 0 * 2 1#5", "UTC")
    found = spec.occurrences(datetime(2000, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC))
    assert [o.date() for o in found] == [date(2016, 2, 29), date(2044, 2, 29), date(2072, 2, 29)]


# ----------------------------------------------------------------- brute force: every day of it


def _brute(expr_dom: str, expr_dow: str, year: int, month: int) -> list[int]:
    """The day fields read one day at a time, from the definitions in the docs' table."""
    first_weekday, length = calendar.monthrange(year, month)

    def weekday(day: int) -> int:  # cron: Sunday = 0
        return (first_weekday + day) % 7

    def weekday_near(n: int) -> int:
        n = min(n, length)
        w = weekday(n)
        if w == 6:
            return n - 1 if n > 1 else n + 2
        if w == 0:
            return n + 1 if n < length else n - 2
        return n

    def dom_match(day: int, term: str) -> bool:
        if term == "*":
            return True
        if term == "L":
            return day == length
        if term.startswith("L-"):
            return day == length - int(term[2:])
        if term == "LW":
            return day == max(d for d in range(1, length + 1) if weekday(d) not in (0, 6))
        if term.endswith("W"):
            return day == weekday_near(int(term[:-1]))
        return day == int(term)

    def dow_match(day: int, term: str) -> bool:
        if term == "*":
            return True
        if "#" in term:
            w, n = (int(x) for x in term.split("#"))
            return weekday(day) == w % 7 and (day - 1) // 7 + 1 == n
        if term.endswith("L"):
            return weekday(day) == int(term[:-1]) % 7 and day + 7 > length
        return weekday(day) == int(term) % 7

    dom_terms, dow_terms = expr_dom.split(","), expr_dow.split(",")
    both = expr_dom.startswith("*") or expr_dow.startswith("*")
    out = []
    for day in range(1, length + 1):
        a = any(dom_match(day, t) for t in dom_terms)
        b = any(dow_match(day, t) for t in dow_terms)
        if (a and b) if both else (a or b):
            out.append(day)
    return out


_DOM_TERMS = ["L", "LW", "L-1", "L-3", "L-27", "1W", "15W", "28W", "30W", "31W", "1", "15", "31"]
_DOW_TERMS = ["5L", "0L", "7L", "1#1", "1#2", "3#4", "6#5", "0#5", "5", "0"]


def _term_lists(terms: list[str]) -> st.SearchStrategy[str]:
    return st.lists(st.sampled_from(terms), min_size=1, max_size=3, unique=True).map(",".join)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    dom=st.one_of(st.just("*"), _term_lists(_DOM_TERMS)),
    dow=st.one_of(st.just("*"), _term_lists(_DOW_TERMS)),
    year=st.integers(1999, 2101),
)
def test_days_match_a_day_by_day_reading(dom: str, dow: str, year: int) -> None:
    try:
        spec = CronSpec.parse(f"0 12 {dom} * {dow}", "UTC")
    except InvalidCronError:
        assert all(not _brute(dom, dow, y, m) for y in range(2001, 2029) for m in range(1, 13))
        return
    got = spec.occurrences(datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC))
    expected = [
        datetime(year, m, d, 12, tzinfo=UTC)
        for m in range(1, 13)
        for d in _brute(dom, dow, year, m)
    ]
    assert got == expected


# ------------------------------------------------------------------ property test: cronsim


def _cronsim_fixed(expr: str, zone: ZoneInfo, start: datetime, end: datetime) -> list[datetime]:
    out = []
    for r in CronSim(expr, start.astimezone(zone)):
        instant = r.astimezone(UTC)
        if instant > end or len(out) >= 60:
            break
        if instant > start:  # cronsim re-emits first-pass instants from a second pass
            out.append(instant)
    return out


# What cronsim reads: L and LW in day-of-month, nL (numeric) and d#n in day-of-week, in
# lists with plain values.
_DOM_TERM = st.one_of(
    st.sampled_from(["L", "LW"]),
    st.integers(1, 31).map(str),
    st.tuples(st.integers(1, 28), st.integers(1, 3)).map(lambda t: f"{t[0]}-{t[0] + t[1]}"),
)
_DOW_TERM = st.one_of(
    st.tuples(st.integers(0, 7), st.integers(1, 5)).map(lambda t: f"{t[0]}#{t[1]}"),
    st.integers(0, 7).map(lambda d: f"{d}L"),
    st.sampled_from(["MON#1", "FRI#3", "SUN#5"]),
    st.integers(0, 7).map(str),
)
_CRONSIM_DOM = st.one_of(
    st.just("*"), st.lists(_DOM_TERM, min_size=1, max_size=3, unique=True).map(",".join)
)
_CRONSIM_DOW = st.one_of(
    st.just("*"), st.lists(_DOW_TERM, min_size=1, max_size=3, unique=True).map(",".join)
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    minute=st.sampled_from(["0", "30", "0,30", "15-45/15", "*/20"]),
    hour=st.sampled_from(["0", "2", "1-3", "23", "*/6", "*"]),
    dom=_CRONSIM_DOM,
    month=st.sampled_from(["*", "2", "3", "10", "3,10", "JAN-MAR", "4,6,9,11"]),
    dow=_CRONSIM_DOW,
    tz=st.sampled_from(["UTC", "Europe/Berlin", "America/New_York", "Australia/Sydney"]),
    start_day=st.integers(0, 4 * 365),
    span=st.integers(1, 200),
)
def test_calendar_terms_match_cronsim(
    minute: str, hour: str, dom: str, month: str, dow: str, tz: str, start_day: int, span: int
) -> None:
    expr = f"{minute} {hour} {dom} {month} {dow}"
    wildcard = minute.startswith("*") or hour.startswith("*")
    if wildcard and tz != "UTC":
        tz = "UTC"  # cronsim's wildcard walk has known DST defects (test_cron_property.py)
    try:
        spec = CronSpec.parse(expr, tz)
    except InvalidCronError:
        event("refused: never fires")
        return  # a never-firing combination: cronsim would iterate forever
    event("compared")
    start = datetime(2025, 1, 1, tzinfo=UTC) + timedelta(days=start_day, hours=start_day % 24)
    end = start + timedelta(days=span)
    ours = spec.occurrences(start, end, 60)
    assert ours == _cronsim_fixed(expr, ZoneInfo(tz), start, end), expr
