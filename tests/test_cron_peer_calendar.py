"""The peer suites' calendar cases (``L``, ``W``, ``#``), run against ``CronSpec``.

Every test method of croniter's and cronsim's own suites that uses a calendar term is here,
transcribed case by case with its source (croniter 7.0 ``croniter/tests/test_croniter.py``, MIT;
cronsim 2.7 ``tests/test_cronsim.py``, BSD-3-Clause): the expression, the start, and the dates
that suite expects. Each lands in exactly one table:

* ``AGREE_NEXT`` / ``AGREE_PREV`` — we return their dates, as they wrote them.
* ``AGREE_REFUSED`` — they refuse it, and so do we (eagerly, naming the field).
* ``DIFFERENT`` — we answer differently, on purpose. Each row names what they do, what we do,
  and the row of ``docs/time-rules.md`` ("Calendar terms: where the libraries differ") that says
  why; the test checks both our answer and that the docs page carries the expression.

0 wrong dates: no row of theirs expects a date we do not return, except the documented ones.
Their naive datetimes are read as UTC (their suites run without a zone); croniter's
``get_prev`` is strictly before its start, ours is "at or before", so the walk asks one second
earlier. Not here: cases that test only their internal representation of a *non*-calendar
field, croniter's seven-field form (seconds last, a year field: ``test_croniter_range``'s
``0 1 8 1,15,L wed 15,45``, a shape we refuse for every expression) and its hashed ``H``.
"""

from __future__ import annotations

import itertools
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from fastapi_voltro_schedules.cron import CronSpec
from fastapi_voltro_schedules.errors import InvalidCronError

DOCS = Path(__file__).resolve().parents[1] / "docs" / "time-rules.md"
_ONE_SECOND = timedelta(seconds=1)


def d(*parts: int) -> datetime:
    return datetime(*parts)  # naive, as the peer suites write them


def _next(expr: str, start: datetime, count: int) -> list[datetime]:
    spec = CronSpec.parse(expr, "UTC")
    out, cursor = [], start.replace(tzinfo=UTC)
    for _ in range(count):
        cursor = spec.next_occurrence(cursor)
        out.append(cursor.replace(tzinfo=None))
    return out


def _prev(expr: str, start: datetime, count: int) -> list[datetime]:
    spec = CronSpec.parse(expr, "UTC")
    out, cursor = [], start.replace(tzinfo=UTC)
    for _ in range(count):
        found = spec.previous_occurrence(cursor - _ONE_SECOND)  # theirs: strictly before
        assert found is not None
        cursor = found
        out.append(cursor.replace(tzinfo=None))
    return out


CRONITER = "croniter test_croniter.py::"
CRONSIM = "cronsim test_cronsim.py::"

# (source, expression, start, the dates that suite expects next, in order)
AGREE_NEXT: list[tuple[str, str, datetime, list[datetime]]] = [
    (
        CRONITER + "test_nth_weekday",
        "0 0 * * sat#1",
        d(2010, 2, 25),
        [d(2010, 3, 6), d(2010, 4, 3)],
    ),
    (
        CRONITER + "test_nth_weekday",
        "0 0 * * wed#5",
        d(2010, 1, 25),
        [d(2010, 3, 31), d(2010, 6, 30), d(2010, 9, 29)],
    ),
    (
        CRONITER + "test_last_day_of_month",
        "0 0 l * *",
        d(2015, 9, 4),
        [d(2015, 9, 30), d(2015, 10, 31), d(2015, 11, 30), d(2015, 12, 31)],
    ),
    (
        CRONITER + "test_last_day_of_month_with_leap_year",
        "0 0 l * *",
        d(2020, 2, 1),
        [d(2020, 2, 29), d(2020, 3, 31)],
    ),
    (
        CRONITER + "test_last_day_of_month_with_leap_year_century_exception",
        "0 0 l * *",
        d(2100, 2, 1),
        [d(2100, 2, 28), d(2100, 3, 31)],
    ),
    (
        CRONITER + "test_last_day_of_month_with_leap_year_century_exception",
        "0 0 l * *",
        d(2400, 2, 1),
        [d(2400, 2, 29), d(2400, 3, 31)],
    ),
    (
        CRONITER + "test_range_with_uppercase_last_day_of_month",
        "0 0 29-L * *",
        d(2015, 9, 4),
        [d(2015, 9, 29), d(2015, 9, 30)],
    ),
    (
        CRONITER + "test_nearest_weekday_basic",
        "0 9 15W * *",
        d(2024, 1, 1),
        [d(2024, 1, 15, 9), d(2024, 2, 15, 9), d(2024, 3, 15, 9)],
    ),
    (CRONITER + "test_nearest_weekday_saturday", "0 9 15W * *", d(2024, 6, 1), [d(2024, 6, 14, 9)]),
    (CRONITER + "test_nearest_weekday_sunday", "0 9 15W * *", d(2024, 9, 1), [d(2024, 9, 16, 9)]),
    (
        CRONITER + "test_nearest_weekday_first_saturday",
        "0 9 1W * *",
        d(2024, 5, 31),
        [d(2024, 6, 3, 9)],
    ),
    (
        CRONITER + "test_nearest_weekday_last_day_sunday",
        "0 9 31W * *",
        d(2025, 3, 1),
        [d(2025, 3, 31, 9)],
    ),
    (
        CRONITER + "test_nearest_weekday_end_of_month_boundary",
        "0 9 30W * *",
        d(2024, 11, 1),
        [d(2024, 11, 29, 9)],
    ),
    (
        CRONITER + "test_nearest_weekday_end_of_month_boundary",
        "0 9 31W * *",
        d(2024, 11, 1),
        [d(2024, 11, 29, 9)],
    ),
    (
        CRONITER + "test_nearest_weekday_iteration",
        "0 0 1W * *",
        d(2023, 12, 31),
        [d(2024, 1, 1), d(2024, 2, 1), d(2024, 3, 1), d(2024, 4, 1), d(2024, 5, 1), d(2024, 6, 3)],
    ),
    (
        CRONITER + "test_mixdow",
        "1 1 7,14,21,L * *",
        d(2018, 10, 1),
        [d(2018, 10, 7, 1, 1), d(2018, 10, 14, 1, 1), d(2018, 10, 21, 1, 1), d(2018, 10, 31, 1, 1)],
    ),
    (
        CRONITER + "test_lwom_mixup_firstlast_sat",
        "0 0 * * 6#1",
        d(2021, 3, 1),
        [d(2021, 3, 6), d(2021, 4, 3), d(2021, 5, 1)],
    ),
    (
        CRONITER + "test_lwom_mixup_firstlast_sat",
        "0 0 * * 6#1,6L",
        d(2021, 3, 1),
        sorted(
            [
                d(2021, 3, 6),
                d(2021, 4, 3),
                d(2021, 5, 1),
                d(2021, 3, 27),
                d(2021, 4, 24),
                d(2021, 5, 29),
            ]
        ),
    ),
    (
        CRONITER + "test_lwom_mixup_4th_and_last",
        "0 0 * * 1#4",
        d(2021, 11, 1),
        [d(2021, 11, 22), d(2021, 12, 27), d(2022, 1, 24)],
    ),
    (CRONITER + "test_issue_142_dow", "35 * 1-l/8 * *", d(2020, 1, 2), [d(2020, 1, 9, 0, 35)]),
    (CRONITER + "test_issue_142_dow", "35 * 1-l/8 * *", d(2020, 1, 10), [d(2020, 1, 17, 0, 35)]),
    (CRONITER + "test_issue_142_dow", "35 * 1-l/8 * *", d(2020, 1, 18), [d(2020, 1, 25, 0, 35)]),
    (CRONITER + "test_issue_142_dow", "35 * 1-l/8 * *", d(2020, 1, 26), [d(2020, 2, 1, 0, 35)]),
    (
        CRONSIM + "TestIterator.test_it_handles_l",
        "1 1 L * *",
        d(2020, 1, 1),
        [d(2020, 1, 31, 1, 1)],
    ),
    (
        CRONSIM + "TestIterator.test_it_handles_lw",
        "1 1 LW 5 *",
        d(2020, 1, 1),
        [d(2020, 5, 29, 1, 1)],
    ),
    (
        CRONSIM + "TestIterator.test_it_handles_last_friday",
        "1 1 * * 5L",
        d(2020, 1, 1),
        [
            d(2020, m, day, 1, 1)
            for m, day in [
                (1, 31),
                (2, 28),
                (3, 27),
                (4, 24),
                (5, 29),
                (6, 26),
                (7, 31),
                (8, 28),
                (9, 25),
                (10, 30),
                (11, 27),
                (12, 25),
            ]
        ],
    ),
    (
        CRONSIM + "TestIterator.test_it_handles_last_sunday_two_notations",
        "1 1 * * 0L",
        d(2020, 1, 1),
        [d(2020, 1, 26, 1, 1)],
    ),
    (
        CRONSIM + "TestIterator.test_it_handles_last_sunday_two_notations",
        "1 1 * * 7L",
        d(2020, 1, 1),
        [d(2020, 1, 26, 1, 1)],
    ),
    (
        CRONSIM + "TestIterator.test_it_handles_nth_weekday",
        "1 1 * * 1#2",
        d(2020, 1, 1),
        [d(2020, 1, 13, 1, 1)],
    ),
    (
        CRONSIM + "TestOptimizations.test_it_skips_fixup_for_naive_datetimes",
        "1 1 L * *",
        d(2020, 1, 1),
        [d(2020, 1, 31, 1, 1)],
    ),
    (
        CRONSIM + "TestOptimizations.test_it_skips_fixup_for_utc_datetimes",
        "1 1 L * *",
        d(2020, 1, 1),
        [d(2020, 1, 31, 1, 1)],
    ),
]

# (source, expression, start, the dates that suite expects walking back, strictly before start)
AGREE_PREV: list[tuple[str, str, datetime, list[datetime]]] = [
    (CRONITER + "test_prev_last_day_of_month", "0 0 l * *", d(2009, 12, 31, 20), [d(2009, 12, 31)]),
    (CRONITER + "test_prev_last_day_of_month", "0 0 l * *", d(2009, 12, 31), [d(2009, 11, 30)]),
    (
        CRONITER + "test_prev_last_day_of_month",
        "0 0 l * *",
        d(2010, 1, 5),
        [d(2009, 12, 31), d(2009, 11, 30), d(2009, 10, 31), d(2009, 9, 30)],
    ),
    (
        CRONITER + "test_prev_last_day_of_month",
        "* * l * *",
        d(2010, 1, 31, 0, 2),
        [d(2010, 1, 31, 0, 1), d(2010, 1, 31, 0, 0), d(2009, 12, 31, 23, 59)],
    ),
    (
        CRONITER + "test_prev_nth_weekday",
        "0 0 * * sat#1,sun#2",
        d(2010, 8, 25, 15, 56),
        [d(2010, 8, 8), d(2010, 8, 7), d(2010, 7, 11)],
    ),
    (
        CRONITER + "test_nearest_weekday_get_prev",
        "0 9 15W * *",
        d(2024, 6, 30),
        [d(2024, 6, 14, 9)],
    ),
]

# (source, expression) — both refuse it
AGREE_REFUSED: list[tuple[str, str]] = [
    (CRONITER + "test_nearest_weekday_is_valid", "0 9 0W * *"),
    (CRONITER + "test_nearest_weekday_is_valid", "0 9 32W * *"),
    (CRONITER + "test_non_ascii_digits_rejected", "0 0 ١٥w * *"),
    (CRONITER + "test_non_ascii_digits_rejected", "0 0 * * 1#٢"),
    (CRONITER + "test_non_ascii_digits_rejected", "0 0 * * l٥"),
    (CRONITER + "test_nth_out_of_range", "0 0 * * 1#7"),
    (CRONITER + "test_nth_out_of_range", "0 0 * * 1#0"),
    (CRONITER + "test_last_out_of_range", "0 0 * * L-1"),
    (CRONITER + "test_last_out_of_range", "0 0 * * L8"),
    (CRONITER + "test_issue_k34", "4 0 L/2 2 0"),
    (
        CRONITER + "test_nth_weekday_with_restricted_day_of_month_still_raises",
        "30 23 8-9 JAN MON-FRI#1",
    ),
    (CRONSIM + "TestValidation.test_it_rejects_zero_nth", "* * * * 1#0"),
    (CRONSIM + "TestValidation.test_it_rejects_big_nth", "* * * * 1#6"),
    (CRONSIM + "TestValidation.test_it_rejects_dow_l_range", "* * * * 5L-6"),
    (CRONSIM + "TestValidation.test_it_rejects_dow_l_hash", "* * * * 5L#1"),
    (CRONSIM + "TestValidation.test_it_rejects_dow_l_slash", "* * * * 5L/3"),
    # "The first date of the month *and* the fourth Monday": never fires. cronsim finds out
    # when iterated (StopIteration); we refuse it when parsed. Their */100 is refused by us for
    # its step alone, so the same day set is written */31 (the 1st only) here.
    (CRONSIM + "TestIterator.test_it_handles_no_matches", "1 1 */31 * MON#4"),
    (CRONSIM + "TestReverse.test_it_handles_no_matches", "1 1 */31 * MON#4"),
]

# cronsim TestValidation.test_it_rejects_bad_values: every pattern × every bad value is refused.
_CRONSIM_BAD_PATTERNS = (
    "%s * * * *",
    "-%s * * * *",
    "* %s * * *",
    "* * %s * *",
    "* * * %s *",
    "* * * %s * ",
    "* * * * %s",
    "* * * * * %s",
    "* * * * * * %s",
    "1-%s * * * *",
    "%s-60 * * * *",
    "* * 1-%s * *",
    "* * 1,%s * *",
    "* * %s/1 * *",
    "* * * %s-DEC *",
    "* * * JAN-%s *",
    "* * * * %s-SUN",
    "* * * * MON-%s",
    "1-%s * * * * *",
    "%s-60 * * * * *",
)
_CRONSIM_BAD_VALUES = ("-1", "61", "ABC", "2/", "/2", "2#", "#2", "1##1", "1//2", "¹", "LL", "LWX")

# (source, expression, what they do, what we do: a list of next dates from the start, or None
# for "refused"; the start) — each documented in docs/time-rules.md
DIFFERENT: list[tuple[str, str, str, list[datetime] | None, datetime]] = [
    (
        CRONITER + "test_lwom_friday",
        "0 0 * * L5",
        "croniter's spelling of the last Friday; its dates are those of our 5L (AGREE_SPELLED)",
        None,
        d(1987, 1, 15),
    ),
    (
        CRONITER + "test_nearest_weekday_wn_format",
        "0 9 W15 * *",
        "croniter's spelling of 15W; its date is our 15W's (AGREE_SPELLED)",
        None,
        d(2024, 1, 1),
    ),
    (
        CRONITER + "test_nearest_weekday_is_valid",
        "0 9 15W,16 * *",
        "croniter refuses W in a list; a list is a union of its terms (Quartz refuses it too)",
        [d(2024, 1, 15, 9), d(2024, 1, 16, 9), d(2024, 2, 15, 9)],
        d(2024, 1, 1),
    ),
    (
        CRONITER + "test_nearest_weekday_is_valid",
        "0 9 1,15W * *",
        "croniter refuses W in a list; a list is a union of its terms",
        [d(2024, 6, 1, 9), d(2024, 6, 14, 9), d(2024, 7, 1, 9)],
        d(2024, 5, 31),
    ),
    (
        CRONITER + "test_hash_mixup_all_fri_3rd_sat",
        "0 0 * * 5,6#3",
        "croniter raises UnsupportedSyntax; we fire every Friday and the third Saturday",
        [d(2021, 3, 5), d(2021, 3, 12), d(2021, 3, 19), d(2021, 3, 20), d(2021, 3, 26)],
        d(2021, 3, 1),
    ),
    (
        CRONITER + "test_lwom_mixup_all_fri_last_sat",
        "0 0 * * 5,6L",
        "croniter raises UnsupportedSyntax; we fire every Friday and the last Saturday",
        [d(2021, 3, 5), d(2021, 3, 12), d(2021, 3, 19), d(2021, 3, 26), d(2021, 3, 27)],
        d(2021, 3, 1),
    ),
    (
        CRONITER + "test_issue156",
        "0 0 * * *,sat#3",
        "croniter fires only the third Saturday (2019-01-19); a list is a union and * is every day",
        [d(2019, 1, 15), d(2019, 1, 16)],
        d(2019, 1, 14, 11, 0, 59),
    ),
    (
        CRONITER + "test_nth_weekday_with_restricted_day_of_month_still_raises",
        "0 0 1 2 fri#2",
        "croniter intersects the day fields when one holds # (and never fires); both fields are "
        "restricted, so the Vixie rule ORs them, as cronsim does",
        [d(2026, 2, 1), d(2026, 2, 13), d(2027, 2, 1)],
        d(2026, 1, 1),
    ),
    (
        CRONITER + "test_nth_weekday_with_restricted_day_of_month_still_raises",
        "0 0 15 * fri#2",
        "croniter intersects the day fields when one holds #; the Vixie rule ORs them",
        [d(2026, 1, 9), d(2026, 1, 15), d(2026, 2, 13)],
        d(2026, 1, 1),
    ),
    (
        CRONITER + "test_nearest_weekday_with_restricted_day_of_week_still_raises",
        "0 0 31w 2 0",
        "croniter intersects the day fields when one holds W (and never fires); the Vixie rule "
        "ORs them: every Sunday of February and its last weekday",
        [d(2026, 2, 1), d(2026, 2, 8), d(2026, 2, 15), d(2026, 2, 22), d(2026, 2, 27)],
        d(2026, 1, 1),
    ),
    (
        CRONITER + "test_issue_k33",
        "30 23 1-7 JAN MON-FRI#1",
        "croniter reads a range before # (the first Monday–Friday) and intersects with 1-7; we "
        "refuse a range before # and ask for a list",
        None,
        d(2018, 1, 1),
    ),
    (
        CRONSIM + "TestParse.test_it_accepts_l_with_step",
        "* * L/2 * *",
        "cronsim ignores a step after L; we refuse it (a step has nothing to step over)",
        None,
        d(2020, 1, 1),
    ),
    (
        CRONSIM + "TestParse.test_it_accepts_lw_with_step",
        "* * LW/2 * *",
        "cronsim ignores a step after LW; we refuse it",
        None,
        d(2020, 1, 1),
    ),
    (
        CRONSIM + "TestValidation.test_it_rejects_symbolic_dow_l",
        "* * * * MONL",
        "cronsim refuses a weekday name before L; we read MONL as 1L (the last Monday), as Quartz "
        "reads FRIL",
        [d(2020, 1, 27), d(2020, 1, 27, 0, 1)],
        d(2020, 1, 1),
    ),
]

# croniter's own dates for its L-prefix spelling, run against our 5L spelling: the dates agree.
AGREE_SPELLED: list[tuple[str, str, datetime, list[datetime], str]] = [
    (
        CRONITER + "test_lwom_friday",
        "0 0 * * 5L",
        d(1987, 1, 15),
        [
            d(1987, m, day)
            for m, day in [
                (1, 30),
                (2, 27),
                (3, 27),
                (4, 24),
                (5, 29),
                (6, 26),
                (7, 31),
                (8, 28),
                (9, 25),
                (10, 30),
                (11, 27),
                (12, 25),
            ]
        ],
        "next",
    ),
    (
        CRONITER + "test_lwom_friday_2hours",
        "0 1,5 * * 5L",
        d(1987, 1, 15),
        [
            d(1987, m, day, h)
            for m, day in [(1, 30), (2, 27), (3, 27), (4, 24), (5, 29), (6, 26)]
            for h in (1, 5)
        ],
        "next",
    ),
    (
        CRONITER + "test_lwom_friday_2xh_2xm",
        "0,30 1,5 * * 5L",
        d(1987, 1, 15),
        [
            d(1987, m, day, h, mi)
            for m, day in [(1, 30), (2, 27), (3, 27)]
            for h in (1, 5)
            for mi in (0, 30)
        ],
        "next",
    ),
    (
        CRONITER + "test_lwom_saturday_rev",
        "0 0 * * 6L",
        d(2017, 12, 31),
        [
            d(2017, m, day)
            for m, day in [
                (12, 30),
                (11, 25),
                (10, 28),
                (9, 30),
                (8, 26),
                (7, 29),
                (6, 24),
                (5, 27),
                (4, 29),
                (3, 25),
                (2, 25),
                (1, 28),
            ]
        ],
        "prev",
    ),
    (
        CRONITER + "test_lwom_tue_thu",
        "0 0 * * 2L,4L",
        d(2016, 6, 1),
        [
            d(2016, 6, 28),
            d(2016, 6, 30),
            d(2016, 7, 26),
            d(2016, 7, 28),
            d(2016, 8, 25),
            d(2016, 8, 30),
            d(2016, 9, 27),
            d(2016, 9, 29),
            d(2016, 10, 25),
            d(2016, 10, 27),
        ],
        "next",
    ),
    (
        CRONITER + "test_lwom_mixup_firstlast_sat",
        "0 0 * * 6L",
        d(2021, 3, 1),
        [d(2021, 3, 27), d(2021, 4, 24), d(2021, 5, 29)],
        "next",
    ),
    (
        CRONITER + "test_lwom_mixup_all_fri_last_sat",
        "0 0 * * 6L",
        d(2021, 3, 1),
        [d(2021, 3, 27)],
        "next",
    ),
    (
        CRONITER + "test_lwom_mixup_4th_and_last",
        "0 0 * * 1L",
        d(2021, 11, 1),
        [d(2021, 11, 29), d(2021, 12, 27), d(2022, 1, 31)],
        "next",
    ),
    (
        CRONITER + "test_lwom_mixup_4th_and_last",
        "0 0 * * 1#4,1L",
        d(2021, 11, 1),
        [d(2021, 11, 22), d(2021, 11, 29), d(2021, 12, 27), d(2022, 1, 24), d(2022, 1, 31)],
        "next",
    ),
    (
        CRONITER + "test_nearest_weekday_wn_format",
        "0 9 15W * *",
        d(2024, 1, 1),
        [d(2024, 1, 15, 9)],
        "next",
    ),
]

# cronsim TestParse: what it parses into, as our CalendarTerms
PARSED: list[tuple[str, str, dict[str, object]]] = [
    (CRONSIM + "TestParse.test_it_parses_day_l", "* * L * *", {"last_day_offsets": (0,)}),
    (CRONSIM + "TestParse.test_it_parses_day_lw", "* * LW * *", {"last_weekday": True}),
    (CRONSIM + "TestParse.test_it_parses_day_lowercase_l", "* * l * *", {"last_day_offsets": (0,)}),
    (CRONSIM + "TestParse.test_it_parses_day_lowercase_lw", "* * lw * *", {"last_weekday": True}),
    (CRONSIM + "TestParse.test_it_parses_nth_weekday", "* * * * 1#2", {"nth_weekdays": ((1, 2),)}),
    (
        CRONSIM + "TestParse.test_it_handles_a_mix_of_ints_and_tuples",
        "* * * * 1,2,3#1",
        {"nth_weekdays": ((3, 1),)},
    ),
    (CRONSIM + "TestParse.test_it_accepts_weekday_l", "* * * * 5L", {"last_weekdays": (5,)}),
    (CRONITER + "test_optimize_cron_expressions", "0 0 1 1 0-6,sat#3", {"nth_weekdays": ((6, 3),)}),
    (CRONITER + "test_confirm_sort", "1 1 7,14,21,L * *", {"last_day_offsets": (0,)}),
]


@pytest.mark.parametrize(("source", "expr", "start", "expected"), AGREE_NEXT)
def test_their_next_dates_are_ours(
    source: str, expr: str, start: datetime, expected: list[datetime]
) -> None:
    assert _next(expr, start, len(expected)) == expected, source


@pytest.mark.parametrize(("source", "expr", "start", "expected"), AGREE_PREV)
def test_their_previous_dates_are_ours(
    source: str, expr: str, start: datetime, expected: list[datetime]
) -> None:
    assert _prev(expr, start, len(expected)) == expected, source


@pytest.mark.parametrize(("source", "expr", "start", "expected", "direction"), AGREE_SPELLED)
def test_their_dates_in_our_spelling(
    source: str, expr: str, start: datetime, expected: list[datetime], direction: str
) -> None:
    walk = _next if direction == "next" else _prev
    assert walk(expr, start, len(expected)) == expected, source


@pytest.mark.parametrize(("source", "expr"), AGREE_REFUSED)
def test_what_they_refuse_we_refuse(source: str, expr: str) -> None:
    with pytest.raises(InvalidCronError):
        CronSpec.parse(expr, "UTC")


def test_cronsim_bad_values_are_refused_in_every_position() -> None:
    accepted = []
    for pattern, value in itertools.product(_CRONSIM_BAD_PATTERNS, _CRONSIM_BAD_VALUES):
        try:
            CronSpec.parse(pattern % value, "UTC")
        except InvalidCronError:
            continue
        accepted.append(pattern % value)
    assert accepted == []


@pytest.mark.parametrize(("source", "expr", "attributes"), PARSED)
def test_their_parse_is_our_calendar_terms(
    source: str, expr: str, attributes: dict[str, object]
) -> None:
    terms = CronSpec.parse(expr, "UTC").fields().calendar
    assert {name: getattr(terms, name) for name in attributes} == attributes, source


def _documented_differences() -> str:
    text = DOCS.read_text()
    match = re.search(
        r"### Calendar terms: where the libraries differ\n(.*?)(\n## |\Z)", text, re.S
    )
    assert match is not None, "docs/time-rules.md has no calendar-differences section"
    return match.group(1)


@pytest.mark.parametrize(("source", "expr", "why", "ours", "start"), DIFFERENT)
def test_each_difference_is_ours_on_purpose_and_documented(
    source: str, expr: str, why: str, ours: list[datetime] | None, start: datetime
) -> None:
    if ours is None:
        with pytest.raises(InvalidCronError):
            CronSpec.parse(expr, "UTC")
    else:
        assert _next(expr, start, len(ours)) == ours, (source, why)
    assert f"`{expr}`" in _documented_differences(), f"{expr} ({source}) is not documented"
