"""Range backfill: an operator names ``(from, to]`` and every occurrence in it runs, in order.

The verb is bounded and confirmable, because a range verb that can enqueue 100k runs is an
outage generator: above :data:`CONFIRM_ABOVE` occurrences it refuses until confirmed; above
the limit (default :data:`DEFAULT_LIMIT`, raisable to :data:`HARD_CEILING`) it refuses outright.
A refusal fires nothing — never a silent prefix. Every answer says how many of the slots
already have a ``succeeded`` run, because those run again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol

import anyio

from .clock import Clock, iso_z
from .definition import Schedule
from .enums import RunStatus
from .errors import (
    BackfillRefusedError,
    BackfillRequestError,
    BackfillStoppedError,
    StoreUnavailableError,
    VoltroError,
    shown,
)
from .fire_requests import FireRequest, Why
from .logs import logger
from .planning import DEAD_AFTER_BEATS
from .store import Store

CONFIRM_ABOVE = 25
DEFAULT_LIMIT = 1000
HARD_CEILING = 10_000
LOCK_SUFFIX = "@range-backfill"


class _Ran(Protocol):
    async def finished(self) -> RunStatus | None: ...


class RangeFirer(Protocol):
    """What a range backfill needs of the scheduler (the engine): its one door, through which
    a :attr:`Why.RANGE` request fires one manual slot and returns once it ran."""

    store: Store
    clock: Clock
    replica_id: str

    async def fire(self, request: FireRequest) -> _Ran: ...


EARLIEST_INSTANT = datetime(1970, 1, 1, tzinfo=UTC)
LATEST_INSTANT = datetime(9000, 1, 1, tzinfo=UTC)
"""Instants a caller may name (range bounds, the runs cursor, a stated arrival time) lie in
``[EARLIEST_INSTANT, LATEST_INSTANT]``: far around any instant a schedule fires at, and far
inside what the cron math (which looks 100 years ahead and 400 back) and the ledger columns
(MariaDB ``DATETIME``: years 1000–9999) can hold. Year 1 or 9999 overflowed them (a 500)."""

INSTANT_RANGE = f"between {iso_z(EARLIEST_INSTANT)[:19]}Z and {iso_z(LATEST_INSTANT)[:19]}Z"


def out_of_range(instant: datetime) -> bool:
    """Whether an aware ``instant`` lies outside the instants a caller may name."""
    return not EARLIEST_INSTANT <= instant <= LATEST_INSTANT


def from_iso(text: str) -> datetime:
    """``datetime.fromisoformat`` of a caller's text, strictly: printable ASCII or ``ValueError``.
    ``fromisoformat`` stops reading at a NUL byte, so ``"…T12:00:00\\x00+00:00"`` parsed as
    noon UTC, and text it never read was taken for an instant."""
    text = text.strip()
    if not (text.isascii() and text.isprintable()):
        raise ValueError("an ISO-8601 instant is printable ASCII")
    return datetime.fromisoformat(text)


def parse_instant(value: str | datetime, field_name: str) -> datetime:
    """An ISO-8601 instant with a zone (``2026-08-10T00:00:00Z`` or ``…+02:00``), between
    :data:`EARLIEST_INSTANT` and :data:`LATEST_INSTANT`."""
    if isinstance(value, datetime):
        parsed = value
    else:
        try:
            parsed = from_iso(value)
        except ValueError:
            raise BackfillRequestError(
                f"{field_name}={shown(value)!r} is not an ISO-8601 instant — write e.g. "
                "2026-08-10T00:00:00Z"
            ) from None
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise BackfillRequestError(
            f"{field_name}={shown(value)} has no zone — add one (2026-08-10T00:00:00Z or "
            "2026-08-10T02:00:00+02:00); a range is an absolute instant, never server-local"
        )
    if out_of_range(parsed):
        raise BackfillRequestError(
            f"{field_name}={shown(value if isinstance(value, str) else value.isoformat())} is "
            f"outside the instants this API takes ({INSTANT_RANGE}) — name an instant in "
            "that range"
        )
    return parsed


@dataclass(frozen=True, slots=True)
class RangePlan:
    """The slots a range backfill would fire, and what the operator should know first."""

    schedule: str
    start: datetime
    end: datetime
    slots: list[datetime]
    already_succeeded: int
    limit: int

    @property
    def count(self) -> int:
        return len(self.slots)


@dataclass(slots=True)
class RangeSummary:
    """What a range backfill did."""

    schedule: str
    count: int
    already_succeeded: int
    fired: int = 0
    succeeded: int = 0
    failed: int = 0
    run_ids: list[str] = field(default_factory=list)
    stopped: str | None = None
    """Why the range stopped before its last slot without an error (``"client-gone"``)."""


def check_limit(limit: int | None) -> int:
    if limit is None:
        return DEFAULT_LIMIT
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise BackfillRequestError(f"limit={shown(limit)} must be a positive integer")
    if limit > HARD_CEILING:
        raise BackfillRequestError(
            f"limit={limit} is above the hard ceiling of {HARD_CEILING:,} — run bigger "
            "catch-ups in slices"
        )
    return limit


async def plan_range(
    store: Store,
    schedule: Schedule,
    start: str | datetime,
    end: str | datetime,
    *,
    confirm: bool = False,
    limit: int | None = None,
    now: datetime | None = None,
) -> RangePlan:
    """Validate a request and count its slots; raise :class:`BackfillRefusedError` when it
    must not fire (nothing has fired when this raises). With ``now``, a range reaching past it
    is refused (``reason="future"``): a backfill runs what passed, never what is still due."""
    begin = parse_instant(start, "from")
    finish = parse_instant(end, "to")
    if begin >= finish:
        raise BackfillRequestError(
            f"from={iso_z(begin)} is not before to={iso_z(finish)} — the range is (from, to]"
        )
    bound = check_limit(limit)
    slots = schedule.occurrences(begin, finish, limit=HARD_CEILING + 1)
    count_text = f"more than {HARD_CEILING:,}" if len(slots) > HARD_CEILING else f"{len(slots):,}"
    already = len(await store.succeeded_slots(schedule.name, begin, slots[-1])) if slots else 0
    plan = RangePlan(schedule.name, begin, finish, slots, already, bound)
    where = f'"{schedule.name}" in ({iso_z(begin)}, {iso_z(finish)}]'
    if len(slots) > bound:
        raise BackfillRefusedError(
            f"refused: {where} has {count_text} occurrences, above the limit of {bound:,} "
            f"({already:,} already succeeded) — nothing fired; run it in slices"
            + ("" if bound >= HARD_CEILING else f" or raise the limit (ceiling {HARD_CEILING:,})"),
            reason="over-limit",
            count=len(slots),
            already_succeeded=already,
        )
    # After the limit (the bigger mistake), before the confirmation (never ask to confirm
    # what would be refused anyway).
    if now is not None and finish > now:
        raise BackfillRefusedError(
            f"refused: to={iso_z(finish)} is in the future (the app's clock reads {iso_z(now)})"
            f" — nothing fired; a range backfill runs slots that passed: end it at or before "
            "now and let the timer fire the rest when they fall due",
            reason="future",
            count=len(slots),
            already_succeeded=already,
        )
    if len(slots) > CONFIRM_ABOVE and not confirm:
        raise BackfillRefusedError(
            f"needs confirmation: {where} has {len(slots):,} occurrences ({already:,} of them "
            f"already succeeded and would run again) — re-run with --yes / "
            '"confirm": true after reading the number',
            reason="needs-confirmation",
            count=len(slots),
            already_succeeded=already,
        )
    return plan


async def run_range(
    engine: RangeFirer,
    schedule: Schedule,
    plan: RangePlan,
    *,
    heartbeat_ms: int,
    progress: Callable[[RangeSummary], Awaitable[None] | None] | None = None,
    stop: anyio.Event | None = None,
) -> RangeSummary:
    """Fire every slot of ``plan`` sequentially, in order, each as a ``manual`` run with its
    own ``scheduled_at``; a failed slot is recorded and the next still fires.

    ``stop`` set (the HTTP client went away): the range stops cleanly after its in-flight slot
    (``summary.stopped``). A lost lock or a slot that cannot be recorded stops it the same way
    with :class:`BackfillStoppedError`; a lock refresh that fails is retried.

    Two range backfills of one schedule never interleave: a claims row
    ``<name>@range-backfill`` is the lock, kept fresh while held; one silent for three beats
    belonged to a process that died and is taken over.
    """
    store, clock, replica = engine.store, engine.clock, engine.replica_id
    key = schedule.name + LOCK_SUFFIX
    await _acquire(store, key, replica, clock.now(), heartbeat_ms, schedule.name)
    summary = RangeSummary(schedule.name, plan.count, plan.already_succeeded)
    lock = _RangeLock(store, clock, key, replica, heartbeat_ms, schedule.name)
    error: VoltroError | None = None
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lock.keep_fresh)
            logger.info(
                "schedule: range backfill  name=%s slots=%d from=%s to=%s alreadySucceeded=%d",
                schedule.name,
                plan.count,
                iso_z(plan.start),
                iso_z(plan.end),
                plan.already_succeeded,
            )
            try:
                await _fire_all(engine, schedule, plan, summary, lock, progress, stop)
            except VoltroError as exc:
                # Raised past the task group, not inside it: the caller gets the domain
                # error itself (an `error` line), not an exception group that breaks the stream.
                error = exc
            tg.cancel_scope.cancel()
    finally:
        if not lock.lost:
            with anyio.CancelScope(shield=True):
                try:
                    await store.release_claim(key, replica_id=replica)
                except StoreUnavailableError as exc:  # it goes stale; the next range takes it
                    logger.warning("schedule: range lock not released  name=%s: %s", key, exc)
    if error is not None:
        raise error
    return summary


async def _fire_all(
    engine: RangeFirer,
    schedule: Schedule,
    plan: RangePlan,
    summary: RangeSummary,
    lock: _RangeLock,
    progress: Callable[[RangeSummary], Awaitable[None] | None] | None,
    stop: anyio.Event | None,
) -> None:
    for index, slot in enumerate(plan.slots):
        remaining = plan.count - index
        if lock.lost:
            raise BackfillStoppedError(
                f'range backfill of "{schedule.name}" stopped before {iso_z(slot)}: its lock is '
                f"held by {lock.lost_to} now — {summary.fired} of {plan.count} slots ran; "
                "nothing after them fired (two ranges are never interleaved)",
                reason="lock-lost",
                fired=summary.fired,
                remaining=remaining,
            )
        if stop is not None and stop.is_set():
            logger.warning(
                "schedule: range backfill stopped (its client went away)  name=%s fired=%d of %d "
                "next=%s",
                schedule.name,
                summary.fired,
                plan.count,
                iso_z(slot),
            )
            summary.stopped = "client-gone"
            return
        try:
            step = await engine.fire(FireRequest(schedule, slot, Why.RANGE))
            status = await step.finished()
            assert status is not None  # a range step is admitted RUN, and has run
        except StoreUnavailableError as exc:
            # The driver's text stays in the log: this message is also an HTTP answer.
            logger.warning("schedule: range backfill stopped  name=%s: %s", schedule.name, exc)
            raise BackfillStoppedError(
                f'range backfill of "{schedule.name}" stopped at {iso_z(slot)}: the slot could '
                "not be recorded (the database did not answer; its error is in the app's log) "
                f"— {summary.fired} of {plan.count} slots ran; resume "
                f"from {iso_z(slot - timedelta(seconds=1))} once the database is back",
                reason="store-unavailable",
                fired=summary.fired,
                remaining=remaining,
            ) from exc
        summary.fired += 1
        if status is RunStatus.SUCCEEDED:
            summary.succeeded += 1
        else:
            summary.failed += 1
        if progress is not None:
            result = progress(summary)
            if result is not None:
                await result


class _RangeLock:
    """The range's claims row kept fresh. A refresh that fails is retried (a blip must not
    abort the range); a lock found held by someone else is *lost*: the range stops after its
    in-flight slot."""

    def __init__(
        self, store: Store, clock: Clock, key: str, replica: str, heartbeat_ms: int, name: str
    ) -> None:
        self.store, self.clock, self.key, self.replica = store, clock, key, replica
        self.interval = heartbeat_ms / 1000
        self.name = name
        self.lost = False
        self.lost_to = ""

    async def keep_fresh(self) -> None:
        while True:
            await self.clock.sleep(self.interval)
            while True:
                try:
                    await self._refresh()
                    break
                except StoreUnavailableError as exc:
                    logger.warning(
                        "schedule: range lock refresh failed — retrying  name=%s: %s",
                        self.name,
                        exc,
                    )
                    await anyio.sleep(min(1.0, self.interval / 2))
            if self.lost:
                logger.warning(
                    "schedule: range lock lost  name=%s heldBy=%s — stopping after the slot in "
                    "flight",
                    self.name,
                    self.lost_to,
                )
                return

    async def _refresh(self) -> None:
        now = self.clock.now()
        if await self.store.touch_claim(self.key, self.replica, now):
            return
        holder = await self.store.claim_holder(self.key)
        if holder is None and await self.store.claim(self.key, self.replica, now):
            return  # gone (pruned, released by a hand): ours again
        self.lost = True
        self.lost_to = holder[0] if holder is not None else "another process"


def lock_is_stale(claimed_at: datetime, now: datetime, heartbeat_ms: int) -> bool:
    """Whether a range lock last refreshed at ``claimed_at`` belonged to a process that died.
    A live range refreshes it every beat, so one silent for :data:`DEAD_AFTER_BEATS` beats is
    taken over — the silence after which a run's row counts as dead too."""
    return now - claimed_at > timedelta(milliseconds=DEAD_AFTER_BEATS * heartbeat_ms)


async def refuse_if_running(
    store: Store, plan: RangePlan, now: datetime, heartbeat_ms: int
) -> None:
    """Refuse ``plan`` up front (:class:`BackfillRefusedError` ``in-progress``, with its count)
    when a live range of its schedule holds the lock. Only a hint that saves starting: a range
    that starts between this check and :func:`run_range`'s own is refused there."""
    holder = await store.claim_holder(plan.schedule + LOCK_SUFFIX)
    if holder is None:
        return
    held_by, claimed_at = holder
    if lock_is_stale(claimed_at, now, heartbeat_ms):
        return  # its holder died; run_range takes the lock over
    raise BackfillRefusedError(
        f'refused: a range backfill of "{plan.schedule}" is already running (held by '
        f"{held_by}) — wait for it to finish; two ranges are never interleaved",
        reason="in-progress",
        count=plan.count,
        already_succeeded=plan.already_succeeded,
    )


async def _acquire(
    store: Store, key: str, replica: str, now: datetime, heartbeat_ms: int, name: str
) -> None:
    if await store.claim(key, replica, now):
        return
    holder = await store.claim_holder(key)
    if holder is None:  # released between our two reads
        if await store.claim(key, replica, now):
            return
        holder = await store.claim_holder(key)
    if holder is not None:
        held_by, claimed_at = holder
        if lock_is_stale(claimed_at, now, heartbeat_ms):
            # Its holder stopped refreshing it: died mid-backfill. Take over exactly once.
            if await store.release_claim(key, claimed_at=claimed_at) and await store.claim(
                key, replica, now
            ):
                return
        raise BackfillRefusedError(
            f'refused: a range backfill of "{name}" is already running (held by {held_by}) '
            "— wait for it to finish; two ranges are never interleaved",
            reason="in-progress",
        )
    raise BackfillRefusedError(
        f'refused: a range backfill of "{name}" is already running — wait for it to finish',
        reason="in-progress",
    )
