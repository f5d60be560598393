"""The durable line's pure decision, :func:`planning.plan_turn`, as a table of lines."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from fastapi_voltro_schedules.enums import BackfillPolicy, CoordinationOutcome, RunStatus, Trigger
from fastapi_voltro_schedules.planning import TurnAction, TurnPlan, adoption_bound, plan_turn
from fastapi_voltro_schedules.store import RunRecord

NOW = datetime(2026, 9, 13, 10, 10, tzinfo=UTC)
BEAT_MS = 1000
PERIOD = timedelta(minutes=1)


def row(rid: str, minute: int, status: RunStatus, replica: str, silent_s: float) -> RunRecord:
    seen = NOW - timedelta(seconds=silent_s)
    return RunRecord(
        id=rid,
        name="batchImport",
        scheduled_at=datetime(2026, 9, 13, 10, minute, tzinfo=UTC),
        status=status,
        trigger=Trigger.EXTERNAL,
        coordination_outcome=CoordinationOutcome.EXTERNAL,
        fired_at=seen,
        heartbeat_at=seen,
        replica_id=replica,
    )


ME_NEW = row("sr_me", 9, RunStatus.QUEUED, "me", 0)
Q, R = RunStatus.QUEUED, RunStatus.RUNNING


def turn(
    line: list[RunRecord], *, new: bool = True, here: Callable[[str], bool] = lambda r: False
) -> TurnPlan:
    """``ME_NEW``'s turn at ``NOW`` on replica ``me``, the bound derived from the period."""
    return plan_turn(
        line,
        ME_NEW,
        new=new,
        now=NOW,
        replica_id="me",
        heartbeat_ms=BEAT_MS,
        adoption_bound=lambda r: adoption_bound(PERIOD, None),
        here=here,
    )


@pytest.mark.parametrize(
    ("line", "new", "action", "run_id", "abandoned"),
    [
        ([], True, TurnAction.START, "sr_me", []),
        ([row("sr_a", 8, R, "pod-a", 0.5)], True, TurnAction.WAIT, None, []),
        # a dead running row is marked abandoned, and does not hold the line shut
        ([row("sr_a", 8, R, "pod-a", 10)], True, TurnAction.START, "sr_me", []),
        # a live earlier waiter: wait behind it
        ([row("sr_b", 7, Q, "pod-b", 0.5)], True, TurnAction.WAIT, None, []),
        # a dead earlier waiter within 2 x period: adopted, run first (trigger kept)
        ([row("sr_b", 7, Q, "pod-b", 30)], True, TurnAction.ADOPT, "sr_b", []),
        # past the bound: written off missed (abandoned) and our own turn comes
        ([row("sr_b", 7, Q, "pod-b", 180)], True, TurnAction.START, "sr_me", ["sr_b"]),
        # a later waiter never blocks an earlier one
        ([row("sr_c", 10, Q, "pod-c", 0)], True, TurnAction.START, "sr_me", []),
        # our own row adopted by someone else meanwhile: stand down (never run twice)
        ([row("sr_me", 9, R, "pod-x", 0)], False, TurnAction.GONE, None, []),
        ([row("sr_me", 9, Q, "me", 0)], False, TurnAction.START, "sr_me", []),
    ],
)
def test_plan_turn(
    line: list[RunRecord], new: bool, action: TurnAction, run_id: str | None, abandoned: list[str]
) -> None:
    plan = turn(line, new=new)
    assert plan.action is action
    assert (plan.run.id if plan.run else None) == run_id
    assert [r.id for r in plan.abandoned] == abandoned
    if action is TurnAction.ADOPT:
        assert plan.run is not None and plan.run.replica_id == "me"
        assert plan.run.trigger is Trigger.EXTERNAL
        assert plan.run.coordination_outcome is CoordinationOutcome.EXTERNAL
        assert plan.insert is not None and plan.insert.status is RunStatus.QUEUED
    # every write compares the heartbeat it judged
    for write in plan.writes:
        judged = next((r for r in line if r.id == write.run_id), None)
        if judged is not None:
            assert write.expect_heartbeat_at == judged.heartbeat_at


def test_the_window_replaces_the_derived_bound() -> None:
    assert adoption_bound(PERIOD, None) == 2 * PERIOD
    assert adoption_bound(PERIOD, 300_000) == timedelta(minutes=5)


def test_under_backfill_all_a_dead_waiter_is_adopted_whatever_its_silence() -> None:
    """An ``all`` schedule's waiter is a slot still owed (a catch-up's, a fall-behind's): one
    silent a little past two periods — its replica killed on a loaded host — is adopted and
    run, never written off ``missed`` (found by the life-cycle chaos test under load: a
    downtime slot written off "silent 4304 ms, past the adoption bound of 4000 ms")."""
    owed = adoption_bound(PERIOD, None, BackfillPolicy.ALL)
    assert owed == timedelta.max
    assert adoption_bound(PERIOD, 300_000, BackfillPolicy.ALL) == timedelta.max
    for silent_s in (180, 86_400 * 30):
        plan = plan_turn(
            [row("sr_b", 7, Q, "pod-b", silent_s)],
            ME_NEW,
            new=True,
            now=NOW,
            replica_id="me",
            heartbeat_ms=BEAT_MS,
            adoption_bound=lambda r: owed,
        )
        assert plan.action is TurnAction.ADOPT and plan.abandoned == []
        assert plan.run is not None and plan.run.id == "sr_b"
    # latest/skip keep the bound: past it a newer slot is due, which is all they owe
    for policy in (BackfillPolicy.LATEST, BackfillPolicy.SKIP):
        assert adoption_bound(PERIOD, None, policy) == 2 * PERIOD


@pytest.mark.parametrize("status", [R, Q])
def test_a_row_going_here_is_live_however_late_its_beat(status: RunStatus) -> None:
    """This replica's own row that it runs (or keeps the place of) now blocks the line even
    when its beat is late enough to read dead — a loaded machine held the watchdog back and
    the next occurrence started beside the one still running here (MariaDB, CI). Another
    replica's silent row is still judged by its beat, and so is one of ours no longer going."""
    silent = row("sr_a", 8, status, "me", 10)
    mine_going = {"sr_a"}.__contains__
    waits = turn([silent], here=mine_going)
    assert waits.action is TurnAction.WAIT and waits.blocker == silent
    assert waits.writes == [] and waits.dead_running == []
    # the same row, no longer going here: dead (running: marked; queued: adopted)
    gone = turn([silent])
    assert gone.action is (TurnAction.START if status is R else TurnAction.ADOPT)
    # another replica's row with our id-set's answer is judged by its beat
    theirs = turn([row("sr_a", 8, status, "pod-a", 10)], here=mine_going)
    assert theirs.action is gone.action
