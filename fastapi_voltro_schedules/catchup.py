"""Boot catch-up: slots that passed while no process ran, per each schedule's ``backfill``.

Computed from each schedule's last run row, before the live timer is armed: the ``missed``
rows are written and every catch-up firing admitted before :func:`catch_up` returns, so a
caught-up firing never races the first live one.

An ``all`` catch-up is durable and ordered: each owed slot joins the schedule's line with a
row of its own (``queued`` until its turn) before the live timer is armed, whatever the
schedule's ``on_overlap`` — so replicas booting together share the slots and skip none, a
``queue`` line runs them with the live slots by ``scheduled_at``, and a stop or crash in the
middle leaves every unreached slot recorded ``queued``. :func:`resume_orphans` (at boot and
every three heartbeats) puts such rows of a stopped replica back in line, as the backfill
policy still owes them (``planning.plan_resume``); :func:`resume_retries` takes over the
retries a stopped replica left pending (``RetryPolicy``), and :func:`resume_jobs` the handed-off
jobs it was following (:mod:`.handoff`), on the same beat.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

import anyio

from .coordination import Verdict
from .definitions import NO_VERSIONS, Versions
from .enums import BackfillPolicy, RunStatus, Trigger
from .errors import StoreUnavailableError
from .fire_requests import Due, FireRequest, Why
from .ledger import mark_abandoned
from .logs import logger
from .pauses import NO_PAUSES, PauseView
from .planning import BOOT_GRACE, CatchUpPlan, is_live, plan_boot_backfill, plan_resume

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .definition import Schedule
    from .dispatcher import Dispatcher
    from .store import RunRecord, Store


async def catch_up(
    store: Store,
    dispatcher: Dispatcher,
    schedules: Sequence[Schedule],
    now: datetime,
    pauses: PauseView = NO_PAUSES,
    versions: Versions = NO_VERSIONS,
) -> dict[str, datetime]:
    """Plan and start the catch-up of every schedule; returns where each schedule's live
    timer continues (schedules with neither a row nor a recorded version are absent: they
    start from now)."""
    if not schedules:
        return {}
    last_runs = await store.last_runs([s.name for s in schedules])
    start_from: dict[str, datetime] = {}
    plans: list[tuple[Schedule, CatchUpPlan]] = []
    # Slots of the last moments are not downtime: a replica booting just after an instant
    # leaves it to the live timer (which claims it like its peers do) instead of recording it
    # missed under another replica's feet.
    horizon = now - BOOT_GRACE
    for schedule in schedules:
        last = last_runs.get(schedule.name)
        after = None if last is None else last.scheduled_at
        if after is None and versions.current(schedule.name) is None:
            continue  # never ran and never recorded: nothing is owed yet
        if pauses.is_paused(schedule.name):
            continue  # the live timer drops its slots until resumed
        since = pauses.catch_up_from(schedule.name, after)
        # Only the slots the definition versions say are owed: a cron edited between deploys
        # owes no slot of its new cadence from before it took effect (definitions.py). A
        # previous cadence's slots are never the live timer's (it follows the current cron),
        # so they are owed up to the moment it ended even within the boot grace — else a slot
        # of the old cron just before this deploy's edit took effect had no row at all.
        cadence = versions.cadence_from(schedule.name)
        until = horizon if cadence is None else max(horizon, min(now, cadence))
        slots, capped = versions.owed(schedule, since, until)
        plan = plan_boot_backfill(slots, schedule.backfill, capped)
        # A last slot ahead of now (the clock stepped back across a restart) must not run
        # again, nor a slot of a cadence that took effect after the horizon (this very boot):
        # the live timer continues after whichever is newest.
        marks = (plan.last_planned, since, cadence)
        start_from[schedule.name] = max(horizon, *(m for m in marks if m is not None))
        if plan.fire or plan.missed:
            plans.append((schedule, plan))
            logger.info(
                "schedule: backfill  name=%s policy=%s passed=%d fire=%d missed=%d%s",
                schedule.name,
                schedule.backfill.value,
                len(slots),
                len(plan.fire),
                len(plan.missed),
                " (capped at the newest 1000 slots)" if capped else "",
            )
    # Every schedule's missed slots in one write (10,000 schedules after an outage are one
    # insert, not 10,000 transactions queued ahead of the first live herd), then the firings.
    await dispatcher.record_missed([(s, plan.missed) for s, plan in plans], Trigger.SELF)
    async with anyio.create_task_group() as prefix:
        for schedule, plan in plans:
            prefix.start_soon(_fire_plan, dispatcher, schedule, plan)
    return start_from


async def start_plans(
    dispatcher: Dispatcher, taken: Sequence[tuple[Schedule, CatchUpPlan]]
) -> None:
    """Carry the catch-ups a ``cluster`` takeover owes out together: every schedule's
    ``missed`` slots in one write, then every slot to fire as one :class:`Due` through the door
    — one slot of a schedule without a line joins one herd (one fenced insert for all), a
    line's slots join it oldest first. One by one, a takeover of 3,000 schedules at a herd's
    instant was 3,000 firings, each with its own fenced insert, racing for the pool: the store
    stopped answering within its 8 s bound and 2,619 of 10,000 slots failed closed (bench herd,
    Postgres ×3 `cluster`)."""
    await dispatcher.record_missed([(s, plan.missed) for s, plan in taken], Trigger.SELF)
    due = Due(why=Why.CATCH_UP)
    for schedule, plan in taken:
        if plan.fire:
            due.add(schedule, list(plan.fire))
    if due.schedules:
        await dispatcher.fire(due)


async def _fire_plan(dispatcher: Dispatcher, schedule: Schedule, plan: CatchUpPlan) -> None:
    # Every slot to fire joins the line now, oldest first, before the live timer is armed:
    # the line then runs them in slot order ahead of any live slot. One after another in the
    # background instead, a live slot joining meanwhile went ahead of the older ones (09:10,
    # 09:40, 09:20, 09:30), a `skip` recorded a slot skipped while a peer ran the one before,
    # and a stop left the unreached ones without a row.
    # (a `queue` schedule's slots join its line anyway; `latest` fires one slot; under `all`
    # Why.CATCH_UP makes each slot owed: it joins the line whatever the overlap rule)
    for slot in plan.fire:
        await dispatcher.fire(FireRequest(schedule, slot, Why.CATCH_UP))


async def resume_orphans(
    store: Store,
    dispatcher: Dispatcher,
    schedules: Sequence[Schedule],
    now: datetime,
    *,
    heartbeat_ms: int,
    here: Callable[[str], bool],
) -> int:
    """Put the silent ``queued`` rows a stopped replica left — slots still owed under their
    schedule's ``backfill`` (``planning.plan_resume``) — back in their lines, taken over by
    this replica; returns how many it took. ``here``: whether this process beats a row."""
    by_name = {s.name: s for s in schedules if s.backfill is BackfillPolicy.ALL}
    if not by_name:
        return 0  # only `all` owes a stopped replica's queued rows: nothing to read
    try:
        queued = await store.queued_names()
    except StoreUnavailableError as exc:
        logger.warning("scheduler: owed queued rows check failed: %s", exc)
        return 0
    taken = 0
    for name, rows in queued.items():
        schedule = by_name.get(name)
        if schedule is None:
            continue  # the line's (adoption), or written off at boot (Maintenance.write_off)
        owed = plan_resume(
            rows, backfill=schedule.backfill, now=now, heartbeat_ms=heartbeat_ms, here=here
        )
        for row in owed:
            firing = await dispatcher.fire(FireRequest(schedule, row.scheduled_at, Why.RESUME, row))
            taken += firing.admission.verdict is Verdict.QUEUED
    return taken


def _left_behind(
    row: RunRecord, now: datetime, heartbeat_ms: int, here: Callable[[str], bool]
) -> bool:
    """A ``running`` row no process beats any more — not this one's (``here``), silent past
    the dead rule: a stopped replica's, for a live one to take over."""
    return (
        row.status is RunStatus.RUNNING
        and not here(row.id)
        and not is_live(row.status, row.fired_at, row.heartbeat_at, now, heartbeat_ms)
    )


async def resume_retries(
    store: Store,
    dispatcher: Dispatcher,
    schedules: Sequence[Schedule],
    rows: Sequence[RunRecord],
    now: datetime,
    *,
    heartbeat_ms: int,
    here: Callable[[str], bool],
) -> int:
    """Take over the retries a stopped replica left pending — among ``rows`` (the ``running``
    rows with ``retry_at`` set the reaper just read), the silent ones — through the door
    (:attr:`Why.RETRY`: the take-over compares the beat judged silent, so one replica gets
    each; the attempt then starts when due, unless the slot's window closed meanwhile).
    Returns how many it took. Such a row of a schedule no replica here can retry (a deleted or
    renamed one: ``schedules`` holds the external ones too) is marked ``failed/abandoned``
    instead, its last failure kept in the message. ``here``: whether this process beats a row."""
    by_name = {s.name: s for s in schedules if s.retry is not None}
    taken = 0
    for row in rows:
        if row.retry_at is None or not _left_behind(row, now, heartbeat_ms, here):
            continue
        schedule = by_name.get(row.name)
        if schedule is None:
            await mark_abandoned(store, row.name, [row], now, heartbeat_ms, pending=True)
            continue
        firing = await dispatcher.fire(FireRequest(schedule, row.scheduled_at, Why.RETRY, row))
        taken += firing.admission.verdict is Verdict.QUEUED
    return taken


async def resume_jobs(
    store: Store,
    dispatcher: Dispatcher,
    schedules: Sequence[Schedule],
    rows: Sequence[RunRecord],
    now: datetime,
    *,
    heartbeat_ms: int,
    here: Callable[[str], bool],
    hands_off: bool,
) -> int:
    """Take over the handed-off jobs a stopped replica was following — among ``rows`` (the
    ``running`` rows naming a job the reaper just read), the silent ones — through the door
    (:attr:`Why.FOLLOW`: the take-over compares the beat judged silent, so one replica gets
    each; the firing then runs again here, enqueueing the same job id — a no-op when the job
    exists — and following it). Returns how many it took. Such a row of a schedule this app
    does not declare, or when this app has no hand-off starter (``hands_off``), is marked
    ``failed/abandoned`` as any corpse. ``here``: whether this process beats a row."""
    by_name = {s.name: s for s in schedules}
    taken = 0
    for row in rows:
        if (
            row.job_id is None
            or row.retry_at is not None
            or not _left_behind(row, now, heartbeat_ms, here)
        ):
            continue
        schedule = by_name.get(row.name)
        if schedule is None or not hands_off:
            await mark_abandoned(store, row.name, [row], now, heartbeat_ms, jobs=True)
            continue
        firing = await dispatcher.fire(FireRequest(schedule, row.scheduled_at, Why.FOLLOW, row))
        taken += firing.admission.verdict is Verdict.RUN
    return taken
