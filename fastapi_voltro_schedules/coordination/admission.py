"""Admission: the one place a firing is decided — gate, overlap rule, the row that says so.

:meth:`Admitter.admit` is the way in for every path that fires — the timer, boot catch-up,
an external arrival, Run now, ``record-and-run``, a range backfill — through the dispatcher's
one door. A firing that does not wait in line is decided by :meth:`Admitter.admit_many`, the
timer's herd and a single arrival alike (a herd of one): one set of rules, batched inside, not
a second path beside the first. Nothing is written before the first line of either, so a rule
that must hold before anything is recorded (a paused schedule, say) belongs at their top.

Admission decides and records; it never starts a handler (the dispatcher does).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING

from ..clock import iso_z
from ..enums import CoordinationOutcome, OverlapPolicy, RunStatus, Trigger
from ..errors import StoreUnavailableError
from ..ledger import excluded_row, new_row
from ..logs import logger
from ..pauses import NO_PAUSES, PauseView
from ..planning import TurnAction
from ..retries import RetryStart, final_message, plan_retry_start
from ..store import RunRecord, new_run_id, new_run_ids
from .base import Admission, Gate, Step, Turn, Verdict
from .overlap_reads import OverlapReads
from .queue import hold_while_paused

if TYPE_CHECKING:
    from ..clock import Clock
    from ..definition import Schedule
    from ..ledger import Ledger
    from ..store import Store
    from .chain import Chain
    from .cluster import ClusterGate
    from .inflight import InFlight
    from .queue import DurableLine
    from .sharing import Shared
    from .skip import SkipRule


class Admitter:
    def __init__(
        self,
        *,
        gate: Gate,
        skip: SkipRule,
        chain: Chain,
        line: DurableLine | None,
        inflight: InFlight,
        ledger: Ledger,
        store: Store,
        clock: Clock,
        replica_id: str,
        pauses: PauseView = NO_PAUSES,
        fence: ClusterGate | None = None,
        shared: Shared | None = None,
    ) -> None:
        self.pauses = pauses
        self.gate = gate
        self.fence = fence
        """``cluster``: the rows of firings elected ``cluster`` are written through the lease
        fence (nothing is written for a schedule this replica no longer owns)."""
        self.skip = skip
        self.chain = chain
        self.line = line
        """The durable line (multi-instance coordination, or a SQLite file several processes
        share); ``None``: the in-process chain only."""
        self.shared = shared
        """Which schedules wait in :attr:`line` (runs elsewhere, see :mod:`.sharing`); the
        others in the in-process chain. ``None``: every one, when there is a line."""
        self.inflight = inflight
        self.ledger = ledger
        self.store = store
        self._overlap_reads = OverlapReads(lambda names: self.store.live_runs(names))
        self.clock = clock
        self.replica_id = replica_id

    def row(
        self,
        schedule: Schedule,
        slot: datetime,
        status: RunStatus,
        trigger: Trigger,
        outcome: CoordinationOutcome,
        run_id: str | None = None,
        now: datetime | None = None,
    ) -> RunRecord:
        """A row of this replica's (``now``: the decision's instant; one per herd, so its rows
        share one ``fired_at`` the writer converts once)."""
        if now is None:
            now = self.clock.now()
        return new_row(schedule.name, slot, status, trigger, outcome, now, self.replica_id, run_id)

    def _lined(self, schedule: Schedule) -> bool:
        """Whether ``schedule`` queues in the durable line (else in the in-process chain)."""
        return self.line is not None and (self.shared is None or self.shared(schedule))

    # -- the door's one admission -----------------------------------------------------------

    async def admit(
        self,
        schedule: Schedule,
        slot: datetime,
        trigger: Trigger,
        run_id: str | None = None,
        *,
        fallback: bool = False,
        owed: bool = False,
        claim: str | None = None,
    ) -> Admission:
        """Decide one firing and write the row that records the decision (``running``,
        ``skipped`` or ``queued``). A manual firing (Run now, range backfill) always runs:
        no gate, no overlap rule. ``run_id`` (manual firings) lets a retried insert keep its
        id, so a write that landed unanswered is found instead of written twice.

        A firing that does not wait in line is a herd of one: it goes through
        :meth:`admit_many`, the same rules and the same writes as the timer's instant.

        ``fallback``: an external schedule's in-app fallback (``trigger="self"``) — elected
        as an arrival is, by the slot's claim whatever the coordination, so of the fallback
        and a (late) arrival exactly one fires the slot.

        ``owed``: a slot of a ``backfill="all"`` catch-up — work that must not be lost. It
        joins the schedule's line whatever its ``on_overlap``: a ``skip`` must not drop an
        owed slot because the one before still runs (two replicas catching up together split
        the slots), and its ``queued`` row is the durable record that it is still owed (a
        crash resumes it, see :meth:`resume`).

        ``claim`` (a range backfill's step): the manual firing runs only if it wins this
        claims key, taken with its row in one transaction — the slot's own key for a slot with
        nothing recorded, a re-run's key for a slot run again — so of range backfills (and
        clock-driven firings, for a slot with nothing recorded) going for one slot at once one
        runs it. ``LOST``: another did."""
        if trigger is Trigger.MANUAL:
            outcome = CoordinationOutcome.NONE
            row = self.row(schedule, slot, RunStatus.RUNNING, trigger, outcome, run_id)
            if claim is not None:
                return await self._run_claimed(row, claim)
            return await self._run(schedule, row)
        await self.pauses.current()
        if self.pauses.holds(schedule.name, slot):
            return Admission(Verdict.PAUSED)
        claim_as = Trigger.EXTERNAL if fallback else trigger
        lined = owed or schedule.on_overlap is OverlapPolicy.QUEUE
        # an excluded slot never waits in line: it is decided (skipped) at once, below
        if lined and (schedule.exclude is None or schedule.excluded(slot) is None):
            return await self._join_line(schedule, slot, trigger, claim_as, owed)
        return (await self.admit_many([schedule], [slot], trigger, claim_as)).one()

    async def _join_line(
        self, schedule: Schedule, slot: datetime, trigger: Trigger, claim_as: Trigger, owed: bool
    ) -> Admission:
        """A firing that waits its turn (``queue``, or an owed slot): elected, then in line."""
        if self.gate.claims(claim_as) and self._lined(schedule):
            # The claims-row race: the claim commits with the first look at the line.
            return await self._queue(schedule, slot, trigger, _claimed(claim_as), True)
        try:
            elected = await self.gate.elect(schedule, slot, claim_as)
        except StoreUnavailableError as exc:
            # Fail closed: a missing run is recoverable by backfill, a double-fire often isn't.
            return self._fail_closed("claim failed", schedule, slot, trigger, None, exc)
        if elected is None:
            return Admission(Verdict.LOST)
        return await self._queue(schedule, slot, trigger, elected, owed=owed)

    async def _write(self, run: RunRecord) -> bool:
        """Insert one firing's row; ``False``: the lease fence refused it (not ours now)."""
        if self.fence is not None and run.coordination_outcome is CoordinationOutcome.CLUSTER:
            return bool(await self.fence.insert([run]))
        await self.ledger.insert([run])
        return True

    async def _run(self, schedule: Schedule, run: RunRecord) -> Admission:
        try:
            if not await self._write(run):
                return Admission(Verdict.LOST)
        except StoreUnavailableError as exc:
            logger.warning(
                "schedule: could not record the firing — not running it  name=%s slot=%s: %s",
                run.name,
                iso_z(run.scheduled_at),
                exc,
            )
            self._hole(schedule, run.scheduled_at, run.trigger, run.coordination_outcome)
            return Admission(Verdict.UNAVAILABLE)
        self.inflight.add(run)
        return Admission(Verdict.RUN, run)

    async def _run_claimed(self, run: RunRecord, key: str) -> Admission:
        """Write ``run``'s row with the claim ``key``, in one transaction; ``RUN`` iff this
        call won it. A failed write is ``UNAVAILABLE`` and leaves no hole to repair: the caller
        (the range step) retries it under the same run id, and finds its row if it landed."""
        try:
            written = await self.store.claim_and_insert(
                [run], self.replica_id, self.clock.now(), keys=[key]
            )
        except StoreUnavailableError as exc:
            logger.warning(
                "schedule: could not record the firing — not running it  name=%s slot=%s: %s",
                run.name,
                iso_z(run.scheduled_at),
                exc,
            )
            return Admission(Verdict.UNAVAILABLE)
        if run.id not in written:
            return Admission(Verdict.LOST)
        self.inflight.add(run)
        return Admission(Verdict.RUN, run)

    def _fail_closed(
        self,
        failed: str,
        schedule: Schedule,
        slot: datetime,
        trigger: Trigger,
        outcome: CoordinationOutcome | None,
        exc: StoreUnavailableError,
    ) -> Admission:
        """Fail closed: nothing fires for ``slot`` — a missing run is recoverable by backfill,
        a double-fire often isn't. Says what ``failed`` and leaves the slot to the hole
        repair (``outcome`` ``None``: nothing was claimed, or it is unknown whether it was)."""
        _log_fail_closed(failed, 1, schedule.name, slot, exc)
        self._hole(schedule, slot, trigger, outcome)
        return Admission(Verdict.UNAVAILABLE)

    def _hole(
        self,
        schedule: Schedule,
        slot: datetime,
        trigger: Trigger,
        outcome: CoordinationOutcome | None,
    ) -> None:
        """Admission stopped (fail-closed) with nothing recorded for the slot: the ledger's
        holes repair it once the store is back (``None``: the claim itself failed)."""
        claimed = None if outcome is None else outcome is not CoordinationOutcome.SINGLE
        self.ledger.holes.add(schedule, slot, trigger, claimed)

    async def _queue(
        self,
        schedule: Schedule,
        slot: datetime,
        trigger: Trigger,
        outcome: CoordinationOutcome,
        claim: bool = False,
        *,
        owed: bool = False,
    ) -> Admission:
        """``claim``: the slot is not claimed yet — its claim is taken in the transaction of
        the first look at the line (``DurableLine.join``)."""
        if self.line is None or not self._lined(schedule):
            return await self._chain(schedule, slot, trigger, outcome, owed=owed)
        me = self.row(schedule, slot, RunStatus.QUEUED, trigger, outcome)
        try:
            if claim:
                joined = await self.line.join(schedule, me)
                if joined is None:
                    return Admission(Verdict.LOST)
                plan = joined
            else:
                plan = await self.line.look(schedule, me, new=True)
        except StoreUnavailableError as exc:
            return self._fail_closed(
                "could not join the queue", schedule, slot, trigger, None if claim else outcome, exc
            )
        if plan.action is TurnAction.START and plan.run is not None:
            self.inflight.add(plan.run)
            return Admission(Verdict.RUN, plan.run)
        queued = plan.insert or me
        if plan.blocker is not None:
            self.line.log_wait(schedule, plan.blocker)
        turn = self.line.turn(schedule, queued, self.pauses)
        if plan.action is TurnAction.ADOPT and plan.run is not None:
            return Admission(Verdict.QUEUED, queued, _Adopted(plan.run, turn))
        return Admission(Verdict.QUEUED, queued, turn)

    async def _chain(
        self,
        schedule: Schedule,
        slot: datetime,
        trigger: Trigger,
        outcome: CoordinationOutcome,
        *,
        owed: bool = False,
    ) -> Admission:
        """The in-process line. Its waiters write no row — except an ``owed`` one (a catch-up
        slot): its ``queued`` row is written before it waits, so a stop or crash leaves a
        record of every slot still owed for the next boot to resume."""
        run_id = new_run_id()
        if self.chain.try_start(schedule.name, run_id):
            running = self.row(schedule, slot, RunStatus.RUNNING, trigger, outcome, run_id)
            try:
                admission = await self._run(schedule, running)
            finally:
                if self.inflight.runs[schedule.name].get(run_id) is None:
                    self.chain.give_up(schedule.name, run_id)
                else:
                    self.chain.started(schedule.name, run_id)
            return admission
        behind = self.chain.behind(schedule.name)
        if isinstance(behind, RunRecord):
            logger.info(
                "schedule: queued behind a run in flight   name=%s heldBy=%s",
                schedule.name,
                behind.replica_id,
            )
        elif behind is not None:
            logger.info(
                "schedule: queued behind an earlier firing name=%s behind=%s",
                schedule.name,
                iso_z(behind),
            )
        queued = self.row(schedule, slot, RunStatus.QUEUED, trigger, outcome, run_id)
        if owed:
            try:
                await self.ledger.insert([queued])
            except StoreUnavailableError as exc:
                failed = "could not join the queue"
                return self._fail_closed(failed, schedule, slot, trigger, outcome, exc)
            return Admission(Verdict.QUEUED, queued, self._chain_written(schedule, queued))

        async def start(row: RunRecord) -> RunRecord | None:
            # The line is handed to this firing: paused, it keeps it (nothing runs) until resumed.
            await hold_while_paused(self.pauses, schedule, row)
            running = self.row(
                schedule, row.scheduled_at, RunStatus.RUNNING, row.trigger, outcome, row.id
            )
            admission = await self._run(schedule, running)
            return admission.run if admission.verdict is Verdict.RUN else None

        return Admission(Verdict.QUEUED, queued, self.chain.enqueue(queued, start))

    def _chain_written(self, schedule: Schedule, queued: RunRecord) -> Turn:
        """A ``queued`` row of this replica's, already written, joins the in-process line:
        its turn turns it ``running`` (compared, so a row another process took over is not
        run here), and it beats while it waits."""

        async def start(row: RunRecord) -> RunRecord | None:
            await hold_while_paused(self.pauses, schedule, row)
            now = self.clock.now()
            try:
                mine = await self.store.update_run(
                    row.id,
                    expect_status=RunStatus.QUEUED,
                    expect_replica_id=self.replica_id,
                    status=RunStatus.RUNNING,
                    fired_at=now,
                    heartbeat_at=now,
                )
            except StoreUnavailableError as exc:
                # Left queued: it stops beating with this turn, and is resumed as owed.
                logger.warning(
                    "schedule: could not start a queued firing — left queued  name=%s runId=%s: %s",
                    schedule.name,
                    row.id,
                    exc,
                )
                return None
            if not mine:
                return None
            running = replace(row, status=RunStatus.RUNNING, fired_at=now, heartbeat_at=now)
            self.inflight.add(running)
            return running

        turn = self.chain.enqueue(queued, start, beat=True)
        self.chain.wake(schedule.name)
        return turn

    async def resume(self, schedule: Schedule, orphan: RunRecord) -> Admission:
        """Take over ``orphan`` — a silent ``queued`` row of a stopped replica, a slot still
        owed (see :func:`~fastapi_voltro_schedules.planning.plan_resume`) — and put it back in
        its schedule's line: the take-over compares the beat that was judged silent, so of
        several replicas (or a waiter adopting it) exactly one gets it. ``LOST``: another did.
        A paused schedule's row is taken over all the same and held in line."""
        row = await self._take_over(
            schedule, orphan, RunStatus.QUEUED, "resume an owed queued firing"
        )
        if isinstance(row, Admission):
            return row
        logger.warning(
            "schedule: resumed an owed queued firing of a replica that stopped reporting  "
            "name=%s runId=%s scheduledAt=%s heldBy=%s",
            schedule.name,
            row.id,
            iso_z(row.scheduled_at),
            orphan.replica_id,
        )
        if self.line is None or not self._lined(schedule):
            return Admission(Verdict.QUEUED, row, self._chain_written(schedule, row))
        return Admission(Verdict.QUEUED, row, self.line.turn(schedule, row, self.pauses))

    async def _take_over(
        self, schedule: Schedule, orphan: RunRecord, status: RunStatus, what: str
    ) -> RunRecord | Admission:
        """``orphan`` (a silent row of ``status`` of a stopped replica) made this replica's:
        one compare-and-set on its owner and the beat judged silent, so of several replicas
        exactly one wins. The row as it now reads, or the answer when it could not be had
        (``LOST``: another replica took it; ``UNAVAILABLE``: the store did not answer)."""
        now = self.clock.now()
        try:
            mine = await self.store.update_run(
                orphan.id,
                expect_status=status,
                expect_replica_id=orphan.replica_id,
                expect_heartbeat_at=orphan.heartbeat_at,
                replica_id=self.replica_id,
                heartbeat_at=now,
            )
        except StoreUnavailableError as exc:
            logger.warning(
                "schedule: could not %s  name=%s runId=%s: %s", what, schedule.name, orphan.id, exc
            )
            return Admission(Verdict.UNAVAILABLE)
        if not mine:
            return Admission(Verdict.LOST)
        return replace(orphan, replica_id=self.replica_id, heartbeat_at=now)

    # -- retries within the slot -------------------------------------------------------------

    async def take_over_retry(self, schedule: Schedule, orphan: RunRecord) -> Admission:
        """Take over ``orphan`` — a silent ``running`` row of a stopped replica with a retry
        pending (``retry_at``) — comparing the owner and the beat that was judged silent, so
        of several replicas exactly one gets it (``LOST``: another did). Answers ``QUEUED``
        with the row as it now reads: its attempt waits for :meth:`retry`."""
        taken = await self._take_over(
            schedule, orphan, RunStatus.RUNNING, "take over a pending retry"
        )
        if isinstance(taken, Admission):
            return taken
        logger.warning(
            "schedule: took over a pending retry of a replica that stopped reporting  "
            "name=%s runId=%s scheduledAt=%s attempt=%d retryAt=%s heldBy=%s",
            schedule.name,
            orphan.id,
            iso_z(orphan.scheduled_at),
            orphan.attempt,
            iso_z(orphan.retry_at) if orphan.retry_at is not None else "-",
            orphan.replica_id,
        )
        return Admission(Verdict.QUEUED, taken)

    async def take_over_job(self, schedule: Schedule, orphan: RunRecord) -> Admission:
        """Take over ``orphan`` — a silent ``running`` row of a stopped replica naming a
        handed-off job (``job_id``) — comparing the owner and the beat judged silent, so of
        several replicas exactly one gets it (``LOST``: another did). Answers ``RUN`` with the
        row as it now reads: its firing runs again here and follows the same job."""
        taken = await self._take_over(
            schedule, orphan, RunStatus.RUNNING, "take over a handed-off job"
        )
        if isinstance(taken, Admission):
            return taken
        logger.warning(
            "schedule: took over a handed-off job of a replica that stopped reporting  "
            "name=%s runId=%s scheduledAt=%s jobId=%s heldBy=%s",
            schedule.name,
            orphan.id,
            iso_z(orphan.scheduled_at),
            orphan.job_id,
            orphan.replica_id,
        )
        return Admission(Verdict.RUN, taken)

    async def retry(self, schedule: Schedule, row: RunRecord) -> Admission:
        """Decide a pending retry of this replica's that came due (``row``: its ``running``
        row, ``retry_at`` set): start the next attempt — ``RUN`` with the row as it then reads
        (``attempt`` one more, ``retry_at`` cleared: one compare-and-set on the owner, so no
        attempt starts twice) — or end the slot (``ENDED``: its last failure recorded final,
        tagged by :func:`~..retries.plan_retry_start`). No gate and no overlap rule: the slot
        is already won, and the row has held it all along."""
        now = self.clock.now()
        await self.pauses.current()
        what, tag, why = plan_retry_start(
            schedule.retry,
            now,
            schedule.retry_window_end(row.scheduled_at),
            paused=self.pauses.is_paused(schedule.name),
        )
        try:
            if what is RetryStart.START:
                mine = await self.store.update_run(
                    row.id,
                    expect_status=RunStatus.RUNNING,
                    expect_replica_id=self.replica_id,
                    attempt=row.attempt + 1,
                    retry_at=None,
                    heartbeat_at=now,
                    # a handed-off attempt's job is over: the next attempt is a job of its own
                    job_id=None,
                    job_tracking=None,
                )
                if not mine:
                    return Admission(Verdict.LOST)
                # fired_at here is the attempt's start: its watchdog deadline counts from it
                # (the row keeps the slot's first firing)
                run = replace(
                    row,
                    attempt=row.attempt + 1,
                    retry_at=None,
                    heartbeat_at=now,
                    fired_at=now,
                    job_id=None,
                    job_tracking=None,
                )
                logger.info(
                    "schedule: retrying  name=%s runId=%s attempt=%d scheduledAt=%s",
                    schedule.name,
                    row.id,
                    run.attempt,
                    iso_z(row.scheduled_at),
                )
                return Admission(Verdict.RUN, run)
            message = final_message(row.error_tag, row.error_message, why)
            ended = await self.store.update_run(
                row.id,
                expect_status=RunStatus.RUNNING,
                expect_replica_id=self.replica_id,
                status=RunStatus.FAILED,
                finished_at=now,
                retry_at=None,
                error_tag=tag,
                error_message=message,
            )
        except StoreUnavailableError as exc:
            # Left pending: it stops beating with this waiter, and is taken over (here or
            # elsewhere) like a stopped replica's.
            logger.warning(
                "schedule: could not decide a pending retry — left pending  name=%s runId=%s: %s",
                schedule.name,
                row.id,
                exc,
            )
            return Admission(Verdict.UNAVAILABLE)
        if not ended:
            return Admission(Verdict.LOST)
        logger.warning(
            "schedule: retries over — the last failure is final  name=%s runId=%s attempts=%d "
            "errorTag=%s: %s",
            schedule.name,
            row.id,
            row.attempt,
            tag,
            why,
        )
        final = replace(row, status=RunStatus.FAILED, finished_at=now, retry_at=None, error_tag=tag)
        return Admission(Verdict.ENDED, replace(final, error_message=message))

    # -- many firings at once: the herd, or a herd of one ---------------------------------

    async def admit_many(
        self,
        schedules: Sequence[Schedule],
        slots: Sequence[datetime],
        trigger: Trigger = Trigger.SELF,
        claim_as: Trigger | None = None,
    ) -> Admitted:
        """Claim, apply the overlap rule to and record firings that do not wait in line —
        ``schedules[i]`` at ``slots[i]``, all with ``trigger`` and elected as ``claim_as``
        (default: ``trigger``): one claim statement per 1,000 keys, one overlap read, one
        insert. The timer's instant admits its herd here, and :meth:`admit` every other such
        firing as a herd of one. The runs to start are written and count as in flight.

        The herd travels as aligned lists, not a list of pairs: a pair per firing, alive for
        the whole herd, was one more object per firing for the collector to promote."""
        claim_as = trigger if claim_as is None else claim_as
        holds = self.pauses.holds
        if any(holds(s.name, slot) for s, slot in zip(schedules, slots, strict=True)):
            kept = [i for i, s in enumerate(schedules) if not holds(s.name, slots[i])]
            schedules, slots = [schedules[i] for i in kept], [slots[i] for i in kept]
        admitted = Admitted()
        if not schedules:
            return admitted
        # The claims-row race (advisoryLock, every external arrival): the claims are taken
        # with the rows, in one transaction (below) — a process killed between the two would
        # leave a claimed slot without a row.
        atomic = self.gate.claims(claim_as)
        try:
            outcomes: Sequence[CoordinationOutcome | None] = (
                [_claimed(claim_as)] * len(schedules)
                if atomic
                else await self.gate.elect_many(schedules, slots)
            )
        except StoreUnavailableError as exc:
            admitted.failed = True
            _log_fail_closed("claim failed", len(schedules), schedules[0].name, slots[0], exc)
            for schedule, slot in zip(schedules, slots, strict=True):
                self.ledger.holes.add(schedule, slot, trigger, None)
            return admitted
        # Indices into the herd, not (schedule, slot, outcome) triples: a triple per firing,
        # alive across the awaits below, was one more object for the collector to promote.
        won = [i for i, outcome in enumerate(outcomes) if outcome is not None]
        if self.inflight.deciding:
            for i in won:
                if schedules[i].on_overlap is OverlapPolicy.SKIP:
                    await self.inflight.wait_decided(schedules[i].name)
        now = self.clock.now()
        elsewhere: dict[str, list[RunRecord]] = defaultdict(list)
        ask = [
            s.name
            for s in (schedules[i] for i in won)
            if s.on_overlap is OverlapPolicy.SKIP and self.skip.needs_read(s)
        ]
        blind: set[str] = set()
        if ask:
            try:
                for row in await self._overlap_reads(ask):
                    elsewhere[row.name].append(row)
            except StoreUnavailableError as exc:
                # Fail closed for the skip schedules only: they cannot see the cluster.
                first = next(i for i in won if schedules[i].name == ask[0])
                _log_fail_closed("overlap check failed", len(ask), ask[0], slots[first], exc)
                admitted.failed = True
                blind = set(ask)
            # fired now, after the overlap read: a corpse it marks abandoned ended before this
            fired = self.clock.now()
        else:
            fired = now
        rows: list[RunRecord] = []
        excluded_log: list[RunRecord] = []
        holders: dict[str, tuple[Schedule, RunRecord]] = {}
        judged: dict[str, tuple[Schedule, list[RunRecord]]] = {}
        starting, runs, skipped = admitted.starting, admitted.runs, admitted.skipped
        for i, run_id in zip(won, new_run_ids(len(won)), strict=True):
            schedule, slot = schedules[i], slots[i]
            outcome = outcomes[i]
            assert outcome is not None
            if schedule.name in blind:
                self._hole(schedule, slot, trigger, None if atomic else outcome)
                continue
            if schedule.exclude is not None:
                reason = schedule.excluded(slot)
                if reason is not None:
                    # an excluded day: the slot's row says so, once (it won the claim)
                    row = self.row(
                        schedule, slot, RunStatus.SKIPPED, trigger, outcome, run_id, fired
                    )
                    row = excluded_row(row, reason)
                    rows.append(row)
                    skipped.append(row)
                    excluded_log.append(row)
                    continue
            if schedule.on_overlap is OverlapPolicy.SKIP:
                seen = elsewhere.get(schedule.name)
                # Nothing read for it (no rows, or no cluster to read): only this process's own
                # runs can hold it, and asking needs no coroutine per schedule of the herd.
                holder = (
                    await self.skip.live_among(schedule, seen, now, bury=not atomic)
                    if seen
                    else self.skip.held_here(schedule)
                )
                if seen and atomic:
                    judged[run_id] = (schedule, seen)  # buried once the slot is won
                if holder is not None and holder.scheduled_at == slot:
                    # a firing of this very slot (a second admission of it here, or the
                    # winner's row elsewhere) is no overlap: the claim makes it a duplicate
                    # — a skipped row would race the running one for the slot's claim
                    holder = None
                if holder is not None:
                    row = self.row(
                        schedule, slot, RunStatus.SKIPPED, trigger, outcome, run_id, fired
                    )
                    rows.append(row)
                    skipped.append(row)
                    if atomic:
                        holders[run_id] = (schedule, holder)  # logged once the slot is won
                    else:
                        self.skip.log_skip(schedule, holder, now)
                    continue
            run = self.row(schedule, slot, RunStatus.RUNNING, trigger, outcome, run_id, fired)
            rows.append(run)
            starting.append(schedule)
            runs.append(run)
        if not rows:
            return admitted
        # While the rows are written the skip schedules' next firings here wait for the answer
        # (their row may be visible already, yet the claim may still be lost): judged before
        # it they would run beside this run, or stand down for one that never runs.
        decision = self.inflight.deciding_on(
            [s.name for s in starting if s.on_overlap is OverlapPolicy.SKIP]
        )
        try:
            if self.fence is not None and not atomic:
                # cluster: only the rows of schedules still ours are written, and only those run
                admitted.keep({r.id for r in await self.fence.insert(rows)})
            elif atomic:
                # only the slots this replica won have rows now, and only those run
                written = await self.ledger.claim_and_insert(rows)
                admitted.keep(written)
                for run_id, (schedule, holder) in holders.items():
                    if run_id in written:
                        self.skip.log_skip(schedule, holder, now)
                for run_id, (schedule, seen) in judged.items():
                    if run_id in written:
                        await self.skip.bury(schedule, seen, now)
            else:
                await self.ledger.insert(rows)
        except StoreUnavailableError as exc:
            admitted.clear()
            admitted.failed = True
            if atomic:
                # the claims went with the rows: to the operator, the claim failed
                _log_fail_closed("claim failed", len(rows), rows[0].name, rows[0].scheduled_at, exc)
            else:
                _log_fail_closed(
                    "could not record the firing",
                    len(rows),
                    rows[0].name,
                    rows[0].scheduled_at,
                    exc,
                )
            for i in won:
                schedule, slot = schedules[i], slots[i]
                if schedule.name not in blind:
                    # unknown whether the claims landed when they were written with the rows
                    self._hole(schedule, slot, trigger, None if atomic else outcomes[i])
            return admitted
        else:
            for run in admitted.runs:  # the ones written (keep above), not every one built
                self.inflight.add(run)
        finally:
            self.inflight.decided(decision)
        if excluded_log:
            written_ids = {row.id for row in admitted.skipped}
            for row in excluded_log:
                if row.id in written_ids:
                    logger.info(
                        "schedule: excluded  name=%s slot=%s reason=%r",
                        row.name,
                        iso_z(row.scheduled_at),
                        row.error_message,
                    )
        return admitted


class Admitted:
    """What :meth:`Admitter.admit_many` admitted: the runs to start with their schedules,
    aligned (their ``running`` rows are written), and the ``skipped`` rows written."""

    __slots__ = ("failed", "runs", "skipped", "starting")

    def __init__(self) -> None:
        self.starting: list[Schedule] = []
        self.runs: list[RunRecord] = []
        self.skipped: list[RunRecord] = []
        self.failed = False
        """The store failed somewhere (fail closed): the slots not admitted are holes."""

    def keep(self, written: set[str]) -> None:
        """Only the rows in ``written`` were written (the rest lost their slot or lease)."""
        if len(written) < len(self.runs) + len(self.skipped):
            kept = [i for i, run in enumerate(self.runs) if run.id in written]
            self.starting = [self.starting[i] for i in kept]
            self.runs = [self.runs[i] for i in kept]
            self.skipped = [row for row in self.skipped if row.id in written]

    def clear(self) -> None:
        self.starting, self.runs, self.skipped = [], [], []

    def one(self) -> Admission:
        """The answer for a herd of one."""
        if self.runs:
            return Admission(Verdict.RUN, self.runs[0])
        if self.skipped:
            return Admission(Verdict.SKIPPED, self.skipped[0])
        return Admission(Verdict.UNAVAILABLE if self.failed else Verdict.LOST)


def _log_fail_closed(
    failed: str, count: int, name: str, slot: datetime, exc: StoreUnavailableError
) -> None:
    """Nothing fires for these slots (fail closed): says what failed, and for a herd how many
    slots and the first."""
    if count == 1:
        logger.warning(
            "schedule: %s — not firing (fail-closed)  name=%s slot=%s: %s",
            failed,
            name,
            iso_z(slot),
            exc,
        )
        return
    logger.warning(
        "schedule: %s — not firing (fail-closed)  slots=%d first=%s@%s: %s",
        failed,
        count,
        name,
        iso_z(slot),
        exc,
    )


def _claimed(claim_as: Trigger) -> CoordinationOutcome:
    """The outcome of a slot won by its claim (``ClaimGate.elect``'s answer)."""
    return (
        CoordinationOutcome.EXTERNAL
        if claim_as is Trigger.EXTERNAL
        else CoordinationOutcome.WON_LOCK
    )


class _Adopted:
    """A turn whose first step is an occurrence adopted while joining the line."""

    def __init__(self, adopted: RunRecord, turn: Turn) -> None:
        self._first: RunRecord | None = adopted
        self._turn = turn

    async def next(self) -> Step | None:
        if self._first is not None:
            first, self._first = self._first, None
            return Step(first, adopted=True)
        return await self._turn.next()

    def close(self) -> None:
        self._turn.close()
