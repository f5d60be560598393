"""Claims: the claims table's primary key elects the one firer of each slot.

Batches lock their keys in sorted order and each replica starts at its own chunk, so a herd of
replicas claiming the same slots neither deadlocks nor queues key by key.
"""

from __future__ import annotations

import zlib
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from . import statements as q
from .sql_connections import SQLConnections, aware
from .statements.claims import claims_prune

MAX_KEY_LENGTH = 255


class SQLClaims(SQLConnections):
    """The claims part of :class:`~.sql.SQLStore`."""

    async def claim(self, key: str, replica_id: str, claimed_at: datetime) -> bool:
        return key in await self.claim_many([key], replica_id, claimed_at)

    async def claim_many(
        self, keys: Sequence[str], replica_id: str, claimed_at: datetime
    ) -> set[str]:
        aware(claimed_at, "claimed_at")
        self._check_keys(keys)
        won: set[str] = set()
        for chunk in self._chunks(keys, replica_id):
            won |= await self._attempt("claim", self._claim_chunk(chunk, replica_id, claimed_at))
        return won

    @staticmethod
    def _chunks(keys: Iterable[str], replica_id: str) -> list[list[str]]:
        """``keys`` in claim statements' chunks, in the order this replica sends them."""
        # Each statement locks its keys in sorted order, so concurrent batches cannot deadlock.
        ordered = sorted(set(keys))
        chunks = [ordered[i : i + q.CLAIM_CHUNK] for i in range(0, len(ordered), q.CLAIM_CHUNK)]
        # Replicas claiming the same herd start at different chunks: in lockstep they would
        # queue behind each other's uncommitted inserts key by key; this way each claims its
        # own stretch in parallel and finds the rest already decided.
        if len(chunks) > 1:
            first = zlib.crc32(replica_id.encode()) % len(chunks)
            chunks = chunks[first:] + chunks[:first]
        return chunks

    @staticmethod
    def _check_keys(keys: Iterable[str]) -> None:
        for key in keys:
            if len(key) > MAX_KEY_LENGTH:
                raise ValueError(f"claim key longer than {MAX_KEY_LENGTH} characters: {key!r}")

    def _claim_chunk(
        self, chunk: list[str], replica_id: str, claimed_at: datetime
    ) -> Callable[[AsyncConnection], Awaitable[set[str]]]:
        async def work(conn: AsyncConnection) -> set[str]:
            dialect = conn.dialect
            if dialect.name == "postgresql":
                params = {"keys": chunk, "replica_id": replica_id, "claimed_at": claimed_at}
                result = await conn.execute(q.claim_insert_array(), params)
                return set(result.scalars())
            rows = [{"key": k, "replica_id": replica_id, "claimed_at": claimed_at} for k in chunk]
            if dialect.insert_returning:
                result = await conn.execute(q.claim_insert(dialect.name, rows))
                return set(result.scalars())
            # MySQL: rowcount says how many, not which; all-or-none needs no read-back
            result = await conn.execute(q.claim_insert(dialect.name, rows, returning=False))
            if result.rowcount == len(chunk):
                return set(chunk)
            if result.rowcount == 0:
                return set()
            won = await conn.execute(q.claims_won_by(chunk, replica_id, claimed_at))
            return set(won.scalars())

        return work

    async def prune_claims(self, older_than: datetime, limit: int) -> int:
        # One statement (one short transaction) per DELETE_BATCH rows; the pacing between
        # calls is the caller's (maintenance.Maintenance.sweep).
        aware(older_than, "older_than")
        deleted = 0
        while deleted < limit:
            batch = min(q.DELETE_BATCH, limit - deleted)

            async def work(conn: AsyncConnection, batch: int = batch) -> int:
                result = await conn.execute(claims_prune(conn.dialect.name, older_than, batch))
                return int(result.rowcount)

            n = await self._attempt("prune_claims", work)
            deleted += n
            if n < batch:
                break
        return deleted

    async def claim_holder(self, key: str) -> tuple[str, datetime] | None:
        async def work(conn: AsyncConnection) -> tuple[str, datetime] | None:
            row = (await conn.execute(q.claim_by_key(key))).first()
            return None if row is None else (row.replica_id, row.claimed_at)

        return await self._attempt("claim_holder", work, write=False)

    async def touch_claim(self, key: str, replica_id: str, at: datetime) -> bool:
        stmt = q.claim_touch(key, replica_id, aware(at, "at"))

        async def work(conn: AsyncConnection) -> bool:
            return bool((await conn.execute(stmt)).rowcount == 1)

        return await self._attempt("touch_claim", work)

    async def release_claim(
        self, key: str, *, replica_id: str | None = None, claimed_at: datetime | None = None
    ) -> bool:
        stmt = q.claim_release(key, replica_id, claimed_at)

        async def work(conn: AsyncConnection) -> bool:
            return bool((await conn.execute(stmt)).rowcount == 1)

        return await self._attempt("release_claim", work)
