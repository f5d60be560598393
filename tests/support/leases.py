"""The cluster tables read from outside: who holds each lease, and whether a replica was stopped
inside one of its transactions.

A verdict about ownership reads these rather than the test's wall clock: the tokens and expiries
are written by the replicas' own statements on the database's clock, so a slow *test* process
does not skew them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from sqlalchemy import bindparam, text
from sqlalchemy.exc import DBAPIError

from fastapi_voltro_schedules.models import LEASES_TABLE, MEMBERS_TABLE
from fastapi_voltro_schedules.store import SQLStore, create_store
from fastapi_voltro_schedules.store.leases import Lease, LeaseStore
from support.cluster import run_async


def fetch_leases(url: str) -> dict[str, Lease]:
    """Every row of the leases table, by schedule name."""

    async def read() -> list[Lease]:
        store = create_store(url)
        try:
            return await LeaseStore(store).leases()
        finally:
            await store.dispose()

    return {lease.name: lease for lease in run_async(read())}


def busiest_owner(leases: dict[str, Lease]) -> str | None:
    """The replica named as owner on the most lease rows (expired or not), if any."""
    owners = Counter(lease.owner for lease in leases.values() if lease.owner)
    return owners.most_common(1)[0][0] if owners else None


def locked_now(url: str, table: str, column: str, keys: Sequence[str]) -> bool:
    """Whether one of the rows of ``table`` whose ``column`` is in ``keys`` is locked by some
    transaction now: read with ``FOR UPDATE NOWAIT`` by key, rolled back at once. Right after a
    SIGSTOP it says whether the process halted inside a transaction on those rows — then they
    stay locked, and whoever needs them waits, until it runs again."""
    if not keys:
        return False

    async def probe() -> bool:
        store = create_store(url)
        assert isinstance(store, SQLStore)
        postgres = store.engine.dialect.name == "postgresql"
        col = store.engine.dialect.identifier_preparer.quote(column)  # `key` is reserved
        stmt = (
            text(
                f"SELECT {col} FROM {table} WHERE {col} = ANY(CAST(:keys AS VARCHAR[])) "
                "FOR UPDATE NOWAIT"
            )
            if postgres
            else text(
                f"SELECT {col} FROM {table} WHERE {col} IN :keys FOR UPDATE NOWAIT"
            ).bindparams(bindparam("keys", expanding=True))
        )
        try:
            async with store.engine.connect() as conn:
                if not postgres:  # the keys' rows only: REPEATABLE READ would lock gaps too
                    await conn.execute(text("SET TRANSACTION ISOLATION LEVEL READ COMMITTED"))
                try:
                    await conn.execute(stmt, {"keys": list(keys)})
                except DBAPIError as exc:
                    if "lock" not in str(exc).lower():
                        raise
                    return True
                finally:
                    await conn.rollback()
            return False
        finally:
            await store.dispose()

    return run_async(probe())


def in_a_beat(url: str, replica_id: str, names: Sequence[str]) -> bool:
    """Whether ``replica_id``'s member row or one of the lease rows ``names`` is locked now (see
    :func:`locked_now`): stopped there, a replica holds its leases until it runs again."""
    return locked_now(url, MEMBERS_TABLE, "replica_id", [replica_id]) or locked_now(
        url, LEASES_TABLE, "name", names
    )
