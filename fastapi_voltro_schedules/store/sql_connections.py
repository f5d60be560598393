"""How every store call reaches the database: one transaction, retried when the database
rolled it back whole, bounded in time, and failing closed with ``StoreUnavailableError``.

The parts of :class:`~.sql.SQLStore` all build on :class:`SQLConnections` and run their
statements through its ``_attempt``, so the retries, the timeouts and the SQLite file guard
hold for each of them alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from datetime import datetime
from typing import TypeVar

import anyio
from sqlalchemy import exc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ..errors import StoreUnavailableError
from ..models import voltro_metadata
from . import statements as q
from .base import Store
from .engines import WRITE_OPTION, describe, is_memory_url, retryable

T = TypeVar("T")
logger = logging.getLogger("fastapi_voltro_schedules.store")

OPERATION_TIMEOUT_S = 8.0
"""Bound of one store call, connection and retries included."""
RETRY_ATTEMPTS = 5


def aware(value: datetime, what: str) -> datetime:
    if value.tzinfo is None:
        raise ValueError(f"{what}={value!r} is naive: the ledger stores aware UTC instants")
    return value


class SQLConnections(Store):
    """The store's engine, its transactions and its lifecycle: what every part of
    :class:`~.sql.SQLStore` relies on."""

    def __init__(self, engine: AsyncEngine, *, owns_engine: bool = True) -> None:
        self._engine = engine
        self._write_engine = engine.execution_options(**{WRITE_OPTION: True})
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

    @property
    def shared_file(self) -> bool:
        return self._sqlite_path is not None

    def change_stamp(self) -> tuple[float, Hashable] | None:
        path = self._sqlite_path
        if path is None:
            return None
        seen: list[tuple[int, int, int] | None] = []
        newest = 0
        for file in (path, path + "-wal"):
            try:
                st = os.stat(file)
            except OSError:
                seen.append(None)
                continue
            seen.append((st.st_mtime_ns, st.st_size, st.st_ino))
            newest = max(newest, st.st_mtime_ns)
        return newest / 1e9, tuple(seen)

    async def checkpoint(self) -> None:
        if self._sqlite_path is None:
            return  # a server, or the memory store: nothing of ours to fold
        self._check_file("checkpoint")
        try:
            async with self._engine.connect() as conn:
                # On the driver's connection: through SQLAlchemy the PRAGMA would run inside
                # the BEGIN our hook opens, and a reader's snapshot holds the log back.
                driver = (await conn.get_raw_connection()).driver_connection
                assert driver is not None  # a pooled connection that is open
                cursor = await driver.execute("PRAGMA wal_checkpoint(PASSIVE)")
                await cursor.close()
        except (exc.SQLAlchemyError, sqlite3.Error, OSError) as error:
            raise StoreUnavailableError(f"store checkpoint: {describe(error)}") from error

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
                raise StoreUnavailableError(f"store {op}: {describe(error)}") from error

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
        for attempt in range(RETRY_ATTEMPTS):
            try:
                async with self._connection(op, write=write) as conn:
                    return await work(conn)
            except exc.DBAPIError as error:
                if attempt + 1 < RETRY_ATTEMPTS and retryable(error):
                    logger.debug("store %s: retrying after %s", op, describe(error))
                    await asyncio.sleep(random.uniform(0.005, 0.05) * (attempt + 1))
                    continue
                raise StoreUnavailableError(f"store {op}: {describe(error)}") from error
        raise AssertionError("unreachable")  # pragma: no cover

    async def _bounded_delete(self, op: str, table: str, older_than: datetime, limit: int) -> int:
        aware(older_than, "older_than")
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
            raise StoreUnavailableError(f"store create_schema: {describe(error)}") from error
        self._schema_ready = True

    async def dispose(self) -> None:
        if self._owns_engine:
            await self._engine.dispose()
