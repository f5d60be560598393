"""Definition versions: rows added with insert-if-absent, read back per schedule."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from . import statements as q
from .base import DefinitionRecord
from .sql_connections import SQLConnections, aware


class SQLDefinitions(SQLConnections):
    """The definition versions of :class:`~.sql.SQLStore`."""

    async def definitions(
        self, names: Collection[str] | None = None
    ) -> dict[str, list[DefinitionRecord]]:
        chunks: list[Collection[str] | None]
        if names is None:
            chunks = [None]
        else:
            ordered = sorted(set(names))
            if not ordered:
                return {}
            chunks = [ordered[i : i + q.NAME_CHUNK] for i in range(0, len(ordered), q.NAME_CHUNK)]

        async def work(conn: AsyncConnection) -> dict[str, list[DefinitionRecord]]:
            found: dict[str, list[DefinitionRecord]] = {}
            for chunk in chunks:
                for row in await conn.execute(q.definitions_select(chunk)):
                    record = DefinitionRecord.from_row(row._mapping)
                    found.setdefault(record.name, []).append(record)
            return found

        return await self._attempt("definitions", work, write=False)

    async def definitions_since(self, after: datetime) -> list[DefinitionRecord]:
        aware(after, "after")

        async def work(conn: AsyncConnection) -> list[DefinitionRecord]:
            rows = await conn.execute(q.definitions_since_select(after))
            return [DefinitionRecord.from_row(row._mapping) for row in rows]

        return await self._attempt("definitions_since", work, write=False)

    async def add_definitions(self, records: Sequence[DefinitionRecord]) -> None:
        if not records:
            return
        for record in records:
            aware(record.effective_from, "effective_from")
        rows = [r.row() for r in records]
        dialect = self.engine.dialect.name

        async def work(conn: AsyncConnection) -> None:
            for i in range(0, len(rows), q.RUN_CHUNK):
                await conn.execute(q.definitions_insert(dialect, rows[i : i + q.RUN_CHUNK]))

        await self._attempt("add_definitions", work)
