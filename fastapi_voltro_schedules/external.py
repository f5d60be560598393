"""Where an external arrival lands: the pure snap of an arrival onto the schedule's cadence.

A platform scheduler (a Kubernetes CronJob, EventBridge, Cloud Scheduler…) delivers *at least
once* and *late*, never early. So an arrival is not trusted to say which occurrence it is: its
instant — the time it states (``X-Voltro-Scheduled-At`` / ``X-CloudScheduler-ScheduleTime``), or
else the instant it arrived — is snapped back to the newest occurrence at or before it. Every
retry and redelivery of one firing snaps to the same ``scheduled_at``, and the claim of that
instant is what dedupes them (:mod:`fastapi_voltro_schedules.engine`).

The rules, decided here and nowhere else:

* **Budget.** The snap reaches back at most ``external_trigger_skew_ms`` (inclusive: an arrival
  exactly that late is accepted) and never past the previous occurrence. Snapping to the
  *newest* occurrence at or before the reference instant already guarantees the second half —
  an arrival is always less than one period late for the occurrence it snaps to — so the
  effective budget is ``min(skew, period)``. On a one-minute cadence a five-minute skew cannot
  make an arrival reach back to an older minute: it lands on the newest one.
* **Off-cadence.** No occurrence within the budget → :attr:`SnapVerdict.OFF_CADENCE`. That is
  almost always a manifest whose schedule drifted from the app's declaration.
* **Fall-back twin.** On the night a wall-clock hour repeats, a fixed-time schedule's
  occurrence is the first pass only; an arrival in the second pass at the same wall time (a
  Kubernetes CronJob fires both) snaps to that first-pass occurrence — so it is answered
  ``duplicate``, not ``off_cadence``.
* **Too late.** A *stated* time more than ``external_trigger_skew_ms`` before ``now`` is refused
  (:attr:`SnapVerdict.TOO_LATE`): lateness is measured against the app's clock, not only
  against the stated time, so a replay of an old firing (any never-claimed past slot, or one
  whose claim the retention sweep pruned) can never run a slot a second time. An arrival that
  states no time is ``now`` itself and never too late.
* **Future.** A reference instant more than :data:`FUTURE_TOLERANCE` after ``now`` is refused
  (:attr:`SnapVerdict.FUTURE`): claiming an occurrence before it is due would turn the real
  firing into a duplicate and lose its work. The tolerance (2 s) absorbs the clock disagreement
  of two NTP-synced hosts — a Cloud Scheduler job stating ``09:00:00`` that reaches an app
  whose clock reads ``08:59:59.6`` is that firing, not a forgery — and nothing more.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from .cron import CronSpec

__all__ = ["FUTURE_TOLERANCE", "SnapResult", "SnapVerdict", "closes_at", "snap"]

FUTURE_TOLERANCE = timedelta(seconds=2)
"""How far ahead of the app's clock a stated time may be and still count as "now"."""


class SnapVerdict(StrEnum):
    """What became of one arrival."""

    ACCEPTED = "accepted"
    """The arrival snapped to an occurrence within the budget: :attr:`SnapResult.scheduled_at`."""
    OFF_CADENCE = "off-cadence"
    """No occurrence lies within the budget before the arrival: refused (409)."""
    FUTURE = "future"
    """The arrival states a time after now (beyond :data:`FUTURE_TOLERANCE`): refused (409)."""
    TOO_LATE = "too-late"
    """The arrival states a time more than the skew before now: refused (409)."""


@dataclass(frozen=True, slots=True)
class SnapResult:
    """The plan for one arrival. Only :attr:`scheduled_at` of an accepted one is ever claimed."""

    verdict: SnapVerdict
    reference: datetime
    """The instant that was snapped: the stated time, or the arrival time (aware UTC)."""
    budget: timedelta
    """How far back this arrival could reach: ``min(skew, period)`` around the reference."""
    scheduled_at: datetime | None = None
    """The occurrence claimed (``ACCEPTED`` only)."""
    previous: datetime | None = None
    """The newest occurrence at or before the reference, whether or not it was in budget."""
    lateness: timedelta | None = None
    """``reference - previous``."""

    @property
    def accepted(self) -> bool:
        return self.verdict is SnapVerdict.ACCEPTED


def snap(spec: CronSpec, arrival: datetime, now: datetime, skew_ms: int) -> SnapResult:
    """Snap ``arrival`` (the stated time, or the arrival instant) onto ``spec``'s cadence.

    ``now`` is the app's clock when the request arrived; ``skew_ms`` is
    ``external_trigger_skew_ms``. Pure: no clock, no I/O.
    """
    if arrival.tzinfo is None or now.tzinfo is None:
        raise ValueError("snap() needs aware datetimes")
    reference = arrival.astimezone(UTC)
    skew = timedelta(milliseconds=skew_ms)
    previous = spec.previous_occurrence(reference)
    following = spec.next_occurrence(reference)
    period = following - previous if previous is not None else following - reference
    budget = min(skew, period)
    if reference - now.astimezone(UTC) > FUTURE_TOLERANCE:
        return SnapResult(SnapVerdict.FUTURE, reference, budget, previous=previous)
    if now.astimezone(UTC) - reference > skew:
        return SnapResult(SnapVerdict.TOO_LATE, reference, budget, previous=previous)
    if previous is None:
        return SnapResult(SnapVerdict.OFF_CADENCE, reference, budget)
    lateness = reference - previous
    # lateness < period always holds (previous is the newest occurrence at or before the
    # reference), so comparing with the skew alone applies min(skew, period).
    if lateness > skew:
        twin = _first_pass_twin(spec, reference)
        twin_previous = None if twin is None else spec.previous_occurrence(twin)
        if twin is not None and twin_previous is not None and twin - twin_previous <= skew:
            # The second firing of a repeated wall time (robfig/cron fires both passes): it
            # is the occurrence its first pass already was — a duplicate, not off-cadence.
            return SnapResult(
                SnapVerdict.ACCEPTED,
                reference,
                budget,
                scheduled_at=twin_previous,
                previous=previous,
                lateness=twin - twin_previous,
            )
        return SnapResult(
            SnapVerdict.OFF_CADENCE, reference, budget, previous=previous, lateness=lateness
        )
    return SnapResult(
        SnapVerdict.ACCEPTED,
        reference,
        budget,
        scheduled_at=previous,
        previous=previous,
        lateness=lateness,
    )


def _first_pass_twin(spec: CronSpec, reference: datetime) -> datetime | None:
    """For an instant in the *second* pass of a repeated hour (the fall-back night) of a
    fixed-time schedule: the instant with the same wall time in the first pass. Else None.

    A fixed-time schedule fires a repeated wall time once, at its first pass; a platform that
    fires it again in the second pass (Kubernetes: robfig/cron fires both) arrives a whole
    DST shift late. Read at its wall time it is that same occurrence. Wildcard schedules fire
    both passes themselves, so their second-pass arrivals snap normally."""
    if spec.is_wildcard:
        return None
    local = reference.astimezone(spec.zone)
    if not local.fold:
        return None
    twin = local.replace(fold=0).astimezone(UTC)
    return twin if twin < reference else None


def closes_at(spec: CronSpec, occurrence: datetime, skew_ms: int) -> datetime:
    """The last instant an arrival (stating no time) can still snap to ``occurrence``:
    ``min(occurrence + skew, next occurrence)``. Past it, the occurrence can only be reached by
    an arrival that states its time — the external missed policy's watcher waits for it."""
    return min(occurrence + timedelta(milliseconds=skew_ms), spec.next_occurrence(occurrence))
