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
from .errors import BackfillRefusedError, BackfillRequestError, shown
from .logs import logger
from .store import Store

CONFIRM_ABOVE = 25
DEFAULT_LIMIT = 1000
HARD_CEILING = 10_000
LOCK_SUFFIX = "@range-backfill"


class RangeFirer(Protocol):
    """What a range backfill needs of the scheduler (the engine, or its dispatcher): fire one
    manual slot and wait for it."""

    store: Store
    clock: Clock
    replica_id: str

    async def run_manual(self, schedule: Schedule, slot: datetime) -> RunStatus: ...
EARLIEST_INSTANT = datetime(1970, 1, 1, tzinfo=UTC)
LATEST_INSTANT = datetime(9000, 1, 1, tzinfo=UTC)
"""Instants a caller may name (range bounds, the runs cursor, a stated arrival time) lie in
``[EARLIEST_INSTANT, LATEST_INSTANT]``: far around any instant a schedule fires at, and far
inside what the cron math (which looks 100 years ahead and 5 back) and the ledger columns
(MariaDB ``DATETIME``: years 1000–9999) can hold. Year 1 or 9999 overflowed them (a 500)."""

INSTANT_RANGE = f"between {iso_z(EARLIEST_INSTANT)[:19]}Z and {iso_z(LATEST_INSTANT)[:19]}Z"


def out_of_range(instant: datetime) -> bool:
    """Whether an aware ``instant`` lies outside the instants a caller may name."""
    return not EARLIEST_INSTANT <= instant <= LATEST_INSTANT


def parse_instant(value: str | datetime, field_name: str) -> datetime:
    """An ISO-8601 instant with a zone (``2026-08-10T00:00:00Z`` or ``…+02:00``), between
    :data:`EARLIEST_INSTANT` and :data:`LATEST_INSTANT`."""
    if isinstance(value, datetime):
        parsed = value
    else:
        try:
            parsed = datetime.fromisoformat(value.strip())
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
) -> RangePlan:
    """Validate a request and count its slots; raise :class:`BackfillRefusedError` when it
    must not fire (nothing has fired when this raises)."""
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
) -> RangeSummary:
    """Fire every slot of ``plan`` sequentially, in order, each as a ``manual`` run with its
    own ``scheduled_at``; a failed slot is recorded and the next still fires.

    Two range backfills of one schedule never interleave: a claims row
    ``<name>@range-backfill`` is the lock, kept fresh while held; one silent for three beats
    belonged to a process that died and is taken over.
    """
    store, clock, replica = engine.store, engine.clock, engine.replica_id
    key = schedule.name + LOCK_SUFFIX
    await _acquire(store, key, replica, clock.now(), heartbeat_ms, schedule.name)
    summary = RangeSummary(schedule.name, plan.count, plan.already_succeeded)
    try:
        async with anyio.create_task_group() as tg:

            async def keep_fresh() -> None:
                while True:
                    await clock.sleep(heartbeat_ms / 1000)
                    await store.touch_claim(key, replica, clock.now())

            tg.start_soon(keep_fresh)
            logger.info(
                "schedule: range backfill  name=%s slots=%d from=%s to=%s alreadySucceeded=%d",
                schedule.name,
                plan.count,
                iso_z(plan.start),
                iso_z(plan.end),
                plan.already_succeeded,
            )
            for slot in plan.slots:
                status = await engine.run_manual(schedule, slot)
                summary.fired += 1
                if status is RunStatus.SUCCEEDED:
                    summary.succeeded += 1
                else:
                    summary.failed += 1
                if progress is not None:
                    result = progress(summary)
                    if result is not None:
                        await result
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await store.release_claim(key, replica_id=replica)
    return summary


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
        if now - claimed_at > timedelta(milliseconds=3 * heartbeat_ms):
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
