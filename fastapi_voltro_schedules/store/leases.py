"""Members and leases: the statements of ``coordination="cluster"``, on the database's clock.

Every instant these statements compare is the database's own (``now()`` on Postgres,
``UTC_TIMESTAMP(6)`` on MariaDB/MySQL), never a replica's: a replica whose clock runs fast
cannot expire another's lease early, and one whose clock runs slow cannot keep a lease past
its expiry. (Cf. Oban's ``Peers.Postgres``: the leader's row carries ``expires_at`` computed
with the database's ``now()``.)

The fence. Every write an owner makes for a slot goes through :meth:`LeaseStore.insert_fenced`
or :meth:`LeaseStore.claim_fenced`: in one transaction it first *share-locks* the schedule's
lease row — only if it is still ``owner``'s, with the caller's token, and unexpired by the
database's clock — and then writes. A takeover locks that row first (``FOR UPDATE SKIP
LOCKED``): either the old owner's write holds it, and the takeover skips the row until a later
beat, after that write committed (so the new owner's catch-up, which reads the ledger after its
takeover commits, sees it), or the takeover commits first (and the old owner's lock read finds
a different token: it writes nothing). A paused-then-resumed owner
whose token is stale writes nothing.

Members are ``SQLStore`` transactions like the rest of the store (the same retries, timeouts
and ``StoreUnavailableError``); SQLite has no cluster (``coordination`` falls back to
``single``), so only Postgres and MariaDB/MySQL are spelled here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy import bindparam, text
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.elements import TextClause

from ..errors import StoreUnavailableError
from ..models import LEASES_TABLE, MEMBERS_TABLE
from . import statements as q
from .base import RunRecord, Store
from .instrumented import InstrumentedStore, sql_store_behind

FORGET_MEMBERS_MS = 24 * 3600 * 1000
"""A member row silent this long is deleted (replica ids change with every process)."""


_READ_COMMITTED = text("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")


T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Lease:
    """One row of ``_voltro_schedule_leases``."""

    name: str
    owner: str
    token: int
    expires_at: datetime


class _Dialect:
    """The few spellings that differ: the database's clock, an interval, a name list."""

    def __init__(self, postgres: bool) -> None:
        self.postgres = postgres
        self.now = "now()" if postgres else "UTC_TIMESTAMP(6)"
        self.share = "FOR SHARE" if postgres else "LOCK IN SHARE MODE"

    def plus_ms(self, param: str) -> str:
        if self.postgres:
            return f"(now() + CAST(:{param} AS INTEGER) * INTERVAL '1 millisecond')"
        return f"TIMESTAMPADD(MICROSECOND, :{param} * 1000, UTC_TIMESTAMP(6))"

    def minus_ms(self, param: str) -> str:
        if self.postgres:
            return f"(now() - CAST(:{param} AS BIGINT) * INTERVAL '1 millisecond')"
        return f"TIMESTAMPADD(MICROSECOND, -:{param} * 1000, UTC_TIMESTAMP(6))"

    def among(self, column: str, param: str) -> str:
        if self.postgres:
            return f"{column} = ANY(CAST(:{param} AS VARCHAR[]))"
        return f"{column} IN :{param}"

    def stmt(self, sql: str, *lists: str) -> TextClause:
        clause = text(sql)
        if not self.postgres and lists:
            clause = clause.bindparams(*(bindparam(name, expanding=True) for name in lists))
        return clause


class LeaseStore:
    """Members and leases of one ledger (Postgres or MariaDB/MySQL)."""

    def __init__(self, store: Store) -> None:
        sql = sql_store_behind(store)  # the lease statements run on the SQL store's engine
        if sql is None or not sql.supports_multi_instance:
            raise TypeError(
                f"coordination=cluster needs a Postgres or MariaDB/MySQL store, not "
                f"{store.dialect_name}"
            )
        self._sql = sql
        # The fenced inserts write past the metrics seam: it is told of their rows.
        self._observed = store if isinstance(store, InstrumentedStore) else None
        self._d = _Dialect(sql.engine.dialect.name == "postgresql")

    async def _attempt(
        self, operation: str, work: Callable[[AsyncConnection], Awaitable[T]], *, write: bool = True
    ) -> T:
        """The SQL store's attempt; an outage is counted in ``store_errors{operation}`` like
        any other store call's (the lease statements write past the metrics seam), so a
        cluster that cannot beat raises the same alert as one that cannot record."""
        try:
            return await self._sql._attempt(operation, work, write=write)
        except StoreUnavailableError:
            if self._observed is not None:
                self._observed.observe_error(operation)
            raise

    # -- members ----------------------------------------------------------------------------

    async def beat(self, replica_id: str, dead_after_ms: int) -> list[str]:
        """Upsert this replica's member row (``heartbeat_at`` = the database's now) and return
        every member that beat within ``dead_after_ms``, sorted — this one included."""
        d = self._d
        if d.postgres:
            upsert = (
                f"INSERT INTO {MEMBERS_TABLE} (replica_id, heartbeat_at, started_at) "
                "VALUES (:me, now(), now()) "
                "ON CONFLICT (replica_id) DO UPDATE SET heartbeat_at = EXCLUDED.heartbeat_at"
            )
        else:
            upsert = (
                f"INSERT INTO {MEMBERS_TABLE} (replica_id, heartbeat_at, started_at) "
                "VALUES (:me, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6)) "
                "ON DUPLICATE KEY UPDATE heartbeat_at = VALUES(heartbeat_at)"
            )
        forget = f"DELETE FROM {MEMBERS_TABLE} WHERE heartbeat_at < {d.minus_ms('forget')}"
        live = (
            f"SELECT replica_id FROM {MEMBERS_TABLE} WHERE heartbeat_at > {d.minus_ms('dead')} "
            "ORDER BY replica_id"
        )

        async def work(conn: AsyncConnection) -> list[str]:
            await conn.execute(text(upsert), {"me": replica_id})
            await conn.execute(text(forget), {"forget": FORGET_MEMBERS_MS})
            result = await conn.execute(text(live), {"dead": dead_after_ms})
            return [str(row[0]) for row in result]

        return await self._attempt("cluster_beat", work)

    async def leave(self, replica_id: str) -> None:
        """Graceful exit: expire every lease this replica holds (now, by the database's
        clock) and delete its member row, so the others take over at their next beat."""
        d = self._d

        async def work(conn: AsyncConnection) -> None:
            await conn.execute(
                text(
                    f"UPDATE {LEASES_TABLE} SET expires_at = {d.now} "
                    f"WHERE owner = :me AND expires_at > {d.now}"
                ),
                {"me": replica_id},
            )
            await conn.execute(
                text(f"DELETE FROM {MEMBERS_TABLE} WHERE replica_id = :me"), {"me": replica_id}
            )

        await self._attempt("cluster_leave", work)

    # -- leases -----------------------------------------------------------------------------

    async def _read_committed(self, conn: AsyncConnection) -> None:
        """On MariaDB/MySQL, run this transaction at READ COMMITTED (Postgres's default): under
        InnoDB's REPEATABLE READ a locking statement keeps every row it scanned locked until
        commit — matching or not (``owner`` has no index) — so one replica frozen inside a
        lease transaction would block every other replica's beat. Issued first: it sets the
        transaction that the next statement begins."""
        if not self._d.postgres:
            await conn.execute(_READ_COMMITTED)

    async def sync(
        self, owner: str, want: Sequence[str], ttl_ms: int, *, ensure: Sequence[str] = ()
    ) -> dict[str, int]:
        """One transaction: release ``owner``'s unexpired leases outside ``want`` (their
        expiry set to now), create missing lease rows for ``ensure`` (expired, token 0), then
        renew ``owner``'s leases in ``want`` and take those that are expired, each until now
        + ``ttl_ms``. A lease taken (not renewed) gets ``token + 1``. Returns every lease
        ``owner`` holds afterwards: ``{name: token}``. A lease another member holds unexpired
        is left alone — it moves only when that member releases it or stops beating."""
        d = self._d
        want = sorted(set(want))
        # Each statement touches only rows it writes, by key: a statement that merely looked at
        # a row another transaction holds would wait for it (InnoDB does, even at READ
        # COMMITTED, for a key lookup), and a replica frozen inside a lease transaction
        # (SIGSTOP, a VM pause) would hold this beat back until every lease in the cluster
        # lapsed. So this replica's own leases are found by a plain read first.
        held = text(
            f"SELECT name, token FROM {LEASES_TABLE} WHERE owner = :me AND expires_at > {d.now}"
        )
        present = d.stmt(
            f"SELECT name FROM {LEASES_TABLE} WHERE {d.among('name', 'names')}", "names"
        )
        release = d.stmt(
            f"UPDATE {LEASES_TABLE} SET expires_at = {d.now} "
            f"WHERE {d.among('name', 'names')} AND owner = :me AND expires_at > {d.now}",
            "names",
        )
        if d.postgres:
            create = text(
                f"INSERT INTO {LEASES_TABLE} (name, owner, token, expires_at) "
                "SELECT n, '', 0, now() FROM unnest(CAST(:names AS VARCHAR[])) AS n "
                "ON CONFLICT (name) DO NOTHING"
            )
        else:
            # A no-op update on a row created meanwhile: INSERT IGNORE would log a server
            # warning for each.
            create = text(
                f"INSERT INTO {LEASES_TABLE} (name, owner, token, expires_at) "
                "VALUES (:name, '', 0, UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE name = name"
            )
        # A renewal waits for its rows: only this replica's own (short) fenced inserts lock a
        # lease it holds unexpired. A take skips a row another transaction holds, and takes it
        # at a later beat, once that transaction ended — after a frozen fenced insert
        # committed, so the takeover's catch-up sees its rows.
        renew = d.stmt(
            f"UPDATE {LEASES_TABLE} SET expires_at = {d.plus_ms('ttl')} "
            f"WHERE {d.among('name', 'names')} AND owner = :me AND expires_at > {d.now}",
            "names",
        )
        takeable = d.stmt(
            f"SELECT name FROM {LEASES_TABLE} "
            f"WHERE {d.among('name', 'want')} AND expires_at <= {d.now} "
            "ORDER BY name FOR UPDATE SKIP LOCKED",
            "want",
        )
        take = d.stmt(
            f"UPDATE {LEASES_TABLE} SET token = token + 1, owner = :me, "
            f"expires_at = {d.plus_ms('ttl')} WHERE {d.among('name', 'taken')}",
            "taken",
        )
        ensure = sorted(set(ensure))

        async def work(conn: AsyncConnection) -> dict[str, int]:
            await self._read_committed(conn)
            mine = {str(row[0]) for row in await conn.execute(held, {"me": owner})}
            wanted = set(want)
            released = sorted(mine - wanted)
            if released:
                await conn.execute(release, {"me": owner, "names": released})
            missing: list[str] = []
            if ensure:  # only absent rows: an upsert of a present one would wait for its lock
                result = await conn.execute(present, {"names": ensure})
                missing = sorted(set(ensure) - {str(row[0]) for row in result})
            if missing:
                if d.postgres:
                    await conn.execute(create, {"names": missing})
                else:
                    await conn.execute(create, [{"name": n} for n in missing])
            if want:
                renewed = sorted(mine & wanted)
                if renewed:
                    await conn.execute(renew, {"me": owner, "names": renewed, "ttl": ttl_ms})
                result = await conn.execute(takeable, {"want": want})
                taken = [str(row[0]) for row in result]
                if taken:
                    await conn.execute(take, {"me": owner, "taken": taken, "ttl": ttl_ms})
            result = await conn.execute(held, {"me": owner})
            return {str(row[0]): int(row[1]) for row in result}

        return await self._attempt("cluster_leases", work)

    async def leases(self) -> list[Lease]:
        """Every lease row, by name (inspection and tests)."""

        async def work(conn: AsyncConnection) -> list[Lease]:
            result = await conn.execute(
                text(f"SELECT name, owner, token, expires_at FROM {LEASES_TABLE} ORDER BY name")
            )
            out = []
            for name, lease_owner, token, expires_at in result:
                at: datetime = expires_at
                at = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
                out.append(Lease(str(name), str(lease_owner), int(token), at))
            return out

        return await self._attempt("cluster_leases_read", work, write=False)

    # -- the fence --------------------------------------------------------------------------

    def _lock(self, names_param: str) -> TextClause:
        d = self._d
        return d.stmt(
            f"SELECT name, token FROM {LEASES_TABLE} "
            f"WHERE {d.among('name', names_param)} AND owner = :me AND expires_at > {d.now} "
            f"ORDER BY name {d.share}",
            names_param,
        )

    async def insert_fenced(
        self, rows: Sequence[RunRecord], owner: str, tokens: Mapping[str, int]
    ) -> list[RunRecord]:
        """Insert the rows whose schedule's lease is still ``owner``'s with the token in
        ``tokens`` and unexpired (the database's clock), holding those lease rows share-locked
        until the insert commits; the other rows are not written. Returns the rows written."""
        if not rows:
            return []
        names = sorted({r.name for r in rows})
        lock = self._lock("names")

        async def work(conn: AsyncConnection) -> list[RunRecord]:
            await self._read_committed(conn)
            result = await conn.execute(lock, {"names": names, "me": owner})
            ours = {str(n) for n, token in result if tokens.get(str(n)) == int(token)}
            keep = [r for r in rows if r.name in ours]
            if keep:
                await self._insert_rows(conn, keep)
            return keep

        written = await self._attempt("insert_fenced", work)
        if written and self._observed is not None:
            self._observed.observe_inserted(written)  # counted like any insert_runs
        return written

    async def _insert_rows(self, conn: AsyncConnection, runs: Sequence[RunRecord]) -> None:
        await self._sql.insert_rows(conn, [r.values() for r in runs])

    async def claim_fenced(
        self, key: str, name: str, owner: str, token: int, claimed_at: datetime
    ) -> bool:
        """Insert the claims row ``key`` iff ``name``'s lease is still ``owner``'s with
        ``token`` (share-locked until the claim commits) and ``key`` is not claimed yet.
        ``True`` iff this call inserted it — the fence for firings whose later rows are written
        by the queue line (``on_overlap="queue"``)."""
        lock = self._lock("names")
        row: dict[str, Any] = {"key": key, "replica_id": owner, "claimed_at": claimed_at}

        async def work(conn: AsyncConnection) -> bool:
            await self._read_committed(conn)
            result = await conn.execute(lock, {"names": [name], "me": owner})
            if not any(int(t) == token for _, t in result):
                return False
            dialect = conn.dialect
            if dialect.insert_returning:
                won = await conn.execute(q.claim_insert(dialect.name, [row]))
                return bool(list(won.scalars()))
            inserted = await conn.execute(q.claim_insert(dialect.name, [row], returning=False))
            return bool(inserted.rowcount == 1)

        return await self._attempt("claim_fenced", work)
