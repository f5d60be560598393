"""The ledger store: one interface (:class:`Store`), one SQL implementation, one factory."""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from ..records import (
    ClaimRecord,
    DefinitionRecord,
    PauseRecord,
    RunOutcome,
    RunRecord,
    new_run_id,
    new_run_ids,
)
from .base import Store
from .sql import DEFAULT_URL, SQLStore, make_engine


def create_store(
    url: str | None = None, *, engine: AsyncEngine | None = None, **engine_options: Any
) -> Store:
    """A store for ``url`` (default: the embedded SQLite file ``./voltro.db``), or on ``engine``.

    - ``sqlite+aiosqlite:///path.db``: WAL, a 5 s busy timeout, writes under ``BEGIN IMMEDIATE``.
    - ``sqlite+aiosqlite://`` (or ``:memory:``): the in-process *memory* store, one shared
      connection, tables created on first use.
    - ``postgresql+asyncpg://…``, ``mysql+asyncmy://…``: pooled, pre-pinged, 5 s connect timeout.

    ``engine_options`` go to ``create_async_engine`` (``pool_size=…``). A store given an
    ``engine`` shares it (the application's own) and never disposes it; SQLite hooks are not
    installed on a shared engine, so configure WAL/busy_timeout there yourself.
    """
    if engine is not None:  # the shared engine wins; ``url`` (the config default) is ignored
        if engine_options:
            raise TypeError("create_store(): engine options cannot apply to a given engine")
        return SQLStore(engine, owns_engine=False)
    return SQLStore(make_engine(url or DEFAULT_URL, **engine_options))


__all__ = [
    "ClaimRecord",
    "DefinitionRecord",
    "PauseRecord",
    "RunOutcome",
    "RunRecord",
    "SQLStore",
    "Store",
    "create_store",
    "new_run_id",
    "new_run_ids",
]
