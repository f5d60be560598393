"""``SQLStore``: the :class:`Store` contract on an ``AsyncEngine`` (SQLite, PostgreSQL, MariaDB).

The statements come from :mod:`.statements`; this module owns connections, transactions,
retries and the translation of driver failures into ``StoreUnavailableError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import re
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import anyio
from sqlalchemy import event, exc, make_url
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import StaticPool
from sqlalchemy.sql.dml import Insert, Update

from ..enums import RunStatus, Trigger
from ..errors import StoreUnavailableError
from ..models import claims_table, runs_table, voltro_metadata
from ..urls import normalize_database_url
from . import statements as q
from .base import LIVE_STATUSES, UNCHECKED, D, PauseRecord, RunOutcome, RunRecord, Store

T = TypeVar("T")
logger = logging.getLogger("fastapi_voltro_schedules.store")

DEFAULT_URL = "sqlite+aiosqlite:///./voltro.db"
SQLITE_BUSY_TIMEOUT_MS = 5000
CONNECT_TIMEOUT_S = 5.0
STATEMENT_TIMEOUT_S = 5.0
"""A server statement that has not answered by then is a dead link, not a slow query."""
OPERATION_TIMEOUT_S = 8.0
"""Bound of one store call, connection and retries included."""
MAX_KEY_LENGTH = 255
_RETRY_ATTEMPTS = 5
_WRITE = "voltro_write"
"""Execution option marking a write transaction: SQLite opens it with ``BEGIN IMMEDIATE``."""

# Deadlock victims and lock-wait timeouts: the transaction was rolled back whole, so running it
# again is safe. Sorted keys make these rare; the retry makes them harmless.
_RETRY_MYSQL_CODES = frozenset({1205, 1213})
_RETRY_PG_STATES = frozenset({"40001", "40P01"})


def is_memory_url(url: str | URL) -> bool:
    """``sqlite+aiosqlite://`` with no path, or ``:memory:``: the in-process memory store."""
    u = make_url(url)
    return u.get_backend_name() == "sqlite" and u.database in (None, "", ":memory:")


def make_engine(url: str | URL, **options: Any) -> AsyncEngine:
    """An engine configured for the ledger: WAL + busy timeout + ``BEGIN IMMEDIATE`` writes on
    SQLite files, one shared connection for memory, pre-ping and connect timeouts on servers.
    ``options`` go to ``create_async_engine`` and win over these defaults. A driver-less URL
    gets its async driver (``urls.normalize_database_url``)."""
    u = normalize_database_url(url)
    backend = u.get_backend_name()
    if backend == "sqlite":
        if is_memory_url(u):
            options = {"poolclass": StaticPool, **options}
            return create_async_engine(u, **options)
        options = {
            "connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
            **options,
        }
        engine = create_async_engine(u, **options)
        _install_sqlite_hooks(engine)
        return engine
    connect_args: dict[str, Any] = {}
    # Statement timeouts as well as connect timeouts: a link that silently drops packets must
    # end in StoreUnavailableError (fail closed), not in a claim that waits forever.
    if backend == "postgresql":
        connect_args = {"timeout": CONNECT_TIMEOUT_S, "command_timeout": STATEMENT_TIMEOUT_S}
    elif backend in ("mysql", "mariadb"):
        connect_args = {"connect_timeout": CONNECT_TIMEOUT_S, "read_timeout": STATEMENT_TIMEOUT_S}
        _quiet_asyncmy_claim_warnings()
    options = {"pool_pre_ping": True, "connect_args": connect_args, **options}
    return create_async_engine(u, **options)


def _install_sqlite_hooks(engine: AsyncEngine) -> None:
    # The pysqlite recipe ("Serializable isolation / Savepoints / Transactional DDL"): take
    # BEGIN away from the driver and emit our own, so a write transaction takes the write lock
    # up front and concurrent writers queue on busy_timeout instead of deadlocking on a lock
    # upgrade ("database is locked").
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        # WAL + NORMAL: no fsync per commit; a power cut may lose the newest commits but never
        # corrupts the file (sqlite.org/wal.html). The ledger takes thousands of commits a second.
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Any) -> None:
        write = conn.get_execution_options().get(_WRITE, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


class _DuplicateClaimFilter(logging.Filter):
    """asyncmy logs every server warning; a lost ``INSERT IGNORE`` claim is not news."""

    _pattern = re.compile(r"^Duplicate entry '.*@\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d' for key")

    def filter(self, record: logging.LogRecord) -> bool:
        return not self._pattern.match(record.getMessage())


def _quiet_asyncmy_claim_warnings() -> None:
    logger = logging.getLogger("asyncmy")
    if not any(isinstance(f, _DuplicateClaimFilter) for f in logger.filters):
        logger.addFilter(_DuplicateClaimFilter())


class _TurnMoved(Exception):
    """A conditional write of a turn found its row moved: roll back and look again."""


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _retryable(error: exc.DBAPIError) -> bool:
    orig = error.orig
    code = orig.args[0] if orig is not None and orig.args else None
    if isinstance(code, int) and code in _RETRY_MYSQL_CODES:
        return True
    state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    return state in _RETRY_PG_STATES


def _aware(value: datetime, what: str) -> datetime:
    if value.tzinfo is None:
        raise ValueError(f"{what}={value!r} is naive: the ledger stores aware UTC instants")
    return value


def _describe(error: BaseException) -> str:
    # the driver's own message, never the statement's parameters or the URL
    orig = getattr(error, "orig", None) or error
    return f"{type(orig).__name__}: {orig}".splitlines()[0][:300]


class SQLStore(Store):
    """The store on a SQLAlchemy ``AsyncEngine``."""

    def __init__(self, engine: AsyncEngine, *, owns_engine: bool = True) -> None:
        self._engine = engine
        self._write_engine = engine.execution_options(**{_WRITE: True})
        self._owns_engine = owns_engine
        self._memory = is_memory_url(engine.url)
        # memory shares one connection: callers take turns, and the tables appear on first use
        self._turn: asyncio.Lock | None = asyncio.Lock() if self._memory else None
        self._schema_ready = not self._memory
        # SQLite has one writer at a time anyway. Queueing this process's writers on a FIFO
        # lock hands the write lock over at once; left to busy_timeout, 50 writers poll and
        # sleep (a 50-task claim race took 3.6 s that way, 0.1 s this way). busy_timeout still
        # arbitrates between processes.
        sqlite_file = engine.dialect.name == "sqlite" and not self._memory
        self._write_turn: asyncio.Lock | None = asyncio.Lock() if sqlite_file else None
        self._driver_statements: dict[str, q.DriverStatement] = {}
        # The SQLite file this store opened, and its identity once the first connection is
        # up: see _check_file
        self._sqlite_path: str | None = None
        if sqlite_file and engine.url.database:
            self._sqlite_path = os.path.abspath(engine.url.database)
        self._sqlite_identity: tuple[int, int] | None = None
        self._sqlite_lost: str | None = None

    @property
    def engine(self) -> AsyncEngine:
        return self._engine

    @property
    def dialect_name(self) -> str:
        if self._memory:
            return "memory"
        dialect = self._engine.dialect
        if dialect.name in ("mysql", "mariadb"):
            return "mariadb" if getattr(dialect, "is_mariadb", False) else "mysql"
        return dialect.name

    @property
    def supports_multi_instance(self) -> bool:
        return self.dialect_name not in ("memory", "sqlite")

    # -- plumbing ---------------------------------------------------------------------------

    def _check_file(self, op: str) -> None:
        """Fail closed when the SQLite ledger file was deleted or replaced under us.

        Unlinking the file does not stop SQLite: pooled connections keep writing to the
        unlinked inode (every run recorded into a file nobody can open again), and each new
        connection silently creates an empty file at the path. So before every statement the
        path must still be the file the first connection opened (same device and inode; one
        ``stat``, microseconds). Once lost, every call raises — routes answer 503 and the
        engine fires nothing — until the app is restarted on a restored file.
        """
        path = self._sqlite_path
        if path is None or self._sqlite_identity is None:
            return  # not SQLite, or not opened yet: the first connection creates the file
        if self._sqlite_lost is None:
            try:
                st = os.stat(path)
            except FileNotFoundError:
                found = "the file is gone"
            else:
                if (st.st_dev, st.st_ino) == self._sqlite_identity:
                    return
                found = "another file is in its place"
            self._sqlite_lost = (
                f"the SQLite ledger {path} was deleted or replaced while the app was running "
                f"({found}); nothing more is written, so no run is recorded into a file nobody "
                f"can read. Stop the app, put the ledger file back at {path} (from a backup, or "
                "run `voltro migrate` for an empty ledger), then start the app again"
            )
            logger.error("store: %s", self._sqlite_lost)
        raise StoreUnavailableError(f"store {op}: {self._sqlite_lost}")

    def _remember_file(self) -> None:
        if self._sqlite_path is not None and self._sqlite_identity is None:
            with contextlib.suppress(OSError):
                st = os.stat(self._sqlite_path)
                self._sqlite_identity = (st.st_dev, st.st_ino)

    @contextlib.asynccontextmanager
    async def _connection(self, op: str, *, write: bool) -> AsyncIterator[AsyncConnection]:
        """A connection in a transaction (committed on success), driver errors translated."""
        self._check_file(op)
        async with contextlib.AsyncExitStack() as stack:
            if self._turn is not None:
                await stack.enter_async_context(self._turn)
                if not self._schema_ready:
                    await self._create_schema()
            if write and self._write_turn is not None:
                await stack.enter_async_context(self._write_turn)
            engine = self._write_engine if write else self._engine
            try:
                conn = await stack.enter_async_context(engine.begin())
                self._remember_file()  # the first connection opened (or created) it
                yield conn
                if write:
                    # unlinked while this transaction ran: roll it back rather than commit
                    # into the lost file
                    self._check_file(op)
            except exc.DBAPIError:
                raise  # _attempt decides: retry or translate
            except (OSError, TimeoutError, exc.TimeoutError) as error:
                raise StoreUnavailableError(f"store {op}: {_describe(error)}") from error

    async def _attempt(
        self, op: str, work: Callable[[AsyncConnection], Awaitable[T]], *, write: bool = True
    ) -> T:
        # Shielded: a statement cancelled halfway (shutdown, a watchdog, a timed-out request)
        # makes the driver tear its connection down in a stray task that can outlive the event
        # loop. Every statement here is short and bounded by the connect/command timeouts, so
        # the caller's cancellation simply lands once it is done.
        with anyio.CancelScope(shield=True):
            try:
                # The last line of defence behind the drivers' own timeouts: no store call,
                # retries included, outlives this bound.
                with anyio.fail_after(OPERATION_TIMEOUT_S):
                    return await self._attempt_unshielded(op, work, write=write)
            except TimeoutError as error:
                raise StoreUnavailableError(
                    f"store {op}: no answer within {OPERATION_TIMEOUT_S:g} s"
                ) from error
        raise AssertionError("unreachable")  # a shielded scope swallows nothing  # pragma: no cover

    async def _attempt_unshielded(
        self, op: str, work: Callable[[AsyncConnection], Awaitable[T]], *, write: bool
    ) -> T:
        for attempt in range(_RETRY_ATTEMPTS):
            try:
                async with self._connection(op, write=write) as conn:
                    return await work(conn)
            except exc.DBAPIError as error:
                if attempt + 1 < _RETRY_ATTEMPTS and _retryable(error):
                    logger.debug("store %s: retrying after %s", op, _describe(error))
                    await asyncio.sleep(random.uniform(0.005, 0.05) * (attempt + 1))
                    continue
                raise StoreUnavailableError(f"store {op}: {_describe(error)}") from error
        raise AssertionError("unreachable")  # pragma: no cover

    async def _read_runs(self, op: str, stmt: Any) -> list[RunRecord]:
        async def work(conn: AsyncConnection) -> list[RunRecord]:
            result = await conn.execute(stmt)
            return [RunRecord.from_row(row._mapping) for row in result]

        return await self._attempt(op, work, write=False)

    # -- claims -----------------------------------------------------------------------------

    async def claim(self, key: str, replica_id: str, claimed_at: datetime) -> bool:
        return key in await self.claim_many([key], replica_id, claimed_at)

    async def claim_many(
        self, keys: Sequence[str], replica_id: str, claimed_at: datetime
    ) -> set[str]:
        _aware(claimed_at, "claimed_at")
        for key in keys:
            if len(key) > MAX_KEY_LENGTH:
                raise ValueError(f"claim key longer than {MAX_KEY_LENGTH} characters: {key!r}")
        # Each statement locks its keys in sorted order, so concurrent batches cannot deadlock.
        ordered = sorted(set(keys))
        chunks = [ordered[i : i + q.CLAIM_CHUNK] for i in range(0, len(ordered), q.CLAIM_CHUNK)]
        # Replicas claiming the same herd start at different chunks: in lockstep they would
        # queue behind each other's uncommitted inserts key by key; this way each claims its
        # own stretch in parallel and finds the rest already decided.
        if len(chunks) > 1:
            first = zlib.crc32(replica_id.encode()) % len(chunks)
            chunks = chunks[first:] + chunks[:first]
        won: set[str] = set()
        for chunk in chunks:
            won |= await self._attempt("claim", self._claim_chunk(chunk, replica_id, claimed_at))
        return won

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
        return await self._bounded_delete("prune_claims", claims_table.name, older_than, limit)

    async def claim_holder(self, key: str) -> tuple[str, datetime] | None:
        async def work(conn: AsyncConnection) -> tuple[str, datetime] | None:
            row = (await conn.execute(q.claim_by_key(key))).first()
            return None if row is None else (row.replica_id, row.claimed_at)

        return await self._attempt("claim_holder", work, write=False)

    async def touch_claim(self, key: str, replica_id: str, at: datetime) -> bool:
        stmt = q.claim_touch(key, replica_id, _aware(at, "at"))

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

    async def _bounded_delete(self, op: str, table: str, older_than: datetime, limit: int) -> int:
        _aware(older_than, "older_than")
        deleted = 0
        while deleted < limit:
            batch = min(q.DELETE_BATCH, limit - deleted)

            async def work(conn: AsyncConnection, batch: int = batch) -> int:
                result = await conn.execute(q.bounded_delete(table, older_than, batch))
                return int(result.rowcount)

            n = await self._attempt(op, work)
            deleted += n
            if n < batch:
                break
        return deleted

    # -- runs: writes -----------------------------------------------------------------------

    async def insert_run(self, run: RunRecord) -> None:
        await self.insert_runs([run])

    async def insert_runs(self, runs: Sequence[RunRecord]) -> None:
        if not runs:
            return
        for r in runs:
            _aware(r.scheduled_at, "scheduled_at")
        rows = [r.to_row() for r in runs]
        await self._write_many("insert_runs", rows, q.insert_runs_array, q.insert_runs)

    async def _write_many(
        self,
        op: str,
        rows: Sequence[Mapping[str, Any]],
        pg_statement: Callable[[], Any],
        statement: Callable[[], Insert | Update],
        **shared: Any,
    ) -> None:
        """One hot statement over many rows (``shared`` values are the same for every row).

        Postgres gets each column as one array (``pg_statement``, an ``unnest`` form); the other
        drivers an ``executemany`` of plain tuples (see :class:`statements.DriverStatement`) in
        chunks of ``RUN_CHUNK`` rows. Either way SQLAlchemy's per-row parameter processing is
        skipped: at 10,000 rows it cost more than the database's own work.
        """
        dialect = self.engine.dialect
        if dialect.name == "postgresql":
            columns = {name: [row[name] for row in rows] for name in rows[0]}

            async def work(conn: AsyncConnection) -> None:
                await conn.execute(pg_statement(), columns | shared)

        else:
            stmt = self._driver_statements.get(op)
            if stmt is None:
                stmt = self._driver_statements[op] = q.driver_statement(statement(), dialect)
            tuples = stmt.rows(rows, dialect.name, shared)

            async def work(conn: AsyncConnection) -> None:
                for start in range(0, len(tuples), q.RUN_CHUNK):
                    await conn.exec_driver_sql(stmt.sql, tuples[start : start + q.RUN_CHUNK])

        await self._attempt(op, work)

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

        async def work(conn: AsyncConnection) -> bool:
            result = await conn.execute(stmt)
            return bool(result.rowcount == 1)

        return await self._attempt("update_run", work)

    async def take_turn(self, name: str, decide: Callable[[list[RunRecord]], D]) -> D:
        for _ in range(_RETRY_ATTEMPTS):
            try:
                return await self._attempt("take_turn", self._turn_work(name, decide))
            except _TurnMoved:
                continue  # a beat landed between our read and our write: look again
        raise StoreUnavailableError(
            f"store take_turn: the line of {name!r} kept moving under {_RETRY_ATTEMPTS} looks"
        )

    def _turn_work(
        self, name: str, decide: Callable[[list[RunRecord]], D]
    ) -> Callable[[AsyncConnection], Awaitable[D]]:
        async def work(conn: AsyncConnection) -> D:
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
            if plan.insert is not None:
                await conn.execute(q.insert_runs(), [plan.insert.to_row()])
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
            return plan

        return work

    async def finish_runs(
        self, outcomes: Sequence[RunOutcome], replica_id: str, *, announce: bool = False
    ) -> None:
        if not outcomes:
            return
        params = [
            {
                "b_id": o.run_id,
                "b_status": o.status.value,
                "b_finished": _aware(o.finished_at, "finished_at"),
                "b_tag": o.error_tag,
                "b_message": o.error_message,
                "b_traceback": o.error_traceback,
            }
            for o in outcomes
        ]
        names = sorted({o.name for o in outcomes if o.name is not None}) if announce else []
        if names and self._engine.dialect.name == "postgresql":
            # The NOTIFY rides in the write's own statement: one round trip, delivered at commit.
            await self._write_many(
                "finish_runs",
                params,
                q.finish_update_array_announced,
                q.finish_update,
                b_replica=replica_id,
                channel=q.NOTIFY_CHANNEL,
                names=names,
            )
            return
        await self._write_many(
            "finish_runs", params, q.finish_update_array, q.finish_update, b_replica=replica_id
        )

    async def heartbeat(
        self, run_ids: Sequence[str], at: datetime | None, replica_id: str
    ) -> int:
        if at is not None:
            _aware(at, "at")
        if not run_ids:
            return 0
        stmt = q.heartbeat_update(run_ids, at, replica_id, self.engine.dialect.name)

        async def work(conn: AsyncConnection) -> int:
            return int((await conn.execute(stmt)).rowcount)

        return await self._attempt("heartbeat", work)

    async def sweep_runs(self, finished_before: datetime, limit: int) -> int:
        return await self._bounded_delete("sweep_runs", runs_table.name, finished_before, limit)

    # -- runs: reads ------------------------------------------------------------------------

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
            _aware(before, "before")
        stmt = q.list_runs(name, limit, before, before_id, statuses)
        return await self._read_runs("list_runs", stmt)

    async def runs_between(
        self,
        after: datetime,
        until: datetime,
        limit: int = 1000,
        cursor: tuple[datetime, str] | None = None,
    ) -> list[RunRecord]:
        _aware(after, "after")
        _aware(until, "until")
        if cursor is not None:
            _aware(cursor[0], "cursor")
        stmt = q.runs_between(after, until, limit, cursor)
        return await self._read_runs("runs_between", stmt)

    async def run_for_slot(
        self, name: str, scheduled_at: datetime, trigger: Trigger
    ) -> RunRecord | None:
        _aware(scheduled_at, "scheduled_at")
        rows = await self._read_runs("run_for_slot", q.run_for_slot(name, scheduled_at, trigger))
        return rows[0] if rows else None

    async def succeeded_slots(
        self, name: str, after: datetime, until: datetime
    ) -> set[datetime]:
        stmt = q.succeeded_slots(name, _aware(after, "after"), _aware(until, "until"))

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

    # -- change notification -------------------------------------------------------------

    async def notify_changed(self, names: Collection[str]) -> None:
        if not names or self._engine.dialect.name != "postgresql":
            return

        async def work(conn: AsyncConnection) -> None:
            await conn.execute(q.notify(names))

        await self._attempt("notify_changed", work, write=False)

    async def listen_changed(
        self, on_change: Callable[[str], None], *, task_status: Any = None
    ) -> None:
        if self._engine.dialect.name != "postgresql":
            raise NotImplementedError(f"{self.dialect_name} has no change notifications")
        # A dedicated connection outside the pool's turnover: LISTEN lives on one session.
        async with self._engine.connect() as conn:
            raw = await conn.get_raw_connection()
            driver = raw.driver_connection
            assert driver is not None

            def callback(_conn: Any, _pid: int, _channel: str, payload: str) -> None:
                on_change(payload)

            # An idle LISTEN session runs no query, so nothing would ever notice it died (a
            # restarted server, a cut link, pg_terminate_backend): asyncpg's termination
            # listener is the only signal, and the caller must hear of it to say it polls.
            lost = anyio.Event()

            def terminated(_conn: Any) -> None:
                lost.set()

            driver.add_termination_listener(terminated)
            await driver.add_listener(q.NOTIFY_CHANNEL, callback)
            try:
                if task_status is not None:
                    task_status.started()
                await lost.wait()
            finally:
                driver.remove_termination_listener(terminated)
                if not lost.is_set():
                    with anyio.CancelScope(shield=True):
                        await driver.remove_listener(q.NOTIFY_CHANNEL, callback)
            # Drop the dead connection rather than return it to the pool.
            await conn.invalidate()
            raise StoreUnavailableError(
                "store listen_changed: the notification connection was closed by the server "
                "or the network"
            )

    # -- pauses -----------------------------------------------------------------------------

    async def pause(
        self, name: str, *, paused_at: datetime, paused_by: str, reason: str | None
    ) -> PauseRecord:
        _aware(paused_at, "paused_at")
        row = {"name": name, "paused_at": paused_at, "paused_by": paused_by, "reason": reason}

        async def work(conn: AsyncConnection) -> PauseRecord:
            again = await conn.execute(q.pause_again(name, paused_at, paused_by, reason))
            if not again.rowcount:
                await conn.execute(q.pause_insert(self.engine.dialect.name, row))
            stored = (await conn.execute(q.pauses_select(name))).one()
            return PauseRecord.from_row(stored._mapping)

        return await self._attempt("pause", work)

    async def resume(
        self, name: str, *, resumed_at: datetime, resumed_by: str
    ) -> PauseRecord | None:
        _aware(resumed_at, "resumed_at")

        async def work(conn: AsyncConnection) -> PauseRecord | None:
            await conn.execute(q.pause_resume(name, resumed_at, resumed_by))
            stored = (await conn.execute(q.pauses_select(name))).first()
            return None if stored is None else PauseRecord.from_row(stored._mapping)

        return await self._attempt("resume", work)

    async def pauses(self) -> list[PauseRecord]:
        async def work(conn: AsyncConnection) -> list[PauseRecord]:
            result = await conn.execute(q.pauses_select())
            return [PauseRecord.from_row(row._mapping) for row in result]

        return await self._attempt("pauses", work, write=False)

    # -- lifecycle --------------------------------------------------------------------------

    async def ping(self) -> None:
        async def work(conn: AsyncConnection) -> None:
            await conn.execute(q.ping())

        await self._attempt("ping", work, write=False)

    async def create_schema(self) -> None:
        if self._turn is not None:
            async with self._turn:
                await self._create_schema()
            return
        await self._create_schema()

    async def _create_schema(self) -> None:
        try:
            async with self._write_engine.begin() as conn:
                await conn.run_sync(voltro_metadata.create_all)
        except (exc.DBAPIError, OSError, TimeoutError) as error:
            raise StoreUnavailableError(f"store create_schema: {_describe(error)}") from error
        self._schema_ready = True

    async def dispose(self) -> None:
        if self._owns_engine:
            await self._engine.dispose()
