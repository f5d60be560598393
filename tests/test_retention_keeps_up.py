"""Retention keeps up with the firing rate (issue 29, item 10).

A sweep used to delete one batch of 1,000 claims per 10 minutes: above 1.7 firings a second the
claims table grew without bound. Now a sweep deletes until a batch comes back short, paced
between batches so no batch meets a herd (cron instants fall on whole seconds), bounded in time,
and the next sweep follows soon when one was cut short.

The real stores prove the count (one sweep, 5,000 expired claims); the pacing is checked on a
virtual clock (every sleep passes at once, moving the clock by its length) against a stand-in
store whose batches take a known time.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest
from pydantic import ValidationError
from sqlalchemy import select
from support.running import running
from support.stores import open_store

from fastapi_voltro_schedules import ScheduleContext, SchedulingConfig, define_schedule
from fastapi_voltro_schedules.config import claim_retention_floor_ms
from fastapi_voltro_schedules.coordination import InFlight
from fastapi_voltro_schedules.maintenance import (
    BACKLOG_PAUSE_SECONDS,
    CLAIM_RETENTION,
    HERD_CLEARANCE_SECONDS,
    HERD_GUARD_SECONDS,
    RETENTION_BATCH,
    RETENTION_INTERVAL_SECONDS,
    SWEEP_BUDGET_SECONDS,
    Maintenance,
    into_second,
)
from fastapi_voltro_schedules.models import claims_table
from fastapi_voltro_schedules.store import SQLStore
from fastapi_voltro_schedules.testing import ManualClock

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
RETENTION_MS = 3600_000
EXPIRED = 5_000
FRESH = 250


def maintenance(store: Any, clock: ManualClock, **kwargs: Any) -> Maintenance:
    options: dict[str, Any] = {"run_retention_ms": None, "claim_retention_ms": RETENTION_MS}
    return Maintenance(
        store=store,
        clock=clock,
        inflight=InFlight(),
        heartbeat_ms=30_000,
        watched_names=[],
        **(options | kwargs),
    )


async def seed_claims(store: SQLStore) -> set[str]:
    """5,000 claims past the retention (a herd per second, as an every-second fleet leaves
    them) and 250 within it; returns the fresh keys."""
    old = T0 - timedelta(milliseconds=RETENTION_MS) - timedelta(seconds=10)
    for second in range(EXPIRED // 1000):
        keys = [f"s{i}@{second}" for i in range(1000)]
        assert len(await store.claim_many(keys, "a", old + timedelta(seconds=second))) == 1000
    fresh = {f"s{i}@fresh" for i in range(FRESH)}
    assert await store.claim_many(sorted(fresh), "b", T0 - timedelta(minutes=59)) == fresh
    return fresh


async def claim_keys(store: SQLStore) -> set[str]:
    async with store.engine.connect() as conn:
        return set((await conn.execute(select(claims_table.c.key))).scalars())


async def test_one_sweep_prunes_every_expired_claim(database_url: str) -> None:
    async with open_store(database_url) as store:
        fresh = await seed_claims(store)
        keeper = maintenance(store, ManualClock(T0))
        await keeper.sweep()
        assert keeper.last_sweep is not None
        assert (keeper.last_sweep.claims, keeper.last_sweep.behind) == (EXPIRED, False)
        assert await claim_keys(store) == fresh


async def test_replicas_sweeping_at_once_share_the_work(database_url: str) -> None:
    """Two replicas' sweeps at the same moment (on Postgres each takes rows the other has
    not locked): every expired claim is deleted once, and nothing fresh."""
    async with open_store(database_url) as store, open_store(database_url) as other:
        fresh = await seed_claims(store)
        clock = ManualClock(T0)
        keepers = [maintenance(store, clock), maintenance(other, clock)]
        async with anyio.create_task_group() as tg:
            for keeper in keepers:
                tg.start_soon(keeper.sweep)
        assert sum(k.last_sweep.claims for k in keepers if k.last_sweep) == EXPIRED
        assert await claim_keys(store) == fresh


# ------------------------------------------------------------------- pacing, on virtual time


class VirtualClock(ManualClock):
    """A sleep passes at once, moving the clock (wall and monotonic) by its length."""

    async def sleep(self, seconds: float) -> None:
        if seconds > 0:
            await self.advance(seconds, settle=0)
        await anyio.lowlevel.checkpoint()


class Backlog:
    """A stand-in store: ``rows`` expired claims, each batch taking ``batch_s`` of the clock."""

    def __init__(self, clock: VirtualClock, rows: int, batch_s: float) -> None:
        self.clock, self.rows, self.batch_s = clock, rows, batch_s
        self.batches: list[tuple[datetime, datetime]] = []
        """(start, end) of every claims batch."""
        self.stop_after: datetime | None = None
        self.scope: anyio.CancelScope | None = None

    async def prune_claims(self, older_than: datetime, limit: int) -> int:
        start = self.clock.now()
        if self.stop_after is not None and start > self.stop_after and self.scope is not None:
            self.scope.cancel()
        await self.clock.advance(self.batch_s, settle=0)
        self.batches.append((start, self.clock.now()))
        n = min(limit, self.rows)
        self.rows -= n
        return n

    async def sweep_runs(self, finished_before: datetime, limit: int) -> int:
        return 0

    async def sweep_rollups(self, before: datetime, limit: int) -> int:
        return 0


async def test_no_batch_meets_a_herd() -> None:
    clock = VirtualClock(T0 + timedelta(milliseconds=300))
    backlog = Backlog(clock, rows=200 * RETENTION_BATCH, batch_s=0.03)
    keeper = maintenance(backlog, clock)
    await keeper.sweep()
    assert keeper.last_sweep is not None
    assert (keeper.last_sweep.claims, keeper.last_sweep.behind) == (200 * RETENTION_BATCH, False)
    guard = max(HERD_GUARD_SECONDS, 2 * backlog.batch_s)
    for start, end in backlog.batches[1:]:
        # clear of the herd before it and of the next one, and never across a whole second
        assert HERD_CLEARANCE_SECONDS <= into_second(start) <= 1 - guard, start
        assert start.replace(microsecond=0) == end.replace(microsecond=0), (start, end)
    # between two batches the sweep rests as long as a batch took: the database's time is
    # never more than half pruning
    starts = [start for start, _ in backlog.batches]
    gaps = [(b - a).total_seconds() for a, b in zip(starts, starts[1:], strict=False)]
    assert min(gaps) >= 2 * backlog.batch_s - 1e-6
    # ...and that still deletes far faster than any engine fires: 200,000 rows in under a minute
    assert (starts[-1] - starts[0]).total_seconds() < 60


async def test_a_sweep_cut_short_is_followed_at_once_then_the_interval() -> None:
    """A backlog larger than one sweep's budget: the sweep stops at its budget, says it is
    behind, and the next follows after a pause of about a second (catching up without rests)
    instead of the interval; once caught up, sweeps come an interval apart."""
    clock = VirtualClock(T0 + timedelta(milliseconds=500))
    backlog = Backlog(clock, rows=3_000 * RETENTION_BATCH, batch_s=0.01)
    keeper = maintenance(backlog, clock)
    with anyio.CancelScope() as scope:
        backlog.scope = scope
        backlog.stop_after = T0 + timedelta(seconds=3 * RETENTION_INTERVAL_SECONDS)  # virtual
        await keeper.retention_loop()
    assert backlog.rows == 0
    starts = [start for start, _ in backlog.batches]
    gaps = [(b - a).total_seconds() for a, b in zip(starts, starts[1:], strict=False)]
    sweeps = [0] + [i + 1 for i, gap in enumerate(gaps) if gap > 0.5]
    first_sweep = (starts[sweeps[1] - 1] - starts[0]).total_seconds()
    assert SWEEP_BUDGET_SECONDS - 1 <= first_sweep <= SWEEP_BUDGET_SECONDS + 1
    assert gaps[sweeps[1] - 1] <= BACKLOG_PAUSE_SECONDS + 1  # behind: the next at once…
    # …which catches up (no rests): 900 batches of 10 ms in well under its budget
    assert (starts[sweeps[2] - 1] - starts[sweeps[1]]).total_seconds() < 30
    # caught up: the later sweeps (one short batch each) come an interval apart
    interval = keeper.sweep_interval()
    assert len(sweeps) >= 4
    assert all(interval <= gaps[i - 1] <= interval + 1 for i in sweeps[2:])
    # every later sweep's first batch starts half-way between two whole seconds
    assert all(abs(into_second(starts[i]) - 0.5) < 1e-3 for i in sweeps[1:])


def test_sweeps_come_at_least_every_tenth_of_the_retention() -> None:
    clock = ManualClock(T0)
    assert maintenance(None, clock, claim_retention_ms=None).sweep_interval() == 600.0
    assert maintenance(None, clock).sweep_interval() == RETENTION_MS / 1000 / 10
    assert maintenance(None, clock, claim_retention_ms=60_000).sweep_interval() == 6.0
    assert maintenance(None, clock, run_retention_ms=2_000).sweep_interval() == 1.0
    assert maintenance(None, clock, claim_retention_ms=None).claim_retention == CLAIM_RETENTION


# ------------------------------------------------------------------------------- the setting


def test_claim_retention_is_a_setting_with_a_floor(monkeypatch: pytest.MonkeyPatch) -> None:
    assert SchedulingConfig().claim_retention_ms == CLAIM_RETENTION // timedelta(milliseconds=1)
    monkeypatch.setenv("VOLTRO_CLAIM_RETENTION_MS", "60000")
    monkeypatch.setenv("VOLTRO_EXTERNAL_TRIGGER_SKEW_MS", "20000")
    monkeypatch.setenv("VOLTRO_SCHEDULE_HEARTBEAT_MS", "10000")
    assert SchedulingConfig().claim_retention_ms == 60_000
    # the default skew (5 min) needs claims to live 2 × 5 min + 2 s
    floor = claim_retention_floor_ms(300_000, 10_000)
    assert floor == 602_000
    with pytest.raises(ValidationError) as refused:
        SchedulingConfig(external_trigger_skew_ms=300_000)
    message = str(refused.value)
    assert "VOLTRO_CLAIM_RETENTION_MS" in message and "602000" in message
    # a range backfill's lock, refreshed once a beat, is never pruned under it
    assert claim_retention_floor_ms(0, 30_000) == 90_000
    with pytest.raises(ValidationError, match="claim_retention_ms"):
        SchedulingConfig(
            claim_retention_ms=89_999, external_trigger_skew_ms=0, schedule_heartbeat_ms=30_000
        )


async def test_the_setting_reaches_the_running_sweep(sqlite_url: str) -> None:
    @define_schedule(name="job", cron="0 0 1 1 *", timezone="UTC")
    async def job(ctx: ScheduleContext) -> None:
        return None

    short = {
        "claim_retention_ms": 60_000,
        "external_trigger_skew_ms": 20_000,
        "schedule_heartbeat_ms": 10_000,
    }
    async with running([job], sqlite_url, ManualClock(T0), **short) as s:
        assert s.engine is not None
        assert s.engine.maintenance.claim_retention == timedelta(seconds=60)
        assert s.engine.maintenance.sweep_interval() == 6.0


# ------------------------------------------------------------------------------- the bench


def test_the_bench_verdict_reads_the_samples_after_the_first_window() -> None:
    from bench.claims_retention import verdict

    def result(counts: list[int]) -> dict[str, Any]:
        samples = [{"t": 10.0 * (i + 1), "claims": c} for i, c in enumerate(counts)]
        return {
            "retention_s": 60.0,
            "sweep_interval_s": 6.0,
            "samples": samples,
            "rate": 1000.0,
            "claim_retention_s": 60.0,
        }

    flat = verdict(
        result([10_000, 20_000, 30_000, 40_000, 50_000, 60_000, 65_000, 66_000, 64_000, 66_500])
    )
    assert flat["flat"] is True
    assert (flat["after_first_window"], flat["at_end"], flat["max"]) == (66_000, 66_500, 66_500)
    growing = verdict(result([10_000 * (i + 1) for i in range(12)]))
    assert growing["flat"] is False
    assert verdict(result([10_000, 20_000]))["flat"] is None  # too short to tell


@pytest.mark.slow
def test_the_bench_runs() -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.claims_retention",
            "--seconds",
            "3",
            "--n",
            "5",
            "--sample-s",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "== sqlite: external, n=5" in done.stdout
    assert "arrivals: {'sent'" in done.stdout and "'failed': 0" in done.stdout
