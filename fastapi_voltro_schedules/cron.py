"""Cron math: parse an expression, then compute its occurrences in a time zone. Pure, no I/O.

The rules (SPEC §1 "Time rules", written out in ``docs/time-rules.md``):

* Five fields (minute hour day-of-month month day-of-week) or six (a leading seconds field),
  or a macro (``@yearly``/``@annually``/``@monthly``/``@weekly``/``@daily``/``@midnight``/
  ``@hourly``). Names (``JAN``–``DEC``, ``SUN``–``SAT``, any case), lists, ranges and steps
  (``*/15``, ``1-30/5``, ``5/10`` = 5 to the field's maximum every 10). Day-of-week 0–7, where
  0 and 7 are both Sunday. Quartz/Jenkins extensions (``L W # ? H``) are rejected.
* Day-of-month / day-of-week follow Vixie cron: if either field starts with ``*`` a day must
  match both, otherwise it may match either.
* DST follows cronie. A *wildcard* job (minute or hour field starts with ``*``) fires on the
  wall clock: in both passes of a repeated hour (distinct UTC instants, in UTC order) and not
  at all for wall times inside a skipped hour. Any other expression is a *fixed-time* job: a
  wall time that occurs twice fires once, at its first occurrence (``fold=0``); wall times that
  do not exist fire once, together, at the first instant after the gap. The seconds field does
  not change which kind a job is.

How it is computed: the fields are expanded once into sorted tuples; the next (or previous)
matching *wall-clock* time is found by jumping field by field (month → day → hour → minute →
second, with ``bisect``), never by stepping minute by minute; that wall time is then mapped to
a UTC instant under the DST rule above. Transitions are located only when a candidate wall time
is ambiguous or missing, so the common path costs two ``utcoffset`` look-ups.
"""

from __future__ import annotations

import calendar
import functools
import re
import unicodedata
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, available_timezones

from .errors import InvalidCronError

__all__ = ["CronFields", "CronSpec"]

_Wall = tuple[int, int, int, int, int, int]
"""A wall-clock time as (year, month, day, hour, minute, second)."""

_ONE_SECOND = timedelta(seconds=1)
_SEARCH_YEARS = 100
"""next_occurrence gives up after this many years (parse rejects expressions that never fire;
the rarest valid ones — 29 February on a given weekday — recur within 28 years)."""
_PREVIOUS_YEARS = 400
"""previous_occurrence looks back this many years before answering None: one whole Gregorian
cycle (weekdays and leap years repeat every 400 years), so every expression that fires at all
is found — 29 February on a Sunday (``0 0 29 2 */7``) recurs only every 28 years, 40 across a
century that skips its leap day. The bound costs nothing on the common path: the search stops
at the first match, and walks a month at a time (a few thousand steps at worst)."""

_MONTH_NAMES = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DOW_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_MONTH_LONG = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip
_MAX_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)

_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


class _Field:
    __slots__ = ("hi", "lo", "name", "names")

    def __init__(self, name: str, lo: int, hi: int, names: dict[str, int] | None = None) -> None:
        self.name = name
        self.lo = lo
        self.hi = hi
        self.names = names or {}


_SECOND = _Field("second", 0, 59)
_MINUTE = _Field("minute", 0, 59)
_HOUR = _Field("hour", 0, 23)
_DOM = _Field("day-of-month", 1, 31)
_MONTH = _Field("month", 1, 12, {n: i + 1 for i, n in enumerate(_MONTH_NAMES)})
_DOW = _Field("day-of-week", 0, 7, {n: i for i, n in enumerate(_DOW_NAMES)})


class _FieldError(Exception):
    """A reason, without the expression prefix."""


def _unsupported(field: _Field, text: str, term: str, token: str) -> str | None:
    """The reason for a Quartz/Jenkins extension, or None if ``token`` is not one."""
    up = token.upper()
    where = f'{field.name} field "{text}"'
    if "#" in term:
        return (
            f'{where} uses "#" (nth weekday of the month), a Quartz extension that is not '
            "supported — schedule the weekday and check the date in the handler"
        )
    if "?" in term:
        return f'{where} uses "?", a Quartz extension that is not supported — write * instead'
    if up == "H" or up.startswith("H("):
        return (
            f'{where} uses "H" (hashed value), a Jenkins extension that is not supported — '
            "pick a fixed value"
        )
    if up == "LW" or (up.endswith("W") and up[:-1].isdigit()):
        return (
            f'{where} uses "W" (nearest weekday), a Quartz extension that is not supported — '
            "list the days explicitly"
        )
    if up == "L" or (up.endswith("L") and up[:-1].isdigit()) or up.startswith("L-"):
        return (
            f'{where} uses "L" (last), a Quartz extension that is not supported — list the '
            "candidate days explicitly (e.g. 28-31) and check the date in the handler"
        )
    return None


def _value(field: _Field, text: str, term: str, token: str) -> int:
    if token.isascii() and token.isdigit():
        value = int(token)
    elif token.upper() in field.names:
        return field.names[token.upper()]
    else:
        why = _unsupported(field, text, term, token)
        if why is not None:
            raise _FieldError(why)
        if token == "":
            raise _FieldError(
                f'{field.name} field "{text}" has an empty value — write a number, a range '
                "(1-5), a list (1,3,5) or a step (*/15)"
            )
        names = ""
        if field is _MONTH:
            names = " or a month name (JAN–DEC)"
        elif field is _DOW:
            names = " or a day name (SUN–SAT)"
        raise _FieldError(
            f'{field.name} field "{text}": "{token}" is not a number{names} — use a value, '
            "a range (1-5), a list (1,3,5) or a step (*/15)"
        )
    if not field.lo <= value <= field.hi:
        extra = " (0 and 7 are both Sunday)" if field is _DOW else ""
        raise _FieldError(
            f"{field.name} value {value} is out of range {field.lo}–{field.hi}{extra}"
        )
    return value


def _parse_field(field: _Field, text: str) -> set[int]:
    values: set[int] = set()
    for term in text.split(","):
        if term == "":
            raise _FieldError(
                f'{field.name} field "{text}" has an empty list item — remove the extra comma'
            )
        base, slash, step_text = term.partition("/")
        step = 1
        if slash:
            if "/" in step_text:
                raise _FieldError(
                    f'{field.name} field "{text}": "{term}" has two steps — write one, e.g. */15'
                )
            if not (step_text.isascii() and step_text.isdigit()):
                why = _unsupported(field, text, term, step_text)
                raise _FieldError(
                    why
                    or f'{field.name} step "{step_text}" in "{term}" is not a number — write '
                    "e.g. */15"
                )
            step = int(step_text)
            span = field.hi - field.lo + 1
            if step == 0:
                raise _FieldError(f"{field.name} step 0 is invalid — a step must be at least 1")
            if step > span:
                raise _FieldError(
                    f'{field.name} step {step} in "{term}" is larger than the field\'s range '
                    f"{field.lo}–{field.hi} — use a step of at most {span}"
                )
        if base == "*":
            start, end = field.lo, field.hi
        else:
            first, dash, last = base.partition("-")
            start = _value(field, text, term, first)
            if dash:
                if "-" in last:
                    raise _FieldError(
                        f'{field.name} field "{text}": "{base}" is not a range — write a-b'
                    )
                end = _value(field, text, term, last)
                if end < start:
                    raise _FieldError(
                        f'{field.name} range "{term if slash else base}" runs backwards — cron '
                        f"ranges do not wrap around; {_unwrap(field, first, start, end, step)}"
                    )
            else:
                # "5/10" means 5 to the field's maximum, every 10, as croniter and cronsim read
                # it (current cronie rejects it; old Vixie cron silently read it as 5).
                end = field.hi if slash else start
        values.update(range(start, end + 1, step))
    return values


def _unwrap(field: _Field, first: str, start: int, end: int, step: int) -> str:
    """The rewrite for a range that runs backwards (``22-2``, ``APR-MAR/3``): the same values
    as if it wrapped around, written as ranges that do not — keeping the step."""
    suffix = f"/{step}" if step > 1 else ""
    if field is _DOW and end == 0:
        return f"write {first}-7{suffix} (7 is Sunday too)"
    if step == 1:
        return f"write it as two ranges, e.g. {start}-{field.hi},{field.lo}-{end}"
    # Day-of-week wraps after Saturday (6): 7 is Sunday again, not a day after it.
    top = 6 if field is _DOW else field.hi
    values = list(range(start, top + 1, step))
    resume = values[-1] + step - (top - field.lo + 1)  # the first value past the wrap
    rest = list(range(resume, end + 1, step))
    listed = ",".join(str(v) for v in values + rest)

    def part(lo: int, hi: int) -> str:
        return str(lo) if lo == hi else f"{lo}-{hi}{suffix}"

    if not rest:
        return f"write {part(start, top)} ({listed}): the step does not reach past the wrap"
    written = f"{part(start, top)},{part(resume, end)}"
    return f"write it as two ranges that keep the step, e.g. {written}" + (
        "" if written == listed else f" ({listed})"
    )


_ALLOWED_SPACE = " \t\n\r"


def _check_characters(expression: str) -> None:
    """Refuse anything but printable ASCII and plain whitespace. ``str.split`` would take a
    no-break or ideographic space as a separator, while a non-ASCII digit is refused as a value:
    both are refused here, naming the character (they hide in copy-pasted expressions)."""
    for position, char in enumerate(expression):
        if char in _ALLOWED_SPACE or (char.isascii() and char.isprintable()):
            continue
        label = unicodedata.name(char, "") or "(a control character)"
        kind = "whitespace" if char.isspace() else "character"
        raise _FieldError(
            f"U+{ord(char):04X} {label} at position {position} is not allowed — a cron "
            f"expression is plain ASCII: separate the fields with ordinary spaces and write "
            f"values with the digits 0-9 (this {kind} usually comes from a copy-paste)"
        )


_YEAR_RE = re.compile(r"(?<!\d)(19[7-9]\d|20\d\d)(?!\d)")


def _year_hint(fields: list[str]) -> str:
    """For a six-field expression whose last field looks like a year (1970–2099): the hint
    that six fields lead with seconds, and there is no year field."""
    if len(fields) != 6 or _YEAR_RE.search(fields[5]) is None:
        return ""
    return (
        f' — "{fields[5]}" looks like a year, but six fields are second minute hour day month '
        "weekday (the seconds come first) and there is no year field: drop the year, e.g. "
        f'"{" ".join(fields[:5])}"'
    )


def _split(expression: str) -> list[str]:
    fields = expression.split()
    if len(fields) == 1 and fields[0].startswith("@"):
        macro = fields[0].lower()
        if macro in _MACROS:
            return _MACROS[macro].split()
        if macro == "@reboot":
            raise _FieldError(
                "@reboot is not a schedule — run start-up work in the app's lifespan instead"
            )
        raise _FieldError(
            f'unknown macro "{fields[0]}" — use @yearly, @annually, @monthly, @weekly, @daily, '
            "@midnight or @hourly, or write the five fields"
        )
    if any(f.startswith("@") for f in fields):
        raise _FieldError(
            "a macro (@daily, …) must be the whole expression — write either the macro or the "
            "fields"
        )
    if len(fields) not in (5, 6):
        raise _FieldError(
            "expected 5 fields (minute hour day month weekday) or 6 (second first), "
            f"got {len(fields)}"
        )
    return fields


_NOT_PLACES = frozenset({"Factory", "localtime", "posixrules"})
"""Names that load as zones but are not places: ``localtime`` is the server's own zone (the
one thing a schedule must never follow), ``posixrules`` the POSIX default rules file, and
``Factory`` the "zone not set" placeholder."""


@functools.cache
def iana_zone_names() -> frozenset[str]:
    """The IANA time zone names a schedule may use: the zones and links of the IANA database
    as the ``tzdata`` package lists them, without the non-places of :data:`_NOT_PLACES`.

    ``ZoneInfo`` alone also loads ``localtime``, ``posixrules``, ``posix/…``/``right/…`` copies
    and any file in the system's zoneinfo directory; on a case-insensitive file system even
    ``Europe/berlin``. A name outside this list is refused, whatever ``ZoneInfo`` would load.
    """
    try:
        from importlib.resources import files

        names = set(files("tzdata").joinpath("zones").read_text(encoding="utf-8").split())
    except (ImportError, OSError):  # pragma: no cover - tzdata is a dependency
        names = {
            z for z in available_timezones() if not z.startswith(("posix/", "right/"))
        }
    return frozenset(names - _NOT_PLACES)


def zone_problem(timezone: object) -> str | None:
    """Why ``timezone`` is not a usable IANA zone name (with the fix), or None if it is."""
    if not isinstance(timezone, str) or not timezone.strip():
        return (
            f"timezone={timezone!r} is not an IANA zone name — use one such as "
            '"Europe/Berlin" or "UTC"'
        )
    names = iana_zone_names()
    if timezone in names:
        return None
    if timezone in _NOT_PLACES:
        return (
            f'timezone "{timezone}" is not an IANA region — it names no place (and '
            '"localtime" is the server\'s own zone, which a schedule never follows); use an '
            'IANA name such as "Europe/Berlin" or "UTC"'
        )
    lowered = timezone.lower().removeprefix("posix/").removeprefix("right/")
    close = sorted(z for z in names if z.lower() == lowered)
    if close:
        return f'unknown timezone "{timezone}" — did you mean "{close[0]}"?'
    return f'unknown timezone "{timezone}" — use an IANA name such as "Europe/Berlin"'


def _zone(timezone: str) -> ZoneInfo:
    problem = zone_problem(timezone)
    if problem is not None:
        raise _FieldError(problem)
    try:
        return ZoneInfo(timezone)
    except (KeyError, ValueError, OSError):  # listed by tzdata but not loadable here
        raise _FieldError(
            f'timezone "{timezone}" cannot be loaded on this machine — install the tzdata '
            "package (pip install tzdata)"
        ) from None


@dataclass(frozen=True, slots=True)
class CronFields:
    """The expanded fields of a :class:`CronSpec`: what it matches, for translating it into
    another cron dialect (``voltro schedule-manifest``). Sorted tuples; day-of-week 0–6
    (7 already folded onto Sunday)."""

    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days_of_month: tuple[int, ...]
    months: tuple[int, ...]
    days_of_week: tuple[int, ...]
    day_and: bool
    """Vixie's rule: True when a day field starts with ``*`` (a day must match both fields),
    False when both are restricted (a day may match either)."""
    texts: tuple[str, str, str, str, str, str]
    """The six field texts as written (macros expanded, ``"0"`` for an absent seconds field)."""


class CronSpec:
    """A parsed cron expression in a time zone. Build with :meth:`parse` (cached, shared).

    Every method takes aware datetimes (any zone; naive ones raise ``ValueError``) and returns
    aware datetimes in ``datetime.UTC``, with whole seconds.
    """

    __slots__ = (
        "_day_and",
        "_days_cache",
        "_dom",
        "_dow",
        "_fixed_zone",
        "_hours",
        "_minutes",
        "_month_set",
        "_months",
        "_seconds",
        "_texts",
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
            if not isinstance(expression, str) or not expression.strip():
                raise _FieldError(
                    "the expression is empty — write five fields (minute hour day month "
                    'weekday), e.g. "0 9 * * *"'
                )
            _check_characters(expression)
            fields = _split(expression)
            has_seconds = len(fields) == 6
            if not has_seconds:
                fields = ["0", *fields]
            seconds = _parse_field(_SECOND, fields[0])
            minutes = _parse_field(_MINUTE, fields[1])
            hours = _parse_field(_HOUR, fields[2])
            dom = _parse_field(_DOM, fields[3])
            months = _parse_field(_MONTH, fields[4])
            try:
                dow = {d % 7 for d in _parse_field(_DOW, fields[5])}
            except _FieldError as exc:
                hint = _year_hint(fields) if has_seconds else ""
                raise _FieldError(f"{exc}{hint}") from None
            # Vixie / cronie: a '*'-led day field makes the two day fields AND, else OR.
            day_and = fields[3].startswith("*") or fields[5].startswith("*")
            if day_and:
                longest = max(_MAX_DAYS[m - 1] for m in months)
                if min(dom) > longest:
                    names = " or ".join(_MONTH_LONG[m - 1] for m in sorted(months))
                    raise _FieldError(
                        f"day-of-month {min(dom)} never occurs in {names} — the schedule would "
                        "never fire"
                    )
            zone = _zone(timezone)
        except _FieldError as exc:
            raise InvalidCronError(
                f'invalid cron expression "{expression}" (tz="{timezone}") — {exc}'
            ) from None

        self.expression = expression
        self.timezone = timezone
        self.zone = zone
        self.has_seconds = has_seconds
        # cronie's rule: the minute or hour field starts with '*'.
        self.is_wildcard = fields[1].startswith("*") or fields[2].startswith("*")
        self._seconds = tuple(sorted(seconds))
        self._minutes = tuple(sorted(minutes))
        self._hours = tuple(sorted(hours))
        self._months = tuple(sorted(months))
        self._month_set = frozenset(months)
        self._dom = frozenset(dom)
        self._dow = frozenset(dow)
        self._day_and = day_and
        self._texts = (fields[0], fields[1], fields[2], fields[3], fields[4], fields[5])
        self._days_cache: dict[int, tuple[int, ...]] = {}
        key = zone.key
        self._fixed_zone = key == "UTC" or key.startswith("Etc/") or key in ("GMT", "Zulu")

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
        return CronFields(
            seconds=self._seconds,
            minutes=self._minutes,
            hours=self._hours,
            days_of_month=tuple(sorted(self._dom)),
            months=self._months,
            days_of_week=tuple(sorted(self._dow)),
            day_and=self._day_and,
            texts=self._texts,
        )

    # ------------------------------------------------------------------ public queries

    def next_occurrence(self, after: datetime) -> datetime:
        """The first occurrence strictly after ``after``, as an aware UTC datetime."""
        local = self._local(after, "after")
        wall: _Wall = (local.year, local.month, local.day, local.hour, local.minute,
                       local.second + 1)  # fmt: skip
        if self._fixed_zone:
            c = self._forward(*wall)
            return datetime(*c, tzinfo=UTC) - local.utcoffset()  # type: ignore[operator]
        if self.is_wildcard:
            return self._next_wildcard(local, wall)
        if local.fold:
            # `after` is in the second pass of a repeated period: every repeated wall time maps
            # to its first pass, which is already behind us — resume at the period's end.
            _, end = self._repeat_bounds(_floor_wall(local))
            wall = _wall(end)
        return self._map_fixed(self._forward(*wall))

    def previous_occurrence(self, at: datetime) -> datetime | None:
        """The newest occurrence at or before ``at`` (aware UTC); None only when there is none
        since year 1 (the search spans a whole 400-year Gregorian cycle)."""
        local = self._local(at, "at")
        wall = _floor_wall(local)
        floor_year = max(1, local.year - _PREVIOUS_YEARS)
        if self._fixed_zone:
            c = self._backward(*wall, floor_year=floor_year)
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
        c = self._backward(*wall, floor_year=floor_year)
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

    def _offsets(self, c: _Wall) -> tuple[timedelta, timedelta]:
        """The UTC offsets of wall time ``c`` read with fold=0 and with fold=1.

        Equal: an ordinary wall time. fold=0 larger: ``c`` is repeated (fold=0 is the first
        pass). fold=0 smaller: ``c`` is inside a gap and does not exist.
        """
        aware = datetime(*c, tzinfo=self.zone)
        return aware.utcoffset(), aware.replace(fold=1).utcoffset()  # type: ignore[return-value]

    def _transition(self, c: _Wall, off0: timedelta, off1: timedelta) -> datetime:
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

    def _repeat_bounds(self, c: _Wall) -> tuple[datetime, datetime]:
        """For an ambiguous wall time ``c``: the naive wall-clock bounds [start, end) of the
        repeated period that holds it."""
        off0, off1 = self._offsets(c)
        u = self._transition(c, off0, off1).replace(tzinfo=None)
        return u + off1, u + off0

    def _gap_bounds(self, c: _Wall, off0: timedelta, off1: timedelta) -> tuple[datetime, datetime]:
        """For a missing wall time ``c``: the naive wall-clock bounds [start, end) of its gap."""
        u = self._transition(c, off0, off1).replace(tzinfo=None)
        return u + off0, u + off1

    def _map_fixed(self, c: _Wall) -> datetime:
        """A fixed-time job's instant for wall time ``c``: repeated → the first pass; missing →
        the first instant after the gap (so every missing time of one gap fires once)."""
        off0, off1 = self._offsets(c)
        if off0 >= off1:
            return datetime(*c, tzinfo=UTC) - off0
        return self._transition(c, off0, off1)

    def _next_wildcard(self, local: datetime, wall: _Wall) -> datetime:
        off_here = local.utcoffset()
        off_other = local.replace(fold=1 - local.fold).utcoffset()
        c = self._forward(*wall)
        if off_here != off_other:
            # `after` is inside a repeated period: finish this pass, then (from the first
            # pass) run through the second pass of the period before going past it.
            start, end = self._repeat_bounds(_floor_wall(local))
            end_w = _wall(end)
            if c < end_w:
                return datetime(*c, tzinfo=UTC) - off_here  # type: ignore[operator]
            if local.fold == 0:
                second = self._forward(*_wall(start))
                if second < end_w:
                    return datetime(*second, tzinfo=UTC) - off_other  # type: ignore[operator]
        while True:
            off0, off1 = self._offsets(c)
            if off0 >= off1:  # ordinary, or the first pass of a repeated time
                return datetime(*c, tzinfo=UTC) - off0
            _, gap_end = self._gap_bounds(c, off0, off1)  # missing: never fires
            c = self._forward(*_wall(gap_end))

    def _previous_wildcard(self, local: datetime, wall: _Wall, floor_year: int) -> datetime | None:
        off_here = local.utcoffset()
        off_other = local.replace(fold=1 - local.fold).utcoffset()
        c = self._backward(*wall, floor_year=floor_year)
        if off_here != off_other:
            start, end = self._repeat_bounds(wall)
            start_w = _wall(start)
            if c is not None and c >= start_w:
                return datetime(*c, tzinfo=UTC) - off_here  # type: ignore[operator]
            if local.fold == 1:
                first = self._backward(*_wall(end - _ONE_SECOND), floor_year=floor_year)
                if first is not None and first >= start_w:
                    return datetime(*first, tzinfo=UTC) - off_other  # type: ignore[operator]
        while c is not None:
            off0, off1 = self._offsets(c)
            if off0 == off1:
                return datetime(*c, tzinfo=UTC) - off0
            if off0 > off1:  # repeated, and `at` is past the whole period: its second pass
                return datetime(*c, tzinfo=UTC) - off1
            gap_start, _ = self._gap_bounds(c, off0, off1)
            c = self._backward(*_wall(gap_start - _ONE_SECOND), floor_year=floor_year)
        return None

    # ------------------------------------------------------------------ wall-clock search

    def _days(self, year: int, month: int) -> tuple[int, ...]:
        """The matching days of ``year``-``month`` (Vixie day rule), sorted; cached."""
        key = year * 12 + month
        days = self._days_cache.get(key)
        if days is None:
            first_weekday, length = calendar.monthrange(year, month)
            dom, dow = self._dom, self._dow
            first_dow = (first_weekday + 1) % 7  # cron: Sunday = 0
            if self._day_and:
                days = tuple(
                    d for d in range(1, length + 1)
                    if d in dom and (first_dow + d - 1) % 7 in dow
                )  # fmt: skip
            else:
                days = tuple(
                    d for d in range(1, length + 1)
                    if d in dom or (first_dow + d - 1) % 7 in dow
                )  # fmt: skip
            if len(self._days_cache) > 4096:
                self._days_cache.clear()
            self._days_cache[key] = days
        return days

    def _forward(self, y: int, mo: int, d: int, h: int, mi: int, s: int) -> _Wall:
        """The first matching wall time at or after the given one (fields may overflow by one:
        second 60, minute 60, hour 24, day past the month's end, month 13 all carry)."""
        months, hours, minutes, seconds = self._months, self._hours, self._minutes, self._seconds
        limit = y + _SEARCH_YEARS
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
                        f"cron expression {self.expression!r} has no occurrence within "
                        f"{_SEARCH_YEARS} years"
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

    def _backward(
        self, y: int, mo: int, d: int, h: int, mi: int, s: int, *, floor_year: int
    ) -> _Wall | None:
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


def _floor_wall(local: datetime) -> _Wall:
    return local.year, local.month, local.day, local.hour, local.minute, local.second


def _wall(naive: datetime) -> _Wall:
    return naive.year, naive.month, naive.day, naive.hour, naive.minute, naive.second


@functools.lru_cache(maxsize=4096)
def _parse_cached(expression: str, timezone: str) -> CronSpec:
    return CronSpec(expression, timezone)
