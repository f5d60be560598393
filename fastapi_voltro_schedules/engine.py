"""The engine: wires the rooms together and owns their lifecycle. It decides nothing itself.

* :mod:`.timer` — the heap of next instants; finds what is due.
* :mod:`.dispatcher` — the one door every firing comes in through (:meth:`Engine.fire`);
  carries admission's answers out through the :mod:`.runner`.
* :mod:`.coordination` — admission: gates (single, claim) and overlap rules (skip, queue).
* :mod:`.catchup` — the boot backfill, and (``cluster``) the catch-up of what each beat of
  the :class:`.coordination.Membership` answers it took over.
* :mod:`.maintenance` — reaper, retention, write-off of orphaned queued rows.
* :mod:`.gcpacing` — full garbage collections moved into the quiet after a herd started; the
  SQLite log is folded there too (``Store.checkpoint``).

Arrows point down: timer → dispatcher → coordination → store.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskStatus

from .catchup import catch_up, resume_jobs, resume_orphans, resume_retries, start_plans
from .context import FiringStarter
from .coordination import (
    Admitter,
    Chain,
    ClaimGate,
    ClusterGate,
    DurableLine,
    InFlight,
    Membership,
    SingleGate,
    SkipRule,
    Wakeups,
)
from .coordination.sharing import shared_schedules
from .definitions import NO_VERSIONS, Versions
from .dispatcher import Dispatcher
from .enums import (
    BackfillPolicy,
    ChangeStrategy,
    Coordination,
    CoordinationOutcome,
    OverlapPolicy,
)
from .errors import StoreUnavailableError
from .gcpacing import shared_pacer
from .logs import logger
from .maintenance import Maintenance, RowlessAccounting
from .metrics import QueueMetrics, default_queue_metrics
from .pauses import NO_PAUSES, PauseView
from .planning import DEAD_AFTER_BEATS, CatchUpPlan
from .runner import Runner
from .timer import Timer

if TYPE_CHECKING:
    from .clock import Clock
    from .definition import Schedule
    from .store import RunRecord, Store

__all__ = ["Engine"]

FOLD_EVERY_S = 1.5
"""The SQLite log is folded at most this often: every other herd at one a second (~4 MB of log
at 1,000 firings a second, what SQLite's own 1,000-page checkpoint took). Folding after every
herd copied the pages rewritten each second twice as often: +3.5% CPU for the same lag."""
FOLD_QUIET_S = 0.1
"""…and only when nothing is due for this long: the fold must not overlap the next herd."""


class Engine:
    """Arms ``self`` schedules and carries out firings. Owned by :class:`Scheduling`."""

    def __init__(
        self,
        *,
        schedules: Sequence[Schedule],
        store: Store,
        clock: Clock,
        runner: Runner,
        coordination: Coordination,
        replica_id: str,
        heartbeat_ms: int,
        shutdown_grace_ms: int,
        run_retention_ms: int | None,
        claim_retention_ms: int | None = None,
        watched_names: Sequence[str] = (),
        overlaps: Mapping[str, OverlapPolicy] | None = None,
        adoption_window_ms: int | None = None,
        change_strategy: ChangeStrategy = ChangeStrategy.POLL,
        queue_metrics: QueueMetrics | None = None,
        pauses: PauseView = NO_PAUSES,
        versions: Versions = NO_VERSIONS,
        external: Sequence[Schedule] = (),
    ) -> None:
        external_names = [s.name for s in external]
        self._schedules = {s.name: s for s in schedules}
        """What this engine runs, by name: a run-time write arms or disarms one in O(1) — ten
        thousand written one after another must not cost ten thousand list rebuilds each."""
        self._external = list(external)
        """The declared ``trigger="external"`` schedules: not this engine's to fire (arrivals
        do), but a silent row of theirs naming a handed-off job is followed here
        (:meth:`resume_jobs`), and a retry one left pending is taken over like a ``self``
        one's (:meth:`resume_retries`)."""
        self.versions = versions
        self.pauses = pauses
        self.store = store
        self.clock = clock
        self.runner = runner
        self.coordination = coordination
        self.replica_id = replica_id
        self.heartbeat_ms = heartbeat_ms
        self.shutdown_grace = shutdown_grace_ms / 1000
        self.inflight = InFlight()
        self.wakeups = Wakeups()
        cluster = coordination is not Coordination.SINGLE
        # cdc: terminal writes are announced with NOTIFY and waiters listen — on Postgres only
        # (elsewhere the setting is refused at boot, see Scheduling).
        self.cdc = change_strategy is ChangeStrategy.CDC
        """Run-time definition writes are announced, and this engine listens for them: a
        replica of any coordination follows them (and a CLI writes them beside one)."""
        self.listens = cluster and self.cdc
        """Terminal writes are announced too: their waiters are on other replicas."""
        self.definition_written: Callable[[str], None] | None = None
        """Told the name of each definition version another process (or this one) wrote, when
        its ``NOTIFY`` arrives (cdc): the catalog reads at once (:meth:`.Catalog.poke`)."""
        claims = ClaimGate(runner.ledger, store, clock, replica_id)
        queue_metrics = queue_metrics or default_queue_metrics()
        gate: SingleGate | ClaimGate | ClusterGate = claims if cluster else SingleGate(claims)
        self.membership: Membership | None = None
        if coordination is Coordination.CLUSTER:
            from .store.leases import LeaseStore

            gate = ClusterGate(LeaseStore(store), claims, clock, replica_id)
            self.membership = Membership(
                gate=gate,
                store=store,
                clock=clock,
                schedules=self.schedules,
                heartbeat_ms=heartbeat_ms,
                versions=versions,
            )
        # Whose overlap rules read the ledger (runs in other processes): every schedule on a
        # fleet; on a SQLite file several workers share, the external ones (their arrivals land
        # on any worker). The rest keep the in-process rules: no read on their firing path.
        shared = shared_schedules(
            cluster=cluster, shared_file=store.shared_file, external=external_names
        )
        line = (
            DurableLine(
                store=store,
                clock=clock,
                replica_id=replica_id,
                heartbeat_ms=heartbeat_ms,
                adoption_window_ms=adoption_window_ms,
                watchdog=runner.watchdog,
                wakeups=self.wakeups,
                metrics=queue_metrics,
            )
            if cluster or (store.shared_file and external_names)
            else None
        )
        self.admitter = Admitter(
            gate=gate,
            fence=gate if isinstance(gate, ClusterGate) else None,
            skip=SkipRule(store, self.inflight, replica_id, heartbeat_ms, shared),
            chain=Chain(self.inflight, runner.watchdog),
            line=line,
            inflight=self.inflight,
            ledger=runner.ledger,
            store=store,
            clock=clock,
            replica_id=replica_id,
            pauses=pauses,
            shared=shared,
        )
        self.dispatcher = Dispatcher(
            admitter=self.admitter,
            runner=runner,
            inflight=self.inflight,
            wakeups=self.wakeups,
            store=store,
            clock=clock,
            coordination=coordination,
            replica_id=replica_id,
        )
        self.fire = self.dispatcher.fire
        """The one door every firing comes in through (:meth:`Dispatcher.fire`): the rooms
        above the engine (arrivals, Run now, the range backfill, the external watcher) hand
        it a :class:`.dispatcher.FireRequest`."""
        # The NOTIFY rides in the terminal write's own transaction: no round trip of its own.
        runner.ledger.announce = self.listens
        self.timer = Timer(clock, self.dispatcher, pauses)
        self.pacer = shared_pacer()
        self._fold_log = store.dialect_name == "sqlite"
        self._folding = False
        self._folded_at = -FOLD_EVERY_S
        self.dispatcher.quiet = self._quiet
        self.dispatcher.settled = self._settled
        self.timer.quiet = self._idle
        self.maintenance = Maintenance(
            store=store,
            clock=clock,
            inflight=self.inflight,
            heartbeat_ms=heartbeat_ms,
            run_retention_ms=run_retention_ms,
            claim_retention_ms=claim_retention_ms,
            watched_names=list(watched_names) or [s.name for s in self.schedules],
            queue_metrics=queue_metrics,
            overlaps=overlaps or {s.name: s.on_overlap for s in self.schedules},
            owing=[s.name for s in self.schedules if s.backfill is BackfillPolicy.ALL],
            rowless=self._rowless_accounting(watched_names),
        )
        self._timer_scope: anyio.CancelScope | None = None
        self._stopped = anyio.Event()

    def _rowless_accounting(self, watched_names: Sequence[str]) -> RowlessAccounting | None:
        """What the claims sweep writes for this app — on a store other processes share (an
        in-memory ledger dies with the only process that could have claimed in it)."""
        if self.store.dialect_name == "memory":
            return None
        own = frozenset(s.name for s in self.schedules)
        outcome = {
            Coordination.SINGLE: CoordinationOutcome.SINGLE,
            Coordination.ADVISORY_LOCK: CoordinationOutcome.WON_LOCK,
            Coordination.CLUSTER: CoordinationOutcome.CLUSTER,
        }[self.coordination]
        return RowlessAccounting(
            replica_id=self.replica_id,
            self_names=own,
            external_names=frozenset(watched_names) - own,
            self_outcome=outcome,
        )

    # -- lifecycle ------------------------------------------------------------------------

    async def supervise(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Catch up on slots missed while down, arm every schedule, keep firing until
        :meth:`stop`."""
        self.pacer.follow()
        try:
            async with anyio.create_task_group() as runs:
                self.dispatcher.bind(runs)
                with anyio.CancelScope() as timer_scope:
                    self._timer_scope = timer_scope
                    await self.maintenance.reap()
                    await self.maintenance.write_off()
                    await self.resume_orphans()
                    await self.resume_retries()
                    await self.resume_jobs()
                    if self.cdc:
                        runs.start_soon(self._listen)
                    now = self.clock.now()
                    if self.membership is not None:
                        # cluster: each owner catches up what it takes over, when it does
                        self._take_over(await self.membership.beat())
                        runs.start_soon(self._membership_loop, self.membership)
                        start_from: dict[str, datetime] = {}
                    else:
                        start_from = await catch_up(
                            self.store,
                            self.dispatcher,
                            self.schedules,
                            now,
                            self.pauses,
                            self.versions,
                        )
                    for schedule in self.schedules:
                        self.timer.arm(schedule, start_from.get(schedule.name, now))
                    runs.start_soon(self.maintenance.retention_loop)
                    runs.start_soon(self._corpse_loop)
                    runs.start_soon(self.runner.ledger.holes.loop)
                    task_status.started()
                    await self.timer.run()
                await self.drain()
                if self.membership is not None:
                    with anyio.CancelScope(shield=True):
                        await self.membership.leave()
                runs.cancel_scope.cancel()
        finally:
            self.dispatcher.bind(None)
            self._stopped.set()

    async def _membership_loop(self, membership: Membership) -> None:
        """``cluster``: beat every heartbeat; start the catch-up of what each beat took over."""
        while True:
            await self.clock.sleep(self.heartbeat_ms / 1000)
            self._take_over(await membership.beat())
            # a takeover's bookkeeping is collected before the next herd, not inside it
            self._quiet()

    def _take_over(self, plans: Mapping[str, CatchUpPlan]) -> None:
        """The membership answered what it took over: each catch-up runs in the background
        (a slow one must not delay the next beat, which renews the leases)."""
        if plans:
            by_name = self._schedules
            taken = [(by_name[name], plan) for name, plan in plans.items()]
            self.dispatcher.spawn(start_plans, self.dispatcher, taken)

    async def resume_orphans(self) -> int:
        """Put the owed ``queued`` rows of stopped replicas back in line (see
        :func:`.catchup.resume_orphans`); returns how many this replica took over."""
        return await resume_orphans(
            self.store,
            self.dispatcher,
            self.schedules,
            self.clock.now(),
            heartbeat_ms=self.heartbeat_ms,
            here=self.runner.watchdog.beats,
        )

    async def resume_retries(self) -> int:
        """Take over the pending retries of stopped replicas among the rows the reaper just
        read (see :func:`.catchup.resume_retries`); returns how many this replica took over."""
        pending, self.maintenance.pending_retries = self.maintenance.pending_retries, []
        return await self._resume_left_behind(resume_retries, pending) if pending else 0

    async def resume_jobs(self) -> int:
        """Take over the handed-off jobs stopped replicas were following, among the rows the
        reaper just read (see :func:`.catchup.resume_jobs`); returns how many this replica took
        over."""
        pending, self.maintenance.pending_jobs = self.maintenance.pending_jobs, []
        if not pending:
            return 0
        hands_off = isinstance(self.runner.workflows, FiringStarter)
        return await self._resume_left_behind(partial(resume_jobs, hands_off=hands_off), pending)

    async def _resume_left_behind(
        self, resume: Callable[..., Awaitable[int]], rows: list[RunRecord]
    ) -> int:
        # every schedule a stopped replica's row may be of: the external ones too (armed
        # nowhere, their rows land on any replica)
        return await resume(
            self.store,
            self.dispatcher,
            [*self.schedules, *self._external],
            rows,
            self.clock.now(),
            heartbeat_ms=self.heartbeat_ms,
            here=self.runner.watchdog.beats,
        )

    async def _corpse_loop(self) -> None:
        """Every three heartbeats — as soon as a silent row counts as dead: mark the dead
        ``running`` rows (the reaper), resume the owed ``queued`` rows a replica that died
        left (in the middle of a catch-up, or with a line waiting) while its peers ran on, take
        over the retries it left pending, and record the slots it left claimed without a
        row."""
        interval = DEAD_AFTER_BEATS * self.heartbeat_ms / 1000
        while True:
            await self.clock.sleep(interval)
            await self.maintenance.reap()
            await self.resume_orphans()
            await self.resume_retries()
            await self.resume_jobs()
            await self.maintenance.account_rowless()

    def _quiet(self) -> None:
        """A herd's handlers have started (or the timer sleeps with nothing due): a full
        collection about to come due runs now, if nothing is due before it would be over
        (:mod:`.gcpacing`)."""
        self.pacer.quiet(self.timer.seconds_until_next())

    def _idle(self) -> None:
        """The timer sleeps with nothing due: both quiet-moment chores."""
        self._quiet()
        self._settled()

    def _settled(self) -> None:
        """A herd's outcomes are all written (or nothing is due): fold the SQLite log, at most
        once a second and not right before the next instant. After the terminal writes, not
        at :meth:`_quiet`: a write landing after the fold keeps SQLite from starting the log
        over, and it grows to the backstop."""
        now = self.clock.monotonic()
        if (
            self._fold_log
            and not self._folding
            and now - self._folded_at >= FOLD_EVERY_S
            and self.timer.seconds_until_next() >= FOLD_QUIET_S
            and self.dispatcher.running_background
        ):
            self._folding, self._folded_at = True, now
            self.dispatcher.spawn(self._fold)

    async def _fold(self) -> None:
        """Fold the write-ahead log (``Store.checkpoint``) off the firing path: the commit
        that crossed SQLite's own threshold would do it inline, before a herd's handlers."""
        try:
            await self.store.checkpoint()
        except StoreUnavailableError as exc:
            # Counted in voltro_schedule_store_errors_total{operation="checkpoint"}; SQLite's
            # own checkpoint stays as the backstop.
            logger.warning("scheduler: could not fold the SQLite log: %s", exc)
        finally:
            self._folding = False

    async def _listen(self) -> None:
        """cdc: wake this replica's waiters on every other replica's terminal write, and its
        catalog on every run-time definition write. A hint: while the channel is down, the
        poll still covers every waiter and the heartbeat every definition."""
        while True:
            try:
                await self.store.listen_changed(
                    self.wakeups.notify,
                    on_definition=self._definition_heard,
                    task_status=_Listening(),
                )
            except Exception as exc:  # the channel broke: poll alone until it is back
                logger.warning("schedule: change notifications lost — polling: %s", exc)
            await anyio.sleep(1.0)

    def _definition_heard(self, name: str) -> None:
        if self.definition_written is not None:
            self.definition_written(name)

    async def stop(self) -> None:
        """Stop arming, give in-flight runs the grace period, cancel the rest (recorded
        ``failed``/``shutdown``). From here nothing new is admitted."""
        self.dispatcher.closing = True
        if self._timer_scope is not None:
            self._timer_scope.cancel()
        await self._stopped.wait()

    async def drain(self) -> None:
        """Give the runs in flight the shutdown grace period to end."""
        if self.inflight.settled:
            return
        logger.info(
            "scheduler: stopping  inFlight=%d graceMs=%d",
            self.inflight.count - len(self.inflight.retrying),
            int(self.shutdown_grace * 1000),
        )
        with anyio.move_on_after(self.shutdown_grace):
            while not self.inflight.settled:
                await self.inflight.idle.wait()

    # -- schedules written at run time ---------------------------------------------------

    @property
    def schedules(self) -> list[Schedule]:
        """What this engine runs (declared, then written, in the order they were armed)."""
        return list(self._schedules.values())

    @property
    def schedule_count(self) -> int:
        """How many schedules this engine runs (no list built: a poll may ask often)."""
        return len(self._schedules)

    def arm_written(self, schedule: Schedule, after: datetime) -> None:
        """Run ``schedule`` — written at run time (new, or an edit of one this engine runs) —
        from ``after``, its version's ``effective_from``: the timer arms its first slot after
        that instant (an edit: after the last slot its previous version accounted for, too);
        the reaper, the queue's write-off and the claims sweep know it; under ``cluster`` the
        next beat shares out its lease. Its firings then take the one door like any other."""
        self._schedules.pop(schedule.name, None)  # an edit moves to the end, as it always did
        self._schedules[schedule.name] = schedule
        self.maintenance.track(
            schedule.name, schedule.on_overlap, schedule.backfill is BackfillPolicy.ALL
        )
        if self.membership is not None:
            self.membership.put(schedule)
        self.timer.rearm(schedule, after)

    def disarm_written(self, name: str) -> bool:
        """Stop running ``name`` (a run-time schedule deleted): nothing new fires; a run in
        flight finishes and is recorded as usual. ``False`` when it was not running here."""
        known = self._schedules.pop(name, None) is not None
        if self.membership is not None:
            self.membership.pop(name)
        return self.timer.disarm(name) or known

    async def write_off_deleted(self, name: str, deleted_at: datetime) -> int:
        """``name`` (a run-time schedule) was deleted at ``deleted_at``: the firings waiting
        in its line never run; each ends with a ``missed``/``written-off`` row
        (:meth:`.Maintenance.write_off_deleted`). This process's in-process waiters leave
        the line before anything is awaited; the ledger's ``queued`` rows — any replica's —
        are written off, and their waiters (here at once, elsewhere at their next look, a
        ``NOTIFY`` under cdc) find their rows gone and stand down. Returns the rows written."""
        withdrawn = self.admitter.chain.withdraw(name)
        written = await self.maintenance.write_off_deleted(name, deleted_at, withdrawn)
        self.wakeups.notify(name)
        if written and self.listens:
            try:
                await self.store.notify_changed([name])
            except StoreUnavailableError:  # a hint: the others' poll finds the rows gone
                pass
        return written

    # -- what the rest of the package asks ------------------------------------------------

    def next_firing(self, name: str) -> datetime | None:
        return self.timer.next_firing(name)

    def schedule_named(self, name: str) -> Schedule | None:
        """The schedule ``name`` this engine runs (declared or written), else ``None``."""
        return self._schedules.get(name)

    def waiting_here(self) -> list[RunRecord]:
        """Firings waiting in this process's in-process line (single-process stores write no
        ``queued`` row for them): their ``queued`` rows as they would read."""
        return self.admitter.chain.pending()


class _Listening:
    """Told by the store when its ``LISTEN`` is in place (again): say so, once per session."""

    def started(self, value: object = None) -> None:
        logger.info("schedule: listening for ledger changes (change_strategy=cdc)")
