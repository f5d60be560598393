"""Which time zone names a schedule may use: IANA places only, judged in one place so that the
schedule definition and the cron parser refuse the same names with the same fix."""

from __future__ import annotations

import functools
from zoneinfo import available_timezones

__all__ = ["iana_zone_names", "zone_problem"]

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
        names = {z for z in available_timezones() if not z.startswith(("posix/", "right/"))}
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
