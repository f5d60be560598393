"""Opening a store in a test: schema created, and no pooled connection left behind."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy.ext.asyncio import AsyncEngine

from fastapi_voltro_schedules.store import SQLStore, create_store


def assert_pool_idle(engine: AsyncEngine) -> None:
    checkedout = getattr(engine.pool, "checkedout", None)
    if checkedout is not None:
        assert checkedout() == 0, "a pooled connection was left checked out"


@asynccontextmanager
async def open_store(url: str) -> AsyncIterator[SQLStore]:
    """A :class:`SQLStore` on ``url`` with the ledger tables; on a clean exit asserts that
    every pooled connection was returned."""
    store = create_store(url)
    assert isinstance(store, SQLStore)
    try:
        await store.create_schema()
        yield store
        assert_pool_idle(store.engine)
    finally:
        await store.dispose()
