"""A claim and the row that says what became of its slot, in one transaction.

Claiming a slot in one statement and recording it in another left a window: a replica killed
between the two held the slot with no row — nobody ran it, nothing said so, and a retried
external arrival read it as a duplicate for ever (3 replicas × 40 schedules, SIGKILLs in the
first 40 ms of a second: 280 slots lost in 7 of 68 kills). Here both land together or neither
does: the claim statement answers which keys this replica won, and the rows of exactly those
are inserted before the transaction commits.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from ..models import claim_key
from .base import RunRecord
from .sql_claims import SQLClaims
from .sql_connections import aware
from .sql_writes import SQLWrites


class SQLClaimedRows(SQLClaims, SQLWrites):
    """:meth:`~.base.Store.claim_and_insert` of :class:`~.sql.SQLStore`."""

    async def claim_and_insert(
        self, runs: Sequence[RunRecord], replica_id: str, claimed_at: datetime
    ) -> set[str]:
        aware(claimed_at, "claimed_at")
        by_key: dict[str, RunRecord] = {}
        for run in runs:
            aware(run.scheduled_at, "scheduled_at")
            by_key.setdefault(claim_key(run.name, run.scheduled_at), run)
        self._check_keys(by_key)
        inserted: set[str] = set()
        for chunk in self._chunks(by_key, replica_id):
            work = self._claim_and_insert_chunk(chunk, by_key, replica_id, claimed_at)
            inserted |= await self._attempt("claim_and_insert", work)
        return inserted

    def _claim_and_insert_chunk(
        self,
        chunk: list[str],
        by_key: dict[str, RunRecord],
        replica_id: str,
        claimed_at: datetime,
    ) -> Callable[[AsyncConnection], Awaitable[set[str]]]:
        claim = self._claim_chunk(chunk, replica_id, claimed_at)

        async def work(conn: AsyncConnection) -> set[str]:
            won = await claim(conn)
            rows = [by_key[key] for key in chunk if key in won]
            if rows:
                await self.insert_rows(conn, [r.values() for r in rows])
            return {r.id for r in rows}

        return work
