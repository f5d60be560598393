"""Store: a claims row as a long-held lock (holder, touch, conditional release), and the
succeeded slots of a range — on every store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fastapi_voltro_schedules.enums import RunStatus, Trigger
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.store import RunRecord, SQLStore, create_store, new_run_id

T = datetime(2026, 8, 10, 9, 30, 15, 250000, tzinfo=UTC)


async def test_claim_lock_lifecycle(database_url: str) -> None:
    await upgrade_to_head(database_url)
    store = create_store(database_url)
    key = "hourly@range-backfill"
    try:
        assert await store.claim_holder(key) is None
        assert await store.claim(key, "a", T)
        assert await store.claim_holder(key) == ("a", T)
        assert not await store.touch_claim(key, "b", T + timedelta(seconds=1))  # not b's
        assert await store.touch_claim(key, "a", T + timedelta(seconds=2))
        assert await store.claim_holder(key) == ("a", T + timedelta(seconds=2))
        # A takeover only deletes the row it saw: a stale read loses.
        assert not await store.release_claim(key, claimed_at=T)
        assert not await store.release_claim(key, replica_id="b")
        assert await store.release_claim(key, claimed_at=T + timedelta(seconds=2))
        assert not await store.release_claim(key)  # already gone
        assert await store.claim(key, "b", T)
        assert await store.release_claim(key, replica_id="b")
    finally:
        if isinstance(store, SQLStore):
            assert store.engine.pool.checkedout() == 0
        await store.dispose()


async def test_succeeded_slots_in_a_range(database_url: str) -> None:
    await upgrade_to_head(database_url)
    store = create_store(database_url)

    def run(hour: int, status: RunStatus, name: str = "hourly") -> RunRecord:
        at = T.replace(minute=0, second=0, microsecond=0) + timedelta(hours=hour)
        return RunRecord(
            id=new_run_id(),
            name=name,
            scheduled_at=at,
            status=status,
            trigger=Trigger.MANUAL if hour == 2 else Trigger.SELF,
        )

    try:
        await store.insert_runs(
            [
                run(0, RunStatus.SUCCEEDED),
                run(1, RunStatus.SUCCEEDED),
                run(2, RunStatus.SUCCEEDED),
                run(3, RunStatus.FAILED),
                run(3, RunStatus.SUCCEEDED, name="other"),
                run(4, RunStatus.SUCCEEDED),
            ]
        )
        base = T.replace(minute=0, second=0, microsecond=0)
        found = await store.succeeded_slots("hourly", base, base + timedelta(hours=3))
        assert found == {base + timedelta(hours=1), base + timedelta(hours=2)}  # (from, to]
    finally:
        await store.dispose()
