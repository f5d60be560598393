"""``cluster``: one owner per schedule, through the database — no per-firing race.

Python has no sharding runtime, so this is the Oban/GoodJob shape on the package's own tables:

* **Members.** Every replica upserts its row in ``_voltro_schedule_members`` every heartbeat
  (``heartbeat_at`` on the database's clock). A row silent for :data:`LEASE_BEATS` beats is
  not a member.
* **Assignment.** Each schedule's owner is chosen by rendezvous hashing over the live members
  (:func:`owner_of`): the member with the highest ``hash(member, name)``. A join takes only the
  schedules it now scores highest on, a leave hands only its own to the next-highest — every
  other schedule stays where it is.
* **Leases.** A schedule is fired only by the holder of its row in ``_voltro_schedule_leases``
  (owner, fencing token, expiry on the database's clock, :data:`LEASE_BEATS` beats ahead). A
  member renews what it should own and releases what it should not every beat; it takes a
  lease only once the lease is expired or released, with ``token + 1``.
* **The fence.** Every write of an owner for a slot is conditional on its lease and token
  (:mod:`..store.leases`): a paused-then-resumed owner whose lease moved writes nothing.
* **Takeover.** A replica that takes a schedule over reads its last run and plans the catch-up
  of the slots the previous owner left, by the schedule's ``backfill`` policy
  (:func:`..planning.plan_takeover`). Slots up to that moment (the *boundary*) belong to the
  catch-up, later ones to the timer. :meth:`Membership.beat` only answers with those plans:
  the engine, which called it, starts them through the dispatcher (coordination never fires).

So ownership moves at most :data:`LEASE_BEATS` beats after an owner's last beat (its lease
expires) plus one beat (the next owner's), and the first slot after that fires on time: within
three beats and one period of the owner going silent.

The firing itself costs no claim: the owner's gate answers from memory and the ``running`` rows
are inserted through the fence (one statement per herd). ``on_overlap="queue"`` firings claim
their slot through the fence instead (the queue line writes their rows). External arrivals are
claimed in the claims table as under ``advisoryLock`` (outcome ``external``); Run now has no gate.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING

from ..clock import iso_z
from ..definitions import NO_VERSIONS, Versions
from ..enums import CoordinationOutcome, OverlapPolicy, RunStatus, Trigger
from ..errors import StoreUnavailableError
from ..ledger import excluded_row, new_row
from ..logs import logger
from ..models import claim_key
from ..planning import BOOT_GRACE, CatchUpPlan, plan_takeover

if TYPE_CHECKING:
    from ..clock import Clock
    from ..definition import Schedule
    from ..store import RunRecord, Store
    from ..store.leases import LeaseStore
    from .claim import ClaimGate

LEASE_BEATS = 2
"""A lease lasts this many heartbeats past its last renewal, and a member row silent this long
is not a member: one missed beat is tolerated, and a silent owner's schedules move within
``LEASE_BEATS + 1`` beats."""


def score(member: str, name: str) -> int:
    """The rendezvous weight of ``member`` for schedule ``name`` (identical on every replica)."""
    digest = hashlib.blake2b(f"{member}\x00{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def owner_of(name: str, members: Sequence[str]) -> str | None:
    """The member that should own ``name``: the highest :func:`score` (ties by id)."""
    best: tuple[int, str] | None = None
    for member in members:
        candidate = (score(member, name), member)
        if best is None or candidate > best:
            best = candidate
    return None if best is None else best[1]


def assigned(names: Sequence[str], members: Sequence[str], me: str) -> list[str]:
    """The schedules among ``names`` that ``me`` should own, given the live ``members``."""
    return [n for n in names if owner_of(n, members) == me]


@dataclass(slots=True)
class Held:
    """A lease this replica holds, as it knows it."""

    token: int
    boundary: datetime
    """Slots up to here are the takeover's catch-up; later ones the timer's."""
    valid_until: float
    """``time.monotonic()`` past which this replica no longer trusts the lease (its renewal was
    sent before then, so the database's expiry is later): the local half of the fence."""
    permits: set[datetime] = field(default_factory=set)
    """Catch-up slots at or before ``boundary`` admitted once each."""
    admitted: datetime | None = None
    """The latest slot this gate admitted under the lease. Its row may still be on its way to
    the ledger when the lease is dropped here and taken again (see
    :meth:`ClusterGate.admitted_before`)."""


class ClusterGate:
    """The :class:`~.base.Gate` of ``cluster``: this replica fires what it holds a lease on."""

    def __init__(
        self, leases: LeaseStore, claims: ClaimGate, clock: Clock, replica_id: str
    ) -> None:
        self.leases = leases
        self._claims = claims
        self._clock = clock
        self.replica_id = replica_id
        self.held: dict[str, Held] = {}
        self._dropped: dict[str, datetime] = {}
        """Of each lease dropped here, the latest slot admitted under it (see
        :meth:`admitted_before`)."""

    # -- what this replica holds ------------------------------------------------------------

    def hold(self, name: str, held: Held) -> None:
        self.held[name] = held

    def drop(self, name: str) -> None:
        held = self.held.pop(name, None)
        if held is not None and held.admitted is not None:
            before = self._dropped.get(name)
            if before is None or held.admitted > before:
                self._dropped[name] = held.admitted

    def _never_landed(self, name: str, slot: datetime) -> None:
        """``slot``'s row was fenced: the latest slot admitted is the instant before it, so a
        takeover plans it again (it plans from after that floor)."""
        floor = slot - timedelta(microseconds=1)
        held = self.held.get(name)
        if held is not None:
            if held.admitted is not None and held.admitted > floor:
                held.admitted = floor
        elif (dropped := self._dropped.get(name)) is not None and dropped > floor:
            self._dropped[name] = floor

    def admitted_before(self, name: str) -> datetime | None:
        """The latest slot this replica admitted under a lease of ``name`` it dropped since
        (forgotten once asked: a takeover asks it). That slot's row may still be on its way
        to the ledger — an admission waits for the pool while a late beat, or a fenced insert
        of a later slot, drops the lease — and when this replica takes the lease again, that
        write goes through the lease as held then: planned again from a ledger that lacks it,
        the slot would run twice (CI saw it under load, on MariaDB, both at one replica)."""
        return self._dropped.pop(name, None)

    def _admits(self, name: str, slot: datetime) -> Held | None:
        held = self.held.get(name)
        if held is None or time.monotonic() >= held.valid_until:
            return None
        if slot in held.permits:
            held.permits.discard(slot)
        elif slot <= held.boundary:
            return None
        if held.admitted is None or slot > held.admitted:
            held.admitted = slot
        return held

    def tokens(self) -> dict[str, int]:
        return {name: held.token for name, held in self.held.items()}

    # -- the Gate protocol ------------------------------------------------------------------

    def claims(self, trigger: Trigger) -> bool:
        # Own firings are fenced by the lease (rows written through :meth:`insert`); an
        # external arrival is elected by its claim alone.
        return trigger is Trigger.EXTERNAL

    async def elect(
        self, schedule: Schedule, slot: datetime, trigger: Trigger
    ) -> CoordinationOutcome | None:
        if trigger is Trigger.EXTERNAL:
            return await self._claims.elect(schedule, slot, trigger)
        held = self._admits(schedule.name, slot)
        if held is None:
            return None
        if schedule.on_overlap is OverlapPolicy.QUEUE:
            # The line writes this firing's rows; the fenced claim is its one fenced write.
            key = claim_key(schedule.name, slot)
            won = await self.leases.claim_fenced(
                key, schedule.name, self.replica_id, held.token, self._clock.now()
            )
            if not won:
                return None
        return CoordinationOutcome.CLUSTER

    async def elect_many(
        self, schedules: Sequence[Schedule], slots: Sequence[datetime]
    ) -> list[CoordinationOutcome | None]:
        return [
            CoordinationOutcome.CLUSTER if self._admits(s.name, slot) is not None else None
            for s, slot in zip(schedules, slots, strict=True)
        ]

    # -- the fenced writes ------------------------------------------------------------------

    async def insert(self, rows: Sequence[RunRecord]) -> list[RunRecord]:
        """Write the rows whose lease this replica still holds with its token; returns them.
        A row left out is logged: this replica no longer owns its schedule."""
        written = await self.leases.insert_fenced(rows, self.replica_id, self.tokens())
        if len(written) < len(rows):
            kept = {r.id for r in written}
            fenced = [row for row in rows if row.id not in kept]
            for row in sorted(fenced, key=lambda r: r.scheduled_at):
                self._never_landed(row.name, row.scheduled_at)
                self.drop(row.name)
            _tell(
                logging.WARNING,
                "lease lost — not firing (fenced)",
                [f"name={row.name} slot={iso_z(row.scheduled_at)}" for row in fenced],
            )
        return written

    async def record_missed(
        self,
        schedule: Schedule,
        slots: Sequence[datetime],
        now: datetime,
        excluded: Mapping[tuple[str, datetime], str] | None = None,
    ) -> list[datetime]:
        """Record ``slots`` missed, through the fence, for the slots this replica owns (those
        in ``excluded``: ``skipped`` with the reason, see :func:`.ledger.excluded_row`)."""
        mine = [s for s in slots if self._admits(schedule.name, s) is not None]
        rows = [
            new_row(
                schedule.name,
                s,
                RunStatus.MISSED,
                Trigger.SELF,
                CoordinationOutcome.CLUSTER,
                now,
                self.replica_id,
            )
            for s in mine
        ]
        if excluded:
            rows = [
                excluded_row(replace(r, fired_at=now), why)
                if (why := excluded.get((r.name, r.scheduled_at))) is not None
                else r
                for r in rows
            ]
        return [r.scheduled_at for r in await self.insert(rows)]


class Membership:
    """This replica's beat: be a member, own what rendezvous gives it, and answer what it took
    over with the catch-up each takeover owes (the caller starts them)."""

    def __init__(
        self,
        *,
        gate: ClusterGate,
        store: Store,
        clock: Clock,
        schedules: Sequence[Schedule],
        heartbeat_ms: int,
        versions: Versions = NO_VERSIONS,
    ) -> None:
        self.gate = gate
        self.versions = versions
        self.leases = gate.leases
        self.store = store
        self.clock = clock
        self.replica_id = gate.replica_id
        self.schedules = {s.name: s for s in schedules}
        self.heartbeat_ms = heartbeat_ms
        self.ttl_ms = LEASE_BEATS * heartbeat_ms
        self.handover = timedelta(milliseconds=heartbeat_ms) + BOOT_GRACE
        """Slots this recent at a takeover fell in a handover (released here, taken at the
        heir's next beat): they fire whatever the backfill policy."""
        self.members: list[str] = []
        self._created: set[str] = set()
        self._assignment: tuple[list[str], list[str]] | None = None
        """The last beat's members and what rendezvous gave this replica among them (see
        :meth:`want`)."""

    def put(self, schedule: Schedule) -> None:
        """``schedule`` is run here now (a run-time one written): the next beat shares it out."""
        self.schedules[schedule.name] = schedule
        self._assignment = None

    def pop(self, name: str) -> None:
        """``name`` is no longer run here (a run-time one deleted)."""
        if self.schedules.pop(name, None) is not None:
            self._assignment = None

    def want(self, members: list[str]) -> list[str]:
        """The schedules this replica should own among ``members``. Kept while neither the
        members nor the schedules change: at 100,000 schedules and three members the
        rendezvous is 300,000 hashes (~0.3 s of CPU), and every beat would pay it."""
        cached = self._assignment
        if cached is not None and cached[0] == members:
            return cached[1]
        want = assigned(sorted(self.schedules), members, self.replica_id)
        self._assignment = (list(members), want)
        return want

    async def beat(self) -> dict[str, CatchUpPlan]:
        """One beat: register, compute the assignment, renew/release/take leases; returns the
        catch-up each schedule taken over at this beat owes (name → plan, only those with
        something to fire or record). A store failure skips the beat (nothing taken): held
        leases are then trusted only until their local bound, and expire on the database by
        themselves."""
        sent = time.monotonic()
        try:
            members = await self.leases.beat(self.replica_id, self.ttl_ms)
            if self.replica_id not in members:
                members = sorted([*members, self.replica_id])
            want = self.want(members)
            ensure = [n for n in want if n not in self._created]
            held = await self.leases.sync(self.replica_id, want, self.ttl_ms, ensure=ensure)
        except StoreUnavailableError as exc:
            logger.warning("scheduler: cluster beat failed — holding no new leases: %s", exc)
            return {}
        self._created.update(ensure)
        if members != self.members:
            logger.info(
                "scheduler: cluster members  count=%d members=%s owns=%d",
                len(members),
                ",".join(members),
                len(want),
            )
            self.members = members
        valid_until = sent + self.ttl_ms / 1000
        answered = time.monotonic()
        released: list[str] = []
        lost: list[str] = []
        moved: list[str] = []
        for name in list(self.gate.held):
            token = held.get(name)
            mine = self.gate.held[name]
            if token is None or token != mine.token:
                self.gate.drop(name)
                heir = owner_of(name, members)
                if name not in self.schedules:
                    # a run-time schedule deleted (Engine.disarm_written): released, not lost
                    released.append(f"name={name}")
                elif heir == self.replica_id:  # it was taken while this replica was silent
                    lost.append(f"name={name}")
                else:
                    moved.append(f"name={name} to={heir or '-'}")
            elif answered >= mine.valid_until:
                # This replica stopped trusting the lease before this renewal came back (a late
                # beat), so the gate refused the slots due meanwhile — yet the database kept it
                # ours, so nobody else fired them. Taken over again from the ledger, they are
                # caught up instead of lost.
                self.gate.drop(name)
                logger.warning(
                    "schedule: lease lapsed here but held — catching up  name=%s token=%d",
                    name,
                    token,
                )
            else:
                mine.valid_until = valid_until
        _tell(logging.INFO, "lease released — schedule deleted", released)
        _tell(logging.WARNING, "lease lost — taken over", lost)
        _tell(logging.INFO, "ownership moved", moved)
        gained = {n: t for n, t in held.items() if n in self.schedules and n not in self.gate.held}
        return await self._take_over(gained, valid_until) if gained else {}

    async def _take_over(
        self, gained: dict[str, int], valid_until: float
    ) -> dict[str, CatchUpPlan]:
        try:
            last = await self.store.last_runs(list(gained))
        except StoreUnavailableError as exc:
            # Not held yet: the next beat finds the leases ours again and retries this.
            logger.warning("scheduler: takeover read failed — retrying next beat: %s", exc)
            return {}
        now = self.clock.now()
        plans: dict[str, CatchUpPlan] = {}
        taken: list[str] = []
        for name, token in gained.items():
            schedule = self.schedules[name]
            last_run = last.get(name)
            last_slot = None if last_run is None else last_run.scheduled_at
            ours = self.gate.admitted_before(name)
            if ours is not None and (last_slot is None or ours > last_slot):
                last_slot = ours  # admitted here, its row not (yet) in the ledger
            boundary = now if last_slot is None else max(now, last_slot)
            plan = plan_takeover(
                last_slot,
                boundary,
                self.handover,
                backfill=schedule.backfill,
                recorded=self.versions.current(name) is not None,
                owed=partial(self.versions.owed, schedule),
            )
            held = Held(token, boundary, valid_until, set(plan.fire) | set(plan.missed))
            self.gate.hold(name, held)
            taken.append(
                f"name={name} token={token} fire={len(plan.fire)} missed={len(plan.missed)}"
            )
            if plan.fire or plan.missed:
                plans[name] = plan
        _tell(logging.INFO, "took ownership", taken)
        return plans

    async def leave(self) -> None:
        """Graceful shutdown: give every lease back so the others take over at their next
        beat instead of after the expiry."""
        self.gate.held.clear()
        try:
            await self.leases.leave(self.replica_id)
        except StoreUnavailableError as exc:
            logger.warning("scheduler: could not leave the cluster (leases expire): %s", exc)


LOG_EACH = 20
"""Ownership changes of one kind at one beat logged a line each, up to this many: a replica
joining or leaving a fleet of 100,000 schedules moves tens of thousands at once — a line each
was hundreds of thousands of lines, and seconds of the beat that must renew the leases."""


def _tell(level: int, what: str, items: list[str]) -> None:
    """Log ``items`` (the ``name=…`` parts of one kind of change) a line each, or — more than
    :data:`LOG_EACH` — one line with their count and the first five."""
    if len(items) <= LOG_EACH:
        for item in items:
            logger.log(level, "schedule: %s  %s", what, item)
    elif items:
        logger.log(
            level, "schedule: %s  count=%d first: %s …", what, len(items), "; ".join(items[:5])
        )
