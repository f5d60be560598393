"""A retry of an occurrence already recorded is answered from the ledger: ``duplicate`` with the
first run's id, and not one write — no claim attempt that could only lose (on SQLite that write
queued behind every other writer: the trigger route's throughput and the duplicate storm)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import clean_server
from sqlalchemy import event
from support.waiting import HANG

from fastapi_voltro_schedules import (
    RunStatus,
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    define_schedule,
)
from fastapi_voltro_schedules.api.trigger import arrive
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.store.instrumented import sql_store_behind
from fastapi_voltro_schedules.testing import ManualClock

T0 = datetime(2026, 6, 1, 12, 0, 30, tzinfo=UTC)
SLOT = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
NEXT = datetime(2026, 6, 1, 12, 1, tzinfo=UTC)


@contextmanager
def _store_url(backend: str, tmp_path: Path) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'voltro.db'}"
        return
    with clean_server(backend) as url:
        yield url


class _Writes:
    """Counts the statements that write (or all of them), sent on one engine while
    ``counting``."""

    def __init__(self, *, reads: bool = False) -> None:
        self.counting = False
        self.reads = reads
        self.sent: list[str] = []

    def __call__(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        head = statement.lstrip().split(None, 1)[0].upper()
        if self.counting and (self.reads or head in ("INSERT", "UPDATE", "DELETE", "WITH")):
            self.sent.append(statement)

    @contextmanager
    def on(self, scheduling: Scheduling) -> Iterator[None]:
        assert scheduling.store is not None
        sql = sql_store_behind(scheduling.store)
        assert sql is not None
        engine = sql.engine.sync_engine
        event.listen(engine, "before_cursor_execute", self)
        self.counting = True
        try:
            yield
        finally:
            self.counting = False
            event.remove(engine, "before_cursor_execute", self)


async def test_a_recorded_occurrence_is_a_duplicate_without_a_write(database_url: str) -> None:
    """A retry of an answered occurrence: from memory on the replica that answered it (not a
    statement), from one read on another (a restart here) — never a write."""
    writes = _Writes()
    statements = _Writes(reads=True)
    ran: list[datetime] = []

    async def report(ctx: ScheduleContext) -> None:
        ran.append(ctx.scheduled_at)

    job = define_schedule(
        name="report", cron="* * * * *", timezone="UTC", trigger="external", handler=report
    )
    await upgrade_to_head(database_url)
    clock = ManualClock(T0)
    s = Scheduling([job], config=SchedulingConfig(database_url=database_url), clock=clock)
    async with s.run():
        first = await arrive(s, "report")
        assert (first.status, first.scheduled_at) == ("accepted", SLOT)
        assert first.run is not None
        assert s.store is not None
        with anyio.fail_after(HANG):
            while (run := await s.store.get_run(first.run.id)) is None or not run.terminal:
                await anyio.sleep(0.01)
        assert run.status is RunStatus.SUCCEEDED

        with statements.on(s):
            again = await arrive(s, "report")
            stated = await arrive(s, "report", SLOT)
    assert (again.status, again.run and again.run.id) == ("duplicate", first.run.id)
    assert (stated.status, stated.run and stated.run.id) == ("duplicate", first.run.id)
    assert statements.sent == []

    restarted = Scheduling([job], config=SchedulingConfig(database_url=database_url), clock=clock)
    async with restarted.run():
        with writes.on(restarted):
            other = await arrive(restarted, "report")
    assert (other.status, other.run and other.run.id) == ("duplicate", first.run.id)
    # (the restarted engine's boot maintenance may delete old rows meanwhile: not the arrival's)
    assert [w for w in writes.sent if not w.lstrip().upper().startswith("DELETE")] == []
    assert ran == [SLOT]


async def test_arrivals_of_one_occurrence_at_once_claim_it_once(database_url: str) -> None:
    """A storm of 50 arrivals for a fresh occurrence in one process: one accepted, 49
    duplicates of its run, and one claim statement sent — the rest waited for the first's
    answer instead of each claiming and polling the ledger."""
    writes = _Writes()
    gate = anyio.Event()

    async def report(ctx: ScheduleContext) -> None:
        await gate.wait()

    job = define_schedule(
        name="report", cron="* * * * *", timezone="UTC", trigger="external", handler=report
    )
    await upgrade_to_head(database_url)
    clock = ManualClock(T0)
    s = Scheduling([job], config=SchedulingConfig(database_url=database_url), clock=clock)
    answers: list[tuple[str, str | None]] = []

    async def one() -> None:
        arrival = await arrive(s, "report")
        answers.append((arrival.status, arrival.run and arrival.run.id))

    async with s.run():
        with writes.on(s):
            async with anyio.create_task_group() as tg:
                for _ in range(50):
                    tg.start_soon(one)
        gate.set()
    accepted = [run_id for status, run_id in answers if status == "accepted"]
    assert len(accepted) == 1 and accepted[0] is not None
    assert sorted(set(answers)) == sorted({("accepted", accepted[0]), ("duplicate", accepted[0])})
    assert len(answers) == 50
    claims = [
        sql
        for sql in writes.sent
        if sql.lstrip().upper().startswith("INSERT") and "_voltro_schedule_claims" in sql
    ]
    assert len(claims) == 1, claims


OVERLAP_MATRIX = [
    pytest.param("sqlite", None, "skip", id="sqlite-skip"),
    pytest.param("sqlite", None, "queue", id="sqlite-queue"),
    pytest.param("postgres", "advisoryLock", "skip", id="postgres-advisoryLock-skip",
                 marks=pytest.mark.postgres),
    pytest.param("postgres", "cluster", "queue", id="postgres-cluster-queue",
                 marks=pytest.mark.postgres),
    pytest.param("mariadb", "advisoryLock", "queue", id="mariadb-advisoryLock-queue",
                 marks=pytest.mark.mariadb),
    pytest.param("mariadb", "cluster", "skip", id="mariadb-cluster-skip",
                 marks=pytest.mark.mariadb),
]  # fmt: skip


@pytest.mark.parametrize(("backend", "coordination", "overlap"), OVERLAP_MATRIX)
async def test_a_storm_while_a_run_is_live_answers_the_first_arrivals_verdict(
    backend: str, coordination: str | None, overlap: str, tmp_path: Path
) -> None:
    """The storm for 12:01 arrives while 12:00's run is still live: under ``skip`` the first
    arrival records the slot skipped, under ``queue`` it parks the slot in line — and the other
    49 are duplicates of that row, with one claim between them; the queued slot runs once."""
    ran: list[datetime] = []
    gate = anyio.Event()

    async def report(ctx: ScheduleContext) -> None:
        ran.append(ctx.scheduled_at)
        await gate.wait()

    job = define_schedule(
        name="report",
        cron="* * * * *",
        timezone="UTC",
        trigger="external",
        on_overlap=overlap,
        handler=report,
    )
    with _store_url(backend, tmp_path) as url:
        await upgrade_to_head(url)
        clock = ManualClock(T0)
        config = SchedulingConfig(database_url=url, coordination=coordination, replica_id="r1")
        s = Scheduling([job], config=config, clock=clock)
        writes = _Writes()
        answers: list[tuple[str, str | None]] = []

        async def one() -> None:
            arrival = await arrive(s, "report")
            answers.append((arrival.status, arrival.run and arrival.run.id))

        async with s.run():
            assert s.store is not None
            live = await arrive(s, "report")
            assert live.status == "accepted"
            with anyio.fail_after(HANG):
                while not ran:
                    await anyio.sleep(0.01)
            clock.set(NEXT + timedelta(seconds=10))
            with writes.on(s):
                async with anyio.create_task_group() as tg:
                    for _ in range(50):
                        tg.start_soon(one)
            firsts = [(status, run_id) for status, run_id in answers if status != "duplicate"]
            expected = "skipped" if overlap == "skip" else "accepted"
            assert [status for status, _ in firsts] == [expected], answers
            first_id = firsts[0][1]
            assert first_id is not None
            assert sorted(set(answers)) == sorted({(expected, first_id), ("duplicate", first_id)})
            assert len(answers) == 50
            claims = [
                sql
                for sql in writes.sent
                if sql.lstrip().upper().startswith("INSERT") and "_voltro_schedule_claims" in sql
            ]
            assert len(claims) == 1, claims
            gate.set()
            with anyio.fail_after(HANG):
                while (run := await s.store.get_run(first_id)) is None or not run.terminal:
                    await anyio.sleep(0.01)
        want = RunStatus.SKIPPED if overlap == "skip" else RunStatus.SUCCEEDED
        assert run.status is want
        assert ran == ([SLOT] if overlap == "skip" else [SLOT, NEXT])
