"""``Store.run_for_slot``: the contract, over SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from support.stores import open_store
from support.waiting import wait_until

from fastapi_voltro_schedules.enums import CoordinationOutcome, RunStatus, Trigger
from fastapi_voltro_schedules.store import RunRecord, SQLStore, new_run_id

SLOT = datetime(2026, 3, 4, 9, 0, tzinfo=UTC)



@pytest.fixture
async def store(database_url: str) -> AsyncIterator[SQLStore]:
    async with open_store(database_url) as s:
        yield s


def row(
    name: str = "job",
    scheduled_at: datetime = SLOT,
    trigger: Trigger = Trigger.EXTERNAL,
    status: RunStatus = RunStatus.RUNNING,
    **kw: Any,
) -> RunRecord:
    kw.setdefault("fired_at", SLOT + timedelta(seconds=3))
    return RunRecord(
        id=kw.pop("id", None) or new_run_id(),
        name=name,
        scheduled_at=scheduled_at,
        status=status,
        trigger=trigger,
        coordination_outcome=CoordinationOutcome.EXTERNAL,
        replica_id="r1",
        **kw,
    )


async def test_none_when_the_slot_has_no_row(store: SQLStore) -> None:
    assert await store.run_for_slot("job", SLOT, Trigger.EXTERNAL) is None


async def test_finds_the_row_of_exactly_that_slot_name_and_trigger(store: SQLStore) -> None:
    mine = row()
    await store.insert_runs(
        [
            row(scheduled_at=SLOT - timedelta(hours=1)),
            row(scheduled_at=SLOT + timedelta(hours=1)),
            row(scheduled_at=SLOT + timedelta(microseconds=1)),
            row(name="other"),
            row(trigger=Trigger.MANUAL),
            row(trigger=Trigger.SELF),
            mine,
        ]
    )
    found = await store.run_for_slot("job", SLOT, Trigger.EXTERNAL)
    assert found == mine
    assert (await store.run_for_slot("job", SLOT, Trigger.SELF)) is not None
    assert await store.run_for_slot("nobody", SLOT, Trigger.EXTERNAL) is None


async def test_any_status_counts(store: SQLStore) -> None:
    missed = row(status=RunStatus.MISSED, fired_at=None)
    await store.insert_run(missed)
    assert await store.run_for_slot("job", SLOT, Trigger.EXTERNAL) == missed


async def test_the_first_recorded_row_wins(store: SQLStore) -> None:
    first, second = row(), row(status=RunStatus.MISSED)
    assert first.id < second.id
    await store.insert_runs([second, first])  # insertion order does not matter, ids do
    assert await store.run_for_slot("job", SLOT, Trigger.EXTERNAL) == first


async def test_any_zone_same_instant(store: SQLStore) -> None:
    mine = row()
    await store.insert_run(mine)
    berlin = SLOT.astimezone(ZoneInfo("Europe/Berlin"))
    assert await store.run_for_slot("job", berlin, Trigger.EXTERNAL) == mine


async def test_naive_slot_is_refused(store: SQLStore) -> None:
    with pytest.raises(ValueError, match="naive"):
        await store.run_for_slot("job", SLOT.replace(tzinfo=None), Trigger.EXTERNAL)


async def test_sees_a_row_committed_while_polling(store: SQLStore) -> None:
    """The duplicate path: the loser polls until the winner's row is committed."""
    mine = row()
    looked = asyncio.Event()

    async def winner() -> None:
        await looked.wait()  # the loser has polled and found nothing
        await store.insert_run(mine)

    async def lookup() -> RunRecord | None:
        found = await store.run_for_slot("job", SLOT, Trigger.EXTERNAL)
        if found is None:
            looked.set()
        return found

    async def loser() -> RunRecord | None:
        found: RunRecord | None = await wait_until(lookup, what="the winner's row")
        return found

    _, found = await asyncio.gather(winner(), loser())
    assert looked.is_set() and found == mine
