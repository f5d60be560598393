"""Our cron, rewritten in each platform scheduler's own dialect — or refused with the reason.

Our expressions follow Vixie cron / cronie (``docs/time-rules.md``). The platforms read cron
their own ways, and an expression copied verbatim can mean something else there:

* **Kubernetes** (robfig/cron v3, ``cron.ParseStandard``): day-of-week is 0–6 (``7`` is
  rejected); ``N/S`` runs from N to the field's maximum — so day-of-week ``1/2`` is 1,3,5
  (we read 1,3,5,7: Sunday included); and the two day fields AND only when one of them holds a
  ``*`` (or ``?``) term *with no step* — ``*/2`` clears robfig's star bit, so ``0 9 */2 * 1``
  means "odd days OR Mondays" there and "odd days that are Mondays" here.
* **AWS EventBridge Scheduler**: six fields (a year last), day-of-week 1–7 from Sunday, and one
  of the two day fields must be ``?`` — so no expression can restrict both.
* **Azure Functions** (NCRONTAB): seconds first, day-of-week 0–6, and the day fields always AND.
* **GCP Cloud Scheduler**: unix-cron (Vixie, as ours) — five fields, written canonically.

Calendar terms (``L``, ``15W``, ``1#2``, ``5L``: :mod:`..cron_days`) exist in EventBridge's
dialect only (Quartz's): :func:`aws_cron` writes the ones AWS documents and means as we do; the
other dialects have no words for them, and every generator refuses them naming the term and the
two ways to keep the schedule (in-app, or the hybrid fallback).

So nothing is copied: each generator expands the expression (:meth:`CronSpec.fields`) and
writes every field out explicitly (lists, ``*`` only where the field is whole, ``0`` for
Sunday), choosing the form that gives the target's day rule our meaning. What no expression
of the target can say is refused by :class:`UntranslatableCronError`, naming the reason.

DST is not a field: each platform's own rule for the repeated and the skipped hour is
documented beside its generator (``docs/kubernetes.md``), and the trigger route absorbs the
Kubernetes double firing (:func:`fastapi_voltro_schedules.external.snap`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from ..cron import CronFields, CronSpec

__all__ = [
    "DayRule",
    "UntranslatableCronError",
    "aws_cron",
    "day_rule",
    "kubernetes_cron",
    "ncrontab",
    "unix_cron",
]


class UntranslatableCronError(ValueError):
    """The expression has no equivalent in the target dialect; the message says why."""


class DayRule(Enum):
    """Which days an expression matches, whatever its spelling."""

    EVERY_DAY = "every day"
    MONTH_DAYS = "the listed days of the month"
    WEEK_DAYS = "the listed days of the week"
    BOTH = "days in both lists (AND)"
    EITHER = "days in either list (OR)"


@dataclass(frozen=True, slots=True)
class _Days:
    rule: DayRule
    dom: tuple[int, ...]
    dow: tuple[int, ...]


_ALL_DOM = tuple(range(1, 32))
_ALL_DOW = tuple(range(7))


def day_rule(f: CronFields) -> DayRule:
    """The effective day rule of ``f``: a whole field under AND drops out; under OR it makes
    every day match."""
    return _days(f).rule


def _days(f: CronFields) -> _Days:
    dom_all = f.days_of_month == _ALL_DOM
    dow_all = f.days_of_week == _ALL_DOW
    if f.day_and:
        if dom_all and dow_all:
            rule = DayRule.EVERY_DAY
        elif dow_all:
            rule = DayRule.MONTH_DAYS
        elif dom_all:
            rule = DayRule.WEEK_DAYS
        else:
            rule = DayRule.BOTH
    else:
        rule = DayRule.EVERY_DAY if dom_all or dow_all else DayRule.EITHER
    return _Days(rule, f.days_of_month, f.days_of_week)


_KEEP_IN_APP = (
    'keep this schedule in-app with trigger="self", or leave it trigger="external" with '
    'fallback="self" (the hybrid: with no platform job for it, the app fires each occurrence '
    "itself once the skew budget has passed)"
)


def _no_calendar_terms(spec: CronSpec, f: CronFields, dialect: str) -> None:
    """Refuse an expression with calendar terms for a dialect that has none."""
    if f.calendar:
        raise UntranslatableCronError(
            f'cron "{spec.expression}" uses a calendar term (day-of-month "{f.texts[3]}", '
            f'day-of-week "{f.texts[5]}"): {dialect} cron has no L, W or # — {_KEEP_IN_APP}'
        )


def _aws_calendar_days(spec: CronSpec, f: CronFields) -> tuple[str, str] | None:
    """EventBridge's (day-of-month, day-of-week) for an expression with calendar terms, or
    None without them. AWS documents ``L`` and ``nW`` in day-of-month and ``nL`` and ``d#n`` in
    day-of-week, each the field's only term (Quartz's rule; ``#`` at most once); ``LW`` and
    ``L-n`` it does not document, and ``nW`` past the 28th reads differently in short months
    (croniter's clamp here, undocumented there) — those are refused."""
    terms = f.calendar
    if not terms:
        return None
    why = None
    if terms.day_of_month and terms.day_of_week:
        why = "calendar terms in both day fields"
    elif terms.day_of_month:
        only_term = not f.days_of_month and f.days_of_week == _ALL_DOW and f.day_and
        if not only_term:
            why = f'day-of-month "{f.texts[3]}" beside other days (AWS takes L or nW alone)'
        elif (
            terms.last_day_offsets == (0,) and not terms.nearest_weekdays and not terms.last_weekday
        ):
            return "L", "?"
        elif (
            len(terms.nearest_weekdays) == 1
            and not terms.last_day_offsets
            and not terms.last_weekday
        ):
            (day,) = terms.nearest_weekdays
            if day <= 28:
                return f"{day}W", "?"
            why = (
                f"{day}W: in a month without day {day} we read the nearest weekday to the "
                "month's last day, which EventBridge does not document"
            )
        else:
            why = f'day-of-month "{f.texts[3]}": EventBridge documents L and nW, not LW or L-n'
    else:
        only_term = not f.days_of_week and f.days_of_month == _ALL_DOM and f.day_and
        count = len(terms.nth_weekdays) + len(terms.last_weekdays)
        if not only_term or count != 1:
            why = f'day-of-week "{f.texts[5]}" beside other days (AWS takes one nL or d#n alone)'
        elif terms.nth_weekdays:
            ((weekday, nth),) = terms.nth_weekdays
            return "?", f"{weekday + 1}#{nth}"  # AWS: 1 = Sunday
        else:
            (weekday,) = terms.last_weekdays
            return "?", f"{weekday + 1}L"
    raise UntranslatableCronError(
        f'cron "{spec.expression}" uses {why}; EventBridge Scheduler cannot say it — {_KEEP_IN_APP}'
    )


def _minute_only(spec: CronSpec, f: CronFields, dialect: str) -> None:
    if f.seconds != (0,):
        raise UntranslatableCronError(
            f'cron "{spec.expression}" fires on seconds {_compact(f.seconds, 0, 59)}: '
            f'{dialect} is minute-granular — use a five-field cron (or trigger="self")'
        )


def _compact(values: tuple[int, ...], lo: int, hi: int, *, star: bool = True) -> str:
    """``values`` written explicitly: ``*`` for the whole field (when ``star``), ``a-b/s`` for
    a progression that runs to the field's end, else ranges and single values."""
    if star and values == tuple(range(lo, hi + 1)):
        return "*"
    if len(values) >= 3:
        step = values[1] - values[0]
        if step > 1 and all(b - a == step for a, b in zip(values, values[1:], strict=False)):
            if values[-1] + step > hi:
                if star and values[0] == lo:
                    return f"*/{step}"
                return f"{values[0]}-{hi}/{step}"
    parts: list[str] = []
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        if j - i >= 2:
            parts.append(f"{values[i]}-{values[j]}")
        else:
            parts.extend(str(v) for v in values[i : j + 1])
        i = j + 1
    return ",".join(parts)


def _plain_list(values: tuple[int, ...]) -> str:
    """Values and ranges only — no step, no ``*`` (AWS's day-of-week after the +1 shift)."""
    return _compact(values, -1, 10_000, star=False)


def _hm_month(f: CronFields) -> tuple[str, str, str]:
    return (
        _compact(f.minutes, 0, 59),
        _compact(f.hours, 0, 23),
        _compact(f.months, 1, 12),
    )


def kubernetes_cron(spec: CronSpec) -> str:
    """The five-field robfig/cron expression that matches what ``spec`` matches.

    The day fields: under our AND, the whole field is written ``*`` (robfig's star bit: AND);
    under our OR, neither field is ever written with a ``*`` (robfig: OR). Our AND of two
    restricted lists (``*/2`` beside a weekday) has no robfig spelling: refused.
    """
    f = spec.fields()
    _minute_only(spec, f, "Kubernetes")
    _no_calendar_terms(spec, f, "Kubernetes (robfig/cron)")
    minute, hour, month = _hm_month(f)
    days = _days(f)
    if days.rule is DayRule.BOTH:
        raise UntranslatableCronError(
            f'cron "{spec.expression}" runs on days that are in both day lists (day-of-month '
            f'"{f.texts[3]}" AND day-of-week "{f.texts[5]}"); Kubernetes (robfig/cron) ANDs '
            "the day fields only when one of them is * — it would run on either. Write one day "
            "field as * and check the other in the handler, or keep this schedule on "
            'trigger="self"'
        )
    if days.rule is DayRule.EVERY_DAY:
        dom, dow = "*", "*"
    elif days.rule is DayRule.MONTH_DAYS:
        dom, dow = _compact(days.dom, 1, 31, star=False), "*"
    elif days.rule is DayRule.WEEK_DAYS:
        dom, dow = "*", _compact(days.dow, 0, 6, star=False)
    else:  # EITHER: no star anywhere in the day fields, so robfig ORs them as we do
        dom, dow = _compact(days.dom, 1, 31, star=False), _compact(days.dow, 0, 6, star=False)
    return f"{minute} {hour} {dom} {month} {dow}"


def _aws_steps(field: str) -> str:
    """AWS spells a step from a start as ``start/step`` (``0/15``), not ``*/15``/``a-b/s``."""
    base, slash, step = field.partition("/")
    if not slash:
        return field
    start = base.split("-")[0]
    return f"{'0' if start == '*' else start}/{step}"


def aws_cron(spec: CronSpec) -> str:
    """The EventBridge Scheduler expression ``cron(min hour dom month dow year)``."""
    f = spec.fields()
    _minute_only(spec, f, "EventBridge Scheduler")
    minute, hour, month = (_aws_steps(x) for x in _hm_month(f))
    if month.startswith("0/"):
        month = "1/" + month[2:]
    calendar_days = _aws_calendar_days(spec, f)
    if calendar_days is not None:
        return f"cron({minute} {hour} {calendar_days[0]} {month} {calendar_days[1]} *)"
    days = _days(f)
    if days.rule in (DayRule.BOTH, DayRule.EITHER):
        how = "AND" if days.rule is DayRule.BOTH else "OR"
        raise UntranslatableCronError(
            f'cron "{spec.expression}" restricts both day-of-month "{f.texts[3]}" and '
            f'day-of-week "{f.texts[5]}" ({how}); EventBridge Scheduler needs one of them to '
            'be "?" — split it into two schedules (one per day field) or keep it on '
            'trigger="self"'
        )
    if days.rule is DayRule.EVERY_DAY:
        dom, dow = "*", "?"
    elif days.rule is DayRule.MONTH_DAYS:
        dom, dow = _aws_steps(_compact(days.dom, 1, 31, star=False)), "?"
    else:
        dom, dow = "?", _plain_list(tuple(d + 1 for d in days.dow))  # 1 = Sunday
    return f"cron({minute} {hour} {dom} {month} {dow} *)"


def ncrontab(spec: CronSpec) -> str:
    """The Azure Functions NCRONTAB expression ``sec min hour day month dow`` (days AND)."""
    f = spec.fields()
    _minute_only(spec, f, "this generator (Azure timers could, but the other platforms not)")
    _no_calendar_terms(spec, f, "Azure Functions (NCRONTAB)")
    minute, hour, month = _hm_month(f)
    days = _days(f)
    if days.rule is DayRule.EITHER:
        raise UntranslatableCronError(
            f'cron "{spec.expression}" runs on days in either list (day-of-month '
            f'"{f.texts[3]}" OR day-of-week "{f.texts[5]}"); NCRONTAB always ANDs the day '
            'fields — split it into two schedules or keep it on trigger="self"'
        )
    dom = "*" if days.rule in (DayRule.EVERY_DAY, DayRule.WEEK_DAYS) else None
    dow = "*" if days.rule in (DayRule.EVERY_DAY, DayRule.MONTH_DAYS) else None
    dom = dom or _compact(days.dom, 1, 31)
    dow = dow or _compact(days.dow, 0, 6)
    return f"0 {minute} {hour} {dom} {month} {dow}"


def unix_cron(spec: CronSpec) -> str:
    """Five Vixie fields (GCP Cloud Scheduler, plain crontab): our own dialect, written out.
    Our AND of two restricted day lists keeps its star-led spelling, which Vixie reads as we
    do."""
    f = spec.fields()
    _minute_only(spec, f, "an external scheduler")
    _no_calendar_terms(spec, f, "unix (GCP Cloud Scheduler, crontab)")
    minute, hour, month = _hm_month(f)
    days = _days(f)
    if days.rule is DayRule.EVERY_DAY:
        dom, dow = "*", "*"
    elif days.rule is DayRule.MONTH_DAYS:
        dom, dow = _compact(days.dom, 1, 31, star=False), "*"
    elif days.rule is DayRule.WEEK_DAYS:
        dom, dow = "*", _compact(days.dow, 0, 6, star=False)
    elif days.rule is DayRule.EITHER:
        dom, dow = _compact(days.dom, 1, 31, star=False), _compact(days.dow, 0, 6, star=False)
    else:
        dom, dow = f.texts[3], f.texts[5]
    return f"{minute} {hour} {dom} {month} {dow}"
