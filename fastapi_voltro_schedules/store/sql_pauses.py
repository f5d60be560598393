"""Pauses: one row per schedule, written conditionally, so operators pausing or resuming at
once all end on the same row; and the span each pause opens, kept for the audit, written in
the same transaction as the row's change that opened or closed it."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from ..models import pause_spans_table, pauses_table
from ..records import ALL_SCHEDULES
from . import statements as q
from .base import PauseRecord
from .sql_connections import SQLConnections, aware


class SQLPauses(SQLConnections):
    """The pauses of :class:`~.sql.SQLStore`."""

    async def pause(
        self, name: str, *, paused_at: datetime, paused_by: str, reason: str | None
    ) -> PauseRecord:
        aware(paused_at, "paused_at")
        row = {"name": name, "paused_at": paused_at, "paused_by": paused_by, "reason": reason}

        async def work(conn: AsyncConnection) -> PauseRecord:
            again = await conn.execute(q.pause_again(name, paused_at, paused_by, reason))
            opened = bool(again.rowcount)
            if not opened:
                inserted = await conn.execute(q.pause_insert(self.engine.dialect.name, row))
                opened = bool(inserted.rowcount)
            if opened:  # not when already paused: that pause's span stays the open one
                await conn.execute(q.span_insert(row))
            stored = (await conn.execute(q.pauses_select(name))).one()
            return PauseRecord.from_row(stored._mapping)

        return await self._attempt("pause", work)

    async def resume(
        self, name: str, *, resumed_at: datetime, resumed_by: str
    ) -> PauseRecord | None:
        aware(resumed_at, "resumed_at")

        async def work(conn: AsyncConnection) -> PauseRecord | None:
            if (await conn.execute(q.pause_resume(name, resumed_at, resumed_by))).rowcount:
                await conn.execute(q.span_resume(name, resumed_at, resumed_by))
            stored = (await conn.execute(q.pauses_select(name))).first()
            return None if stored is None else PauseRecord.from_row(stored._mapping)

        return await self._attempt("resume", work)

    async def pause_all(
        self,
        *,
        paused_at: datetime,
        paused_by: str,
        reason: str | None,
        until: datetime | None,
    ) -> PauseRecord:
        aware(paused_at, "paused_at")
        if until is not None:
            aware(until, "until")
        now = paused_at

        async def work(conn: AsyncConnection) -> PauseRecord:
            # A window in force keeps who/when/why and takes the new end (row and span).
            if (await conn.execute(q.fleet_extend(pauses_table, now, until))).rowcount:
                await conn.execute(q.fleet_extend(pause_spans_table, now, until))
            else:
                row = q.fleet_row(now, paused_by, reason, until)
                opened = bool(
                    (await conn.execute(q.fleet_again(now, paused_by, reason, until))).rowcount
                )
                if not opened:
                    inserted = await conn.execute(q.pause_insert(self.engine.dialect.name, row))
                    opened = bool(inserted.rowcount)
                if opened:
                    await conn.execute(q.span_insert(row))
            stored = (await conn.execute(q.pauses_select(ALL_SCHEDULES))).one()
            return PauseRecord.from_row(stored._mapping)

        return await self._attempt("pause_all", work)

    async def resume_all(self, *, resumed_at: datetime, resumed_by: str) -> PauseRecord | None:
        aware(resumed_at, "resumed_at")

        async def work(conn: AsyncConnection) -> PauseRecord | None:
            ended = await conn.execute(q.fleet_resume(pauses_table, resumed_at, resumed_by))
            if ended.rowcount:
                await conn.execute(q.fleet_resume(pause_spans_table, resumed_at, resumed_by))
            stored = (await conn.execute(q.pauses_select(ALL_SCHEDULES))).first()
            return None if stored is None else PauseRecord.from_row(stored._mapping)

        return await self._attempt("resume_all", work)

    async def pauses(self) -> list[PauseRecord]:
        async def work(conn: AsyncConnection) -> list[PauseRecord]:
            result = await conn.execute(q.pauses_select())
            return [PauseRecord.from_row(row._mapping) for row in result]

        return await self._attempt("pauses", work, write=False)

    async def pause_spans(self) -> list[PauseRecord]:
        async def work(conn: AsyncConnection) -> list[PauseRecord]:
            result = await conn.execute(q.spans_select())
            return [PauseRecord.from_row(row._mapping) for row in result]

        return await self._attempt("pause_spans", work, write=False)
