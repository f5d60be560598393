"""A real database link cut at the exact statement that matters, for the reliability tests
(``tests/reliability``): the scheduler's store behind a :class:`~support.tcp_proxy.TcpProxy`,
a store method wrapped so that the proxy is cut just before the real statement is sent (the
statement then really fails in the real driver, as it would on a real partition), and a count
of how the calls of a method ended — the signal that a cut was met, instead of a sleep.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
from fastapi import FastAPI
from sqlalchemy.engine import make_url

from fastapi_voltro_schedules import Scheduling
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.store import SQLStore
from fastapi_voltro_schedules.store.instrumented import sql_store_behind
from support.tcp_proxy import TcpProxy


def inner_store(s: Scheduling) -> SQLStore:
    assert s.store is not None
    store = sql_store_behind(s.store)
    assert store is not None
    return store


def cut_before(
    store: SQLStore, method: str, proxy: TcpProxy, when: Callable[..., bool], times: int = 1
) -> list[int]:
    """Cut ``proxy`` right before the real ``store.method`` runs, for the first ``times`` calls
    ``when(*args)`` accepts. Returns a one-item counter of the cuts made."""
    real: Callable[..., Awaitable[Any]] = getattr(store, method)
    cuts = [0]

    async def wrapped(*args: Any, **kwargs: Any) -> Any:
        if cuts[0] < times and when(*args):
            cuts[0] += 1
            proxy.cut()
        return await real(*args, **kwargs)

    setattr(store, method, wrapped)
    return cuts


@dataclass
class Calls:
    """How the calls of one store method ended so far."""

    ok: int = 0
    failed: int = 0


def count_calls(store: SQLStore, method: str) -> Calls:
    """Count the calls of ``store.method`` that returned and those that raised. Wrap after
    :func:`cut_before`, so that the cut is inside what is counted: ``failed`` then says the
    statement really met the cut (and a link restored after it cannot turn it into a success)."""
    real: Callable[..., Awaitable[Any]] = getattr(store, method)
    calls = Calls()

    async def wrapped(*args: Any, **kwargs: Any) -> Any:
        try:
            result = await real(*args, **kwargs)
        except Exception:
            calls.failed += 1
            raise
        calls.ok += 1
        return result

    setattr(store, method, wrapped)
    return calls


@asynccontextmanager
async def proxied(url: str) -> AsyncIterator[tuple[TcpProxy, str]]:
    """The ledger migrated at ``url``, and a proxy in front of its server: ``(proxy, the URL
    through it)``."""
    await upgrade_to_head(url)
    db = make_url(url)
    default_port = 5432 if db.get_backend_name() == "postgresql" else 3306
    with TcpProxy(db.host or "127.0.0.1", db.port or default_port) as proxy:
        yield proxy, db.set(port=proxy.port).render_as_string(hide_password=False)


def client(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")

