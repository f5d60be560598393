"""The dialect translations, checked by occurrences: our CronSpec against each platform's
published rules (tests/support/cron_dialects.py) over two years in DST zones.

What may differ is only what the DST rules make differ, and each difference is accounted for:
a Kubernetes second-pass firing of a fixed-time schedule is absorbed by the trigger route
(a duplicate of its first pass), and a fixed-time slot inside a spring-forward gap — which we
fire at the gap's end and the platforms skip — is recorded ``missed`` (documented)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from support.cron_dialects import (
    DialectError,
    aws_occurrences,
    ncrontab_occurrences,
    robfig_occurrences,
)

from fastapi_voltro_schedules.cron import CronSpec
from fastapi_voltro_schedules.external import snap
from fastapi_voltro_schedules.manifests.dialects import (
    UntranslatableCronError,
    aws_cron,
    kubernetes_cron,
    ncrontab,
    unix_cron,
)

START, END = date(2025, 1, 1), date(2027, 1, 1)
ZONES = ("Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "UTC")

KUBERNETES = [
    # (our cron, the Kubernetes expression)
    ("0 9 * * 1-5", "0 9 * * 1-5"),
    ("0 6 * * 7", "0 6 * * 0"),
    ("0 8 * * 1/2", "0 8 * * 0,1,3,5"),
    ("0 8 * * 5-7", "0 8 * * 0,5,6"),
    ("30 4 1,15 * 5", "30 4 1,15 * 5"),
    ("0 12 */2 * *", "0 12 1-31/2 * *"),
    ("0 12 */2 * 1-7", "0 12 1-31/2 * *"),
    ("0 12 1-31 * 1", "0 12 * * *"),
    ("*/15 1-3 * * *", "*/15 1-3 * * *"),
    ("30 1 * * *", "30 1 * * *"),
    ("30 2 * * *", "30 2 * * *"),
    ("0 1-3 * * 0", "0 1-3 * * 0"),
    ("15 2 * 3,10 SUN", "15 2 * 3,10 0"),
    ("@daily", "0 0 * * *"),
    ("0 0 29 2 *", "0 0 29 2 *"),
]
AWS = [
    ("0 9 * * 1-5", "cron(0 9 ? * 2-6 *)"),
    ("0 6 * * 7", "cron(0 6 ? * 1 *)"),
    ("0 8 * * 1/2", "cron(0 8 ? * 1,2,4,6 *)"),
    ("*/15 1-3 * * *", "cron(0/15 1-3 * * ? *)"),
    ("0 12 */2 * *", "cron(0 12 1/2 * ? *)"),
    ("30 1 * * *", "cron(30 1 * * ? *)"),
    ("30 2 * * *", "cron(30 2 * * ? *)"),
    ("0 0 1 */3 *", "cron(0 0 1 1/3 ? *)"),
    # calendar terms (issue 36): EventBridge has L, nW, nL and # (1 = Sunday)
    ("0 2 L * *", "cron(0 2 L * ? *)"),
    ("0 9 15W * *", "cron(0 9 15W * ? *)"),
    ("0 9 1W * *", "cron(0 9 1W * ? *)"),
    ("0 17 * * 5L", "cron(0 17 ? * 6L *)"),
    ("0 17 * * SUNL", "cron(0 17 ? * 1L *)"),
    ("0 9 * * MON#2", "cron(0 9 ? * 2#2 *)"),
    ("30 2 * 3,10 0#5", "cron(30 2 ? 3,10 1#5 *)"),
]
AZURE = [
    ("0 9 * * 1-5", "0 0 9 * * 1-5"),
    ("0 6 * * 7", "0 0 6 * * 0"),
    ("0 12 */2 * 1", "0 0 12 */2 * 1"),
    ("*/15 1-3 * * *", "0 */15 1-3 * * *"),
    ("30 2 * * *", "0 30 2 * * *"),
]
_IN_APP = 'trigger="self", or leave it trigger="external" with fallback="self"'
REFUSED = [
    (kubernetes_cron, "0 9 */2 * 1", "robfig"),
    # calendar terms: only EventBridge has words for them, and not for all
    (kubernetes_cron, "0 2 L * *", "Kubernetes \\(robfig/cron\\) cron has no L, W or #"),
    (kubernetes_cron, "0 9 * * MON#2", _IN_APP),
    (ncrontab, "0 17 * * 5L", "NCRONTAB\\) cron has no L, W or #"),
    (ncrontab, "0 9 15W * *", _IN_APP),
    (unix_cron, "0 18 LW * *", "GCP Cloud Scheduler, crontab\\) cron has no L, W or #"),
    (aws_cron, "0 18 LW * *", "EventBridge documents L and nW, not LW or L-n"),
    (aws_cron, "0 2 L-3 * *", "not LW or L-n"),
    (aws_cron, "0 9 31W * *", "31W: in a month without day 31"),
    (aws_cron, "0 2 1,L * *", "beside other days"),
    (aws_cron, "0 9 * * MON#1,FRIL", "AWS takes one nL or d#n alone"),
    (aws_cron, "0 9 L * 5", "beside other days"),
    (aws_cron, "0 9 15W * 5L", "calendar terms in both day fields"),
    (aws_cron, "0 9 * * 5L", None),
    (aws_cron, "30 4 1,15 * 5", '"?"'),
    (aws_cron, "0 9 */2 * 1", '"?"'),
    (ncrontab, "30 4 1,15 * 5", "ANDs"),
]


def ours(cron: str, tz: str) -> list[datetime]:
    spec = CronSpec.parse(cron, tz)
    lo = datetime.combine(START, datetime.min.time(), tzinfo=spec.zone) - timedelta(seconds=1)
    hi = datetime.combine(END, datetime.min.time(), tzinfo=spec.zone) - timedelta(seconds=1)
    return spec.occurrences(lo, hi)


def account(cron: str, tz: str, mine: list[datetime], theirs: list[datetime]) -> dict[str, int]:
    """Fail unless every difference is one the DST rules explain; count each kind."""
    spec = CronSpec.parse(cron, tz)
    mine_set, theirs_set = set(mine), set(theirs)
    counts = {"absorbed": 0, "gap": 0, "lost-second-pass": 0}
    for t in sorted(theirs_set - mine_set):
        # an extra platform firing must be answered duplicate of one of ours
        plan = snap(spec, t, t, 300_000)
        assert plan.accepted and plan.scheduled_at in mine_set, (cron, tz, t)
        counts["absorbed"] += 1
    for o in sorted(mine_set - theirs_set):
        local = o.astimezone(spec.zone)
        before = (o - timedelta(seconds=1)).astimezone(spec.zone)
        if before.utcoffset() != local.utcoffset() and local.utcoffset() > before.utcoffset():
            counts["gap"] += 1  # fired by us at a gap's end; skipped there → recorded missed
        elif local.fold == 1 and spec.is_wildcard:
            counts["lost-second-pass"] += 1  # a platform firing a repeated time once
        else:
            raise AssertionError(f"{cron} {tz}: {o} is ours only, for no DST reason")
    return counts


@pytest.mark.parametrize(("cron", "expected"), KUBERNETES)
@pytest.mark.parametrize("tz", ZONES)
def test_kubernetes_translation_matches_by_occurrences(cron: str, expected: str, tz: str) -> None:
    k8s = kubernetes_cron(CronSpec.parse(cron, tz))
    assert k8s == expected
    mine = ours(cron, tz)
    theirs = robfig_occurrences(k8s, tz, START, END)
    account(cron, tz, mine, theirs)
    if tz == "UTC":
        assert mine == theirs


def test_copying_our_cron_verbatim_would_be_wrong_in_kubernetes() -> None:
    """The reasons the translation exists, shown by the reference evaluator."""
    with pytest.raises(DialectError):
        robfig_occurrences("0 6 * * 7", "UTC", START, END)  # rejected outright
    assert ours("0 8 * * 1/2", "UTC") != robfig_occurrences("0 8 * * 1/2", "UTC", START, END)
    assert ours("0 12 */2 * 1", "UTC") != robfig_occurrences("0 12 */2 * 1", "UTC", START, END)


def test_the_fall_back_and_spring_forward_nights_in_kubernetes() -> None:
    tz = "America/New_York"
    counts = account(
        "30 1 * * *", tz, ours("30 1 * * *", tz), robfig_occurrences("30 1 * * *", tz, START, END)
    )
    assert counts == {"absorbed": 2, "gap": 0, "lost-second-pass": 0}  # Nov 2025, Nov 2026
    counts = account(
        "30 2 * * *", tz, ours("30 2 * * *", tz), robfig_occurrences("30 2 * * *", tz, START, END)
    )
    assert counts == {"absorbed": 0, "gap": 2, "lost-second-pass": 0}  # Mar 2025, Mar 2026


@pytest.mark.parametrize(("cron", "expected"), AWS)
@pytest.mark.parametrize("tz", ZONES)
def test_aws_translation_matches_by_occurrences(cron: str, expected: str, tz: str) -> None:
    expr = aws_cron(CronSpec.parse(cron, tz))
    assert expr == expected
    mine = ours(cron, tz)
    account(cron, tz, mine, aws_occurrences(expr, tz, START, END))
    if tz == "UTC":
        assert mine == aws_occurrences(expr, tz, START, END)


@pytest.mark.parametrize(("cron", "expected"), AZURE)
@pytest.mark.parametrize("tz", ZONES)
def test_azure_translation_matches_by_occurrences(cron: str, expected: str, tz: str) -> None:
    expr = ncrontab(CronSpec.parse(cron, tz))
    assert expr == expected
    mine = ours(cron, tz)
    account(cron, tz, mine, ncrontab_occurrences(expr, tz, START, END))
    if tz == "UTC":
        assert mine == ncrontab_occurrences(expr, tz, START, END)


@pytest.mark.parametrize(("translate", "cron", "reason"), REFUSED)
def test_what_cannot_be_said_is_refused_with_the_reason(translate, cron, reason) -> None:  # type: ignore[no-untyped-def]
    if reason is None:  # a row that shows its neighbour's refusal is not blanket
        translate(CronSpec.parse(cron, "UTC"))
        return
    with pytest.raises(UntranslatableCronError, match=reason):
        translate(CronSpec.parse(cron, "UTC"))


def test_the_fall_back_twin_is_a_duplicate_only_for_fixed_time_schedules() -> None:
    fixed = CronSpec.parse("30 1 * * *", "America/New_York")
    second = datetime(2026, 11, 1, 6, 30, 20, tzinfo=UTC)  # 01:30:20 EST, second pass
    plan = snap(fixed, second, second, 300_000)
    assert plan.accepted and plan.scheduled_at == datetime(2026, 11, 1, 5, 30, tzinfo=UTC)
    # ten minutes past the second 01:30 is still off-cadence
    late = second + timedelta(minutes=10)
    assert not snap(fixed, late, late, 300_000).accepted
    # a wildcard schedule fires both passes itself: its second pass is its own occurrence
    wild = CronSpec.parse("30 * * * *", "America/New_York")
    plan = snap(wild, second, second, 300_000)
    assert plan.accepted and plan.scheduled_at == datetime(2026, 11, 1, 6, 30, tzinfo=UTC)
    # an ordinary day's arrival an hour late stays off-cadence
    ordinary = datetime(2026, 10, 20, 6, 30, 20, tzinfo=UTC)
    assert not snap(fixed, ordinary, ordinary, 300_000).accepted
