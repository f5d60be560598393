"""Replicas booting together record the same definition versions: one waits for a peer only at
the chunk the peer is writing, never for the peer's whole write.

Found by the herd bench (Postgres ×3, 10,000 schedules, on a busy 2-core box): two of the three
replicas failed to boot with ``store add_definitions: no answer within 8 s``. Every row they
inserted conflicted with an uncommitted row of the first replica's single 10,000-row
transaction, so they waited for all of it, and the store's 8 s bound ran out first.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import create_async_engine
from support.waiting import HANG

from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.models import definitions_table
from fastapi_voltro_schedules.records import DefinitionRecord
from fastapi_voltro_schedules.store import create_store
from fastapi_voltro_schedules.store.sql_definitions import definition_chunks
from fastapi_voltro_schedules.store.statements import RUN_CHUNK, definitions_insert

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def _first_versions(count: int, recorded_by: str) -> list[DefinitionRecord]:
    return [
        DefinitionRecord(
            name=f"s{i:05d}",
            version=1,
            cron="0 9 * * *",
            timezone="UTC",
            trigger="self",
            on_overlap="skip",
            backfill="skip",
            handler="jobs:report",
            args="{}",
            source="code",
            effective_from=T0,
            recorded_by=recorded_by,
        )
        for i in range(count)
    ]


@pytest.mark.parametrize(
    "server",
    [
        pytest.param("postgres_url", marks=pytest.mark.postgres),
        pytest.param("mariadb_url", marks=pytest.mark.mariadb),
    ],
)
async def test_a_peer_mid_write_holds_up_one_chunk_not_the_whole_boot(
    server: str, request: pytest.FixtureRequest
) -> None:
    url: str = request.getfixturevalue(server)
    await upgrade_to_head(url)
    records = _first_versions(3 * RUN_CHUNK, recorded_by="replica-b")
    chunks = definition_chunks(records)
    assert len(chunks) == 3
    held = chunks[-1]  # the peer is still writing the chunk this replica comes to last
    store = create_store(url)
    peer = create_async_engine(url)
    reader = create_async_engine(url)

    async def committed() -> int:
        async with reader.connect() as conn:
            return int(
                (
                    await conn.execute(select(func.count()).select_from(definitions_table))
                ).scalar_one()
            )

    try:
        async with peer.connect() as conn:
            transaction = await conn.begin()
            dialect = conn.dialect.name
            await conn.execute(definitions_insert(dialect), [r.row() for r in held])
            recording = asyncio.ensure_future(store.add_definitions(records))
            # While the peer's chunk is uncommitted, every other chunk is written and committed.
            deadline = asyncio.get_running_loop().time() + HANG
            while await committed() < 2 * RUN_CHUNK:
                assert not recording.done() or recording.exception() is None, recording.exception()
                assert asyncio.get_running_loop().time() < deadline, (
                    f"only {await committed()} versions committed while a peer holds one chunk"
                )
                await asyncio.sleep(0.05)
            assert not recording.done()  # it waits for the chunk the peer is writing…
            await transaction.commit()
        await asyncio.wait_for(recording, HANG)  # …and ends once the peer committed it
        assert await committed() == 3 * RUN_CHUNK
        stored = await store.definitions()
        assert len(stored) == 3 * RUN_CHUNK
        assert all(len(versions) == 1 for versions in stored.values())
    finally:
        await store.dispose()
        await peer.dispose()
        await reader.dispose()
