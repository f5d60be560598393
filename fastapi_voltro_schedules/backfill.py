"""Range backfill: an operator names ``(from, to]`` and every occurrence in it runs, in order.

The verb is bounded and confirmable, because a range verb that can enqueue 100k runs is an
outage generator: above :data:`CONFIRM_ABOVE` occurrences it refuses until confirmed; above
the limit (default :data:`DEFAULT_LIMIT`, raisable to :data:`HARD_CEILING`) it refuses outright.
A refusal fires nothing — never a silent prefix. Every answer says how many of the slots
already have a ``succeeded`` run.

Which slots run is the ``reprocess`` policy's (:class:`~.enums.Reprocess`, decided per slot by
``planning.plan_reprocess`` from what the ledger says of it): by default only the slots with
nothing recorded. A slot run again gets a new ``manual`` row; its earlier rows stay as they
were, so its history is kept and the audit (which never counts ``manual`` rows as duplicates)
stays clean. Every step is elected by a claim written with its row — the slot's own key for a
slot with nothing recorded, a key naming the row it re-runs for a re-run — so two backfills
(or a backfill and a clock-driven firing of an empty slot) never run one slot twice. A dry run
(:func:`plan_range` alone) reads the ledger and writes nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Protocol

import anyio

from .clock import Clock, iso_z
from .definition import Schedule
from .enums import Reprocess, RunStatus
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
from .models import claim_key, rerun_claim_key
from .planning import DEAD_AFTER_BEATS, SlotAction, SlotPlan, plan_reprocess
from .store import RunRecord, Store

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


def parse_range(start: str | datetime, end: str | datetime) -> tuple[datetime, datetime]:
    """``(from, to]`` parsed, ``from`` before ``to`` (:class:`BackfillRequestError` naming the
    field otherwise)."""
    begin = parse_instant(start, "from")
    finish = parse_instant(end, "to")
    if begin >= finish:
        raise BackfillRequestError(
            f"from={iso_z(begin)} is not before to={iso_z(finish)} — the range is (from, to]"
        )
    return begin, finish


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
    """The occurrences of a range, what the ledger says of each, which of them a backfill
    under :attr:`reprocess` fires — and what the operator should know first."""

    schedule: str
    start: datetime
    end: datetime
    slots: list[datetime]
    """Every occurrence in ``(start, end]``, oldest first."""
    already_succeeded: int
    limit: int
    reprocess: Reprocess = Reprocess.NONE
    states: list[SlotPlan] = field(default_factory=list)
    """Each of :attr:`slots` with its current status and what happens to it."""
    dry_run: bool = False
    """Planned to be shown, not fired: :func:`run_range` of it fires nothing."""

    @property
    def count(self) -> int:
        """The occurrences in the range (what the limit bounds)."""
        return len(self.slots)

    @property
    def firing(self) -> list[SlotPlan]:
        """The slots this backfill fires, oldest first."""
        return [state for state in self.states if state.fires]

    @property
    def to_run(self) -> int:
        """How many slots this backfill fires (what the confirmation is about)."""
        return sum(1 for state in self.states if state.fires)

    @property
    def kept(self) -> int:
        """Slots left as they are: their outcome stands under :attr:`reprocess`, or a run of
        them is in progress."""
        return self.count - self.to_run


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
    reprocess: Reprocess = Reprocess.NONE
    to_run: int = 0
    """The slots the plan fires (``count`` minus :attr:`kept`)."""
    kept: int = 0
    """Slots not fired: their outcome stands under ``reprocess``, or a run is in progress."""
    taken: int = 0
    """Slots of the plan another process ran first (it won the slot's claim): not run here."""
    dry_run: bool = False
    """Nothing fired: :attr:`states` says what would have."""
    states: list[SlotPlan] = field(default_factory=list)
    """Each slot of the range as the plan found it: its status then, and what the backfill
    does (did) with it."""


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


def check_reprocess(value: Reprocess | str | None) -> Reprocess:
    """``none`` (the default), ``failed`` or ``all``; anything else is bad input naming the
    field."""
    if value is None:
        return Reprocess.NONE
    try:
        return Reprocess(value)
    except ValueError:
        choices = ", ".join(r.value for r in Reprocess)
        raise BackfillRequestError(
            f"reprocess={shown(value)!r} is not one of {choices} — none runs only the slots "
            "with nothing recorded, failed also re-runs failed and missed ones, all re-runs "
            "every slot"
        ) from None


def _rerun_note(plan: RangePlan) -> str:
    """What the operator should know of the slots that already succeeded."""
    if plan.reprocess is Reprocess.ALL:
        return f"{plan.already_succeeded:,} of them already succeeded and would run again"
    return f"{plan.already_succeeded:,} of them already succeeded and are not run again"


async def range_rows(store: Store, name: str, after: datetime, until: datetime) -> list[RunRecord]:
    """``name``'s rows with ``after < scheduled_at <= until`` (any trigger and status), read
    newest first in keyset pages."""
    rows: list[RunRecord] = []
    before: datetime = until + timedelta(microseconds=1)
    before_id: str | None = None
    while True:
        page = await store.list_runs(name, limit=_ROWS_PAGE, before=before, before_id=before_id)
        inside = [row for row in page if row.scheduled_at > after]
        rows += inside
        if len(page) < _ROWS_PAGE or len(inside) < len(page):
            return rows
        before, before_id = page[-1].scheduled_at, page[-1].id


_ROWS_PAGE = 1000


async def plan_range(
    store: Store,
    schedule: Schedule,
    start: str | datetime,
    end: str | datetime,
    *,
    confirm: bool = False,
    limit: int | None = None,
    now: datetime | None = None,
    reprocess: Reprocess | str | None = None,
    dry_run: bool = False,
) -> RangePlan:
    """Validate a request, read what the ledger says of each of its slots and decide which
    fire under ``reprocess``; raise :class:`BackfillRefusedError` when it must not fire
    (nothing has fired when this raises). With ``now``, a range reaching past it is refused
    (``reason="future"``): a backfill runs what passed, never what is still due.

    Reads only: the plan is also the answer of a dry run (``dry_run``: no confirmation is
    asked — nothing would fire)."""
    policy = check_reprocess(reprocess)
    begin, finish = parse_range(start, end)
    bound = check_limit(limit)
    slots = schedule.occurrences(begin, finish, limit=HARD_CEILING + 1)
    count_text = f"more than {HARD_CEILING:,}" if len(slots) > HARD_CEILING else f"{len(slots):,}"
    where = f'"{schedule.name}" in ({iso_z(begin)}, {iso_z(finish)}]'
    if len(slots) > bound:
        # Refused before the ledger is read: the range is too big to even look at.
        already = len(await store.succeeded_slots(schedule.name, begin, slots[-1]))
        raise BackfillRefusedError(
            f"refused: {where} has {count_text} occurrences, above the limit of {bound:,} "
            f"({already:,} already succeeded) — nothing fired; run it in slices"
            + ("" if bound >= HARD_CEILING else f" or raise the limit (ceiling {HARD_CEILING:,})"),
            reason="over-limit",
            count=len(slots),
            already_succeeded=already,
        )
    rows = await range_rows(store, schedule.name, begin, slots[-1]) if slots else []
    states = plan_reprocess(slots, rows, policy.value)
    if schedule.exclude is not None:
        # an excluded day is not run by a backfill either: the slot is not owed
        states = [
            replace(state, action=SlotAction.EXCLUDED)
            if state.fires and schedule.excluded(state.slot) is not None
            else state
            for state in states
        ]
    already = sum(1 for state in states if state.status is RunStatus.SUCCEEDED)
    plan = RangePlan(schedule.name, begin, finish, slots, already, bound, policy, states, dry_run)
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
    if plan.to_run > CONFIRM_ABOVE and not confirm and not dry_run:
        raise BackfillRefusedError(
            f"needs confirmation: {where} has {len(slots):,} occurrences ({_rerun_note(plan)}"
            f"; reprocess={policy.value}) and {plan.to_run:,} of them would run — re-run "
            'with --yes / "confirm": true after reading the number',
            reason="needs-confirmation",
            count=len(slots),
            already_succeeded=already,
        )
    return plan


def summary_of(plan: RangePlan) -> RangeSummary:
    """The summary of ``plan`` before anything fired (a dry run's answer)."""
    return RangeSummary(
        plan.schedule,
        plan.count,
        plan.already_succeeded,
        reprocess=plan.reprocess,
        to_run=plan.to_run,
        kept=plan.kept,
        dry_run=plan.dry_run,
        states=list(plan.states),
    )


async def run_range(
    engine: RangeFirer,
    schedule: Schedule,
    plan: RangePlan,
    *,
    heartbeat_ms: int,
    progress: Callable[[RangeSummary], Awaitable[None] | None] | None = None,
    stop: anyio.Event | None = None,
) -> RangeSummary:
    """Fire the slots ``plan`` fires (:attr:`RangePlan.firing`) sequentially, in order, each as
    a ``manual`` run with its own ``scheduled_at``, each only if it wins its claim; a failed
    slot is recorded and the next still fires. A dry run's plan fires nothing, takes no lock
    and writes nothing: its summary is the plan.

    ``stop`` set (the HTTP client went away): the range stops cleanly after its in-flight slot
    (``summary.stopped``). A lost lock or a slot that cannot be recorded stops it the same way
    with :class:`BackfillStoppedError`; a lock refresh that fails is retried.

    Two range backfills of one schedule never interleave: a claims row
    ``<name>@range-backfill`` is the lock, kept fresh while held; one silent for three beats
    belonged to a process that died and is taken over.
    """
    if plan.dry_run:
        return summary_of(plan)
    store, clock, replica = engine.store, engine.clock, engine.replica_id
    key = schedule.name + LOCK_SUFFIX
    await _acquire(store, key, replica, clock.now(), heartbeat_ms, schedule.name)
    summary = summary_of(plan)
    lock = _RangeLock(store, clock, key, replica, heartbeat_ms, schedule.name)
    error: VoltroError | None = None
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lock.keep_fresh)
            logger.info(
                "schedule: range backfill  name=%s slots=%d from=%s to=%s alreadySucceeded=%d "
                "reprocess=%s toRun=%d",
                schedule.name,
                plan.count,
                iso_z(plan.start),
                iso_z(plan.end),
                plan.already_succeeded,
                plan.reprocess.value,
                plan.to_run,
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
    firing = plan.firing
    for index, state in enumerate(firing):
        slot = state.slot
        remaining = len(firing) - index
        if lock.lost:
            raise BackfillStoppedError(
                f'range backfill of "{schedule.name}" stopped before {iso_z(slot)}: its lock is '
                f"held by {lock.lost_to} now — {summary.fired} of {plan.to_run} slots ran; "
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
                plan.to_run,
                iso_z(slot),
            )
            summary.stopped = "client-gone"
            return
        try:
            claim = step_claim(schedule.name, state)
            request = FireRequest(schedule, slot, Why.RANGE, claim=claim)
            step = await engine.fire(request)
            # None: another process won the slot — or took its pending retry over (RetryPolicy):
            # either way it ran there, and is counted below as taken
            status = await step.finished()
        except StoreUnavailableError as exc:
            # The driver's text stays in the log: this message is also an HTTP answer.
            logger.warning("schedule: range backfill stopped  name=%s: %s", schedule.name, exc)
            raise BackfillStoppedError(
                f'range backfill of "{schedule.name}" stopped at {iso_z(slot)}: the slot could '
                "not be recorded (the database did not answer; its error is in the app's log) "
                f"— {summary.fired} of {plan.to_run} slots ran; resume "
                f"from {iso_z(slot - timedelta(seconds=1))} once the database is back",
                reason="store-unavailable",
                fired=summary.fired,
                remaining=remaining,
            ) from exc
        if status is None:
            # Another process won the slot's claim (another backfill re-ran this outcome, or a
            # clock-driven firing took the empty slot): it ran there, not again here.
            summary.taken += 1
            logger.info(
                "schedule: range backfill — slot taken elsewhere, not run here  name=%s slot=%s",
                schedule.name,
                iso_z(slot),
            )
        else:
            summary.fired += 1
            if status is RunStatus.SUCCEEDED:
                summary.succeeded += 1
            else:
                summary.failed += 1
        if progress is not None:
            result = progress(summary)
            if result is not None:
                await result


def step_claim(name: str, state: SlotPlan) -> str:
    """The claims key a range step must win: the slot's own when nothing is recorded for it
    (the key a clock-driven firing of it claims), else one naming the row it re-runs."""
    if state.action is SlotAction.RERUN and state.current is not None:
        return rerun_claim_key(name, state.slot, state.current.id)
    return claim_key(name, state.slot)


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
