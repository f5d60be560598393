"""Store.finish_runs: many terminal writes in one executemany, each a compare-and-set."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fastapi_voltro_schedules.enums import RunStatus, Trigger
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.store import RunOutcome, RunRecord, SQLStore, create_store, new_run_id

T = datetime(2026, 3, 4, 9, 0, 0, 123456, tzinfo=UTC)


def running(replica: str, status: RunStatus = RunStatus.RUNNING) -> RunRecord:
    return RunRecord(
        id=new_run_id(),
        name="job",
        scheduled_at=T,
        status=status,
        trigger=Trigger.SELF,
        fired_at=T,
        replica_id=replica,
    )


async def test_finish_runs_writes_only_own_running_rows(database_url: str) -> None:
    await upgrade_to_head(database_url)
    store = create_store(database_url)
    try:
        mine = [running("me") for _ in range(3)]
        theirs = running("other")
        abandoned = running("me", RunStatus.FAILED)
        await store.insert_runs([*mine, theirs, abandoned])
        done = T + timedelta(seconds=2)
        await store.finish_runs(
            [
                RunOutcome(mine[0].id, RunStatus.SUCCEEDED, done),
                RunOutcome(mine[1].id, RunStatus.FAILED, done, "ValueError", "boom"),
                RunOutcome(theirs.id, RunStatus.SUCCEEDED, done),
                RunOutcome(abandoned.id, RunStatus.SUCCEEDED, done),
            ],
            "me",
        )
        rows = {r.id: r for r in await store.list_runs("job")}
        assert rows[mine[0].id].status is RunStatus.SUCCEEDED
        assert rows[mine[0].id].finished_at == done  # microseconds and UTC kept
        assert rows[mine[1].id].status is RunStatus.FAILED
        failed = rows[mine[1].id]
        assert (failed.error_tag, failed.error_message) == ("ValueError", "boom")
        assert rows[mine[2].id].status is RunStatus.RUNNING  # not in the batch
        assert rows[theirs.id].status is RunStatus.RUNNING  # another replica's row
        assert rows[abandoned.id].status is RunStatus.FAILED  # no longer running: untouched
        assert rows[abandoned.id].finished_at is None
        await store.finish_runs([], "me")  # nothing to do is not an error
    finally:
        if isinstance(store, SQLStore):
            assert store.engine.pool.checkedout() == 0
        await store.dispose()
