"""A second differential oracle for ``CronSpec.occurrences``: croniter.

croniter is no longer a runtime dependency (nothing in the package imports it: the engine's own
cron math implements the cronie DST rule), but where its semantics are ours it is an
independent implementation worth comparing against, beside cronsim (``test_cron_property.py``).

Where croniter and we agree, and so what this test draws:

* **Zones without DST in 2026** (UTC, Asia/Kolkata, America/Sao_Paulo). Excluded: every zone
  with transitions, because croniter does not follow the cronie rule — at a fall-back it fires
  a fixed-time job (``30 1 * * *``) twice, once per pass of the repeated hour, where cronie
  and we fire it once; and in a spring-forward gap it does not run the skipped fixed time at
  the jump. ``test_croniter_repeats_fixed_times_at_fall_back`` pins that difference.
* **Five fields.** croniter's six-field form puts the seconds *last* (or first with
  ``second_at_beginning``); the seconds-first form is compared with cronsim already.
* **Day-of-month or day-of-week restricted, not both.** With both restricted we apply the
  Vixie rule (OR, except AND when one field starts with ``*``, e.g. ``*/2``); croniter ≥ 6.1
  ORs ``*/2`` too (``day_or``), so those expressions mean different days. Either one alone
  means the same thing in both.
* **Numbers only** in the day-of-week field's ranges (croniter reads ``SUN-SAT`` names in
  ranges differently across versions); names and 7-as-Sunday are exercised against cronsim.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import croniter
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.cron_fields import MONTHS, field

from fastapi_voltro_schedules.cron import CronSpec
from fastapi_voltro_schedules.errors import InvalidCronError

LIMIT = 300
NO_DST_ZONES = ["UTC", "Asia/Kolkata", "America/Sao_Paulo"]


@st.composite
def agreeing_cases(draw: st.DrawFn) -> tuple[str, str, datetime, datetime]:
    tz = draw(st.sampled_from(NO_DST_ZONES))
    start = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(
        seconds=draw(st.integers(0, 364 * 86400))
    )
    end = start + timedelta(seconds=draw(st.integers(1, 3 * 86400)))
    minute = draw(field(0, 59, [0, 15, 30, 45, 59], star_weight=2))
    hour = draw(field(0, 23, [0, 1, 12, 23], star_weight=2))
    dom = draw(field(1, 31, [1, 15, 28, 29, 30, 31], star_weight=6))
    mon = draw(field(1, 12, [1, 2, 6, 12], star_weight=7, names=MONTHS))
    dow = draw(field(0, 6, [0, 1, 5, 6], star_weight=6))
    if "/" in dow and not dow.startswith("*"):
        # `N/step` in day-of-week: Vixie steps through N-7, so 1/3 is 1,4,7 and 7 is Sunday;
        # croniter stops at 6. Not where their semantics agree.
        dow = dow.split("/")[0]
    if dom != "*" and dow != "*":
        if draw(st.booleans()):
            dom = "*"
        else:
            dow = "*"
    return " ".join([minute, hour, dom, mon, dow]), tz, start, end


def _croniter(expr: str, zone: ZoneInfo, start: datetime, end: datetime) -> list[datetime]:
    it = croniter(expr, start.astimezone(zone))
    out: list[datetime] = []
    while len(out) < LIMIT:
        nxt = it.get_next(datetime).astimezone(UTC)
        if nxt > end:
            break
        out.append(nxt)
    return out


@settings(
    max_examples=int(os.environ.get("VOLTRO_HYPOTHESIS_EXAMPLES", "200")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(case=agreeing_cases())
def test_occurrences_match_croniter_where_it_agrees(
    case: tuple[str, str, datetime, datetime],
) -> None:
    expr, tz, start, end = case
    if not croniter.is_valid(expr):
        return  # what croniter refuses is compared with cronsim's refusals instead
    try:
        spec = CronSpec.parse(expr, tz)
    except InvalidCronError as exc:
        # We refuse, on purpose, a day that never occurs ("* * 30 2 *"); croniter would search
        # for it forever. Only that refusal is allowed here.
        assert "never" in str(exc), (expr, exc)
        return
    ours = spec.occurrences(start, end, limit=LIMIT)
    assert ours == _croniter(expr, ZoneInfo(tz), start, end), expr


def test_croniter_repeats_fixed_times_at_fall_back() -> None:
    """Why DST zones are excluded above: the one difference, pinned so a croniter that changes
    its rule is noticed. Berlin, 25 Oct 2026: 02:00–03:00 local happens twice."""
    zone = ZoneInfo("Europe/Berlin")
    start = datetime(2026, 10, 24, 22, tzinfo=UTC)  # 00:00 local, before the fall-back
    end = start + timedelta(hours=6)
    ours = CronSpec.parse("30 2 * * *", "Europe/Berlin").occurrences(start, end)
    theirs = _croniter("30 2 * * *", zone, start, end)
    assert ours == [datetime(2026, 10, 25, 0, 30, tzinfo=UTC)]  # once: the first pass (cronie)
    assert len(theirs) == 2 and theirs[0] == ours[0]  # croniter: both passes
