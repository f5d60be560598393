"""``example_app/db.py``: replicas booting together on a fresh database all come up.

Three engines run ``create_tables`` at the same moment against one database, as three replicas'
lifespans do; on Postgres the losers of ``create_all``'s check-then-create race used to fail
their startup (uvicorn exit 3: the CI failure of ``test_three_replicas_run_each_slot_once``).
With three tables, a loser failed on the first while the winner was still creating the others.
"""

from __future__ import annotations

import asyncio

from sqlalchemy import insert, select, text

from example_app.db import create_tables, digests, make_engine, metadata

ROUNDS = 8  # the race lost at least one replica in 9 rounds of 10 before the fix


async def test_replicas_creating_the_tables_at_once_all_boot(database_url: str) -> None:
    engines = [make_engine(database_url) for _ in range(3)]
    try:
        for _ in range(ROUNDS):
            async with engines[0].begin() as conn:  # every table: the tenants' come after
                for table in reversed(metadata.sorted_tables):  # digests, and race with them too
                    await conn.execute(text(f"DROP TABLE IF EXISTS {table.name}"))
            for engine in engines:  # connected beforehand, so the three CREATEs meet
                async with engine.connect():
                    pass
            outcomes = await asyncio.gather(*(create_tables(e) for e in engines),
                                            return_exceptions=True)  # fmt: skip
            assert outcomes == [None, None, None]
        async with engines[1].begin() as conn:  # the table is really there and usable
            await conn.execute(insert(digests).values(slot=text("CURRENT_TIMESTAMP"),
                                                      recipients=1, sent_by="r1"))  # fmt: skip
            assert (await conn.execute(select(digests.c.sent_by))).scalars().all() == ["r1"]
    finally:
        for engine in engines:
            await engine.dispose()
