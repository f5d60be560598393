"""Cron math: parse an expression, then compute its occurrences in a time zone. Pure, no I/O.

The rules (SPEC §1 "Time rules", written out in ``docs/time-rules.md``):

* Five fields (minute hour day-of-month month day-of-week) or six (a leading seconds field),
  or a macro (``@yearly``/``@annually``/``@monthly``/``@weekly``/``@daily``/``@midnight``/
  ``@hourly``). Names (``JAN``–``DEC``, ``SUN``–``SAT``, any case), lists, ranges and steps
  (``*/15``, ``1-30/5``, ``5/10`` = 5 to the field's maximum every 10). Day-of-week 0–7, where
  0 and 7 are both Sunday. Quartz's calendar terms in the day fields: ``L``, ``L-3``, ``15W``,
  ``LW`` (day-of-month), ``1#2``, ``5L``/``FRIL`` (day-of-week) — :mod:`.cron_days` says
  which days they name. ``?`` and Jenkins' ``H`` are rejected.
* Day-of-month / day-of-week follow Vixie cron: if either field starts with ``*`` a day must
  match both, otherwise it may match either.
* DST follows cronie. A *wildcard* job (minute or hour field starts with ``*``) fires on the
  wall clock: in both passes of a repeated hour (distinct UTC instants, in UTC order) and not
  at all for wall times inside a skipped hour. Any other expression is a *fixed-time* job: a
  wall time that occurs twice fires once, at its first occurrence (``fold=0``); wall times that
  do not exist fire once, together, at the first instant after the gap. The seconds field does
  not change which kind a job is.

How it is computed, in three modules: :mod:`.cron_fields` expands the fields once into sorted
tuples; :mod:`.cron_search` finds the next (or previous) matching *wall-clock* time by jumping
field by field (month → day → hour → minute → second, with ``bisect``), never by stepping
minute by minute; this module maps that wall time to a UTC instant under the DST rule above.
Transitions are located only when a candidate wall time is ambiguous or missing, so the common
path costs two ``utcoffset`` look-ups. Which zone names a schedule may use is :mod:`.zones`'s
to judge.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from .cron_fields import CronFields, FieldError, parse_fields
from .cron_search import SEARCH_YEARS as _SEARCH_YEARS
from .cron_search import Wall, WallSearch
from .errors import InvalidCronError
from .zones import iana_zone_names, zone_problem

# The zone names were judged here before the split; callers still import them from here.
__all__ = ["CronFields", "CronSpec", "iana_zone_names", "zone_problem"]

_ONE_SECOND = timedelta(seconds=1)
_PREVIOUS_YEARS = 400
"""previous_occurrence looks back this many years before answering None: one whole Gregorian
cycle (weekdays and leap years repeat every 400 years), so every expression that fires at all
is found — 29 February on a Sunday (``0 0 29 2 */7``) recurs only every 28 years, 40 across a
century that skips its leap day. The bound costs nothing on the common path: the search stops
at the first match, and walks a month at a time (a few thousand steps at worst)."""


def _zone(timezone: str) -> ZoneInfo:
    problem = zone_problem(timezone)
    if problem is not None:
        raise FieldError(problem)
    try:
        return ZoneInfo(timezone)
    except (KeyError, ValueError, OSError):  # listed by tzdata but not loadable here
        raise FieldError(
            f'timezone "{timezone}" cannot be loaded on this machine — install the tzdata '
            "package (pip install tzdata)"
        ) from None


class CronSpec:
    """A parsed cron expression in a time zone. Build with :meth:`parse` (cached, shared).

    Every method takes aware datetimes (any zone; naive ones raise ``ValueError``) and returns
    aware datetimes in ``datetime.UTC``, with whole seconds.
    """

    __slots__ = (
        "_fields",
        "_fixed_zone",
        "_last_next",
        "_search",
        "expression",
        "has_seconds",
        "is_wildcard",
        "timezone",
        "zone",
    )

    expression: str
    timezone: str
    zone: ZoneInfo
    has_seconds: bool
    is_wildcard: bool

    def __init__(self, expression: str, timezone: str) -> None:
        """Parse ``expression`` in ``timezone``; prefer :meth:`parse`, which caches."""
        try:
            fields, has_seconds = parse_fields(expression)
            zone = _zone(timezone)
        except FieldError as exc:
            raise InvalidCronError(
                f'invalid cron expression "{expression}" (tz="{timezone}") — {exc}'
            ) from None

        self.expression = expression
        self.timezone = timezone
        self.zone = zone
        self.has_seconds = has_seconds
        # cronie's rule: the minute or hour field starts with '*'.
        self.is_wildcard = fields.texts[1].startswith("*") or fields.texts[2].startswith("*")
        self._fields = fields
        self._search = WallSearch(fields, expression)
        key = zone.key
        self._fixed_zone = key == "UTC" or key.startswith("Etc/") or key in ("GMT", "Zulu")
        # the last next_occurrence asked and its answer (one tuple: set at once)
        self._last_next: tuple[datetime, datetime] | None = None

    @classmethod
    def parse(cls, expression: str, timezone: str) -> CronSpec:
        """Parse (and validate) ``expression`` in the IANA zone ``timezone``.

        Cached on ``(expression, timezone)``: schedules sharing a cron and a zone share one
        object. Raises :class:`InvalidCronError` with the reason and the fix.
        """
        if not isinstance(expression, str) or not isinstance(timezone, str):
            return cls(expression, timezone)  # raises with a clear message
        return _parse_cached(expression, timezone)

    def __repr__(self) -> str:
        return f"CronSpec({self.expression!r}, {self.timezone!r})"

    def fields(self) -> CronFields:
        """What the expression matches, field by field (see :class:`CronFields`)."""
        return self._fields  # frozen: safe to hand out

    # ------------------------------------------------------------------ public queries

    def next_occurrence(self, after: datetime) -> datetime:
        """The first occurrence strictly after ``after``, as an aware UTC datetime."""
        # Schedules sharing a cron and a zone share this object, and a boot or a herd asks it
        # the same question once per schedule (100,000 times at a boot of 100,000): the last
        # answer is kept. ``fold`` is compared too: two wall times of one zone compare equal
        # whatever their fold, though they are different instants.
        last = self._last_next
        if last is not None and last[0] == after and last[0].fold == after.fold:
            return last[1]
        found = self._next_occurrence(after)
        self._last_next = (after, found)
        return found

    def _next_occurrence(self, after: datetime) -> datetime:
        local = self._local(after, "after")
        wall: Wall = (local.year, local.month, local.day, local.hour, local.minute,
                      local.second + 1)  # fmt: skip
        if self._fixed_zone:
            c = self._search.forward(*wall)
            return datetime(*c, tzinfo=UTC) - local.utcoffset()  # type: ignore[operator]
        if self.is_wildcard:
            return self._next_wildcard(local, wall)
        if local.fold:
            # `after` is in the second pass of a repeated period: every repeated wall time maps
            # to its first pass, which is already behind us — resume at the period's end.
            _, end = self._repeat_bounds(_floor_wall(local))
            wall = _wall(end)
        return self._map_fixed(self._search.forward(*wall))

    def previous_occurrence(self, at: datetime) -> datetime | None:
        """The newest occurrence at or before ``at`` (aware UTC); None only when there is none
        since year 1 (the search spans a whole 400-year Gregorian cycle)."""
        local = self._local(at, "at")
        wall = _floor_wall(local)
        floor_year = max(1, local.year - _PREVIOUS_YEARS)
        if self._fixed_zone:
            c = self._search.backward(*wall, floor_year=floor_year)
            if c is None:
                return None
            return datetime(*c, tzinfo=UTC) - local.utcoffset()  # type: ignore[operator]
        if self.is_wildcard:
            return self._previous_wildcard(local, wall, floor_year)
        if local.fold:
            # Second pass: every wall time of the repeated period maps to its first pass,
            # which is before `at` — so the newest is the last one before the period's end.
            _, end = self._repeat_bounds(wall)
            wall = _wall(end - _ONE_SECOND)
        c = self._search.backward(*wall, floor_year=floor_year)
        return None if c is None else self._map_fixed(c)

    def iter_occurrences(self, start: datetime, end: datetime | None = None) -> Iterator[datetime]:
        """Occurrences in ``(start, end]`` (unbounded without ``end``), in order, lazily."""
        self._local(start, "start")  # validate now, not at the first next()
        if end is not None:
            self._local(end, "end")
        return self._iterate(start, end)

    def _iterate(self, start: datetime, end: datetime | None) -> Iterator[datetime]:
        cursor = start
        while True:
            cursor = self.next_occurrence(cursor)
            if end is not None and cursor > end:
                return
            yield cursor

    def occurrences(
        self, start: datetime, end: datetime, limit: int | None = None
    ) -> list[datetime]:
        """Every occurrence in ``(start, end]``, in order, at most ``limit`` of them.

        Callers that must detect overflow pass ``cap + 1``.
        """
        self._local(start, "start")
        self._local(end, "end")
        result: list[datetime] = []
        if limit is not None and limit <= 0:
            return result
        cursor = start
        while True:
            cursor = self.next_occurrence(cursor)
            if cursor > end:
                return result
            result.append(cursor)
            if limit is not None and len(result) >= limit:
                return result

    def period_at(self, instant: datetime) -> timedelta:
        """``next_occurrence(instant) - previous_occurrence(instant)``: the length of the slot
        holding ``instant`` (cron is not fixed-interval: a weekday job's Friday slot is 3 days,
        a daily job's is 23 h or 25 h across DST). Without an earlier occurrence (only near year
        1), the interval between the next two occurrences."""
        nxt = self.next_occurrence(instant)
        prev = self.previous_occurrence(instant)
        if prev is None:
            return self.next_occurrence(nxt) - nxt
        return nxt - prev

    # ------------------------------------------------------------------ DST layer

    def _local(self, value: datetime, name: str) -> datetime:
        if not isinstance(value, datetime):
            raise TypeError(f"{name} must be a datetime, got {type(value).__name__}")
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(
                f"{name}={value.isoformat()} is naive — pass a timezone-aware datetime "
                "(e.g. datetime.now(UTC))"
            )
        return value.astimezone(self.zone)

    def _offsets(self, c: Wall) -> tuple[timedelta, timedelta]:
        """The UTC offsets of wall time ``c`` read with fold=0 and with fold=1.

        Equal: an ordinary wall time. fold=0 larger: ``c`` is repeated (fold=0 is the first
        pass). fold=0 smaller: ``c`` is inside a gap and does not exist.
        """
        aware = datetime(*c, tzinfo=self.zone)
        return aware.utcoffset(), aware.replace(fold=1).utcoffset()  # type: ignore[return-value]

    def _transition(self, c: Wall, off0: timedelta, off1: timedelta) -> datetime:
        """The UTC instant of the transition that makes ``c`` ambiguous or missing."""
        naive = datetime(*c, tzinfo=UTC)
        lo, hi = sorted((naive - off0, naive - off1))
        lo_ts, hi_ts = int(lo.timestamp()), int(hi.timestamp())
        zone = self.zone
        lo_off = datetime.fromtimestamp(lo_ts, zone).utcoffset()
        # Invariant: the offset at lo_ts is the old one, at hi_ts the new one.
        while hi_ts - lo_ts > 1:
            mid = (lo_ts + hi_ts) // 2
            if datetime.fromtimestamp(mid, zone).utcoffset() == lo_off:
                lo_ts = mid
            else:
                hi_ts = mid
        return datetime.fromtimestamp(hi_ts, UTC)

    def _repeat_bounds(self, c: Wall) -> tuple[datetime, datetime]:
        """For an ambiguous wall time ``c``: the naive wall-clock bounds [start, end) of the
        repeated period that holds it."""
        off0, off1 = self._offsets(c)
        u = self._transition(c, off0, off1).replace(tzinfo=None)
        return u + off1, u + off0

    def _gap_bounds(self, c: Wall, off0: timedelta, off1: timedelta) -> tuple[datetime, datetime]:
        """For a missing wall time ``c``: the naive wall-clock bounds [start, end) of its gap."""
        u = self._transition(c, off0, off1).replace(tzinfo=None)
        return u + off0, u + off1

    def _map_fixed(self, c: Wall) -> datetime:
        """A fixed-time job's instant for wall time ``c``: repeated → the first pass; missing →
        the first instant after the gap (so every missing time of one gap fires once)."""
        off0, off1 = self._offsets(c)
        if off0 >= off1:
            return datetime(*c, tzinfo=UTC) - off0
        return self._transition(c, off0, off1)

    def _next_wildcard(self, local: datetime, wall: Wall) -> datetime:
        off_here = local.utcoffset()
        off_other = local.replace(fold=1 - local.fold).utcoffset()
        c = self._search.forward(*wall)
        if off_here != off_other:
            # `after` is inside a repeated period: finish this pass, then (from the first
            # pass) run through the second pass of the period before going past it.
            start, end = self._repeat_bounds(_floor_wall(local))
            end_w = _wall(end)
            if c < end_w:
                return datetime(*c, tzinfo=UTC) - off_here  # type: ignore[operator]
            if local.fold == 0:
                second = self._search.forward(*_wall(start))
                if second < end_w:
                    return datetime(*second, tzinfo=UTC) - off_other  # type: ignore[operator]
        limit = local.year + _SEARCH_YEARS
        while True:
            off0, off1 = self._offsets(c)
            if off0 >= off1:  # ordinary, or the first pass of a repeated time
                return datetime(*c, tzinfo=UTC) - off0
            if c[0] > limit:
                # Every match falls in a skipped hour (`*/30 2 * 3 0L` in Europe/Berlin: March's
                # last Sunday is always the spring-forward night): the search restarts after
                # each gap, so bound it here as the wall search bounds itself.
                raise ValueError(
                    f"cron expression {self.expression!r} has no occurrence within "
                    f"{_SEARCH_YEARS} years in {self.timezone}: every match is inside a "
                    "skipped (spring-forward) hour"
                )
            _, gap_end = self._gap_bounds(c, off0, off1)  # missing: never fires
            c = self._search.forward(*_wall(gap_end))

    def _previous_wildcard(self, local: datetime, wall: Wall, floor_year: int) -> datetime | None:
        off_here = local.utcoffset()
        off_other = local.replace(fold=1 - local.fold).utcoffset()
        c = self._search.backward(*wall, floor_year=floor_year)
        if off_here != off_other:
            start, end = self._repeat_bounds(wall)
            start_w = _wall(start)
            if c is not None and c >= start_w:
                return datetime(*c, tzinfo=UTC) - off_here  # type: ignore[operator]
            if local.fold == 1:
                first = self._search.backward(*_wall(end - _ONE_SECOND), floor_year=floor_year)
                if first is not None and first >= start_w:
                    return datetime(*first, tzinfo=UTC) - off_other  # type: ignore[operator]
        while c is not None:
            off0, off1 = self._offsets(c)
            if off0 == off1:
                return datetime(*c, tzinfo=UTC) - off0
            if off0 > off1:  # repeated, and `at` is past the whole period: its second pass
                return datetime(*c, tzinfo=UTC) - off1
            gap_start, _ = self._gap_bounds(c, off0, off1)
            c = self._search.backward(*_wall(gap_start - _ONE_SECOND), floor_year=floor_year)
        return None


def _floor_wall(local: datetime) -> Wall:
    return local.year, local.month, local.day, local.hour, local.minute, local.second


def _wall(naive: datetime) -> Wall:
    return naive.year, naive.month, naive.day, naive.hour, naive.minute, naive.second


@functools.lru_cache(maxsize=4096)
def _parse_cached(expression: str, timezone: str) -> CronSpec:
    return CronSpec(expression, timezone)
