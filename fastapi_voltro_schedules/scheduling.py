"""``Scheduling``: the object an app wires into its lifespan.

Boot order: validate the schedule set against the app-wide config, pick the coordination the
store can serve (warn on a fallback), make sure the ledger schema is there (SQLite: migrate;
a server database: refuse to start until ``voltro migrate`` ran), take the database's clock on
a server store, log what will run, arm. The steps themselves live in :mod:`.boot`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import datetime, timedelta
from functools import partial
from types import ModuleType
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup

from . import wiring
from .arrivals import Arrivals
from .backfill import RangePlan, RangeSummary, plan_range, refuse_if_running, run_range
from .boot import (
    build_engine,
    check_schedules,
    database_clock,
    firer_lock,
    follow_database_clock,
    log_boot,
)
from .catalog import Catalog, PutResult, load_runtime_schedules, newest_effective
from .clock import Clock, DatabaseClock, SystemClock, iso_z
from .config import (
    CoordinationChoice,
    SchedulingConfig,
    StoreKind,
    resolve_coordination,
    store_kind,
)
from .context import WorkflowStarter
from .definition import Schedule
from .definitions import NO_VERSIONS, Versions, record_versions
from .discovery import check_unique_names, discover_handlers, discover_schedules
from .engine import Engine
from .enums import (
    BackfillPolicy,
    Coordination,
    OverlapPolicy,
    RecordPolicy,
    Reprocess,
    TriggerMode,
)
from .errors import (
    ConfigurationError,
    ScheduleNotFoundError,
    SchedulePausedError,
    SchedulerDisabledError,
    SchedulerNotRunningError,
    SchedulerShuttingDownError,
    StoreUnavailableError,
)
from .external_missed import watch_external_missed
from .fire_requests import FireRequest, Why
from .handlers import NamedHandler, check_unique_handlers
from .leadership import Leadership
from .listing import Cursor, ListingFilter, NameIndex, select_page
from .logs import ensure_visible, logger
from .metrics import SchedulerMetrics, default_metrics
from .monitors import Monitor
from .monitors.feed import Monitors, both, check_monitors
from .outcomes import OutcomeHook, OutcomeHooks, check_hook
from .pauses import ALL_SCHEDULES, NO_PAUSES, Pauses, PauseView
from .retries import RetryPolicy
from .store.instrumented import InstrumentedStore
from .tokens import Tokens, load_tokens

if TYPE_CHECKING:
    from fastapi import FastAPI
    from sqlalchemy.ext.asyncio import AsyncEngine

    from .store import PauseRecord, RunRecord, Store


class Scheduling:
    """The scheduler of one app: its schedules, config, store and clock.

    ``FastAPI(lifespan=scheduling.lifespan)``, or ``async with scheduling.run(app):`` inside a
    lifespan of your own.

    ``on_outcome``: called once per outcome this process records (see :mod:`.outcomes`).
    ``monitors``: cron monitors checked in from the ledger — ``SentryCronsMonitor``,
    ``HealthchecksMonitor`` (see :mod:`.monitors`); beside ``on_outcome``, not instead of it.
    ``metrics``: the collectors to feed (default: the process-wide ones on prometheus_client's
    global registry, which ``GET /metrics`` serves).
    """

    def __init__(
        self,
        schedules: Iterable[Schedule] = (),
        *,
        config: SchedulingConfig | None = None,
        engine: AsyncEngine | None = None,
        clock: Clock | None = None,
        workflows: WorkflowStarter | None = None,
        on_outcome: OutcomeHook | None = None,
        metrics: SchedulerMetrics | None = None,
        handlers: Iterable[NamedHandler] = (),
        monitors: Iterable[Monitor] = (),
    ) -> None:
        self.schedules: list[Schedule] = check_unique_names(list(schedules))
        self.handlers: dict[str, NamedHandler] = check_unique_handlers(handlers)
        """The handlers run-time schedules may name (``define_handler``), by name."""
        self._declared = {s.name for s in self.schedules}
        """The names declared in code (run-time writes cannot take them)."""
        self.catalog: Catalog | None = None
        """The run-time schedules of the running scheduler (:mod:`.catalog`)."""
        self._seen_at_boot: datetime | None = None
        self.on_outcome = check_hook(on_outcome)
        self.metrics = metrics if metrics is not None else default_metrics()
        self._hooks: OutcomeHooks | None = None
        self.monitors: list[Monitor] = check_monitors(monitors)
        self._monitors: Monitors | None = None
        self.config = config if config is not None else SchedulingConfig()
        self.clock: Clock = clock if clock is not None else SystemClock()
        self._wall_clock: Clock | None = None
        """The clock given, while :meth:`run` uses the database's (:class:`DatabaseClock`)."""
        self.workflows = workflows
        self._engine = engine
        self.store_kind: StoreKind = store_kind(
            engine.dialect.name if engine is not None else self.config.database_url
        )
        self.coordination: CoordinationChoice = resolve_coordination(
            self.config.coordination, self.store_kind
        )
        self.store: Store | None = None
        self.engine: Engine | None = None
        self.arrivals: Arrivals | None = None
        """The external arrivals of the running scheduler (:mod:`.arrivals`): what this run
        remembers of the occurrences it answered dies with it."""
        self.app: FastAPI | None = None
        self.pauses: Pauses | None = None
        """The process's copy of the pauses table (while running)."""
        self.versions: Versions = NO_VERSIONS
        """Each schedule's definition versions, recorded at boot (:mod:`.definitions`)."""
        self.tokens: Tokens = Tokens()
        """The route tokens, parsed and checked at boot (:func:`load_tokens`)."""
        self._running = False
        self._leadership: Leadership | None = None
        self._names = NameIndex()
        """The schedules sorted by name, for the listing's pages (:mod:`.listing`)."""
        wiring.register(self)  # so schedules_router's lifespan can find a module-level one

    @classmethod
    def from_package(cls, package: str | ModuleType, **kwargs: Any) -> Scheduling:
        """A scheduler for every schedule and handler in the package's ``*_cron`` modules
        (``handlers=`` given too: added to the ones found)."""
        handlers = [*discover_handlers(package), *kwargs.pop("handlers", ())]
        return cls(discover_schedules(package), handlers=handlers, **kwargs)

    @property
    def active(self) -> bool:
        """Inside :meth:`run` (booted, or switched off by ``scheduler_enabled=False``)."""
        return self._running

    @property
    def fires_here(self) -> bool:
        """Whether this process arms the timer (``False`` in a process that only serves the
        routes of a SQLite file another process fires, see ``leadership.py``)."""
        return self._leadership is not None and self._leadership.armed

    @property
    def effective_coordination(self) -> Coordination:
        return self.coordination.effective

    def trigger_of(self, schedule: Schedule) -> TriggerMode:
        return schedule.effective_trigger(self.config.trigger)

    def ledger_target(self) -> str | AsyncEngine:
        """Where this scheduler's ledger lives: the shared engine, else ``config.database_url``
        (normalised) — what ``voltro migrate --app`` migrates."""
        return self._engine if self._engine is not None else self.config.database_url

    def get(self, name: str) -> Schedule | None:
        # a dict lookup: a scan of the list was ~2.5 ms at 100,000 schedules, on every runs
        # page and every external arrival
        return self._names_now().by_name.get(name)

    def _names_now(self) -> NameIndex:
        catalog = self.catalog
        # the set changes at boot, at stop and with each run-time write the catalog applies
        stamp = (id(self.schedules), len(self.schedules), id(catalog), catalog and catalog.changes)
        self._names.refresh(self.schedules, stamp)
        return self._names

    async def schedule_page(
        self, filters: ListingFilter, cursor: Cursor | None, limit: int
    ) -> tuple[list[Schedule], str | None]:
        """One page of the schedules listing, by name (see :mod:`.listing`), and the cursor of
        the next (``None``: the last page)."""
        names = self._names_now()
        pauses = await self.current_pauses()
        page = await select_page(self.store, names, filters, cursor, limit, pauses.is_paused)
        by_name = names.by_name
        return [by_name[n] for n in page.names], page.next_cursor

    def _schedule_named(self, name: str) -> Schedule | None:
        """``name``'s definition for a check-in: the engine's (a dict, run-time edits
        included) while it runs, the list's before."""
        engine = self.engine
        return engine.schedule_named(name) if engine is not None else self.get(name)

    def validate(self) -> None:
        """Boot-time checks that need the app-wide defaults (definition time could not)."""
        check_schedules(self.schedules, self.config, self.workflows)

    @property
    def lifespan(self) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
        """For ``FastAPI(lifespan=scheduling.lifespan)``."""

        @asynccontextmanager
        async def lifespan(app: FastAPI) -> AsyncIterator[None]:
            async with self.run(app):
                yield

        return lifespan

    @asynccontextmanager
    async def run(
        self, app: FastAPI | None = None, *, arm: bool = True
    ) -> AsyncIterator[Scheduling]:
        """Boot the scheduler for the duration of the block. Entering twice is a no-op.

        ``arm=False`` boots the ledger and the engine without any timer or watcher (runs still
        get their watchdog and heartbeat): what the CLI uses to run a range backfill against the
        app's database from another process.
        """
        if self._running:
            yield self
            return
        self._running = True
        if not self.config.scheduler_enabled:
            try:
                self._disabled_boot(app)
                yield self
            finally:
                self._running = False
            return
        leadership: Leadership | None = None
        try:
            store = await self._boot(app)
            self.pauses = pauses = Pauses(store, self.clock)
            await pauses.refresh()  # before any timer is armed: a paused schedule stays quiet
            self.engine = engine = build_engine(
                self.config,
                store,
                self.clock,
                self.schedules,
                coordination=self.effective_coordination,
                app=self.app,
                workflows=self.workflows,
                pauses=pauses,
                versions=self.versions,
            )
            self.arrivals = Arrivals(engine, store)
            self.catalog = catalog = Catalog(
                store=store,
                clock=self.clock,
                engine=engine,
                versions=self.versions,
                handlers=self.handlers,
                declared=self._declared,
                listing=self.schedules,
                replica_id=self.config.replica_id,
                heartbeat_ms=self.config.schedule_heartbeat_ms,
            )
            if self._seen_at_boot is not None:
                catalog.start_from(self._seen_at_boot)
            pauses.due_in = lambda: engine.timer.seconds_until_next()
            failure: Exception | None = None

            async def arm_timer(tg: TaskGroup) -> None:
                await tg.start(engine.supervise)
                tg.start_soon(partial(watch_external_missed, self, metrics=self.metrics))

            def serve_runs(tg: TaskGroup) -> None:
                # Not the firer: no supervisor, so admitted runs (Run now, the trigger route)
                # execute in this group until a takeover arms the engine's own.
                engine.dispatcher.bind(tg)

            async with anyio.create_task_group() as tg:
                if self._hooks is not None:
                    tg.start_soon(self._hooks.run)
                if self._monitors is not None:
                    tg.start_soon(self._monitors.run)
                tg.start_soon(engine.runner.watchdog.run)
                if isinstance(self.clock, DatabaseClock):
                    tg.start_soon(follow_database_clock, self.clock)
                await tg.start(pauses.run)
                # every process follows the run-time writes (a non-firer too: it lists them,
                # and its engine must hold them when it takes over the firing)
                tg.start_soon(catalog.follow)
                if arm:
                    lock = firer_lock(self.ledger_target())
                    leadership = Leadership(lock, arm_timer, serve_runs)
                    self._leadership = leadership
                    await leadership.start(tg)
                else:
                    serve_runs(tg)  # no timer (the CLI's in-process verbs): runs execute here
                try:
                    yield self
                except Exception as exc:
                    # The caller's own error leaves as itself, not wrapped in the task group's
                    # ExceptionGroup.
                    failure = exc
                finally:
                    if leadership is not None and await leadership.stop():
                        await engine.stop()
                    else:
                        await engine.drain()  # runs outside a supervisor get the grace too
                    if self._hooks is not None:
                        await self._hooks.close()  # deliver the shutdown's outcomes too
                    if self._monitors is not None:
                        await self._monitors.close()  # and check them in
                    tg.cancel_scope.cancel()  # the watchdog and the watcher loop until told
            if failure is not None:
                raise failure
        finally:
            if leadership is not None:
                leadership.release()
            self._leadership = None
            await self._shutdown()
            self._running = False

    async def plan_backfill(
        self,
        name: str,
        start: str | datetime,
        end: str | datetime,
        *,
        confirm: bool = False,
        limit: int | None = None,
        reprocess: Reprocess | str | None = None,
        dry_run: bool = False,
    ) -> RangePlan:
        """Check a range backfill without firing (raises when it would be refused — also when
        a live range of the schedule is running): each slot with its current status and
        whether it fires under ``reprocess`` (``none`` by default, see :class:`Reprocess`).

        ``dry_run``: the plan is only to be shown — no confirmation is asked, and neither a
        pause nor a range in progress refuses it (it reads the ledger and writes nothing);
        :meth:`run_backfill` of it fires nothing."""
        schedule = self.schedule(name)
        store = self.running_engine().store
        if not dry_run:
            await self._refuse_if_paused(name)
        plan = await plan_range(
            store,
            schedule,
            start,
            end,
            confirm=confirm,
            limit=limit,
            now=self.clock.now(),
            reprocess=reprocess,
            dry_run=dry_run,
        )
        if not dry_run:
            now, beat = self.clock.now(), self.config.schedule_heartbeat_ms
            await refuse_if_running(store, plan, now, beat)
        return plan

    async def backfill(
        self,
        name: str,
        start: str | datetime,
        end: str | datetime,
        *,
        confirm: bool = False,
        limit: int | None = None,
        reprocess: Reprocess | str | None = None,
        dry_run: bool = False,
        progress: Callable[[RangeSummary], Awaitable[None] | None] | None = None,
        stop: anyio.Event | None = None,
    ) -> RangeSummary:
        """Range backfill: fire the occurrences of ``name`` in ``(start, end]`` that
        ``reprocess`` says (``none``: only those with nothing recorded; ``failed``: also the
        failed and missed ones; ``all``: every one) in order, as ``manual`` runs — each only if
        it wins its claim, so concurrent backfills run a slot once. Refusals
        (:class:`BackfillRefusedError`) fire nothing. ``dry_run``: fire nothing, write
        nothing; ``summary.states`` lists each slot with its current status. ``stop`` set:
        the range stops after the slot in flight (``summary.stopped``)."""
        plan = await self.plan_backfill(
            name, start, end, confirm=confirm, limit=limit, reprocess=reprocess, dry_run=dry_run
        )
        return await self.run_backfill(plan, progress=progress, stop=stop)

    async def run_backfill(
        self,
        plan: RangePlan,
        *,
        progress: Callable[[RangeSummary], Awaitable[None] | None] | None = None,
        stop: anyio.Event | None = None,
    ) -> RangeSummary:
        """Fire a range :meth:`plan_backfill` planned (the second half of :meth:`backfill`,
        for a caller that answers the refusals before it starts)."""
        return await run_range(
            self.running_engine(),
            self.schedule(plan.schedule),
            plan,
            heartbeat_ms=self.config.schedule_heartbeat_ms,
            progress=progress,
            stop=stop,
        )

    def spawn_request_work_under_scheduler(
        self, work: Callable[[], Coroutine[Any, Any, None]]
    ) -> None:
        """Start ``work`` — work a request starts that must outlive the request (a range
        backfill's slots) — in the running scheduler's own task group, where its runs live,
        not the caller's: its lifetime is the scheduler's, not the request's (a client that
        disconnects cancels its request, and must not cancel a range's slot in flight with
        it). :class:`SchedulerShuttingDownError` once the scheduler is stopping: nothing
        starts."""
        dispatcher = self.running_engine().dispatcher
        if not dispatcher.running_background:
            raise SchedulerShuttingDownError("the scheduler is shutting down — nothing was fired")
        dispatcher.spawn(work)

    def schedule(self, name: str) -> Schedule:
        """The schedule named ``name``; :class:`ScheduleNotFoundError` if there is none."""
        schedule = self.get(name)
        if schedule is None:
            raise ScheduleNotFoundError(name)
        return schedule

    def running_engine(self) -> Engine:
        """The engine of the running scheduler; :class:`ConfigurationError` outside ``run``,
        :class:`SchedulerDisabledError` when ``scheduler_enabled`` is false."""
        if not self.config.scheduler_enabled:
            raise SchedulerDisabledError(self.disabled_message())
        if self.engine is None:
            raise ConfigurationError(
                "the scheduler is not running — call this inside `async with "
                "scheduling.run(app):` or the app's lifespan"
            )
        return self.engine

    def running_store(self) -> Store:
        """The running scheduler's store (the ledger the inspect routes read, through the
        metrics seam); :class:`SchedulerNotRunningError` (503) before boot or after stop."""
        if self.store is None:
            raise SchedulerNotRunningError()
        return self.store

    async def fire_now(self, name: str) -> RunRecord:
        """Run now: run ``name`` immediately (``trigger="manual"``), whatever ``on_overlap``
        says. Returns once the run row exists; the handler runs in the background."""
        schedule = self.schedule(name)
        engine = self.running_engine()
        await self._refuse_if_paused(name)
        firing = await engine.fire(FireRequest(schedule, engine.clock.now(), Why.RUN_NOW))
        assert firing.admission.run is not None  # else the door raised
        return firing.admission.run

    def running_catalog(self) -> Catalog:
        """The run-time schedules of the running scheduler (``ConfigurationError`` outside
        ``run``, ``SchedulerDisabledError`` when switched off)."""
        self.running_engine()
        assert self.catalog is not None  # set with the engine
        return self.catalog

    async def put_schedule(
        self,
        name: str,
        *,
        cron: str,
        timezone: str,
        handler: str,
        args: Mapping[str, Any] | None = None,
        on_overlap: OverlapPolicy | str = OverlapPolicy.SKIP,
        backfill: BackfillPolicy | str = BackfillPolicy.SKIP,
        max_runtime_ms: int | None = None,
        retry: RetryPolicy | Mapping[str, Any] | None = None,
        exclude: object = None,
        record: RecordPolicy | str | None = None,
        by: str | None = None,
    ) -> PutResult:
        """Create or replace the run-time schedule ``name`` — every replica runs it within
        one heartbeat (at once under ``change_strategy="cdc"`` on Postgres), this one at once
        (see :mod:`.catalog`). ``handler`` names a
        ``define_handler``; ``args`` (a JSON object, at most
        :data:`~.runtime_schedules.MAX_ARGS_BYTES`) reach each firing as ``ctx.args``.
        ``retry``: a :class:`~.retries.RetryPolicy` (or its wire form ``{"attempts",
        "backoffMs", "maxBackoffMs"}``); ``None``: the handler's own (``define_handler``).
        ``exclude``: days it does not run — dates or ISO date strings, holidays specs
        (``{"country": "DE", "subdiv": "BY"}``) or ``holidays`` calendars, or a list of them;
        an excluded slot is recorded ``skipped`` (see :mod:`.exclusions`).
        ``record``: ``"all"`` (default) or ``"failures"`` — successes counted per hour instead
        of a row each (:class:`~.enums.RecordPolicy`).

        Refused, writing nothing: :class:`~.errors.InvalidScheduleError` (``.field`` names
        the bad field), :class:`~.errors.DeclaredInCodeError` (a name declared in code)."""
        return await self.running_catalog().put(
            name,
            cron=cron,
            timezone=timezone,
            handler=handler,
            args=args,
            on_overlap=on_overlap,
            backfill=backfill,
            max_runtime_ms=max_runtime_ms,
            retry=retry,
            exclude=exclude,
            record=record,
            by=by,
        )

    async def delete_schedule(self, name: str, by: str | None = None) -> None:
        """Delete the run-time schedule ``name`` on every replica (a firing in flight
        finishes; nothing new fires). :class:`~.errors.ScheduleNotFoundError` when there is
        none; :class:`~.errors.DeclaredInCodeError` for a declared one."""
        await self.running_catalog().delete(name, by=by)

    async def current_pauses(self) -> PauseView:
        """The pauses copy, looked at again first when it is old (:meth:`Pauses.current`);
        before the scheduler runs nothing is paused."""
        if self.pauses is None:
            return NO_PAUSES
        await self.pauses.current()
        return self.pauses

    async def _refuse_if_paused(self, name: str) -> None:
        record = (await self.current_pauses()).get(name)
        if record is not None and record.active:
            raise SchedulePausedError(
                name,
                paused_at=iso_z(record.paused_at),
                paused_by=record.paused_by,
                reason=record.reason,
                every_schedule=record.name == ALL_SCHEDULES,
            )

    def running_pauses(self) -> Pauses:
        """The pauses of the running scheduler; :class:`ConfigurationError` outside ``run``."""
        self.running_engine()
        assert self.pauses is not None  # set before the engine
        return self.pauses

    async def pause(self, name: str, *, by: str, reason: str | None = None) -> PauseRecord:
        """Pause ``name`` on every replica (see :mod:`.pauses`). Idempotent."""
        self.schedule(name)
        return await self.running_pauses().pause(name, by=by, reason=reason)

    async def resume(self, name: str, *, by: str) -> PauseRecord | None:
        """Resume ``name`` from its next occurrence; ``None`` when it was not paused."""
        self.schedule(name)
        return await self.running_pauses().resume(name, by=by)

    async def pause_all(
        self, *, by: str, reason: str | None = None, until: datetime | None = None
    ) -> PauseRecord:
        """Pause every schedule on every replica — run-time ones written meanwhile too — until
        :meth:`resume_all`, or until ``until`` (an aware instant after now: every replica
        fires again by itself after it). Nothing inside the window is replayed. Idempotent: a
        window in force keeps its who/when/why and takes the new ``until``."""
        return await self.running_pauses().pause_all(by=by, reason=reason, until=until)

    async def resume_all(self, *, by: str) -> PauseRecord | None:
        """End the fleet-wide pause now (its window is not caught up; schedules paused on
        their own stay paused); ``None`` when every schedule was never paused at once."""
        return await self.running_pauses().resume_all(by=by)

    def disabled_message(self) -> str:
        return (
            "the scheduler is disabled (VOLTRO_SCHEDULER_ENABLED=false / "
            "SchedulingConfig(scheduler_enabled=False)): nothing is armed and no database is "
            "open — unset it (or set it to true) to run schedules in this process"
        )

    def _disabled_boot(self, app: FastAPI | None) -> None:
        """The off switch: bind the app (so routes can say why) and touch nothing else."""
        ensure_visible()
        self.validate()
        self.app = app
        if app is not None:
            app.state.scheduling = self
        logger.info(
            "scheduler: disabled (VOLTRO_SCHEDULER_ENABLED=false) — %d schedule(s) not armed, "
            "no database opened; the routes answer 503 scheduler_disabled",
            len(self.schedules),
        )

    async def _boot(self, app: FastAPI | None) -> Store:
        from .migrations import ensure_schema
        from .store import SQLStore, create_store

        ensure_visible()
        self.validate()
        self.tokens = load_tokens(self.config)
        for warning in self.tokens.warnings:
            logger.warning("scheduler: %s", warning)
        self.app = app
        if app is not None:
            app.state.scheduling = self
            app.state.workflows = self.workflows
        if self.coordination.warning:
            logger.warning(self.coordination.warning)
        store = (
            create_store(engine=self._engine)
            if self._engine is not None
            else create_store(self.config.database_url)
        )
        self.store = store
        # Migrate through the store's own engine: an in-memory SQLite lives on that one
        # connection only.
        target = store.engine if isinstance(store, SQLStore) else self.config.database_url
        await ensure_schema(target)
        # Every ledger call of the engine, the watchers and the routes goes through here: the
        # one seam where outcomes become metrics, hook calls and monitor check-ins.
        self._hooks = hooks = OutcomeHooks(self.on_outcome) if self.on_outcome is not None else None
        self._monitors = monitors = (
            Monitors(
                self.monitors,
                self._schedule_named,
                timedelta(milliseconds=self.config.external_trigger_skew_ms),
            )
            if self.monitors
            else None
        )
        self.store = InstrumentedStore(
            store,
            self.metrics,
            both(
                hooks.submit if hooks is not None else None,
                monitors.recorded if monitors is not None else None,
            ),
            monitors.started if monitors is not None else None,
        )
        if store.supports_multi_instance and isinstance(self.clock, SystemClock):
            self._wall_clock = self.clock
            self.clock = await database_clock(self.clock, self.store, self.config)
        # Before anything plans a slot: catch-up, takeovers and the external missed watcher
        # owe only what the versions say.
        # Every schedule's versions — the run-time ones too, armed below with the declared
        # ones (the same catch-up, from their versions) — read once, and kept current by the
        # recording.
        known = await self.store.definitions()
        self.versions = await record_versions(
            self.store,
            self.schedules,
            self.trigger_of,
            self.clock.now(),
            self.config.replica_id,
            known=known,
        )
        self.schedules.extend(load_runtime_schedules(known, self.handlers, self._declared))
        self._seen_at_boot = newest_effective(known)
        self.metrics.watch(self)
        log_boot(self.schedules, self.config, self.effective_coordination, self.clock.now())
        return self.store

    async def schema_pending(self) -> str | None:
        """Why the ledger's schema is not the one this version runs on — ``"is at revision X,
        head is Y"`` — or ``None`` when it is (or the store keeps no SQL schema). What the
        readiness probe asks on each call: a ``voltro migrate`` of another release, or a
        restored database, changes the answer while the process runs. Database errors
        propagate (the probe reads them as the ledger not answering)."""
        from sqlalchemy.exc import SQLAlchemyError

        from .migrations import pending_upgrade
        from .store.instrumented import sql_store_behind

        store = None if self.store is None else sql_store_behind(self.store)
        if store is None:
            return None
        try:
            return await pending_upgrade(store.engine)
        except (SQLAlchemyError, OSError) as exc:
            raise StoreUnavailableError(f"store schema check: {exc}") from exc

    def next_fire_times(self) -> Mapping[str, datetime]:
        """When each schedule fires next: the armed timer of a ``self`` schedule, the next
        occurrence of an ``external`` one (``voltro_schedule_next_fire_timestamp_seconds``)."""
        engine = self.engine
        if engine is None:
            return {}
        now = self.clock.now()
        times: dict[str, datetime] = {}
        for schedule in self.schedules:
            if self.trigger_of(schedule) is TriggerMode.EXTERNAL:
                times[schedule.name] = schedule.next_occurrence(now)
            else:
                at = engine.next_firing(schedule.name)
                if at is not None:
                    times[schedule.name] = at
        return times

    async def _shutdown(self) -> None:
        self.engine = None
        self.catalog = None
        # the run-time schedules are the table's: the next boot loads them again
        self.schedules[:] = [s for s in self.schedules if s.source != "runtime"]
        self.arrivals = None
        if self._wall_clock is not None:
            self.clock, self._wall_clock = self._wall_clock, None
        self.metrics.unwatch(self)
        self._hooks = None
        self._monitors = None
        if isinstance(self.store, InstrumentedStore):
            self.store.forget_running()
        self.pauses = None
        if self.store is not None:
            await self.store.dispose()
            self.store = None
