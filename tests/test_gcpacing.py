"""The garbage-collection pacer: its model of CPython's full-collection trigger, checked against
CPython itself, and the quiet moment it is offered after a herd's handlers started."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from support.waiting import HANG

from fastapi_voltro_schedules import ScheduleContext, Scheduling, SchedulingConfig, define_schedule
from fastapi_voltro_schedules.gcpacing import CollectionPacer, shared_pacer
from fastapi_voltro_schedules.testing import ManualClock


@pytest.fixture
def pacer() -> Iterator[CollectionPacer]:
    """A pacer of its own (not the process's), in step from a full collection."""
    if not gc.isenabled():
        pytest.fail("these tests need the collector enabled (something left it disabled)")
    own = CollectionPacer()
    own.follow()
    try:
        yield own
    finally:
        own.close()


def test_the_model_predicts_cpythons_own_full_collections(pacer: CollectionPacer) -> None:
    """At every generation-1 collection CPython decides whether to make it a full one. The
    pacer's estimate must agree: a full one happened only where the model says it is due, and
    none was skipped where the model says it was due (within one young generation's worth of
    objects CPython untracks — atomic tuples — which the estimate cannot see)."""
    # A heap the size of an app's (FastAPI, SQLAlchemy…): a quarter of it takes more than
    # `threshold[2]` generation-1 passes to promote, so the pending count is what decides.
    ballast = [[i] for i in range(400_000)]
    gc.collect()  # the pacer sees it: the ballast is now in its total
    threshold = pacer.threshold
    assert threshold is not None and threshold > 100_000
    _, _, passes_threshold = gc.get_threshold()
    slack = gc.get_threshold()[0]
    decisions: list[tuple[int, bool]] = []  # (generation collected, model said due)

    def before_the_pacer(phase: str, info: dict[str, Any]) -> None:
        if phase != "start" or info["generation"] == 0:
            return
        threshold = pacer.threshold
        assert threshold is not None
        passes = gc.get_count()[2]  # what CPython checks: not yet counted for this pass
        due = passes > passes_threshold and pacer.pending >= threshold
        near = passes > passes_threshold and pacer.pending >= threshold - slack
        decisions.append((info["generation"], due if info["generation"] == 1 else near))

    def full_ones() -> int:
        return sum(1 for generation, _ in decisions if generation == 2)

    gc.callbacks.insert(0, before_the_pacer)
    try:
        kept: list[list[int]] = []
        # Until CPython made three full collections (800,000 rounds on a fresh process; a
        # worker whose earlier tests left a bigger heap needs more), at most 8,000,000.
        for i in range(8_000_000):
            kept.append([i])  # long-lived: promoted, then dropped in bulk
            if len(kept) > 15_000:
                kept = []
                if full_ones() >= 3:
                    break
            _ = {"short": [i]}  # dies young: never promoted
    finally:
        gc.callbacks.remove(before_the_pacer)
        del ballast
    full = [due for generation, due in decisions if generation == 2]
    partial = [due for generation, due in decisions if generation == 1]
    assert len(full) >= 3, decisions  # the workload did set CPython off, several times
    assert all(full), decisions  # …each time the model said it was due
    assert not any(partial), decisions  # …and never skipped one the model called due


def _promote(count: int) -> list[list[int]]:
    """``count`` live objects, pushed into generation 2 by explicit generation-1 passes (an
    explicit pass never turns into a full one)."""
    live = [[i] for i in range(count)]
    for _ in range(gc.get_threshold()[2] + 1):
        gc.collect(1)
    return live


def test_a_due_collection_runs_at_the_quiet_moment(pacer: CollectionPacer) -> None:
    threshold = pacer.threshold
    assert threshold is not None
    live = _promote(threshold + 1)
    assert pacer.pending >= threshold
    assert pacer.quiet(10.0) is True
    assert pacer.collected == 1 and pacer.pending == 0
    assert live  # kept alive through it


def test_a_collection_due_but_for_its_passes_runs_at_the_quiet_moment(
    pacer: CollectionPacer,
) -> None:
    """Pending past the threshold with few generation-1 passes since the last full collection
    (a takeover, a boot: much promoted, little allocated): CPython runs it a few thousand
    allocations into the next herd — the quiet moment runs it first."""
    threshold = pacer.threshold
    assert threshold is not None
    saved = gc.get_threshold()
    live = _promote(threshold + 1)
    passes = gc.get_count()[2]
    gc.set_threshold(saved[0], saved[1], passes + 50)  # the passes are far from due
    try:
        assert pacer.quiet(10.0) is True
    finally:
        gc.set_threshold(*saved)
    assert pacer.collected == 1 and pacer.pending == 0
    assert live


def test_no_collection_without_pressure_or_without_time(pacer: CollectionPacer) -> None:
    threshold = pacer.threshold
    assert threshold is not None
    assert pacer.quiet(10.0) is False  # in step, nothing pending: nothing to move
    live = _promote(threshold + 1)
    assert pacer.quiet(0.0) is False  # due, but the next instant is now: not quiet
    assert pacer.collected == 0 and pacer.pending >= threshold
    assert live


def test_an_app_that_disabled_the_collector_keeps_it_disabled(pacer: CollectionPacer) -> None:
    threshold = pacer.threshold
    assert threshold is not None
    live = _promote(threshold + 1)
    gc.disable()
    try:
        assert pacer.quiet(10.0) is False
    finally:
        gc.enable()
    assert pacer.collected == 0
    assert live


def test_following_is_once_per_process() -> None:
    """A second ``follow`` (a scheduler started again) neither adds a callback nor collects."""
    own = CollectionPacer()
    try:
        own.follow()
        assert gc.callbacks.count(own._observe) == 1
        full = gc.get_stats()[2]["collections"]
        own.follow()
        assert gc.callbacks.count(own._observe) == 1
        assert gc.get_stats()[2]["collections"] == full
    finally:
        own.close()
    assert own._observe not in gc.callbacks and own.threshold is None


async def test_the_herd_offers_the_quiet_moment_after_its_handlers_started(
    sqlite_url: str,
) -> None:
    """The engine asks the pacer once per herd, after every handler took its first step, with
    the time left until the timer's next instant — and, before it, when the timer went to sleep
    with nothing due (after arming): never between a herd's dispatch and its handlers."""
    started: list[str] = []
    offered: list[tuple[list[str], float]] = []

    async def handler(ctx: ScheduleContext) -> None:
        started.append(ctx.name)
        await anyio.lowlevel.checkpoint()

    schedules = [
        define_schedule(name=f"h{i}", cron="* * * * *", timezone="UTC", handler=handler)
        for i in range(5)
    ]
    clock = ManualClock(datetime(2026, 6, 1, 11, 59, 30, tzinfo=UTC))
    config = SchedulingConfig(database_url=sqlite_url, replica_id="a")
    scheduling = Scheduling(schedules, config=config, clock=clock)
    pacer = shared_pacer()
    real_quiet = pacer.quiet

    def spy(seconds: float) -> bool:
        offered.append((list(started), seconds))
        return real_quiet(seconds)

    pacer.quiet = spy  # type: ignore[method-assign]
    try:
        async with scheduling.run():
            with anyio.fail_after(HANG):
                while not offered:
                    await anyio.sleep(0.01)
            assert offered == [([], pytest.approx(30.0, abs=0.01))]  # armed: 30 s of nothing
            await clock.advance(30)
            with anyio.fail_after(HANG):
                while len(offered) < 2:
                    await anyio.sleep(0.01)
    finally:
        del pacer.quiet
    (seen, seconds) = offered[1]
    assert sorted(seen) == [f"h{i}" for i in range(5)]  # all five had started
    assert seconds == pytest.approx(30.0, abs=0.01)  # the next minute, capped at 30 s
