"""Reads of runs: pages, slot lookups, last runs, and the liveness reads.

A liveness read judges silence on the database's clock, read in the same transaction as the
rows, so no replica's clock decides whether another replica's run is abandoned.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from ..enums import RunStatus, Trigger
from . import statements as q
from .base import Latest, OutcomeRecord, RollupRecord, RunRecord
from .sql_connections import SQLConnections, aware
from .statements.rollups import rollups_between


class SQLReads(SQLConnections):
    """The run reads of :class:`~.sql.SQLStore`."""

    async def _read_runs(self, op: str, stmt: Any) -> list[RunRecord]:
        async def work(conn: AsyncConnection) -> list[RunRecord]:
            result = await conn.execute(stmt)
            return [RunRecord.from_row(row._mapping) for row in result]

        return await self._attempt(op, work, write=False)

    async def get_run(self, run_id: str) -> RunRecord | None:
        rows = await self._read_runs("get_run", q.run_by_id(run_id))
        return rows[0] if rows else None

    async def list_runs(
        self,
        name: str | None,
        limit: int = 100,
        before: datetime | None = None,
        *,
        before_id: str | None = None,
        statuses: Collection[RunStatus] | None = None,
    ) -> list[RunRecord]:
        if before is not None:
            aware(before, "before")
        stmt = q.list_runs(name, limit, before, before_id, statuses)
        return await self._read_runs("list_runs", stmt)

    async def runs_between(
        self,
        after: datetime,
        until: datetime,
        limit: int = 1000,
        cursor: tuple[datetime, str] | None = None,
    ) -> list[RunRecord]:
        aware(after, "after")
        aware(until, "until")
        if cursor is not None:
            aware(cursor[0], "cursor")
        stmt = q.runs_between(after, until, limit, cursor)
        return await self._read_runs("runs_between", stmt)

    async def run_for_slot(
        self, name: str, scheduled_at: datetime, trigger: Trigger
    ) -> RunRecord | None:
        aware(scheduled_at, "scheduled_at")
        rows = await self._read_runs("run_for_slot", q.run_for_slot(name, scheduled_at, trigger))
        return rows[0] if rows else None

    async def succeeded_slots(self, name: str, after: datetime, until: datetime) -> set[datetime]:
        stmt = q.succeeded_slots(name, aware(after, "after"), aware(until, "until"))

        async def work(conn: AsyncConnection) -> set[datetime]:
            return {row.scheduled_at for row in await conn.execute(stmt)}

        return await self._attempt("succeeded_slots", work, write=False)

    async def last_run(self, name: str) -> RunRecord | None:
        return (await self.last_runs([name])).get(name)

    async def last_runs(self, names: Collection[str]) -> dict[str, RunRecord]:
        if not names:
            return {}
        dialect = self.engine.dialect.name
        stmt = q.last_runs(dialect)
        ordered = list(dict.fromkeys(names))
        found: dict[str, RunRecord] = {}
        # chunked: one statement per NAME_CHUNK names, so 10,000 schedules never make one
        # unbounded parameter (or one statement a pool timeout could kill halfway)
        for start in range(0, len(ordered), q.NAME_CHUNK):
            params = q.last_runs_params(ordered[start : start + q.NAME_CHUNK], dialect)

            async def work(conn: AsyncConnection, params: dict[str, Any] = params) -> None:
                for row in await conn.execute(stmt, params):
                    record = RunRecord.from_row(row._mapping)
                    found[record.name] = record

            await self._attempt("last_runs", work, write=False)
        return found

    async def latest(self, names: Collection[str]) -> Latest:
        ordered = list(dict.fromkeys(names))
        latest = Latest({}, {}, {})
        dialect = self.engine.dialect.name
        runs = q.latest_runs(dialect)
        for start in range(0, len(ordered), q.NAME_CHUNK):
            chunk = ordered[start : start + q.NAME_CHUNK]
            params = q.last_runs_params(chunk, dialect)
            states = q.states_of(chunk, dialect)

            async def work(
                conn: AsyncConnection, params: dict[str, Any] = params, states: Any = states
            ) -> Latest:
                found = Latest({}, {}, {})
                for row in await conn.execute(runs, params):
                    fields = row._mapping
                    record = RunRecord.from_row(fields)
                    if fields["is_newest"]:
                        found.newest[record.name] = record
                    if fields["is_last"]:
                        found.last[record.name] = record
                await _read_outcomes(conn, states, found.outcomes)
                return found

            # each chunk's answer kept only once its attempt succeeded (a retry reads it again)
            found = await self._attempt("latest", work, write=False)
            latest.newest.update(found.newest)
            latest.last.update(found.last)
            latest.outcomes.update(found.outcomes)
        return latest

    async def rollups(
        self, names: Collection[str] | None, first: datetime, last: datetime, limit: int = 1000
    ) -> list[RollupRecord]:
        stmt = rollups_between(names, aware(first, "first"), aware(last, "last"), limit)

        async def work(conn: AsyncConnection) -> list[RollupRecord]:
            return [
                RollupRecord(r.name, r.hour, int(r.succeeded), int(r.total_ms), int(r.max_ms))
                for r in await conn.execute(stmt)
            ]

        return await self._attempt("rollups", work, write=False)

    async def outcomes(self, names: Collection[str]) -> dict[str, OutcomeRecord]:
        ordered = list(dict.fromkeys(names))
        found: dict[str, OutcomeRecord] = {}
        dialect = self.engine.dialect.name
        for start in range(0, len(ordered), q.NAME_CHUNK):
            stmt = q.states_of(ordered[start : start + q.NAME_CHUNK], dialect)

            async def work(conn: AsyncConnection, stmt: Any = stmt) -> None:
                await _read_outcomes(conn, stmt, found)

            await self._attempt("outcomes", work, write=False)
        return found

    async def names_in_status(
        self,
        statuses: Collection[RunStatus],
        *,
        after: str | None,
        prefix: str | None,
        limit: int,
    ) -> list[str]:
        if not statuses:
            return []
        stmt = q.names_in_status(statuses, after, prefix, limit)

        async def work(conn: AsyncConnection) -> list[str]:
            return [str(row[0]) for row in await conn.execute(stmt)]

        return await self._attempt("names_in_status", work, write=False)

    async def live_runs(
        self, name: str | Collection[str], statuses: Collection[RunStatus] = (RunStatus.RUNNING,)
    ) -> list[RunRecord]:
        names = [name] if isinstance(name, str) else list(name)
        found: list[RunRecord] = []
        for start in range(0, len(names), q.NAME_CHUNK):
            chunk = names[start : start + q.NAME_CHUNK]
            stmt = q.runs_in_status(chunk, statuses, self.engine.dialect.name)
            found += await self._read_runs("live_runs", stmt)
        return found

    async def database_now(self) -> datetime:
        stmt = q.database_now(self.engine.dialect.name)

        async def work(conn: AsyncConnection) -> datetime:
            now: datetime = (await conn.execute(stmt)).scalar_one()
            return now

        return await self._attempt("database_now", work, write=False)

    async def silent_runs(
        self,
        names: Collection[str],
        silent_for: timedelta,
        statuses: Collection[RunStatus] = (RunStatus.RUNNING,),
    ) -> list[RunRecord]:
        if silent_for < timedelta(0):
            raise ValueError(f"silent_for={silent_for!r} is negative")
        ordered = list(dict.fromkeys(names))
        if not ordered:
            return []
        dialect = self.engine.dialect.name
        clock = q.database_now(dialect)

        async def work(conn: AsyncConnection) -> list[RunRecord]:
            # the clock read and the rows in one transaction: on Postgres statement_timestamp()
            # is per statement, so the cutoff is never older than the rows it judges
            cutoff = (await conn.execute(clock)).scalar_one() - silent_for
            found: list[RunRecord] = []
            for start in range(0, len(ordered), q.NAME_CHUNK):
                chunk = ordered[start : start + q.NAME_CHUNK]
                result = await conn.execute(q.silent_runs(chunk, statuses, cutoff, dialect))
                found += [RunRecord.from_row(row._mapping) for row in result]
            found.sort(key=lambda r: (r.scheduled_at, r.id))
            return found

        return await self._attempt("silent_runs", work, write=False)

    async def queued_runs(self, name: str) -> list[RunRecord]:
        return await self._read_runs("queued_runs", q.runs_in_status([name], [RunStatus.QUEUED]))

    async def queued_names(self) -> dict[str, list[RunRecord]]:
        by_name: dict[str, list[RunRecord]] = {}
        for row in await self._read_runs("queued_names", q.queued_rows()):
            by_name.setdefault(row.name, []).append(row)
        return by_name


async def _read_outcomes(
    conn: AsyncConnection, states: Any, into: dict[str, OutcomeRecord]
) -> None:
    """The outcomes ``states`` (a :func:`~.statements.states_of`) reads, by name, into ``into``."""
    for row in await conn.execute(states):
        outcome = OutcomeRecord.from_row(row._mapping)
        into[outcome.name] = outcome
