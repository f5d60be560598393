"""Cron text → fields: split an expression (or expand a macro), parse each field against its
range and names, and refuse what cron would misread — with the reason and the fix. Pure, no I/O.

The messages here carry no expression prefix: :class:`.cron.CronSpec` adds it (with the zone),
so a field error and a zone error read alike.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from dataclasses import field as dataclass_field

from .cron_days import CalendarTerms, month_days

__all__ = ["CronFields", "FieldError", "parse_fields"]

_MONTH_NAMES = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DOW_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_MONTH_LONG = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip
_DOW_LONG = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
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


class FieldError(Exception):
    """A reason, without the expression prefix."""


def _unsupported(field: _Field, text: str, term: str, token: str) -> str | None:
    """The reason for an extension this field does not take, or None if ``token`` is not one.

    The calendar terms (``L``, ``W``, ``#``) are read by :func:`_calendar_term` in the day
    fields; reaching here, they are in a field (or a shape) that has no meaning for them."""
    up = token.upper()
    where = f'{field.name} field "{text}"'
    if "?" in term:
        return f'{where} uses "?", a Quartz extension that is not supported — write * instead'
    if up == "H" or up.startswith("H("):
        return (
            f'{where} uses "H" (hashed value), a Jenkins extension that is not supported — '
            "pick a fixed value"
        )
    if "#" in term:
        return (
            f'{where} uses "#" (the nth weekday of the month), which only the day-of-week field '
            "takes — e.g. 1#2 (the second Monday) in the fifth field"
        )
    if ("W" in up and up.rstrip("W").replace("L", "").isdigit()) or up == "LW":
        return (
            f'{where} uses "W" (the nearest weekday), which only the day-of-month field takes — '
            "e.g. 15W or LW in the third field"
        )
    if "L" in up and (up == "L" or up.replace("L", "").replace("-", "").isdigit()):
        return (
            f'{where} uses "L" (last), which only the day fields take — L or L-3 in '
            "day-of-month, 5L (the last Friday) in day-of-week"
        )
    return None


class _Terms:
    """The calendar terms met while parsing the two day fields (built into
    :class:`.cron_days.CalendarTerms` once both are read)."""

    __slots__ = ("last_day_offsets", "last_weekday", "last_weekdays", "nearest", "nth")

    def __init__(self) -> None:
        self.last_day_offsets: set[int] = set()
        self.nearest: set[int] = set()
        self.last_weekday = False
        self.nth: set[tuple[int, int]] = set()
        self.last_weekdays: set[int] = set()

    def build(self) -> CalendarTerms:
        return CalendarTerms(
            last_day_offsets=tuple(sorted(self.last_day_offsets)),
            nearest_weekdays=tuple(sorted(self.nearest)),
            last_weekday=self.last_weekday,
            nth_weekdays=tuple(sorted(self.nth)),
            last_weekdays=tuple(sorted(self.last_weekdays)),
        )


_RANGE_TO_LAST = re.compile(r"\d+-L(/\d+)?", re.ASCII)
_ORDINAL = {1: "first", 2: "second", 3: "third", 4: "fourth", 5: "fifth"}


def _calendar_term(field: _Field, text: str, term: str, terms: _Terms) -> bool:
    """Read ``term`` into ``terms`` if it is a calendar term of its day field (``L``, ``L-3``,
    ``15W``, ``LW``; ``1#2``, ``5L``, ``FRIL``) and say so; refuse a malformed one with the
    fix. False: an ordinary term (``n-L`` included: the generic range reads L as 31)."""
    up = term.upper()
    # "day-of-month field "1,L-40": "L-40" — …"; the term once when it is the whole field.
    where = f'{field.name} field "{text}"' + ("" if term == text else f': "{term}"')
    if field is _DOM:
        if ("L" not in up and "W" not in up) or _RANGE_TO_LAST.fullmatch(up):
            return False
        if "/" in up:
            raise FieldError(
                f"{where} puts a step on a calendar term — L, L-n, nW and LW name one "
                "day a month, there is nothing to step over: write the term alone"
            )
        if up == "L":
            terms.last_day_offsets.add(0)
            return True
        if up == "LW":
            terms.last_weekday = True
            return True
        if m := re.fullmatch(r"L-(\d+)", up, re.ASCII):
            offset = int(m[1])
            if offset > 30:
                raise FieldError(
                    f"{where} is before the 1st of every month — the offset in L-n "
                    "runs 0–30 (L-30 is the 1st of a 31-day month)"
                )
            terms.last_day_offsets.add(offset)
            return True
        if m := re.fullmatch(r"(\d+)W", up, re.ASCII):
            day = int(m[1])
            if not 1 <= day <= 31:
                raise FieldError(
                    f"{where} — day {day} is out of range 1–31 (nW takes a day of the "
                    "month: 15W is the weekday nearest the 15th)"
                )
            terms.nearest.add(day)
            return True
        if m := re.fullmatch(r"W(\d+)", up, re.ASCII):
            raise FieldError(
                f"{where} is croniter's spelling — write {m[1]}W (the W comes after the day)"
            )
        raise FieldError(
            f"{where} is not a day-of-month term — write L (the last day), L-3 (three "
            "days before it), 15W (the weekday nearest the 15th) or LW (the last weekday); "
            "a range may end at L (25-L)"
        )
    if field is not _DOW or ("#" not in up and "L" not in up):
        return False
    if "#" in up:
        day_text, _, nth_text = term.partition("#")
        if "L" in day_text.upper() or "L" in nth_text.upper():
            raise FieldError(
                f"{where} mixes # and L — write 5#2 (the second Friday) or 5L (the last Friday)"
            )
        if not day_text or not nth_text:
            raise FieldError(
                f"{where} needs a weekday and a count — write e.g. 1#2 (the second "
                "Monday of the month)"
            )
        if any(c in day_text for c in "-/*") or "/" in nth_text:
            raise FieldError(
                f"{where} — # takes one weekday and no range or step: list them "
                "instead, e.g. MON#1,TUE#1"
            )
        if not (nth_text.isascii() and nth_text.isdigit()):
            raise FieldError(f"{where} — the count after # must be a number 1–5, e.g. 1#2")
        nth = int(nth_text)
        weekday = _value(field, text, term, day_text) % 7
        if nth == 0:
            raise FieldError(f"{where} — the count after # runs 1–5 ({day_text}#1 is the first)")
        if nth > 5:
            raise FieldError(
                f"{where} — the count after # runs 1–5 (no month has a {nth}th "
                f"{_DOW_LONG[weekday]}): write e.g. {day_text}#5 or {day_text}L for the last one"
            )
        terms.nth.add((weekday, nth))
        return True
    if up == "L":
        raise FieldError(
            f"{where} — L alone is ambiguous in day-of-week (Quartz reads it as Saturday): "
            "write 6L (the last Saturday of the month) or SAT (every Saturday)"
        )
    if any(c in up for c in "-/*"):
        raise FieldError(
            f"{where} — L takes one weekday and no range or step: write e.g. 5L (the "
            "last Friday of the month), or list several (1L,5L)"
        )

    def weekday_like(token: str) -> bool:  # so that "JUL" stays a plain bad value
        return (token.isascii() and token.isdigit()) or token.upper() in field.names

    if up.endswith("L") and weekday_like(term[:-1]):
        weekday = _value(field, text, term, term[:-1]) % 7
        terms.last_weekdays.add(weekday)
        return True
    if up.startswith("L") and weekday_like(term[1:]):
        raise FieldError(
            f"{where} is croniter's spelling — write {term[1:]}L (the L comes after "
            "the weekday: 5L is the last Friday)"
        )
    return False


def _value(field: _Field, text: str, term: str, token: str) -> int:
    if token.isascii() and token.isdigit():
        value = int(token)
    elif token.upper() in field.names:
        return field.names[token.upper()]
    else:
        why = _unsupported(field, text, term, token)
        if why is not None:
            raise FieldError(why)
        if token == "":
            raise FieldError(
                f'{field.name} field "{text}" has an empty value — write a number, a range '
                "(1-5), a list (1,3,5) or a step (*/15)"
            )
        names = ""
        if field is _MONTH:
            names = " or a month name (JAN–DEC)"
        elif field is _DOW:
            names = " or a day name (SUN–SAT)"
        raise FieldError(
            f'{field.name} field "{text}": "{token}" is not a number{names} — use a value, '
            "a range (1-5), a list (1,3,5) or a step (*/15)"
        )
    if not field.lo <= value <= field.hi:
        extra = " (0 and 7 are both Sunday)" if field is _DOW else ""
        raise FieldError(f"{field.name} value {value} is out of range {field.lo}–{field.hi}{extra}")
    return value


def _parse_field(field: _Field, text: str, terms: _Terms | None = None) -> set[int]:
    """The plain values of one field; the day fields' calendar terms go into ``terms``."""
    values: set[int] = set()
    for term in text.split(","):
        if term == "":
            raise FieldError(
                f'{field.name} field "{text}" has an empty list item — remove the extra comma'
            )
        if terms is not None and _calendar_term(field, text, term, terms):
            continue
        base, slash, step_text = term.partition("/")
        step = 1
        if slash:
            if "/" in step_text:
                raise FieldError(
                    f'{field.name} field "{text}": "{term}" has two steps — write one, e.g. */15'
                )
            if not (step_text.isascii() and step_text.isdigit()):
                why = _unsupported(field, text, term, step_text)
                raise FieldError(
                    why
                    or f'{field.name} step "{step_text}" in "{term}" is not a number — write '
                    "e.g. */15"
                )
            step = int(step_text)
            span = field.hi - field.lo + 1
            if step == 0:
                raise FieldError(f"{field.name} step 0 is invalid — a step must be at least 1")
            if step > span:
                raise FieldError(
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
                    raise FieldError(
                        f'{field.name} field "{text}": "{base}" is not a range — write a-b'
                    )
                # "25-L": to the month's last day — the same as to 31, as a day past the
                # month's end never matches (croniter's spelling).
                end = (
                    31 if field is _DOM and last.upper() == "L" else _value(field, text, term, last)
                )
                if end < start:
                    raise FieldError(
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
        raise FieldError(
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
            raise FieldError(
                "@reboot is not a schedule — run start-up work in the app's lifespan instead"
            )
        raise FieldError(
            f'unknown macro "{fields[0]}" — use @yearly, @annually, @monthly, @weekly, @daily, '
            "@midnight or @hourly, or write the five fields"
        )
    if any(f.startswith("@") for f in fields):
        raise FieldError(
            "a macro (@daily, …) must be the whole expression — write either the macro or the "
            "fields"
        )
    if len(fields) not in (5, 6):
        raise FieldError(
            "expected 5 fields (minute hour day month weekday) or 6 (second first), "
            f"got {len(fields)}"
        )
    return fields


@dataclass(frozen=True, slots=True)
class CronFields:
    """The expanded fields of a :class:`.cron.CronSpec`: what it matches, for translating it into
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
    calendar: CalendarTerms = dataclass_field(default_factory=CalendarTerms)
    """The day terms relative to the month (``L``, ``L-3``, ``15W``, ``LW``, ``1#2``,
    ``5L``), beside the plain values above — which leave them out: ``L`` alone has no plain
    day-of-month value. A falsy ``CalendarTerms`` when there are none."""


_CYCLE_START = 2001
_CYCLE_YEARS = 28
"""Every calendar (the weekday of 1 January, leap or not) occurs within 28 consecutive years
between 1901 and 2099: an expression whose day terms match no day in those years never fires."""


def _fires_in_a_cycle(
    dom: set[int], dow: set[int], terms: CalendarTerms, day_and: bool, months: set[int]
) -> bool:
    dom_f, dow_f = frozenset(dom), frozenset(dow)
    return any(
        month_days(year, month, dom_f, dow_f, terms, day_and)
        for year in range(_CYCLE_START, _CYCLE_START + _CYCLE_YEARS)
        for month in sorted(months)
    )


def parse_fields(expression: str) -> tuple[CronFields, bool]:
    """The fields of ``expression``, and whether it has a leading seconds field (``texts``
    cannot tell: an absent seconds field reads as ``"0"``). Raises :class:`FieldError`."""
    if not isinstance(expression, str) or not expression.strip():
        raise FieldError(
            "the expression is empty — write five fields (minute hour day month weekday), e.g. "
            '"0 9 * * *"'
        )
    _check_characters(expression)
    fields = _split(expression)
    has_seconds = len(fields) == 6
    if not has_seconds:
        fields = ["0", *fields]
    seconds = _parse_field(_SECOND, fields[0])
    minutes = _parse_field(_MINUTE, fields[1])
    hours = _parse_field(_HOUR, fields[2])
    terms = _Terms()
    dom = _parse_field(_DOM, fields[3], terms)
    months = _parse_field(_MONTH, fields[4])
    try:
        dow = {d % 7 for d in _parse_field(_DOW, fields[5], terms)}
    except FieldError as exc:
        hint = _year_hint(fields) if has_seconds else ""
        raise FieldError(f"{exc}{hint}") from None
    calendar_terms = terms.build()
    # Vixie / cronie: a '*'-led day field makes the two day fields AND, else OR.
    day_and = fields[3].startswith("*") or fields[5].startswith("*")
    if day_and and dom and not calendar_terms.day_of_month:
        longest = max(_MAX_DAYS[m - 1] for m in months)
        if min(dom) > longest:
            names = " or ".join(_MONTH_LONG[m - 1] for m in sorted(months))
            raise FieldError(
                f"day-of-month {min(dom)} never occurs in {names} — the schedule would never fire"
            )
    if calendar_terms and not _fires_in_a_cycle(dom, dow, calendar_terms, day_and, months):
        names = " or ".join(_MONTH_LONG[m - 1] for m in sorted(months))
        raise FieldError(
            f'day-of-month "{fields[3]}" and day-of-week "{fields[5]}" never name the same day'
            + ("" if len(months) == 12 else f" of {names}")
            + " — the schedule would never fire"
        )
    parsed = CronFields(
        seconds=tuple(sorted(seconds)),
        minutes=tuple(sorted(minutes)),
        hours=tuple(sorted(hours)),
        days_of_month=tuple(sorted(dom)),
        months=tuple(sorted(months)),
        days_of_week=tuple(sorted(dow)),
        day_and=day_and,
        texts=(fields[0], fields[1], fields[2], fields[3], fields[4], fields[5]),
        calendar=calendar_terms,
    )
    return parsed, has_seconds
