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
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncConnection

from ..models import claim_key, slot_of_claim_key
from . import statements as q
from .base import ClaimRecord, RunRecord
from .sql_claims import SQLClaims
from .sql_connections import aware
from .sql_writes import SQLWrites
from .statements.rollups import ROLLED_UP_HOLDER

_SECOND = timedelta(seconds=1)
"""A claim key names a whole second: the rows of its slot lie within it."""


class SQLClaimedRows(SQLClaims, SQLWrites):
    """:meth:`~.base.Store.claim_and_insert` of :class:`~.sql.SQLStore`."""

    async def claim_and_insert(
        self,
        runs: Sequence[RunRecord],
        replica_id: str,
        claimed_at: datetime,
        *,
        keys: Sequence[str] | None = None,
    ) -> set[str]:
        aware(claimed_at, "claimed_at")
        if keys is not None and len(keys) != len(runs):
            raise ValueError(f"claim_and_insert: {len(keys)} keys for {len(runs)} runs")
        by_key: dict[str, RunRecord] = {}
        for i, run in enumerate(runs):
            aware(run.scheduled_at, "scheduled_at")
            key = claim_key(run.name, run.scheduled_at) if keys is None else keys[i]
            by_key.setdefault(key, run)
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

    async def rowless_claims(
        self, after: datetime, upto: datetime, limit: int
    ) -> tuple[list[tuple[ClaimRecord, str, datetime]], datetime | None]:
        aware(after, "after")
        aware(upto, "upto")

        async def work(
            conn: AsyncConnection,
        ) -> tuple[list[tuple[ClaimRecord, str, datetime]], datetime | None]:
            read = (await conn.execute(q.claims_between(after, upto, limit))).all()
            more = read[-1].claimed_at if len(read) == limit else None
            found = []
            for row in read:
                slot = slot_of_claim_key(row.key)
                # a slot whose success was folded into a rollup has no row by design
                if slot is not None and row.replica_id != ROLLED_UP_HOLDER:
                    found.append((ClaimRecord(row.key, row.replica_id, row.claimed_at), *slot))
            if not found:
                return [], more
            names = {name for _, name, _ in found}
            first = min(at for _, _, at in found)
            last = max(at for _, _, at in found) + _SECOND
            recorded = {
                claim_key(r.name, r.scheduled_at)
                for r in await conn.execute(q.slots_with_rows(names, first, last))
            }
            found = [(c, name, at) for c, name, at in found if c.key not in recorded]
            return found, more

        return await self._attempt("rowless_claims", work, write=False)

    async def account_claim(self, claim: ClaimRecord, row: RunRecord, replica_id: str) -> bool:
        aware(row.scheduled_at, "scheduled_at")

        async def work(conn: AsyncConnection) -> bool:
            recorded = q.slots_with_rows([row.name], row.scheduled_at, row.scheduled_at + _SECOND)
            if (await conn.execute(recorded)).first():
                return False  # the row landed after all: nothing to account for
            taken = q.claim_take_over(claim.key, claim.replica_id, claim.claimed_at, replica_id)
            if (await conn.execute(taken)).rowcount != 1:
                return False  # another replica accounted for it, or the claim moved
            await self.insert_rows(conn, [row.values()])
            return True

        return await self._attempt("account_claim", work)
