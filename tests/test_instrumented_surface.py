"""The metrics seam has one door per store call: :class:`InstrumentedStore` spells out every
method of the :class:`Store` interface and forwards nothing else to the store it wraps.

A method the wrapper does not spell out would run the interface's default on the wrapper itself
(``notify_changed`` would do nothing, ``checkpoint`` never fold the log) or, with a forwarding
``__getattr__``, reach the wrapped store uncounted. What only a SQL store has (its engine) is
asked for by name, through :func:`sql_store_behind`.
"""

from __future__ import annotations

import inspect

import pytest
from prometheus_client import CollectorRegistry

from fastapi_voltro_schedules.metrics import SchedulerMetrics
from fastapi_voltro_schedules.store import SQLStore, Store, create_store
from fastapi_voltro_schedules.store.instrumented import InstrumentedStore, sql_store_behind


def test_every_store_method_is_spelled_out_on_the_wrapper() -> None:
    interface = {name for name, _ in inspect.getmembers(Store) if not name.startswith("_")}
    assert interface  # the interface was read
    missing = sorted(name for name in interface if name not in vars(InstrumentedStore))
    assert missing == [], f"InstrumentedStore inherits, does not delegate: {missing}"


async def test_the_wrapper_forwards_nothing_beyond_the_interface(sqlite_url: str) -> None:
    sql = create_store(sqlite_url)
    store = InstrumentedStore(sql, SchedulerMetrics(CollectorRegistry()))
    try:
        assert isinstance(sql, SQLStore)
        sql.engine  # noqa: B018 - the SQL store has an engine…
        with pytest.raises(AttributeError):
            store.engine  # type: ignore[attr-defined]  # noqa: B018 - …the seam does not lend it
        assert sql_store_behind(store) is sql
        assert sql_store_behind(sql) is sql
    finally:
        await store.dispose()
