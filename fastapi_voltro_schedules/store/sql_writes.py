"""Writes of runs, and the queue line (``take_turn``).

The queue line sits with the writes because a turn is a batch of conditional writes under one
row lock: when one of them finds its row moved, the whole turn is rolled back and looked at
again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.dml import Insert, Update

from ..enums import RunStatus
from ..errors import StoreUnavailableError
from ..models import claim_key, runs_table
from ..records import ROLLED_UP_TAG, RUN_COLUMNS
from . import statements as q
from .base import LIVE_STATUSES, UNCHECKED, D, RunOutcome, RunRecord
from .sql_connections import RETRY_ATTEMPTS, SQLConnections, aware
from .statements import rollups

_STATUS_AT = RUN_COLUMNS.index("status")
_TERMINAL_VALUES = frozenset(s.value for s in RunStatus if s.terminal)


def _is_terminal(status: Any) -> bool:
    return status is not None and str(getattr(status, "value", status)) in _TERMINAL_VALUES


class _TurnMoved(Exception):
    """A conditional write of a turn found its row moved: roll back and look again."""


def _rolls_up(outcome: RunOutcome) -> bool:
    return (
        outcome.roll_up
        and outcome.status is RunStatus.SUCCEEDED
        and outcome.name is not None
        and outcome.scheduled_at is not None
    )


def _utcnow() -> datetime:
    return datetime.now(UTC)


class SQLWrites(SQLConnections):
    """The run writes of :class:`~.sql.SQLStore`."""

    async def insert_run(self, run: RunRecord) -> None:
        await self.insert_runs([run])

    async def insert_runs(self, runs: Sequence[RunRecord]) -> None:
        if not runs:
            return
        for r in runs:
            aware(r.scheduled_at, "scheduled_at")
        rows = [r.values() for r in runs]

        async def work(conn: AsyncConnection) -> None:
            await self.insert_rows(conn, rows)

        await self._attempt("insert_runs", work)

    async def insert_rows(self, conn: AsyncConnection, rows: Sequence[tuple[Any, ...]]) -> None:
        """Run rows (:meth:`RunRecord.values`) inserted on ``conn``, in its transaction; the
        terminal ones (``skipped``, ``missed``) are each schedule's newest outcome too."""
        await self._write_rows(
            conn, "insert_runs", RUN_COLUMNS, rows, q.insert_runs_array, q.insert_runs
        )
        # a firing's insert (running rows: the hot one) has nothing to note
        done = [r[0] for r in rows if r[_STATUS_AT] in _TERMINAL_VALUES]
        if done:
            await self.note_outcomes(conn, done)

    async def note_outcomes(self, conn: AsyncConnection, run_ids: Sequence[str]) -> None:
        """Record the terminal runs among ``run_ids`` as their schedules' newest outcome (if
        newer than the stored one), on ``conn``, in the transaction that wrote them."""
        dialect = conn.dialect.name
        await conn.execute(q.note_runs(dialect), q.note_runs_params(run_ids, dialect))

    async def _write_rows(
        self,
        conn: AsyncConnection,
        op: str,
        keys: Sequence[str],
        rows: Sequence[tuple[Any, ...]],
        pg_statement: Callable[[], Any],
        statement: Callable[[], Insert | Update],
        **shared: Any,
    ) -> None:
        """One hot statement over many rows, each a tuple of the binds ``keys`` names
        (``shared`` values are the same for every row); ``op`` names its compiled form.

        Postgres gets each column as one array (``pg_statement``, an ``unnest`` form); the
        other drivers an ``executemany`` of plain tuples (``statement`` compiled once, see
        :class:`statements.DriverStatement`), in chunks of ``RUN_CHUNK`` rows on MariaDB and all
        in one on SQLite. Either way SQLAlchemy's per-row parameter processing is skipped: at
        10,000 rows it cost more than the database's own work.
        """
        dialect = conn.dialect
        if dialect.name == "postgresql":
            by_column = zip(*rows, strict=True)
            columns = {key: list(col) for key, col in zip(keys, by_column, strict=True)}
            await conn.execute(pg_statement(), columns | shared)
            return
        stmt = self._driver_statements.get(op)
        if stmt is None:
            stmt = self._driver_statements[op] = q.driver_statement(statement(), dialect)
        tuples = stmt.tuples(keys, rows, dialect.name, shared)
        # SQLite binds each row of an executemany on its own (no parameter limit): one call
        # for the whole batch, not one thread round trip per chunk — the herd's insert was ~25
        # ms shorter (199 against 221 ms, median of 6 interleaved runs).
        chunk = len(tuples) if dialect.name == "sqlite" else q.RUN_CHUNK
        for start in range(0, len(tuples), chunk):
            await conn.exec_driver_sql(stmt.sql, tuples[start : start + chunk])

    async def update_run(
        self,
        run_id: str,
        *,
        expect_status: RunStatus | Collection[RunStatus],
        expect_replica_id: str | None = None,
        expect_heartbeat_at: datetime | None = UNCHECKED,
        **values: Any,
    ) -> bool:
        if isinstance(expect_status, str):
            statuses = [RunStatus(expect_status)]
        else:
            statuses = [RunStatus(s) for s in expect_status]
        check = expect_heartbeat_at is not UNCHECKED
        stmt = q.conditional_update(
            run_id,
            statuses,
            expect_replica_id,
            values,
            expect_heartbeat_at if check else None,
            check_heartbeat=check,
        )

        note = _is_terminal(values.get("status"))

        async def work(conn: AsyncConnection) -> bool:
            result = await conn.execute(stmt)
            won = bool(result.rowcount == 1)
            if won and note:
                await self.note_outcomes(conn, [run_id])
            return won

        return await self._attempt("update_run", work)

    async def take_turn(self, name: str, decide: Callable[[list[RunRecord]], D]) -> D:
        for _ in range(RETRY_ATTEMPTS):
            try:
                plan = await self._attempt("take_turn", self._turn_work(name, decide))
                assert plan is not None  # only a claim can be lost
                return plan
            except _TurnMoved:
                continue  # a beat landed between our read and our write: look again
        raise StoreUnavailableError(
            f"store take_turn: the line of {name!r} kept moving under {RETRY_ATTEMPTS} looks"
        )

    async def claim_turn(
        self,
        key: str,
        replica_id: str,
        claimed_at: datetime,
        name: str,
        decide: Callable[[list[RunRecord]], D],
    ) -> D | None:
        aware(claimed_at, "claimed_at")
        claim = {"key": key, "replica_id": replica_id, "claimed_at": claimed_at}
        for _ in range(RETRY_ATTEMPTS):
            try:
                return await self._attempt("claim_turn", self._turn_work(name, decide, claim))
            except _TurnMoved:
                continue
        raise StoreUnavailableError(
            f"store claim_turn: the line of {name!r} kept moving under {RETRY_ATTEMPTS} looks"
        )

    def _turn_work(
        self,
        name: str,
        decide: Callable[[list[RunRecord]], D],
        claim: dict[str, Any] | None = None,
    ) -> Callable[[AsyncConnection], Awaitable[D | None]]:
        async def work(conn: AsyncConnection) -> D | None:
            if claim is not None:
                # The slot's claim first, in the turn's own transaction: lost, nothing is
                # written; won, it commits with the row the turn writes (or not at all).
                statement = q.claim_insert(conn.dialect.name, [claim], returning=False)
                if (await conn.execute(statement)).rowcount != 1:
                    return None
            now = _utcnow()
            # The lock: an UPDATE of the line's claims row (created on first use). Insert-then-
            # update would deadlock on MySQL (two shared locks from the duplicate insert, both
            # upgrading), so the common path is the update alone.
            if (await conn.execute(q.line_lock(name, now))).rowcount == 0:
                row = {"key": name + q.LINE_SUFFIX, "replica_id": "", "claimed_at": now}
                await conn.execute(q.claim_insert(conn.dialect.name, [row], returning=False))
                await conn.execute(q.line_lock(name, now))
            result = await conn.execute(q.runs_in_status([name], LIVE_STATUSES))
            plan = decide([RunRecord.from_row(r._mapping) for r in result])
            done: list[str] = []
            if plan.insert is not None:
                await conn.execute(q.insert_runs(), [plan.insert.to_row()])
                if plan.insert.status.terminal:
                    done.append(plan.insert.id)
            for w in plan.writes:
                stmt = q.conditional_update(
                    w.run_id,
                    [w.expect_status],
                    w.expect_replica_id,
                    w.values,
                    w.expect_heartbeat_at,
                    check_heartbeat=True,
                )
                if (await conn.execute(stmt)).rowcount != 1:
                    raise _TurnMoved
                if _is_terminal(w.values.get("status")):
                    done.append(w.run_id)
            if done:
                await self.note_outcomes(conn, done)
            return plan

        return work

    async def finish_runs(
        self, outcomes: Sequence[RunOutcome], replica_id: str, *, announce: bool = False
    ) -> None:
        if not outcomes:
            return
        rolled = [o for o in outcomes if _rolls_up(o)]
        rows = [
            (
                o.run_id,
                o.status.value,
                aware(o.finished_at, "finished_at"),
                ROLLED_UP_TAG if _rolls_up(o) else o.error_tag,
                o.error_message,
                o.error_traceback,
            )
            for o in outcomes
        ]
        names = sorted({o.name for o in outcomes if o.name is not None}) if announce else []
        # On Postgres the schedules' newest outcomes (and, under cdc, the NOTIFY) ride in the
        # write's own statement: one round trip, delivered at commit. The other stores note
        # the outcomes with a second statement in the same transaction.
        shared: dict[str, Any] = {"b_replica": replica_id}
        pg_statement: Callable[[], Any] = q.finish_update_array_noted
        if names and self._engine.dialect.name == "postgresql":
            pg_statement = q.finish_update_array_announced
            shared |= {"channel": q.NOTIFY_CHANNEL, "names": names}

        async def work(conn: AsyncConnection) -> None:
            await self._write_rows(
                conn, "finish_runs", q.FINISH_KEYS, rows, pg_statement, q.finish_update, **shared
            )
            if conn.dialect.name != "postgresql":
                await self.note_outcomes(conn, [r[0] for r in rows])
            if rolled:
                await self._fold(conn, rolled)

        await self._attempt("finish_runs", work)

    async def _fold(self, conn: AsyncConnection, rolled: Sequence[RunOutcome]) -> None:
        """Fold the marked successes of ``rolled``'s schedules older than the newest success
        this batch wrote into their hours' rollups, on ``conn``, in the finish's transaction
        (see :meth:`Store.finish_runs`)."""
        newest: dict[str, tuple[datetime, str]] = {}
        for o in rolled:
            assert o.name is not None and o.scheduled_at is not None  # _rolls_up checked
            mark = (o.scheduled_at, o.run_id)
            if o.name not in newest or newest[o.name] < mark:
                newest[o.name] = mark
        names = sorted(newest)
        folded: list[Any] = []
        for start in range(0, len(names), q.NAME_CHUNK):
            marked = await conn.execute(rollups.marked_runs(names[start : start + q.NAME_CHUNK]))
            # the batch's own rows are marked too: everything older than the newest is folded
            folded += [r for r in marked if (r.scheduled_at, r.id) < newest[r.name]]
        if not folded:
            return
        hours: dict[tuple[str, datetime], list[int]] = {}
        for r in folded:
            hour = r.scheduled_at.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
            took = 0
            if r.fired_at is not None and r.finished_at is not None:
                took = max(0, (r.finished_at - r.fired_at) // timedelta(milliseconds=1))
            tally = hours.setdefault((r.name, hour), [0, 0, 0])
            tally[0] += 1
            tally[1] += took
            tally[2] = max(tally[2], took)
        for start in range(0, len(folded), q.RUN_CHUNK):
            chunk = folded[start : start + q.RUN_CHUNK]
            await conn.execute(rollups.delete_runs([r.id for r in chunk]))
            keys = [claim_key(r.name, r.scheduled_at) for r in chunk]
            await conn.execute(rollups.hand_claims_to_rollup(keys))
        # in key order: two batches adding to the same hours lock them in the same order
        await conn.execute(
            rollups.add_to_hours(conn.dialect.name),
            [
                {"name": name, "hour": hour, "succeeded": n, "total_ms": total, "max_ms": most}
                for (name, hour), (n, total, most) in sorted(hours.items())
            ],
        )

    async def defer_run(self, outcome: RunOutcome, replica_id: str) -> bool:
        if outcome.retry_at is None:
            raise ValueError("defer_run(): the outcome names no retry_at")
        return await self.update_run(
            outcome.run_id,
            expect_status=RunStatus.RUNNING,
            expect_replica_id=replica_id,
            retry_at=aware(outcome.retry_at, "retry_at"),
            heartbeat_at=aware(outcome.finished_at, "finished_at"),
            error_tag=outcome.error_tag,
            error_message=outcome.error_message,
            error_traceback=outcome.error_traceback,
        )

    async def heartbeat(self, run_ids: Sequence[str], at: datetime | None, replica_id: str) -> int:
        if at is not None:
            aware(at, "at")
        if not run_ids:
            return 0
        stmt = q.heartbeat_update(run_ids, at, replica_id, self.engine.dialect.name)

        async def work(conn: AsyncConnection) -> int:
            return int((await conn.execute(stmt)).rowcount)

        return await self._attempt("heartbeat", work)

    async def sweep_runs(self, finished_before: datetime, limit: int) -> int:
        return await self._bounded_delete("sweep_runs", runs_table.name, finished_before, limit)

    async def sweep_rollups(self, before: datetime, limit: int) -> int:
        aware(before, "before")
        deleted = 0
        while deleted < limit:
            batch = min(q.DELETE_BATCH, limit - deleted)

            async def work(conn: AsyncConnection, batch: int = batch) -> int:
                return int((await conn.execute(rollups.prune_rollups(before, batch))).rowcount)

            n = await self._attempt("sweep_rollups", work)
            deleted += n
            if n < batch:
                break
        return deleted
