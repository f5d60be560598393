"""Cron text → fields: split an expression (or expand a macro), parse each field against its
range and names, and refuse what cron would misread — with the reason and the fix. Pure, no I/O.

The messages here carry no expression prefix: :class:`.cron.CronSpec` adds it (with the zone),
so a field error and a zone error read alike.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

__all__ = ["CronFields", "FieldError", "parse_fields"]

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


class FieldError(Exception):
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


def _parse_field(field: _Field, text: str) -> set[int]:
    values: set[int] = set()
    for term in text.split(","):
        if term == "":
            raise FieldError(
                f'{field.name} field "{text}" has an empty list item — remove the extra comma'
            )
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
                end = _value(field, text, term, last)
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
    dom = _parse_field(_DOM, fields[3])
    months = _parse_field(_MONTH, fields[4])
    try:
        dow = {d % 7 for d in _parse_field(_DOW, fields[5])}
    except FieldError as exc:
        hint = _year_hint(fields) if has_seconds else ""
        raise FieldError(f"{exc}{hint}") from None
    # Vixie / cronie: a '*'-led day field makes the two day fields AND, else OR.
    day_and = fields[3].startswith("*") or fields[5].startswith("*")
    if day_and:
        longest = max(_MAX_DAYS[m - 1] for m in months)
        if min(dom) > longest:
            names = " or ".join(_MONTH_LONG[m - 1] for m in sorted(months))
            raise FieldError(
                f"day-of-month {min(dom)} never occurs in {names} — the schedule would never fire"
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
    )
    return parsed, has_seconds
