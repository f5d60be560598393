"""What comes to the dispatcher's one door: a :class:`FireRequest` (schedule, slot, and why it
fires), or the timer's instant as a :class:`Due` batch of them.

A leaf: the rooms that fire (the timer, catch-up, arrivals, the range backfill, Run now)
build requests without importing the dispatcher that carries them out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING

from .enums import Trigger

if TYPE_CHECKING:
    from .definition import Schedule
    from .records import RunRecord


class Why(StrEnum):
    """Why a firing comes to the door: it decides the trigger recorded and how it is admitted."""

    TIMER = "timer"
    """A live slot of a ``self`` schedule came due (the timer; ``trigger="self"``)."""
    CATCH_UP = "catch-up"
    """A slot a boot or a ``cluster`` takeover catches up (``trigger="self"``); under
    ``backfill="all"`` it is owed: it joins the schedule's line with a row of its own."""
    RESUME = "resume"
    """A stopped replica's silent ``queued`` row, still owed, put back in line
    (:attr:`FireRequest.row`; ``trigger="self"``)."""
    ARRIVAL = "arrival"
    """An external arrival (the trigger route, or the missed policy running a slot no arrival
    claimed; ``trigger="external"``): the slot is claimed whatever the coordination."""
    FALLBACK = "fallback"
    """The in-app fallback of an external schedule whose platform trigger is late
    (``trigger="self"``, claimed as an arrival is, so a late arrival is a duplicate)."""
    RUN_NOW = "run-now"
    """An operator's Run now (``trigger="manual"``): no gate, no overlap rule, at most one in
    flight per schedule per process."""
    RANGE = "range"
    """One slot of a range backfill (``trigger="manual"``): its insert is retried through a
    blip; the request returns once the slot has run — or at once, not run, when another
    process won its claim (:attr:`FireRequest.claim`)."""
    RETRY = "retry"
    """The next attempt of a slot whose run failed (``RetryPolicy``): :attr:`FireRequest.row`
    is the slot's ``running`` row with its pending retry — this replica's own, or one a
    stopped replica left (taken over first). No gate, no overlap rule: the slot is already
    won, and its row keeps its own trigger."""
    FOLLOW = "follow"
    """A stopped replica's silent ``running`` row that names a handed-off job
    (:mod:`.handoff`, :attr:`FireRequest.row`): taken over on the beat judged silent, then its
    firing runs again here — enqueueing the same job id (a no-op when the job exists) and
    following it. No gate, no overlap rule: the slot is already won; the row keeps its
    trigger and its ``fired_at`` (the watchdog's deadline covers the whole job)."""

    @property
    def trigger(self) -> Trigger:
        return _TRIGGER[self]


_TRIGGER = {
    Why.TIMER: Trigger.SELF,
    Why.CATCH_UP: Trigger.SELF,
    Why.RESUME: Trigger.SELF,
    Why.ARRIVAL: Trigger.EXTERNAL,
    Why.FALLBACK: Trigger.SELF,
    Why.RUN_NOW: Trigger.MANUAL,
    Why.RANGE: Trigger.MANUAL,
    Why.RETRY: Trigger.SELF,  # nominal: a retry keeps its row's trigger
    Why.FOLLOW: Trigger.SELF,  # nominal: a followed job keeps its row's trigger
}


@dataclass(frozen=True, slots=True)
class FireRequest:
    """Fire ``schedule`` at ``slot`` because of ``why``."""

    schedule: Schedule
    slot: datetime
    why: Why
    row: RunRecord | None = None
    """:attr:`Why.RESUME`: the ``queued`` row taken over (its slot is ``slot``);
    :attr:`Why.RETRY`: the ``running`` row whose retry is pending; :attr:`Why.FOLLOW`: the
    silent ``running`` row naming a handed-off job."""
    claim: str | None = None
    """:attr:`Why.RANGE`: the claims key the step must win to run (the slot's own, or a
    re-run's: :func:`~.models.rerun_claim_key`); ``None``: it runs unclaimed."""

    @property
    def trigger(self) -> Trigger:
        return self.why.trigger


@dataclass(slots=True)
class Due:
    """Many schedules' requests at once, column-wise: ``schedules[i]`` owes ``slots[i]``. Two
    aligned lists instead of a request per firing: a herd of 10,000 then allocates nothing per
    firing for the collector to promote (see :meth:`.coordination.Admitter.admit_many`).

    ``why``: :attr:`Why.TIMER` — the timer's instant (one slot, or several when a schedule
    fell behind: the dispatcher plans them by its ``backfill``); or :attr:`Why.CATCH_UP` — the
    slots a ``cluster`` takeover's catch-ups fire, already planned (a takeover of 3,000
    schedules is one herd, not 3,000 firings racing for the store)."""

    schedules: list[Schedule] = field(default_factory=list)
    slots: list[list[datetime]] = field(default_factory=list)
    why: Why = Why.TIMER

    def add(self, schedule: Schedule, slots: list[datetime]) -> None:
        self.schedules.append(schedule)
        self.slots.append(slots)
