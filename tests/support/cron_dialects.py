"""Reference evaluators of the platforms' cron dialects, written from their published rules
(not from our code), for checking the translations in ``manifests/dialects.py``.

* :func:`robfig_occurrences` — robfig/cron v3 as Kubernetes uses it (``cron.ParseStandard``,
  ``SpecSchedule.Next``): fields ``min hour dom month dow``; ``*``/``?`` set the star bit unless
  stepped by more than 1; ``N/S`` runs N..max; day-of-week 0–6 (7 is an error); the day fields
  AND when either has the star bit, else OR; a time fires at every instant whose wall clock
  reads it — both passes of a repeated hour, never inside a skipped one.
* :func:`aws_occurrences` — EventBridge Scheduler: ``min hour dom month dow year`` with ``?``
  in one day field, dow 1–7 from Sunday; a skipped time does not run, a repeated time runs once
  (AWS's DST statement; we take the first pass). Its wildcards ``L`` (the month's last day),
  ``nW`` (the weekday nearest day n, in the month — Quartz's rule: a Saturday 1st is Monday the
  3rd, a Sunday on the last day the Friday before), ``nL`` (the last weekday n of the month)
  and ``d#n`` (the n-th weekday d), each the field's only term, as the AWS reference says.
* :func:`ncrontab_occurrences` — NCRONTAB: ``sec min hour day month dow``, dow 0–6, the day
  fields AND; DST taken as AWS's rule (Azure does not publish one).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

_NAMES = {n: i for i, n in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
_MONTHS = {
    n: i + 1
    for i, n in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
    )
}


class DialectError(ValueError):
    pass


def _field(
    text: str, lo: int, hi: int, names: dict[str, int] | None = None
) -> tuple[set[int], bool]:
    values: set[int] = set()
    star = False
    for term in text.split(","):
        rng, _, step_s = term.partition("/")
        step = int(step_s) if step_s else 1
        if rng in ("*", "?"):
            start, end = lo, hi
            if step <= 1:
                star = True
        else:
            a, dash, b = rng.partition("-")
            conv = lambda s: (names or {}).get(s.lower(), None) if not s.isdigit() else int(s)  # noqa: E731
            start = conv(a)
            end = conv(b) if dash else (hi if step_s else start)
            if start is None or end is None:
                raise DialectError(f"bad value in {text!r}")
        if start < lo or end > hi or start > end:
            raise DialectError(f"{text!r} out of range {lo}-{hi}")
        values.update(range(start, end + 1, step))
    return values, star


def _instants(zone: ZoneInfo, wall: datetime, *, both_passes: bool) -> list[datetime]:
    """The UTC instants at which the wall clock of ``zone`` reads ``wall``."""
    found = []
    for fold in (0, 1):
        aware = wall.replace(tzinfo=zone, fold=fold)
        utc = aware.astimezone(UTC)
        if utc.astimezone(zone).replace(tzinfo=None) == wall and utc not in found:
            found.append(utc)
    found.sort()
    return found if both_passes else found[:1]


def _walk(
    zone: ZoneInfo,
    start: date,
    end: date,
    minutes: set[int],
    hours: set[int],
    day_ok: callable[[date], bool],
    *,
    both_passes: bool,  # type: ignore[valid-type]
) -> Iterator[datetime]:
    day = start
    while day < end:
        if day_ok(day):
            for h in sorted(hours):
                for m in sorted(minutes):
                    wall = datetime(day.year, day.month, day.day, h, m)
                    yield from _instants(zone, wall, both_passes=both_passes)
        day += timedelta(days=1)


def robfig_occurrences(expr: str, tz: str, start: date, end: date) -> list[datetime]:
    f = expr.split()
    if len(f) != 5:
        raise DialectError("robfig standard: 5 fields")
    minutes, _ = _field(f[0], 0, 59)
    hours, _ = _field(f[1], 0, 23)
    dom, dom_star = _field(f[2], 1, 31)
    months, _ = _field(f[3], 1, 12, _MONTHS)
    dow, dow_star = _field(f[4], 0, 6, _NAMES)

    def day_ok(d: date) -> bool:
        if d.month not in months:
            return False
        a, b = d.day in dom, (d.weekday() + 1) % 7 in dow
        return (a and b) if (dom_star or dow_star) else (a or b)

    return sorted(_walk(ZoneInfo(tz), start, end, minutes, hours, day_ok, both_passes=True))


def aws_occurrences(expr: str, tz: str, start: date, end: date) -> list[datetime]:
    assert expr.startswith("cron(") and expr.endswith(")")
    f = expr[5:-1].split()
    if len(f) != 6:
        raise DialectError("AWS: 6 fields")
    if (f[2] == "?") == (f[4] == "?"):
        raise DialectError("AWS: exactly one day field must be ?")
    minutes, _ = _field(f[0], 0, 59)
    hours, _ = _field(f[1], 0, 23)
    months, _ = _field(f[3], 1, 12, _MONTHS)
    assert f[5] == "*"
    dom_ok = _aws_dom(f[2])
    dow_ok = _aws_dow(f[4])

    def day_ok(d: date) -> bool:
        return d.month in months and dom_ok(d) and dow_ok(d)

    return sorted(_walk(ZoneInfo(tz), start, end, minutes, hours, day_ok, both_passes=False))


def _month_length(d: date) -> int:
    nxt = (d.replace(day=28) + timedelta(days=4)).replace(day=1)
    return (nxt - timedelta(days=1)).day


def _aws_dom(text: str) -> Callable[[date], bool]:
    if text == "?":
        return lambda d: True
    if text == "L":
        return lambda d: d.day == _month_length(d)
    if text.endswith("W"):
        n = int(text[:-1])

        def nearest(d: date) -> bool:
            target = d.replace(day=n)
            if target.weekday() == 5:  # Saturday
                target = target - timedelta(days=1) if n > 1 else target + timedelta(days=2)
            elif target.weekday() == 6:  # Sunday
                if n < _month_length(d):
                    target = target + timedelta(days=1)
                else:
                    target = target - timedelta(days=2)
            return d == target

        return nearest
    days = _field(text, 1, 31)[0]
    return lambda d: d.day in days


def _aws_dow(text: str) -> Callable[[date], bool]:
    def aws_day(d: date) -> int:  # 1 = Sunday
        return (d.weekday() + 1) % 7 + 1

    if text == "?":
        return lambda d: True
    if "#" in text:
        day, nth = (int(x) for x in text.split("#"))
        return lambda d: aws_day(d) == day and (d.day - 1) // 7 + 1 == nth
    if text.endswith("L"):
        day = int(text[:-1])
        return lambda d: aws_day(d) == day and d.day + 7 > _month_length(d)
    days = _field(text, 1, 7)[0]
    return lambda d: aws_day(d) in days


def ncrontab_occurrences(expr: str, tz: str, start: date, end: date) -> list[datetime]:
    f = expr.split()
    if len(f) != 6 or f[0] != "0":
        raise DialectError("NCRONTAB here: 6 fields, second 0")
    minutes, _ = _field(f[1], 0, 59)
    hours, _ = _field(f[2], 0, 23)
    dom, _ = _field(f[3], 1, 31)
    months, _ = _field(f[4], 1, 12, _MONTHS)
    dow, _ = _field(f[5], 0, 6, _NAMES)

    def day_ok(d: date) -> bool:
        return d.month in months and d.day in dom and (d.weekday() + 1) % 7 in dow

    return sorted(_walk(ZoneInfo(tz), start, end, minutes, hours, day_ok, both_passes=False))
