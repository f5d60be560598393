"""What ``Scheduling`` settles at boot besides opening the ledger and arming the timer.

Check the schedule set against the app-wide config, choose the clock the replicas share, build
the engine the config asks for, pick the SQLite one-firer lock, and say what will run. Each
step takes what it reads as arguments — the schedules, the config, the store — and never the
``Scheduling`` itself: this room sits below the facade and never imports it back.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from .clock import Clock, DatabaseClock, iso_z
from .config import SchedulingConfig
from .context import WorkflowStarter
from .definitions import Versions
from .engine import Engine
from .enums import ChangeStrategy, Coordination, TriggerMode
from .errors import ConfigurationError, StoreUnavailableError
from .leadership import FirerLock, sqlite_file
from .ledger import Ledger
from .logs import logger
from .pauses import PauseView
from .runner import Runner
from .watchdog import Watchdog

if TYPE_CHECKING:
    from fastapi import FastAPI
    from sqlalchemy.ext.asyncio import AsyncEngine

    from .definition import Schedule
    from .store import Store

CLOCK_DRIFT_WARN_SECONDS = 1.0
"""A host clock this far from the database's is worth a boot warning: the database's clock
decides, but the host's time sync is broken."""


def check_schedules(
    schedules: Sequence[Schedule], config: SchedulingConfig, workflows: WorkflowStarter | None
) -> None:
    """The checks that need the app-wide defaults (definition time could not make them)."""
    for schedule in schedules:
        trigger = schedule.effective_trigger(config.trigger)
        if schedule.has_seconds and trigger is TriggerMode.EXTERNAL:
            raise ConfigurationError(
                f'schedule "{schedule.name}" (module {schedule.module}): cron '
                f'"{schedule.cron}" has a seconds field but inherits trigger="external" '
                "from VOLTRO_TRIGGER — platform schedulers are minute-granular; set "
                'trigger="self" on the schedule or use a five-field cron'
            )
        if schedule.fallback is not None and trigger is TriggerMode.SELF:
            raise ConfigurationError(
                f'schedule "{schedule.name}" (module {schedule.module}) sets '
                f'fallback="{schedule.fallback.value}" but inherits trigger="self" from '
                "VOLTRO_TRIGGER — a fallback backs up a platform scheduler, and this "
                'schedule has none; set trigger="external" on the schedule (or '
                "VOLTRO_TRIGGER=external), or drop fallback="
            )
        if schedule.workflow is not None and workflows is None:
            raise ConfigurationError(
                f'schedule "{schedule.name}" (module {schedule.module}) targets workflow '
                f'"{schedule.workflow.name}" but no workflow starter is configured — pass '
                "Scheduling(workflows=<object with async start(name, payload) -> str>)"
            )


# -- the clock ---------------------------------------------------------------------------


async def database_clock(local: Clock, store: Store, config: SchedulingConfig) -> DatabaseClock:
    """The shared database's clock for a server store (see :class:`DatabaseClock`), read once;
    warns when this host's own clock is off by more than :data:`CLOCK_DRIFT_WARN_SECONDS`."""
    tolerance = min(timedelta(seconds=1), timedelta(milliseconds=config.schedule_heartbeat_ms / 4))
    clock = DatabaseClock(local, store.database_now, tolerance)
    try:
        await clock.resync()
    except StoreUnavailableError as exc:
        # the schema check just reached it: a blip, not a reason to refuse to boot
        logger.warning(
            "scheduler: could not read the database's clock at boot (%s) — this host's clock "
            "stands in until the next read, in %.0f s",
            exc,
            clock.RESYNC_SECONDS,
        )
        return clock
    drift = clock.offset.total_seconds()
    if abs(drift) >= CLOCK_DRIFT_WARN_SECONDS:
        logger.warning(
            "scheduler: this host's clock is %.1f s %s the database's — firing times and "
            "liveness follow the database's clock; fix the host's time sync (NTP)",
            abs(drift),
            "behind" if drift > 0 else "ahead of",
        )
    return clock


async def follow_database_clock(clock: DatabaseClock) -> None:
    """Re-read the database's clock every :attr:`DatabaseClock.RESYNC_SECONDS`, until
    cancelled. A failed read keeps the estimate, which carries on the monotonic clock."""
    while True:
        await clock.sleep(clock.RESYNC_SECONDS)
        try:
            await clock.resync()
        except StoreUnavailableError as exc:
            logger.warning("scheduler: could not read the database's clock: %s", exc)


# -- the engine --------------------------------------------------------------------------


def build_engine(
    config: SchedulingConfig,
    store: Store,
    clock: Clock,
    schedules: Sequence[Schedule],
    *,
    coordination: Coordination,
    app: FastAPI | None,
    workflows: WorkflowStarter | None,
    pauses: PauseView,
    versions: Versions,
) -> Engine:
    """The engine for the running scheduler: its ``self`` schedules, the config's policies."""
    triggers = {s.name: s.effective_trigger(config.trigger) for s in schedules}
    runner = Runner(
        ledger=Ledger(store, clock, config.replica_id),
        watchdog=Watchdog(clock, store, config.replica_id, config.schedule_heartbeat_ms),
        clock=clock,
        app=app,
        workflows=workflows,
    )
    return Engine(
        schedules=[s for s in schedules if triggers[s.name] is TriggerMode.SELF],
        store=store,
        clock=clock,
        runner=runner,
        coordination=coordination,
        replica_id=config.replica_id,
        heartbeat_ms=config.schedule_heartbeat_ms,
        shutdown_grace_ms=config.shutdown_grace_ms,
        run_retention_ms=config.run_retention_ms,
        claim_retention_ms=config.claim_retention_ms,
        watched_names=[s.name for s in schedules],
        overlaps={s.name: s.on_overlap for s in schedules},
        adoption_window_ms=config.queue_adoption_window_ms,
        change_strategy=change_strategy(config, store),
        pauses=pauses,
        versions=versions,
        external=[s for s in schedules if triggers[s.name] is TriggerMode.EXTERNAL],
    )


def change_strategy(config: SchedulingConfig, store: Store) -> ChangeStrategy:
    """The effective ``change_strategy``: ``cdc`` needs Postgres (LISTEN/NOTIFY); anywhere
    else it falls back to the poll, with a boot warning — never silently."""
    wanted = config.change_strategy
    if wanted is ChangeStrategy.CDC and store.dialect_name != "postgresql":
        logger.warning(
            "scheduling.change_strategy=cdc needs postgres (LISTEN/NOTIFY) — falling back "
            "to poll (%s): queued firings notice a finished run within 1 s",
            store.dialect_name,
        )
        return ChangeStrategy.POLL
    return wanted


def firer_lock(ledger: str | AsyncEngine) -> FirerLock | None:
    """The one-firer lock of a SQLite file ledger (``leadership.py``); memory and server
    databases need none.

    ``ledger`` is where the ledger lives — the shared engine given to ``Scheduling(engine=...)``,
    else ``config.database_url`` (:meth:`Scheduling.ledger_target`) — and never the store:
    the store the boot holds is the metrics wrapper, which says nothing of its file.
    """
    from sqlalchemy import make_url

    url = make_url(ledger) if isinstance(ledger, str) else ledger.url
    database = sqlite_file(url)
    return FirerLock(database) if database is not None else None


# -- what will run -----------------------------------------------------------------------


BOOT_LOG_SCHEDULES = 200
"""The boot log lists this many schedules, then counts the rest: a line each for 100,000
schedules was 100,000 lines of noise in the deploy's log and ~3.5 s of the boot."""


def log_boot(
    schedules: Sequence[Schedule],
    config: SchedulingConfig,
    coordination: Coordination,
    now: datetime,
) -> None:
    """The boot log: the counts, the coordinator, and each schedule with its next firing (the
    first :data:`BOOT_LOG_SCHEDULES` of them)."""
    triggers = {s.name: s.effective_trigger(config.trigger) for s in schedules}
    counts = {mode: 0 for mode in TriggerMode}
    for trigger in triggers.values():
        counts[trigger] += 1
    logger.info(
        "scheduler: starting  total=%d self=%d external=%d coordinator=%s",
        len(schedules),
        counts[TriggerMode.SELF],
        counts[TriggerMode.EXTERNAL],
        coordination.value,
    )
    for schedule in schedules[:BOOT_LOG_SCHEDULES]:
        trigger = triggers[schedule.name]
        if trigger is TriggerMode.SELF:
            next_firing = iso_z(schedule.next_occurrence(now))
        elif schedule.fallback is not None:
            next_firing = "on trigger (else in-app fallback)"
        else:
            next_firing = "on trigger"
        logger.info(
            "scheduler:   %s  cron=%r tz=%s trigger=%s next=%s",
            schedule.name,
            schedule.cron,
            schedule.timezone,
            trigger.value,
            next_firing,
        )
    if len(schedules) > BOOT_LOG_SCHEDULES:
        logger.info(
            "scheduler:   … and %d more (`voltro schedule list` shows every one)",
            len(schedules) - BOOT_LOG_SCHEDULES,
        )
