"""The arrivals room called directly, without HTTP, a database or an engine: what one external
arrival means — where it snaps, when it is a duplicate, which stated times are refused, how a
slot the missed policy (or the in-app fallback) accounted for answers — on the ManualClock.

The room's engine and ledger are the two narrow seams it declares (``fire``/``waiting_here``
and three reads); the fakes below stand in for them, so each decision is seen by itself: what
was handed to the engine, what was read, what was answered.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import anyio
import pytest
from starlette.responses import JSONResponse

from fastapi_voltro_schedules import (
    RunStatus,
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    Trigger,
    TriggerMode,
    define_schedule,
)
from fastapi_voltro_schedules import arrivals as room
from fastapi_voltro_schedules.api.trigger import answered
from fastapi_voltro_schedules.arrivals import Arrival, Arrivals, ArrivalStatus, arrive
from fastapi_voltro_schedules.coordination import Admission, Verdict
from fastapi_voltro_schedules.definition import Schedule
from fastapi_voltro_schedules.dispatcher import Firing
from fastapi_voltro_schedules.errors import (
    NOT_RUNNING,
    FutureArrivalError,
    NotExternallyTriggeredError,
    OffCadenceError,
    ScheduleNotFoundError,
    SchedulerNotRunningError,
    TooLateArrivalError,
)
from fastapi_voltro_schedules.fire_requests import FireRequest
from fastapi_voltro_schedules.models import claim_key
from fastapi_voltro_schedules.pauses import NO_PAUSES, PauseView
from fastapi_voltro_schedules.store import PauseRecord, RunRecord, new_run_id
from fastapi_voltro_schedules.testing import ManualClock

NOW = datetime(2026, 6, 1, 12, 0, 30, tzinfo=UTC)
SLOT = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
SKEW_MS = 300_000


def _nothing(ctx: ScheduleContext) -> None:
    return None


def external(
    name: str = "report", cron: str = "* * * * *", fallback: str | None = None
) -> Schedule:
    return define_schedule(
        name=name,
        cron=cron,
        timezone="UTC",
        trigger="external",
        handler=_nothing,
        fallback=fallback,
    )


def row(name: str, slot: datetime, status: RunStatus, trigger: Trigger) -> RunRecord:
    return RunRecord(new_run_id(), name, slot, status, trigger)


class Ledger:
    """The three reads the room answers from; ``rows`` by (name, slot, trigger), ``claims`` by
    claim key. Counts the reads, to tell an answer from memory from one from the ledger."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, datetime, Trigger], RunRecord] = {}
        self.claims: dict[str, tuple[str, datetime]] = {}
        self.reads = 0

    def record(self, run: RunRecord) -> RunRecord:
        self.rows[(run.name, run.scheduled_at, run.trigger)] = run
        self.claims[claim_key(run.name, run.scheduled_at)] = ("replica", run.scheduled_at)
        return run

    async def run_for_slot(
        self, name: str, scheduled_at: datetime, trigger: Trigger
    ) -> RunRecord | None:
        self.reads += 1
        return self.rows.get((name, scheduled_at, trigger))

    async def claim_holder(self, key: str) -> tuple[str, datetime] | None:
        self.reads += 1
        return self.claims.get(key)

    async def get_run(self, run_id: str) -> RunRecord | None:
        self.reads += 1
        return next((r for r in self.rows.values() if r.id == run_id), None)


class Engine:
    """Fires by writing the row the verdict says (as admission would) and recording what it was
    handed. ``verdicts`` are answered in turn (then ``RUN``); a ``LOST`` one first lets
    ``on_lost`` play the replica that won."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.fired: list[tuple[str, datetime, Trigger]] = []
        self.verdicts: list[Verdict] = []
        self.line: list[RunRecord] = []
        self.on_lost: Callable[[Schedule, datetime], object] = lambda schedule, slot: None
        self.hold: anyio.Event | None = None

    async def fire(self, request: FireRequest) -> Firing:
        schedule, slot, trigger = request.schedule, request.slot, request.trigger
        self.fired.append((schedule.name, slot, trigger))
        if self.hold is not None:
            await self.hold.wait()
        verdict = self.verdicts.pop(0) if self.verdicts else Verdict.RUN
        status = {Verdict.RUN: RunStatus.RUNNING, Verdict.SKIPPED: RunStatus.SKIPPED}
        if verdict not in status:  # LOST, PAUSED: no row of this firing's
            if verdict is Verdict.LOST:
                self.on_lost(schedule, slot)
            return Firing(Admission(verdict))
        run = self.ledger.record(row(schedule.name, slot, status[verdict], trigger))
        return Firing(Admission(verdict, run))

    def waiting_here(self) -> list[RunRecord]:
        return self.line


class Paused(PauseView):
    def __init__(self, record: PauseRecord) -> None:
        self.record = record

    def get(self, name: str) -> PauseRecord | None:
        return self.record if name == self.record.name else None


@dataclass
class Host:
    """The scheduler as the room sees it (the ``arrivals.Scheduling`` protocol)."""

    schedules: list[Schedule]
    clock: ManualClock = field(default_factory=lambda: ManualClock(NOW))
    config: SchedulingConfig = field(
        default_factory=lambda: SchedulingConfig(external_trigger_skew_ms=SKEW_MS)
    )
    ledger: Ledger = field(default_factory=Ledger)
    pauses: PauseView = NO_PAUSES
    arrivals: Arrivals | None = None
    engine: Engine = field(init=False)

    def __post_init__(self) -> None:
        self.engine = Engine(self.ledger)
        self.arrivals = Arrivals(self.engine, self.ledger)

    def get(self, name: str) -> Schedule | None:
        return next((s for s in self.schedules if s.name == name), None)

    def trigger_of(self, schedule: Schedule) -> TriggerMode:
        return schedule.effective_trigger(self.config.trigger)

    async def current_pauses(self) -> PauseView:
        return self.pauses


@pytest.fixture
def host() -> Host:
    return Host([external()])


@pytest.fixture
def quick_polls() -> Iterator[None]:
    """A duplicate polls the ledger for its winner's row in real time; make each poll short."""
    before = room.DUPLICATE_POLL_SECONDS
    room.DUPLICATE_POLL_SECONDS = 0.001
    yield
    room.DUPLICATE_POLL_SECONDS = before


# -- snap -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("now", "stated", "slot"),
    [
        # arrived late, stating nothing: the newest occurrence at or before the arrival
        (NOW, None, SLOT),
        (SLOT + timedelta(seconds=59.999), None, SLOT),
        (SLOT, None, SLOT),
        # a stated time wins over the arrival's own instant, up to the skew budget before now
        (NOW + timedelta(minutes=4), SLOT + timedelta(seconds=5), SLOT),
        # a stated time a little ahead of the app's clock (within the tolerance) is that firing
        (SLOT - timedelta(seconds=1), SLOT, SLOT),
    ],
)
async def test_an_arrival_snaps_to_its_occurrence_and_fires_it_once(
    host: Host, now: datetime, stated: datetime | None, slot: datetime
) -> None:
    host.clock.set(now)
    answer = await arrive(host, "report", stated)
    assert (answer.status, answer.scheduled_at) == (ArrivalStatus.ACCEPTED, slot)
    assert answer.run is not None and answer.run.scheduled_at == slot
    assert host.engine.fired == [("report", slot, Trigger.EXTERNAL)]


async def test_an_overlapping_arrival_answers_its_skipped_row(host: Host) -> None:
    host.engine.verdicts = [Verdict.SKIPPED]
    answer = await arrive(host, "report")
    assert answer.status is ArrivalStatus.SKIPPED
    assert answer.run is not None and answer.run.status is RunStatus.SKIPPED


# -- refusals ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cron", "stated", "refusal"),
    [
        # ahead of the app's clock by more than the tolerance: the real firing would be lost
        ("* * * * *", NOW + timedelta(seconds=3), FutureArrivalError),
        # older than the skew budget: a replay never runs its slot (again)
        ("* * * * *", NOW - timedelta(milliseconds=SKEW_MS + 1), TooLateArrivalError),
        # no occurrence within the budget before the arrival: the caller's cron drifted
        ("0 9 * * *", None, OffCadenceError),
        ("0 9 * * *", NOW, OffCadenceError),
    ],
)
async def test_a_refused_arrival_fires_and_reads_nothing(
    cron: str, stated: datetime | None, refusal: type[Exception]
) -> None:
    host = Host([external(cron=cron)])
    with pytest.raises(refusal):
        await arrive(host, "report", stated)
    assert host.engine.fired == []
    assert host.ledger.reads == 0


async def test_refusals_before_the_snap_come_in_order() -> None:
    host = Host(
        [
            external(),
            define_schedule(name="own", cron="* * * * *", timezone="UTC", handler=_nothing),
        ]
    )
    host.arrivals = None  # not running
    with pytest.raises(ScheduleNotFoundError):
        await arrive(host, "nobody")
    with pytest.raises(NotExternallyTriggeredError):
        await arrive(host, "own")
    with pytest.raises(SchedulerNotRunningError, match=re.escape(NOT_RUNNING)):
        await arrive(host, "report")


# -- duplicates -------------------------------------------------------------------------------


async def test_a_retry_is_the_first_arrivals_duplicate_answered_from_memory(host: Host) -> None:
    first = await arrive(host, "report")
    reads = host.ledger.reads
    host.clock.set(NOW + timedelta(seconds=20))
    again = await arrive(host, "report")
    stated = await arrive(host, "report", SLOT)
    for answer in (again, stated):
        assert answer == Arrival(ArrivalStatus.DUPLICATE, SLOT, first.run)
    assert host.ledger.reads == reads  # not a read: the occurrence's run never changes
    assert len(host.engine.fired) == 1


async def test_arrivals_of_one_occurrence_at_once_fire_it_once(host: Host) -> None:
    host.engine.hold = anyio.Event()
    answers: list[Arrival] = []

    async def one() -> None:
        answers.append(await arrive(host, "report"))

    async with anyio.create_task_group() as tg:
        for _ in range(5):
            tg.start_soon(one)
        await anyio.wait_all_tasks_blocked()
        host.engine.hold.set()
    statuses = sorted(a.status for a in answers)
    assert statuses == ["accepted"] + ["duplicate"] * 4
    assert len({a.run.id for a in answers if a.run is not None}) == 1
    assert len(host.engine.fired) == 1


async def test_a_restarted_scheduler_remembers_nothing_and_asks_the_ledger(host: Host) -> None:
    first = await arrive(host, "report")
    host.arrivals = Arrivals(host.engine, host.ledger)  # the next run of the scheduler
    reads = host.ledger.reads
    again = await arrive(host, "report")
    assert again == Arrival(ArrivalStatus.DUPLICATE, SLOT, first.run)
    assert host.ledger.reads == reads + 1  # one read, no claim
    assert len(host.engine.fired) == 1


async def test_a_claim_lost_to_another_replica_answers_its_run(
    host: Host, quick_polls: None
) -> None:
    winner = row("report", SLOT, RunStatus.RUNNING, Trigger.EXTERNAL)
    host.engine.verdicts = [Verdict.LOST]
    host.engine.on_lost = lambda schedule, slot: host.ledger.record(winner)
    answer = await arrive(host, "report")
    assert answer == Arrival(ArrivalStatus.DUPLICATE, SLOT, winner)
    assert len(host.engine.fired) == 1


async def test_a_claim_released_without_a_row_is_claimed_again(
    host: Host, quick_polls: None
) -> None:
    """Its holder could not record the firing (the store blinked) and let go: this arrival
    may run the slot after all."""
    host.engine.verdicts = [Verdict.LOST]
    answer = await arrive(host, "report")
    assert answer.status is ArrivalStatus.ACCEPTED
    assert len(host.engine.fired) == 2


async def test_a_claim_held_without_a_row_is_a_duplicate_of_nothing(
    host: Host, quick_polls: None
) -> None:
    """The claimant died between its claim and its row: nothing runs the slot, and the arrival
    says so (no run) once it waited for the row its bound."""
    host.engine.verdicts = [Verdict.LOST]
    host.engine.on_lost = lambda schedule, slot: host.ledger.claims.update(
        {claim_key("report", slot): ("dead", slot)}
    )
    before = room.DUPLICATE_WAIT_SECONDS
    room.DUPLICATE_WAIT_SECONDS = 0.05
    try:
        answer = await arrive(host, "report")
    finally:
        room.DUPLICATE_WAIT_SECONDS = before
    assert answer == Arrival(ArrivalStatus.DUPLICATE, SLOT, None)
    assert len(host.engine.fired) == 1


async def test_a_firing_waiting_in_this_process_is_the_duplicate(
    host: Host, quick_polls: None
) -> None:
    waiting = row("report", SLOT, RunStatus.QUEUED, Trigger.EXTERNAL)
    host.engine.verdicts = [Verdict.LOST]
    host.engine.on_lost = lambda schedule, slot: host.engine.line.append(waiting)
    answer = await arrive(host, "report")
    assert answer == Arrival(ArrivalStatus.DUPLICATE, SLOT, waiting)
    assert host.arrivals is not None and await host.arrivals.run(waiting.id) == waiting


# -- the missed policy and the fallback ------------------------------------------------------


async def test_a_slot_the_missed_policy_recorded_answers_its_missed_row(host: Host) -> None:
    """The watcher found the window closed and recorded the slot ``missed`` (its claim held);
    a retry stating that time is that row's duplicate and never fires it."""
    missed = host.ledger.record(row("report", SLOT, RunStatus.MISSED, Trigger.EXTERNAL))
    answer = await arrive(host, "report", SLOT)
    assert answer == Arrival(ArrivalStatus.DUPLICATE, SLOT, missed)
    assert host.engine.fired == []


async def test_a_slot_the_fallback_fired_answers_its_self_run() -> None:
    host = Host([external(fallback="self")])
    fired = host.ledger.record(row("report", SLOT, RunStatus.SUCCEEDED, Trigger.SELF))
    answer = await arrive(host, "report")
    assert answer == Arrival(ArrivalStatus.DUPLICATE, SLOT, fired)
    assert host.engine.fired == []


async def test_without_a_fallback_a_self_row_is_not_the_arrivals(host: Host) -> None:
    host.ledger.record(row("report", SLOT, RunStatus.SUCCEEDED, Trigger.SELF))
    answer = await arrive(host, "report")
    assert answer.status is ArrivalStatus.ACCEPTED


# -- pauses -----------------------------------------------------------------------------------


async def test_a_paused_arrival_claims_nothing_and_is_not_remembered(host: Host) -> None:
    host.pauses = Paused(PauseRecord("report", SLOT - timedelta(hours=1), "operator"))
    paused = await arrive(host, "report")
    assert paused == Arrival(ArrivalStatus.PAUSED, SLOT, None)
    # paused before the refusals: even a far-future stated time is answered `paused`
    later = await arrive(host, "report", NOW + timedelta(days=1))
    assert later.status is ArrivalStatus.PAUSED
    assert (host.engine.fired, host.ledger.reads) == ([], 0)
    host.pauses = NO_PAUSES
    assert (await arrive(host, "report")).status is ArrivalStatus.ACCEPTED


async def test_paused_between_the_check_and_the_claim(host: Host) -> None:
    host.engine.verdicts = [Verdict.PAUSED]
    assert await arrive(host, "report") == Arrival(ArrivalStatus.PAUSED, SLOT, None)


# -- where the room lives, and how the route answers it ---------------------------------------


async def test_the_room_lives_as_long_as_a_run_of_the_scheduler() -> None:
    s = Scheduling(
        [external()], config=SchedulingConfig(database_url="sqlite+aiosqlite://"), clock=None
    )
    assert s.arrivals is None
    async with s.run(arm=False):
        first = s.arrivals
        assert first is not None
    assert s.arrivals is None
    async with s.run(arm=False):
        assert s.arrivals is not None and s.arrivals is not first


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (ArrivalStatus.ACCEPTED, 202),
        (ArrivalStatus.DUPLICATE, 200),
        (ArrivalStatus.SKIPPED, 200),
        (ArrivalStatus.PAUSED, 200),
    ],
)
def test_the_route_maps_each_answer(status: ArrivalStatus, code: int) -> None:
    run = row("report", SLOT, RunStatus.RUNNING, Trigger.EXTERNAL)
    response = answered(Arrival(status, SLOT, run))
    assert isinstance(response, JSONResponse) and response.status_code == code
    assert json.loads(bytes(response.body)) == {
        "status": status.value,
        "runId": run.id,
        "scheduledAt": "2026-06-01T12:00:00.000Z",
    }
