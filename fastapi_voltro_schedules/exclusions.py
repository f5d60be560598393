"""Days a schedule does not fire on: listed dates and calendars (holidays). Pure but for the
optional ``holidays`` package, imported only when a holidays spec is built.

``define_schedule(..., exclude=...)`` and ``put_schedule(..., exclude=...)`` take them; the
admission records an excluded slot ``skipped`` with the reason (``error_tag="excluded"``), so
the slot has its row and is never owed as ``missed``. The cadence does not change: the slot
exists, it is just not run — ``next_occurrence`` still names it.

What ``exclude`` takes (one of them, or a list/tuple/set of them):

* a ``datetime.date`` (or an ISO date string, ``"2026-12-24"``) — that day, in the schedule's
  zone;
* a holidays spec, a mapping ``{"country": "DE", "subdiv": "BY", "language": "de"}``
  (``subdiv`` and ``language`` optional): the public holidays of the ``holidays`` package
  (``pip install 'fastapi-voltro-schedules[holidays]'``);
* a calendar object — anything with ``__contains__(date)`` (``holidays.country_holidays("DE")``
  itself, or your own). A ``holidays`` calendar is kept as its spec (country, subdivision,
  language), so every replica and every boot rebuild the same one; another object is kept by
  its class name only (its contents are not part of the definition version) and cannot be
  stored for a run-time schedule, which is data.

The slot's day is its date in the schedule's zone: ``0 23 * * *`` in Europe/Berlin on
2026-10-03 is excluded by the 3 October, whatever the UTC date.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any
from zoneinfo import ZoneInfo

__all__ = ["EXCLUDED_TAG", "ExcludeError", "Exclusions", "parse_exclude"]

EXCLUDED_TAG = "excluded"
"""``error_tag`` of the ``skipped`` row of an excluded slot (its message is the reason)."""
_HOLIDAY_KEYS = ("country", "subdiv", "language")
MAX_DATES = 10_000
"""Dates one schedule may list (27 years of days): a list past it is a mistake, or a job for a
calendar object."""


class ExcludeError(ValueError):
    """``exclude`` is not something this module can read; the message says what and the fix.
    ``path`` names the item (``exclude[2]``, ``exclude[1].country``)."""

    def __init__(self, message: str, path: str = "exclude") -> None:
        super().__init__(message)
        self.path = path


def _holidays_module() -> Any:
    try:
        import holidays
    except ImportError:
        raise ExcludeError(
            "a holidays calendar needs the holidays package — pip install "
            "'fastapi-voltro-schedules[holidays]'"
        ) from None
    return holidays


@dataclass(frozen=True, slots=True)
class HolidaySpec:
    """A ``holidays`` package calendar, by what builds it."""

    country: str
    subdiv: str | None = None
    language: str | None = None

    def build(self, path: str) -> Any:
        holidays = _holidays_module()
        try:
            return holidays.country_holidays(
                self.country, subdiv=self.subdiv, language=self.language
            )
        except NotImplementedError as exc:
            # the package's own message names what it lacks (country or subdivision)
            raise ExcludeError(f"{exc} (see holidays.list_supported_countries())", path) from None

    def to_json(self) -> dict[str, str]:
        return {k: v for k, v in zip(_HOLIDAY_KEYS, self._values(), strict=True) if v is not None}

    def _values(self) -> tuple[str | None, ...]:
        return self.country, self.subdiv, self.language


@dataclass(frozen=True, slots=True)
class Exclusions:
    """What a schedule does not run: :attr:`dates`, and calendars (holidays specs built once,
    and opaque calendar objects). Build with :func:`parse_exclude`."""

    dates: frozenset[date] = frozenset()
    holidays: tuple[HolidaySpec, ...] = ()
    others: tuple[Any, ...] = field(default=(), compare=False)
    """Calendar objects that are not ``holidays`` ones (kept by class name in the version)."""
    _calendars: tuple[Any, ...] = field(default=(), compare=False, repr=False)
    """The built calendars of :attr:`holidays`, in order."""

    def __bool__(self) -> bool:
        return bool(self.dates or self.holidays or self.others)

    def reason(self, day: date) -> str | None:
        """Why ``day`` is excluded (``None``: it is not): ``holiday: <name>`` for a named
        holiday, ``excluded: <day> is listed`` for a listed date, ``excluded: <day> is in
        <calendar>`` for another calendar."""
        if day in self.dates:
            return f"{EXCLUDED_TAG}: {day.isoformat()} is listed"
        for calendar in self._calendars:
            if day in calendar:
                return f"holiday: {calendar.get(day)}"
        for calendar in self.others:
            if day in calendar:
                name = getattr(calendar, "get", lambda _d: None)(day)
                if isinstance(name, str) and name:
                    return f"holiday: {name}"
                return f"{EXCLUDED_TAG}: {day.isoformat()} is in {_class_name(calendar)}"
        return None

    def reason_at(self, slot: datetime, zone: ZoneInfo) -> str | None:
        """:meth:`reason` for the slot's date in ``zone``."""
        return self.reason(slot.astimezone(zone).date())

    @property
    def storable(self) -> bool:
        """Whether it is all data (no opaque calendar object): a run-time schedule's must be."""
        return not self.others

    def to_json(self) -> str:
        """Canonical JSON, the definition version's ``exclude`` column: a changed exclusion is
        a new version, the same one (in any order) is not."""
        items: list[Any] = [d.isoformat() for d in sorted(self.dates)]
        items += sorted((h.to_json() for h in self.holidays), key=lambda h: json.dumps(h))
        items += sorted({f"calendar:{_class_name(c)}" for c in self.others})
        return json.dumps(items, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    def wire(self) -> list[Any]:
        """As the inspect API and ``put_schedule`` take it back."""
        result: list[Any] = json.loads(self.to_json())
        return result


NO_EXCLUSIONS = Exclusions()


def _class_name(obj: object) -> str:
    kind = type(obj)
    return f"{kind.__module__}.{kind.__qualname__}"


def _holiday_spec(value: Mapping[Any, Any], path: str) -> HolidaySpec:
    unknown = sorted(str(k) for k in value if k not in _HOLIDAY_KEYS)
    if unknown:
        raise ExcludeError(
            f'"{unknown[0]}" is not a holidays field — write {{"country": "DE", '
            '"subdiv": "BY", "language": "de"}} (subdiv and language optional)',
            f"{path}.{unknown[0]}",
        )
    for key in _HOLIDAY_KEYS:
        if key not in value and key != "country":
            continue  # optional; but a null one is refused (the schema says string)
        item = value.get(key)
        if not isinstance(item, str) or not item.strip():
            what = "is required" if key not in value else f"{item!r} is not a non-empty string"
            raise ExcludeError(
                f'{what} — an ISO country code such as "DE"'
                if key == "country"
                else f'{what} — e.g. "BY" (subdiv) or "de" (language)',
                f"{path}.{key}",
            )
    spec = HolidaySpec(value["country"], value.get("subdiv"), value.get("language"))
    spec.build(path)  # eagerly: an unknown country or subdivision fails here, not on the day
    return spec


def _is_holidays_object(obj: object) -> bool:
    return (type(obj).__module__ or "").startswith("holidays.")


def _from_holidays_object(calendar: Any) -> HolidaySpec | None:
    """The spec a ``holidays`` package calendar was built from, if it is one that a spec
    rebuilds exactly (a country calendar with the default categories)."""
    country = getattr(calendar, "country", None)
    if not _is_holidays_object(calendar) or not isinstance(country, str):
        return None
    categories = getattr(calendar, "categories", None)
    default = getattr(calendar, "default_category", "public")
    if categories is not None and set(categories) != {default}:
        return None  # other categories than the public holidays: keep the object itself
    language = getattr(calendar, "language", None)
    return HolidaySpec(calendar.country, getattr(calendar, "subdiv", None), language)


def parse_exclude(value: object) -> Exclusions | None:
    """Read ``exclude`` (see the module doc); ``None`` or an empty list: ``None``. Raises
    :class:`ExcludeError` naming the item and the fix."""
    if value is None or isinstance(value, Exclusions):
        return value or None
    items: Iterable[object]
    if isinstance(value, list | tuple | set | frozenset):
        items = value if isinstance(value, list | tuple) else sorted(value, key=repr)
        many = True
    else:
        items, many = [value], False
    dates: set[date] = set()
    specs: list[HolidaySpec] = []
    others: list[Any] = []
    for index, item in enumerate(items):
        path = f"exclude[{index}]" if many else "exclude"
        if isinstance(item, datetime):
            raise ExcludeError(
                f"{item.isoformat()} is a datetime — exclude takes days: pass "
                f"{item.date().isoformat()!r} or date({item.year}, {item.month}, {item.day})",
                path,
            )
        if isinstance(item, date):
            dates.add(item)
        elif isinstance(item, str):
            try:
                dates.add(date.fromisoformat(item))
            except ValueError:
                raise ExcludeError(
                    f'{item[:40]!r} is not an ISO date — write YYYY-MM-DD, e.g. "2026-12-24"',
                    path,
                ) from None
        elif (spec := _from_holidays_object(item)) is not None:
            specs.append(spec)  # before Mapping: a holidays calendar is a dict of its days
        elif isinstance(item, Mapping) and not _is_holidays_object(item):
            specs.append(_holiday_spec(item, path))
        elif hasattr(type(item), "__contains__") and not isinstance(item, bytes):
            others.append(item)
        else:
            raise ExcludeError(
                f"{type(item).__name__} {str(item)[:40]!r} is not a day or a calendar — pass "
                'dates, ISO date strings, a holidays spec {"country": "DE"}, or an object with '
                '__contains__(date) such as holidays.country_holidays("DE")',
                path,
            )
    if len(dates) > MAX_DATES:
        raise ExcludeError(
            f"{len(dates):,} dates is over the limit of {MAX_DATES:,} — use a calendar object"
        )
    unique = tuple(dict.fromkeys(specs))
    if not (dates or unique or others):
        return None
    calendars = tuple(spec.build("exclude") for spec in unique)
    return Exclusions(frozenset(dates), unique, tuple(others), calendars)


def exclusions_from_json(text: str | None) -> Exclusions | None:
    """The exclusions a definition version stored (:meth:`Exclusions.to_json`); ``None`` for
    none. A ``calendar:`` item (an opaque object of a declared schedule) cannot be rebuilt from
    data and is left out: only declared schedules hold one, and their code rebuilds it."""
    if not text:
        return None
    items = [i for i in json.loads(text) if not (isinstance(i, str) and i.startswith("calendar:"))]
    return parse_exclude(items)
