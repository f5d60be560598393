"""The vocabulary of admission, and the one small interface every coordination module meets.

Admission answers "may this firing run now, and under which outcome?" and returns that answer
(an :class:`Admission`); it never starts a handler. The dispatcher carries answers out.

Two kinds of module sit side by side in this package, each behind a two-method protocol:

* a :class:`Gate` decides *who* fires a slot — :mod:`.single` (no gate), :mod:`.claim` (the
  claims-row race of ``advisoryLock``, and every external arrival); ``cluster`` is one more
  module of this kind;
* an overlap rule decides *whether it may start now* — :mod:`.skip`, :mod:`.queue` (the
  durable line) and :mod:`.chain` (the in-process line of single-process stores).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

from ..enums import CoordinationOutcome, Trigger

if TYPE_CHECKING:
    from ..definition import Schedule
    from ..store import RunRecord


class Verdict(StrEnum):
    """Why an admission did or did not produce a ``running`` row."""

    RUN = "run"
    """This replica runs the slot: the ``running`` row exists."""
    QUEUED = "queued"
    """The firing waits its turn (``on_overlap="queue"``): follow :attr:`Admission.turn`."""
    LOST = "lost"
    """Another caller already claimed the slot (a duplicate, or another replica won)."""
    SKIPPED = "skipped"
    """A run of the schedule was live; a ``skipped`` row was recorded."""
    UNAVAILABLE = "unavailable"
    """The store could not be written or read: nothing runs (fail closed)."""
    PAUSED = "paused"
    """An operator paused the schedule (:mod:`..pauses`): nothing runs, nothing is recorded."""
    ENDED = "ended"
    """A pending retry came due and no attempt starts (the window closed, the schedule is
    paused or no longer retries): the slot's last failure was recorded final."""


@dataclass(frozen=True, slots=True)
class Step:
    """One run a waiting firing carries out: its own (last) or an adopted one (then ask
    again)."""

    run: RunRecord
    adopted: bool = False


class Turn(Protocol):
    """A firing waiting in line. :meth:`next` blocks until the next run it must carry out."""

    async def next(self) -> Step | None:
        """The next run to execute (its row is ``running``), or ``None``: stood down."""
        ...

    def close(self) -> None:
        """Leave the line (cancelled, or done) — gives the turn on if this firing held it."""
        ...


@dataclass(frozen=True, slots=True)
class Admission:
    verdict: Verdict
    run: RunRecord | None = None
    """The ``running`` row (``RUN``), the ``skipped`` row (``SKIPPED``) or the firing's
    ``queued`` row (``QUEUED`` — on single-process stores one not written, whose id the
    ``running`` row will carry)."""
    turn: Turn | None = None
    """``QUEUED``: the wait, carried out by the dispatcher."""


class Gate(Protocol):
    """Who fires a slot. ``single``, ``claim`` (advisoryLock and external arrivals), and later
    ``cluster`` implement it. Both methods raise ``StoreUnavailableError``: the caller fails
    closed."""

    async def elect(
        self, schedule: Schedule, slot: datetime, trigger: Trigger
    ) -> CoordinationOutcome | None:
        """The outcome this replica fires the slot under, or ``None``: someone else has it."""
        ...

    async def elect_many(
        self, schedules: Sequence[Schedule], slots: Sequence[datetime]
    ) -> list[CoordinationOutcome | None]:
        """:meth:`elect` for the herd (``trigger="self"``): ``schedules[i]`` at ``slots[i]``,
        the outcomes aligned with them."""
        ...

    def claims(self, trigger: Trigger) -> bool:
        """Whether :meth:`elect` for ``trigger`` is the claims-row race (and nothing else): the
        admitter then claims the slot in the same transaction as the row that records it
        (``Store.claim_and_insert``) instead of calling :meth:`elect` — a process killed in
        between must not hold a slot with no row."""
        ...
