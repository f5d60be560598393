"""The wall-clock search: the next (or previous) wall time an expression matches, found by
jumping field by field (month → day → hour → minute → second, with ``bisect``), never by
stepping minute by minute. It knows nothing of zones: :class:`.cron.CronSpec` maps the wall
times it finds to UTC instants under the DST rule.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

from .cron_days import month_days
from .cron_fields import CronFields

__all__ = ["SEARCH_YEARS", "Wall", "WallSearch"]

Wall = tuple[int, int, int, int, int, int]
"""A wall-clock time as (year, month, day, hour, minute, second)."""

SEARCH_YEARS = 100
"""next_occurrence gives up after this many years (parse rejects expressions that never fire;
the rarest valid ones — 29 February on a given weekday — recur within 28 years)."""


class WallSearch:
    """One expression's fields, held in the shapes the search reads fastest: sorted tuples to
    bisect, sets to test; plus a cache of each month's matching days."""

    __slots__ = (
        "_calendar",
        "_day_and",
        "_days_cache",
        "_dom",
        "_dow",
        "_expression",
        "_hours",
        "_minutes",
        "_month_set",
        "_months",
        "_seconds",
    )

    def __init__(self, fields: CronFields, expression: str) -> None:
        self._expression = expression  # for the error when nothing matches
        self._seconds = fields.seconds
        self._minutes = fields.minutes
        self._hours = fields.hours
        self._months = fields.months
        self._month_set = frozenset(fields.months)
        self._dom = frozenset(fields.days_of_month)
        self._dow = frozenset(fields.days_of_week)
        self._day_and = fields.day_and
        self._calendar = fields.calendar
        self._days_cache: dict[int, tuple[int, ...]] = {}

    def _days(self, year: int, month: int) -> tuple[int, ...]:
        """The matching days of ``year``-``month`` (Vixie day rule, calendar terms), sorted;
        cached."""
        key = year * 12 + month
        days = self._days_cache.get(key)
        if days is None:
            days = month_days(year, month, self._dom, self._dow, self._calendar, self._day_and)
            if len(self._days_cache) > 4096:
                self._days_cache.clear()
            self._days_cache[key] = days
        return days

    def forward(self, y: int, mo: int, d: int, h: int, mi: int, s: int) -> Wall:
        """The first matching wall time at or after the given one (fields may overflow by one:
        second 60, minute 60, hour 24, day past the month's end, month 13 all carry)."""
        months, hours, minutes, seconds = self._months, self._hours, self._minutes, self._seconds
        limit = y + SEARCH_YEARS
        while True:
            if mo not in self._month_set:
                i = bisect_left(months, mo)
                if i == len(months):
                    y += 1
                    mo = months[0]
                else:
                    mo = months[i]
                d, h, mi, s = 1, 0, 0, 0
                if y > limit:
                    raise ValueError(
                        f"cron expression {self._expression!r} has no occurrence within "
                        f"{SEARCH_YEARS} years"
                    )
            days = self._days(y, mo)
            i = bisect_left(days, d)
            if i == len(days):
                mo += 1
                d, h, mi, s = 1, 0, 0, 0
                continue
            if days[i] != d:
                d, h, mi, s = days[i], 0, 0, 0
            i = bisect_left(hours, h)
            if i == len(hours):
                d += 1
                h, mi, s = 0, 0, 0
                continue
            if hours[i] != h:
                h, mi, s = hours[i], 0, 0
            i = bisect_left(minutes, mi)
            if i == len(minutes):
                h += 1
                mi, s = 0, 0
                continue
            if minutes[i] != mi:
                mi, s = minutes[i], 0
            i = bisect_left(seconds, s)
            if i == len(seconds):
                mi += 1
                s = 0
                continue
            return y, mo, d, h, mi, seconds[i]

    def backward(
        self, y: int, mo: int, d: int, h: int, mi: int, s: int, *, floor_year: int
    ) -> Wall | None:
        """The last matching wall time at or before the given one, or None before
        ``floor_year`` (fields may underflow by one and borrow)."""
        months, hours, minutes, seconds = self._months, self._hours, self._minutes, self._seconds
        while True:
            if mo not in self._month_set:
                i = bisect_right(months, mo) - 1
                if i < 0:
                    y -= 1
                    mo = months[-1]
                else:
                    mo = months[i]
                d, h, mi, s = 31, 23, 59, 59
                if y < floor_year:
                    return None
            days = self._days(y, mo)
            i = bisect_right(days, d) - 1
            if i < 0:
                mo -= 1
                d, h, mi, s = 31, 23, 59, 59
                continue
            if days[i] != d:
                d, h, mi, s = days[i], 23, 59, 59
            i = bisect_right(hours, h) - 1
            if i < 0:
                d -= 1
                h, mi, s = 23, 59, 59
                continue
            if hours[i] != h:
                h, mi, s = hours[i], 59, 59
            i = bisect_right(minutes, mi) - 1
            if i < 0:
                h -= 1
                mi, s = 59, 59
                continue
            if minutes[i] != mi:
                mi, s = minutes[i], 59
            i = bisect_right(seconds, s) - 1
            if i < 0:
                mi -= 1
                s = 59
                continue
            return y, mo, d, h, mi, seconds[i]
