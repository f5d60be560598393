"""Change notification (``change_strategy="cdc"``) on Postgres ``LISTEN``/``NOTIFY``.

Only a hint: waiters that hear nothing (another database, a lost listening connection) poll.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

import anyio
from sqlalchemy.ext.asyncio import AsyncConnection

from ..errors import StoreUnavailableError
from . import statements as q
from .sql_connections import SQLConnections


class SQLChanges(SQLConnections):
    """The change notification of :class:`~.sql.SQLStore`."""

    async def notify_changed(self, names: Collection[str]) -> None:
        if not names or self._engine.dialect.name != "postgresql":
            return

        async def work(conn: AsyncConnection) -> None:
            await conn.execute(q.notify(names))

        await self._attempt("notify_changed", work, write=False)

    async def listen_changed(
        self,
        on_change: Callable[[str], None],
        *,
        on_definition: Callable[[str], None] | None = None,
        task_status: Any = None,
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

            # Both channels on the one session: a definition written at run time costs the
            # listener no connection of its own.
            listeners: list[tuple[str, Callable[..., None]]] = [(q.NOTIFY_CHANNEL, callback)]
            if on_definition is not None:
                heard = on_definition

                def defined(_conn: Any, _pid: int, _channel: str, payload: str) -> None:
                    heard(payload)

                listeners.append((q.DEFINITIONS_CHANNEL, defined))

            # An idle LISTEN session runs no query, so nothing would ever notice it died (a
            # restarted server, a cut link, pg_terminate_backend): asyncpg's termination
            # listener is the only signal, and the caller must hear of it to say it polls.
            lost = anyio.Event()

            def terminated(_conn: Any) -> None:
                lost.set()

            driver.add_termination_listener(terminated)
            for channel, listener in listeners:
                await driver.add_listener(channel, listener)
            try:
                if task_status is not None:
                    task_status.started()
                await lost.wait()
            finally:
                driver.remove_termination_listener(terminated)
                if not lost.is_set():
                    with anyio.CancelScope(shield=True):
                        for channel, listener in listeners:
                            await driver.remove_listener(channel, listener)
            # Drop the dead connection rather than return it to the pool.
            await conn.invalidate()
            raise StoreUnavailableError(
                "store listen_changed: the notification connection was closed by the server "
                "or the network"
            )
