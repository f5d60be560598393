"""Definition versions: rows added with insert-if-absent, read back per schedule."""

from __future__ import annotations

import zlib
from collections.abc import Awaitable, Callable, Collection, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from . import statements as q
from .base import DefinitionRecord
from .sql_connections import SQLConnections, aware


class SQLDefinitions(SQLConnections):
    """The definition versions of :class:`~.sql.SQLStore`."""

    async def definitions(
        self, names: Collection[str] | None = None
    ) -> dict[str, list[DefinitionRecord]]:
        # Read in pieces, each its own bounded attempt: the whole table at 100,000 schedules
        # in one statement took longer than the store's 8 s bound on a busy host, and three
        # replicas booting together failed their boots on it.
        found: dict[str, list[DefinitionRecord]] = {}
        if names is not None:
            ordered = sorted(set(names))
            for i in range(0, len(ordered), q.NAME_CHUNK):
                stmt = q.definitions_select(ordered[i : i + q.NAME_CHUNK])
                for record in await self._attempt("definitions", _reader(stmt), write=False):
                    found.setdefault(record.name, []).append(record)
            return found
        after: tuple[str, int] | None = None
        while True:
            stmt = q.definitions_page(after, q.DEFINITIONS_PAGE)
            page = await self._attempt("definitions", _reader(stmt), write=False)
            for record in page:
                found.setdefault(record.name, []).append(record)
            if len(page) < q.DEFINITIONS_PAGE:
                return found
            after = (page[-1].name, page[-1].version)

    async def definitions_since(
        self, after: datetime, known: Callable[[str, int], bool] | None = None
    ) -> tuple[datetime | None, list[DefinitionRecord]]:
        aware(after, "after")

        async def work(conn: AsyncConnection) -> tuple[datetime | None, list[DefinitionRecord]]:
            if known is None:
                rows = await conn.execute(q.definitions_since_select(after))
                records = [DefinitionRecord.from_row(row._mapping) for row in rows]
                return (records[-1].effective_from if records else None), records
            # the keys first (~8x cheaper a row than a whole one); whole rows of the unknown
            keys = (await conn.execute(q.definition_keys_since_select(after))).all()
            newest = await conn.scalar(q.newest_effective_since_select(after)) if keys else None
            wanted = sorted({k.name for k in keys if not known(k.name, k.version)})
            records = []
            for i in range(0, len(wanted), q.NAME_CHUNK):
                chunk = wanted[i : i + q.NAME_CHUNK]
                for row in await conn.execute(q.definitions_since_select(after, chunk)):
                    record = DefinitionRecord.from_row(row._mapping)
                    if not known(record.name, record.version):
                        records.append(record)
            records.sort(key=lambda r: (r.effective_from, r.name, r.version))
            return newest, records

        return await self._attempt("definitions_since", work, write=False)

    async def add_definitions(
        self, records: Sequence[DefinitionRecord], *, announce: bool = False
    ) -> int:
        if not records:
            return 0
        for record in records:
            aware(record.effective_from, "effective_from")
        dialect = self.engine.dialect.name
        # On Postgres under cdc a NOTIFY per inserted row follows in the insert's transaction:
        # sent at commit, for the rows this replica inserted only.
        announced = announce and dialect == "postgresql"
        recorded = 0
        for chunk in definition_chunks(records):
            rows = [r.row() for r in chunk]

            async def work(conn: AsyncConnection, rows: list[dict[str, Any]] = rows) -> int:
                # the rows an INSERT … ON CONFLICT DO NOTHING / INSERT IGNORE really added
                result = await conn.execute(q.definitions_insert(dialect), rows)
                if not result.returns_rows:  # MariaDB/MySQL: counted, not named
                    return int(result.rowcount)
                added = list(result.scalars())
                if announced and added:
                    await conn.execute(q.definitions_announce(added))
                return len(added)

            recorded += await self._attempt("add_definitions", work)
        return recorded


def definition_chunks(records: Sequence[DefinitionRecord]) -> list[list[DefinitionRecord]]:
    """``records`` in the chunks :meth:`SQLDefinitions.add_definitions` writes, each in a
    transaction of its own, in the order it writes them.

    Sorted by ``(name, version)`` so concurrent writers lock rows in one order (no deadlock),
    and replicas booting together start at different chunks (like the herd's claims). In one
    transaction, in lockstep, a replica waited for a peer's whole write of the same 10,000
    first versions — every row conflicts with an uncommitted one of the peer's — and on a busy
    host that wait outlasted the store's 8 s bound and the boot failed (bench herd, Postgres
    ×3). Now a replica waits at most for the one chunk a peer is writing."""
    ordered = sorted(records, key=lambda r: (r.name, r.version))
    chunks = [ordered[i : i + q.RUN_CHUNK] for i in range(0, len(ordered), q.RUN_CHUNK)]
    if len(chunks) > 1:
        first = zlib.crc32(ordered[0].recorded_by.encode()) % len(chunks)
        chunks = chunks[first:] + chunks[:first]
    return chunks


def _reader(stmt: Any) -> Callable[[AsyncConnection], Awaitable[list[DefinitionRecord]]]:
    async def work(conn: AsyncConnection) -> list[DefinitionRecord]:
        return [DefinitionRecord.from_row(row._mapping) for row in await conn.execute(stmt)]

    return work
