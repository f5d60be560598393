"""``change_strategy="cdc"`` on Postgres: a waiter starts on the blocking run's NOTIFY.

Two replicas (two ``Scheduling`` instances with their own pools) share the Postgres ledger;
every handoff of the line passes from one to the other (see ``bench/queue_handoff.py``, which
these tests drive). The waiters' poll is made 30 s long, so a handoff well under a second can
only have come from the notification. Losing the ``LISTEN`` connection is noticed and logged
(the poll is all that is left meanwhile), and the listener comes back on its own.
"""

from __future__ import annotations

import logging

import anyio
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from bench.queue_handoff import handoffs
from fastapi_voltro_schedules import ChangeStrategy

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

LONG_POLL = 30.0
LISTENING = "schedule: listening for ledger changes (change_strategy=cdc)"
LOST = (
    "schedule: change notifications lost — polling: store listen_changed: the notification "
    "connection was closed by the server or the network"
)


async def test_a_queued_waiter_on_another_replica_starts_on_the_notify(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="fastapi_voltro_schedules"):
        with anyio.fail_after(LONG_POLL):  # one handoff left to the poll would take 30 s
            gaps = await handoffs(postgres_url, 8, ChangeStrategy.CDC, poll_seconds=LONG_POLL)
    assert len(gaps) == 8
    assert max(gaps) < 0.5, gaps
    assert caplog.text.count(LISTENING) == 2


LISTENERS = (
    "FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN %' "
    "AND pid <> pg_backend_pid()"
)


async def _terminate_listeners(url: str) -> int:
    """Once both replicas' ``LISTEN`` sessions exist, cut them both (as a server restart or
    a dropped link would); returns how many were cut."""
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with engine.connect() as conn:
            while (await conn.execute(text(f"SELECT count(*) {LISTENERS}"))).scalar_one() < 2:
                # pg_stat_activity is a snapshot held for the transaction: end it to look again
                await conn.rollback()
                await anyio.sleep(0.05)  # both replicas still booting
            result = await conn.execute(text(f"SELECT pg_terminate_backend(pid) {LISTENERS}"))
            return len(result.fetchall())
    finally:
        await engine.dispose()


async def test_losing_the_listen_connection_is_logged_and_the_listener_comes_back(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    gaps: list[float] = []

    async def measure() -> None:
        gaps.extend(
            await handoffs(
                postgres_url, 6, ChangeStrategy.CDC, poll_seconds=LONG_POLL, first_hold=5.0
            )
        )

    with caplog.at_level(logging.INFO, logger="fastapi_voltro_schedules"):
        with anyio.fail_after(LONG_POLL):
            async with anyio.create_task_group() as tg:
                tg.start_soon(measure)
                # While the first run holds the line: cut both LISTEN sessions.
                assert await _terminate_listeners(postgres_url) == 2
                with anyio.fail_after(4):
                    while caplog.text.count(LOST) < 2 or caplog.text.count(LISTENING) < 4:
                        await anyio.sleep(0.05)
    # Both replicas said they lost it (and so poll), and re-listened: the handoffs after
    # that still came from the notification, not from the 30 s poll.
    assert caplog.text.count(LOST) == 2
    assert caplog.text.count(LISTENING) == 4
    assert len(gaps) == 6 and max(gaps) < 0.5, gaps
