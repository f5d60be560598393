"""Each schedule's newest outcome (``_voltro_schedule_state``), on every store.

The state is written by the write that makes a row terminal, in its transaction: a batch of
finishes, a ``skipped``/``missed`` insert, a conditional update (abandoned, written off). It only
moves forward: an old slot finishing late never hides a newer outcome. The listing filters by it
without reading the ledger.
"""

from __future__ import annotations

import importlib.util
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import delete, func, select
from support.stores import open_store

from fastapi_voltro_schedules.enums import CoordinationOutcome, RunStatus, Trigger
from fastapi_voltro_schedules.models import runs_table, state_table
from fastapi_voltro_schedules.store import RunOutcome, RunRecord, SQLStore, new_run_id
from fastapi_voltro_schedules.store import statements as q

T0 = datetime(2026, 5, 28, 9, 0, 0, 123456, tzinfo=UTC)
ME = "replica-a"


def row(
    name: str,
    at: datetime,
    status: RunStatus = RunStatus.RUNNING,
    trigger: Trigger = Trigger.SELF,
    **kw: Any,
) -> RunRecord:
    return RunRecord(
        id=new_run_id(),
        name=name,
        scheduled_at=at,
        status=status,
        trigger=trigger,
        coordination_outcome=CoordinationOutcome.SINGLE,
        fired_at=at,
        finished_at=at if status.terminal else None,
        replica_id=ME,
        **kw,
    )


def done(run: RunRecord, status: RunStatus, after: timedelta = timedelta(seconds=1)) -> RunOutcome:
    return RunOutcome(
        run_id=run.id, status=status, finished_at=run.scheduled_at + after, name=run.name
    )


async def test_a_finish_batch_records_each_schedules_newest_outcome(store: SQLStore) -> None:
    a1, a2 = row("a", T0), row("a", T0 + timedelta(minutes=1))
    b1 = row("b", T0)
    await store.insert_runs([a1, a2, b1])
    assert await store.outcomes(["a", "b"]) == {}  # running rows are no outcome yet

    # one batch holding two runs of "a": the newer slot wins, whatever the order in the batch
    await store.finish_runs(
        [done(a2, RunStatus.FAILED), done(a1, RunStatus.SUCCEEDED), done(b1, RunStatus.SUCCEEDED)],
        ME,
    )
    got = await store.outcomes(["a", "b", "never"])
    assert set(got) == {"a", "b"}
    assert (got["a"].run_id, got["a"].status) == (a2.id, RunStatus.FAILED)
    assert got["a"].scheduled_at == a2.scheduled_at
    assert got["a"].finished_at == a2.scheduled_at + timedelta(seconds=1)
    assert (got["b"].run_id, got["b"].status) == (b1.id, RunStatus.SUCCEEDED)


async def test_an_old_slot_finishing_late_never_hides_the_newer_outcome(store: SQLStore) -> None:
    old, new = row("job", T0 - timedelta(days=30), trigger=Trigger.MANUAL), row("job", T0)
    await store.insert_runs([old, new])
    await store.finish_runs([done(new, RunStatus.SUCCEEDED)], ME)
    await store.finish_runs([done(old, RunStatus.FAILED, timedelta(days=31))], ME)  # a backfill
    got = (await store.outcomes(["job"]))["job"]
    assert (got.run_id, got.status) == (new.id, RunStatus.SUCCEEDED)

    # a newer slot moves it on
    newer = row("job", T0 + timedelta(hours=1))
    await store.insert_runs([newer])
    await store.finish_runs([done(newer, RunStatus.FAILED)], ME)
    assert (await store.outcomes(["job"]))["job"].run_id == newer.id


async def test_terminal_inserts_and_conditional_updates_are_outcomes_too(store: SQLStore) -> None:
    skipped = row("skip", T0, RunStatus.SKIPPED)
    missed = row("miss", T0, RunStatus.MISSED)
    running = row("corpse", T0)
    await store.insert_runs([skipped, missed, running])
    got = await store.outcomes(["skip", "miss", "corpse"])
    assert {n: o.status for n, o in got.items()} == {
        "skip": RunStatus.SKIPPED,
        "miss": RunStatus.MISSED,
    }

    # a lost compare-and-set writes no outcome; a won one does, in its transaction
    assert not await store.update_run(
        running.id, expect_status=RunStatus.QUEUED, status=RunStatus.FAILED, finished_at=T0
    )
    assert "corpse" not in await store.outcomes(["corpse"])
    assert await store.update_run(
        running.id,
        expect_status=RunStatus.RUNNING,
        status=RunStatus.FAILED,
        finished_at=T0,
        error_tag="abandoned",
    )
    assert (await store.outcomes(["corpse"]))["corpse"].status is RunStatus.FAILED

    # a non-terminal update (a heartbeat, a retry's wait) is no outcome
    again = row("corpse", T0 + timedelta(minutes=1))
    await store.insert_runs([again])
    await store.update_run(again.id, expect_status=RunStatus.RUNNING, heartbeat_at=T0)
    assert (await store.outcomes(["corpse"]))["corpse"].run_id == running.id


async def test_names_in_status_pages_in_name_order_by_prefix(store: SQLStore) -> None:
    names = [f"tenant-{i:03d}" for i in range(30)] + ["other-1", "te%nant", "te_nant"]
    runs = [row(n, T0) for n in names]
    await store.insert_runs(runs)
    # every third one failed
    await store.finish_runs(
        [
            done(r, RunStatus.FAILED if i % 3 == 0 else RunStatus.SUCCEEDED)
            for i, r in enumerate(runs)
        ],
        ME,
    )
    failed = await store.names_in_status([RunStatus.FAILED], after=None, prefix="tenant-", limit=4)
    assert failed == ["tenant-000", "tenant-003", "tenant-006", "tenant-009"]
    following = await store.names_in_status(
        [RunStatus.FAILED], after=failed[-1], prefix="tenant-", limit=100
    )
    assert following == [f"tenant-{i:03d}" for i in range(12, 30, 3)]
    both = await store.names_in_status(
        [RunStatus.FAILED, RunStatus.SUCCEEDED], after="tenant-026", prefix="tenant-", limit=100
    )
    assert both == ["tenant-027", "tenant-028", "tenant-029"]
    # the prefix is literal: % and _ match themselves only
    assert await store.names_in_status(
        [RunStatus.FAILED, RunStatus.SUCCEEDED], after=None, prefix="te%", limit=10
    ) == ["te%nant"]
    assert await store.names_in_status([RunStatus.MISSED], after=None, prefix=None, limit=10) == []


async def test_the_migration_fills_the_state_from_the_ledger(store: SQLStore) -> None:
    """0012 fills the table from a ledger written before it: the same rows the writes keep."""
    a1, a2, b = row("a", T0), row("a", T0 + timedelta(minutes=1)), row("b", T0)
    await store.insert_runs([a1, a2, b])
    await store.finish_runs(
        [done(a1, RunStatus.SUCCEEDED), done(a2, RunStatus.FAILED), done(b, RunStatus.SKIPPED)],
        ME,
    )
    kept = await store.outcomes(["a", "b"])
    spec = importlib.util.spec_from_file_location(
        "m0012",
        Path(__file__).parents[1] / "alembic" / "versions" / "0012_scale_listing_state.py",
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    async with store.engine.begin() as conn:
        await conn.execute(delete(state_table))
        fill = module.FILL_STATE_SQL
        await conn.exec_driver_sql(fill)
        assert (await conn.execute(select(func.count()).select_from(runs_table))).scalar() == 3
    assert await store.outcomes(["a", "b"]) == kept


async def test_the_runs_listing_by_status_is_an_index_read(postgres_url: str) -> None:
    """``runs?status=…`` without a name reads ``ix_voltro_runs_status_scheduled`` on Postgres
    (EXPLAIN over 60,000 rows), one range per status merged — never a sort of every match."""
    async with open_store(postgres_url) as store:
        async with store.engine.begin() as conn:
            # 60,000 rows: mostly succeeded, a few failed and missed, over 60,000 minutes
            await conn.exec_driver_sql(
                f"INSERT INTO {runs_table.name} "
                "(id, name, scheduled_at, status, trigger, coordination_outcome, replica_id) "
                "SELECT 'sr_' || lpad(to_hex(g), 32, '0'), 'job' || (g % 50), "
                "timestamptz '2026-01-01' + g * interval '1 minute', "
                "CASE WHEN g % 500 = 0 THEN 'failed' WHEN g % 777 = 0 THEN 'missed' "
                "ELSE 'succeeded' END, 'self', 'single', '' FROM generate_series(1, 60000) AS g"
            )
            await conn.exec_driver_sql(f"ANALYZE {runs_table.name}")
            for statuses, cursor in (
                ([RunStatus.FAILED], None),
                ([RunStatus.FAILED, RunStatus.MISSED], None),
                ([RunStatus.FAILED, RunStatus.MISSED], (T0, "sr_f")),
            ):
                before, before_id = cursor if cursor else (None, None)
                stmt = q.list_runs(None, 101, before, before_id, statuses)
                compiled = stmt.compile(dialect=conn.dialect)
                params = tuple(compiled.params[n] for n in compiled.positiontup or ())
                result = await conn.exec_driver_sql("EXPLAIN " + compiled.string, params)
                plan = "\n".join(r[0] for r in result)
                assert "ix_voltro_runs_status_scheduled" in plan, plan
                assert "Seq Scan" not in plan, plan
                # a sort, if any, is of the merged per-status pages (each at most `limit`)
                rows = await conn.execute(stmt)
                got = [(r.scheduled_at, r.id) for r in rows]
                assert got == sorted(got, reverse=True)
                assert got and len(got) <= 101


async def test_sqlite_plans_read_the_index_each_statement_is_for(sqlite_url: str) -> None:
    """SQLite plans without statistics: the status index must not steal the hot statements
    from the indexes they were written for (EXPLAIN QUERY PLAN)."""
    from fastapi_voltro_schedules.models import bind_utc

    async def plan(conn: Any, stmt: Any, params: tuple[Any, ...] | None = None) -> str:
        if params is None:
            compiled = stmt.compile(
                dialect=conn.dialect, compile_kwargs={"render_postcompile": True}
            )
            values = compiled.construct_params()
            params = tuple(
                bind_utc(v, "sqlite") if isinstance(v, datetime) else v
                for v in (values[k] for k in compiled.positiontup or ())
            )
            sql = compiled.string
        else:
            sql = stmt.text.replace(":state_ids", "?")
        rows = await conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql, params)
        return " | ".join(str(r[3]) for r in rows)

    async with open_store(sqlite_url) as store:
        async with store.engine.connect() as conn:
            sweep = await plan(conn, q.bounded_delete(runs_table.name, T0, 1000))
            assert "ix_voltro_runs_finished (finished_at<?)" in sweep, sweep
            assert "ix_voltro_runs_status_scheduled" not in sweep, sweep
            noted = await plan(conn, q.note_runs("sqlite"), ('["a"]',))
            assert "SEARCH r USING INDEX sqlite_autoindex" in noted, noted
            assert "status_scheduled" not in noted, noted
            one = await plan(conn, q.list_runs("job", 101, T0, "sr_0", [RunStatus.FAILED]))
            assert "ix_voltro_runs_name_status_scheduled (name=? AND status=?" in one, one
            assert "TEMP B-TREE" not in one, one
            every = await plan(conn, q.list_runs(None, 101, None, None, [RunStatus.FAILED]))
            assert "ix_voltro_runs_status_scheduled (status=?)" in every, every
            assert "TEMP B-TREE" not in every, every
            silent = await plan(conn, q.silent_runs(["job"], [RunStatus.RUNNING], T0, "sqlite"))
            assert "ix_voltro_runs_name_status_scheduled (name=? AND status=?)" in silent, silent
