"""Which days of one month the two day fields match — the Vixie rule, and the calendar terms
whose day moves with the month (``L``, ``L-3``, ``15W``, ``LW`` in day-of-month; ``1#2``,
``5L`` in day-of-week). Pure, no I/O.

:mod:`.cron_fields` parses the terms into a :class:`CalendarTerms`; :mod:`.cron_search` asks
:func:`month_days` for each month it visits (and caches the answer), and so does the parser's
check that an expression fires at all.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass

__all__ = ["CalendarTerms", "month_days"]


@dataclass(frozen=True, slots=True)
class CalendarTerms:
    """The day terms that name a day relative to the month, not a fixed number.

    Day-of-week numbers are 0–6 from Sunday (7 already folded onto 0).
    """

    last_day_offsets: tuple[int, ...] = ()
    """``L`` (0) and ``L-n`` (n): the month's last day minus n; nothing when that is before
    the 1st (``L-30`` in February)."""
    nearest_weekdays: tuple[int, ...] = ()
    """``nW``: the weekday (Monday–Friday) nearest day n, never crossing into another month
    (a Saturday 1st moves to Monday the 3rd, a Sunday 31st to Friday the 29th). In a month
    shorter than n, the nearest weekday to the month's last day (croniter's reading)."""
    last_weekday: bool = False
    """``LW``: the month's last weekday (Monday–Friday)."""
    nth_weekdays: tuple[tuple[int, int], ...] = ()
    """``d#n``: (weekday, n) — the n-th such weekday of the month (n 1–5; a month without a
    fifth one has none)."""
    last_weekdays: tuple[int, ...] = ()
    """``dL``: the month's last such weekday (``5L``: the last Friday)."""

    @property
    def day_of_month(self) -> bool:
        return bool(self.last_day_offsets or self.nearest_weekdays or self.last_weekday)

    @property
    def day_of_week(self) -> bool:
        return bool(self.nth_weekdays or self.last_weekdays)

    def __bool__(self) -> bool:
        return self.day_of_month or self.day_of_week


def _weekday_near(day: int, length: int, first_dow: int) -> int:
    """The Monday–Friday nearest ``day`` (clamped to the month), staying inside the month."""
    day = min(day, length)
    dow = (first_dow + day - 1) % 7  # cron: Sunday = 0
    if dow == 6:  # Saturday: the Friday before, unless that is last month — then Monday
        return day - 1 if day > 1 else day + 2
    if dow == 0:  # Sunday: the Monday after, unless that is next month — then Friday
        return day + 1 if day < length else day - 2
    return day


def _relative_days(terms: CalendarTerms, length: int, first_dow: int) -> tuple[set[int], set[int]]:
    """The days this month that the relative terms name: (day-of-month ones, day-of-week ones)."""
    dom: set[int] = set()
    for offset in terms.last_day_offsets:
        if length - offset >= 1:
            dom.add(length - offset)
    for day in terms.nearest_weekdays:
        dom.add(_weekday_near(day, length, first_dow))
    if terms.last_weekday:
        dom.add(_weekday_near(length, length, first_dow))
    dow: set[int] = set()
    for weekday, nth in terms.nth_weekdays:
        day = 1 + (weekday - first_dow) % 7 + 7 * (nth - 1)
        if day <= length:
            dow.add(day)
    last_dow = (first_dow + length - 1) % 7
    for weekday in terms.last_weekdays:
        dow.add(length - (last_dow - weekday) % 7)
    return dom, dow


def month_days(
    year: int,
    month: int,
    dom: frozenset[int],
    dow: frozenset[int],
    terms: CalendarTerms,
    day_and: bool,
) -> tuple[int, ...]:
    """The days of ``year``-``month`` the day fields match, sorted. ``dom``/``dow`` are the
    plain values; ``day_and`` is Vixie's rule (a ``*``-led day field: both must match)."""
    first_weekday, length = calendar.monthrange(year, month)
    first_dow = (first_weekday + 1) % 7  # cron: Sunday = 0
    if terms:
        rel_dom, rel_dow = _relative_days(terms, length, first_dow)
    else:
        rel_dom = rel_dow = set()
    result = []
    for d in range(1, length + 1):
        in_dom = d in dom or d in rel_dom
        in_dow = (first_dow + d - 1) % 7 in dow or d in rel_dow
        if (in_dom and in_dow) if day_and else (in_dom or in_dow):
            result.append(d)
    return tuple(result)
