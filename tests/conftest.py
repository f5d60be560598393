"""Shared fixtures: one store URL per backend, each with a clean ledger schema.

Server stores come from the environment:

    VOLTRO_TEST_POSTGRES_URL=postgresql+asyncpg://postgres@127.0.0.1:5432/test
    VOLTRO_TEST_MYSQL_URL=mysql+asyncmy://root@127.0.0.1:3306/test

With a variable unset, that store's tests are *skipped* with a reason — unless
``VOLTRO_TEST_REQUIRE_SERVICES=1`` (CI), which turns the skip into a failure.

Fixtures
--------
``sqlite_url``     ``sqlite+aiosqlite:///<tmp>/voltro.db`` — a fresh file per test.
``postgres_url``   the Postgres URL, with a clean ledger schema before and after the test.
``mariadb_url``    the MariaDB/MySQL URL, likewise (``mysql_url`` is an alias).
``redis_url``      ``VOLTRO_TEST_REDIS_URL`` (the hand-off tests' job engines), flushed.
``database_url``   parametrized ``sqlite`` / ``postgres`` / ``mariadb``: one of the three.
``async_engine``   an ``AsyncEngine`` on ``database_url``, disposed after the test.

"Clean" means: none of our tables (``_voltro_schedule_runs``, ``_voltro_schedule_claims``,
``_voltro_alembic_version``) and no table whose name starts with ``voltro_test_`` — name the
tables a test creates for itself that way so they are dropped too. Nothing is migrated: call
``fastapi_voltro_schedules.migrations.upgrade_to_head(url_or_engine)`` when a test needs the
tables.

The server databases are shared, so tests against one of them must never overlap: each
server fixture holds an exclusive file lock (in the temp dir) for the test's duration, which
serialises concurrent pytest processes on this machine. Under pytest-xdist (``.ci/run`` uses
``-n``) each worker gets a database of its own on the same server — ``test_gw0``,
``test_gw1``… beside the URL's ``test``, created on first use — so workers never share tables
and never wait for each other's lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import gc
import inspect as inspect_source
import os
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiosqlite.core as aiosqlite_core
import pytest
from sqlalchemy import inspect, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool
from support.cluster import run_async
from support.stores import open_store
from support.waiting import HANG

from fastapi_voltro_schedules.migrations import VOLTRO_TABLES
from fastapi_voltro_schedules.models import ALEMBIC_VERSION_TABLE
from fastapi_voltro_schedules.store import SQLStore

POSTGRES_ENV = "VOLTRO_TEST_POSTGRES_URL"
MYSQL_ENV = "VOLTRO_TEST_MYSQL_URL"
REQUIRE_ENV = "VOLTRO_TEST_REQUIRE_SERVICES"

SERVER_ENVS = {"postgres": POSTGRES_ENV, "mariadb": MYSQL_ENV}
STORES = ("sqlite", "postgres", "mariadb")

LEDGER_TABLES = (*sorted(VOLTRO_TABLES), ALEMBIC_VERSION_TABLE)
TEST_TABLE_PREFIX = "voltro_test_"
EXAMPLE_TABLES = ("example_digests", "example_tenants", "example_tenant_reports")
"""The example app's own tables (example_app/db.py): tests that run the example on a server
database leave them behind, and a user-autogenerate test would then see a table to drop."""



def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "postgres: needs the Postgres test server")
    config.addinivalue_line("markers", "mariadb: needs the MariaDB/MySQL test server")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Collect the garbage of a test that ignores ``unclosed`` warnings while its filter still
    holds. Those tests (``support.tcp_proxy.CUT_LINK_WARNINGS``) leave a driver's socket to the
    collector by design; collected later, during whichever test the collector next runs in, the
    same warning is an error there (``filterwarnings = error``) — on a busy machine, where
    collections fall elsewhere, that was a red CI in a test that leaked nothing."""
    try:
        return (yield)
    finally:
        if any(
            "unclosed" in str(arg)
            for mark in item.iter_markers("filterwarnings")
            for arg in mark.args
        ):
            gc.collect()


def _aiosqlite_idle_line() -> int:
    """The line where an aiosqlite connection's worker thread waits for its next call."""
    lines, first = inspect_source.getsourcelines(aiosqlite_core._connection_worker_thread)
    return first + next(i for i, line in enumerate(lines) if "tx.get()" in line)


_AIOSQLITE_IDLE = (aiosqlite_core._connection_worker_thread.__code__, _aiosqlite_idle_line())


def _aiosqlite_calls_in_flight() -> list[threading.Thread]:
    frames = sys._current_frames()
    busy = []
    for thread in threading.enumerate():
        if not thread.name.endswith("(_connection_worker_thread)") or thread.ident is None:
            continue
        frame = frames.get(thread.ident)
        if frame is not None and (frame.f_code, frame.f_lineno) != _AIOSQLITE_IDLE:
            busy.append(thread)
    return busy


@pytest.fixture(autouse=True)
async def _aiosqlite_calls_land_before_the_loop_closes() -> AsyncIterator[None]:
    """After the test, wait until no aiosqlite worker thread is still inside a call. A call
    whose awaiting task was cancelled at shutdown still runs to its end in its thread, then
    hands its result to the loop that asked — closed by then if the test's loop closed first
    ("Event loop is closed", raised in that thread during whichever test runs next: on a busy
    machine the slow end of a query fell after the loop's close)."""
    yield
    deadline = time.monotonic() + HANG
    while _aiosqlite_calls_in_flight() and time.monotonic() < deadline:
        await asyncio.sleep(0.005)


# --------------------------------------------------------------------------- helpers




def require_service_url(store: str) -> str:
    """The URL of a server store from its env variable; skip (or fail, in CI) when unset.
    Under xdist, the worker's own database on that server (see the module docstring)."""
    env = SERVER_ENVS[store]
    url = os.environ.get(env)
    if url:
        return _worker_database(url)
    reason = f"{store} tests need {env} (e.g. {_EXAMPLES[store]})"
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{reason}; {REQUIRE_ENV}=1 forbids skipping them", pytrace=False)
    pytest.skip(reason)


_EXAMPLES = {
    "postgres": "postgresql+asyncpg://postgres@127.0.0.1:5432/test",
    "mariadb": "mysql+asyncmy://root@127.0.0.1:3306/test",
}


_created: dict[str, str] = {}


def _worker_database(url: str) -> str:
    """``url`` itself outside xdist; else the same server with the database
    ``<database>_<worker>``, created once per process if it does not exist."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return url
    if url not in _created:
        base = make_url(url)
        name = f"{base.database}_{worker}"
        run_async(_create_database(url, name))
        _created[url] = base.set(database=name).render_as_string(hide_password=False)
    return _created[url]


async def _create_database(url: str, name: str) -> None:
    engine = create_async_engine(url, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            quoted = conn.dialect.identifier_preparer.quote(name)
            if conn.dialect.name == "postgresql":
                found = await conn.exec_driver_sql(
                    "SELECT 1 FROM pg_database WHERE datname = $1", (name,)
                )
                if found.first() is None:
                    await conn.exec_driver_sql(f"CREATE DATABASE {quoted}")
            else:
                await conn.exec_driver_sql(f"CREATE DATABASE IF NOT EXISTS {quoted}")
    finally:
        await engine.dispose()


async def reset_database(url: str) -> None:
    """Drop our ledger tables, our version table and every ``voltro_test_*`` table."""
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with engine.begin() as conn:
            names = await conn.run_sync(lambda c: inspect(c).get_table_names())
            doomed = [
                n
                for n in names
                if n in LEDGER_TABLES or n in EXAMPLE_TABLES or n.startswith(TEST_TABLE_PREFIX)
            ]
            quote = conn.dialect.identifier_preparer.quote
            for name in doomed:
                await conn.exec_driver_sql(f"DROP TABLE IF EXISTS {quote(name)}")
    finally:
        await engine.dispose()


@contextlib.contextmanager
def _exclusive(store: str, url: str) -> Iterator[None]:
    """Serialise tests of every pytest process on this machine against one server database."""
    database = make_url(url).database
    path = Path(tempfile.gettempdir()) / f"voltro-tests-{store}-{database}.lock"
    with path.open("a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


@contextlib.contextmanager
def clean_server(store: str) -> Iterator[str]:
    url = require_service_url(store)
    with _exclusive(store, url):
        run_async(reset_database(url))
        try:
            yield url
        finally:
            run_async(reset_database(url))


def backend_of(url: str) -> str:
    """``sqlite`` / ``postgres`` / ``mariadb`` for a test URL."""
    backend = make_url(url).get_backend_name()
    return {"postgresql": "postgres", "mysql": "mariadb"}.get(backend, backend)


# --------------------------------------------------------------------------- fixtures


REDIS_ENV = "VOLTRO_TEST_REDIS_URL"


@pytest.fixture
def redis_url() -> Iterator[str]:
    """The Redis the hand-off tests' job engines use (``VOLTRO_TEST_REDIS_URL``, e.g.
    ``redis://127.0.0.1:6379/5``: a database index of the suite's own), emptied before and after
    the test under a machine-wide lock; skipped when unset — a failure under
    ``VOLTRO_TEST_REQUIRE_SERVICES=1``."""
    url = os.environ.get(REDIS_ENV)
    if not url:
        reason = f"hand-off tests need {REDIS_ENV} (e.g. redis://127.0.0.1:6379/5)"
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{reason}; {REQUIRE_ENV}=1 forbids skipping them", pytrace=False)
        pytest.skip(reason)
    import redis

    client = redis.Redis.from_url(url)
    database = client.connection_pool.connection_kwargs.get("db", 0)
    path = Path(tempfile.gettempdir()) / f"voltro-tests-redis-{database}.lock"
    try:
        with path.open("a+") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                client.flushdb()
                yield url
                client.flushdb()
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
    finally:
        client.close()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A temp-file SQLite database (nothing created yet)."""
    return f"sqlite+aiosqlite:///{tmp_path / 'voltro.db'}"


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """The Postgres test database, free of our tables before and after the test."""
    with clean_server("postgres") as url:
        yield url


@pytest.fixture
def mariadb_url() -> Iterator[str]:
    """The MariaDB/MySQL test database, free of our tables before and after the test."""
    with clean_server("mariadb") as url:
        yield url


@pytest.fixture
def mysql_url(mariadb_url: str) -> str:
    """Alias of :func:`mariadb_url`."""
    return mariadb_url


@pytest.fixture(
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
        pytest.param("mariadb", id="mariadb", marks=pytest.mark.mariadb),
    ]
)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An async URL with a clean schema, once per store: ``sqlite``, ``postgres``, ``mariadb``."""
    store: str = request.param
    if store == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'voltro.db'}"
        return
    with clean_server(store) as url:
        yield url


@pytest.fixture
async def async_engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    """An ``AsyncEngine`` on :func:`database_url`; disposed after the test."""
    engine = create_async_engine(database_url)
    try:
        yield engine
    finally:
        await engine.dispose()


REAL_STORES = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    pytest.param("mariadb", id="mariadb", marks=pytest.mark.mariadb),
]
SERVERS = [
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("mariadb", marks=pytest.mark.mariadb),
]
"""``@pytest.mark.parametrize("server", SERVERS)``: a test on each database server."""
URL_FIXTURE = {"sqlite": "sqlite_url", "postgres": "postgres_url", "mariadb": "mariadb_url"}


@pytest.fixture(params=REAL_STORES)
async def store(request: pytest.FixtureRequest) -> AsyncIterator[SQLStore]:
    """A migrated store on each real backend — a SQLite file, Postgres, MariaDB — cleaned
    first (a module that needs another set, an in-memory SQLite say, defines its own)."""
    async with open_store(request.getfixturevalue(URL_FIXTURE[request.param])) as s:
        yield s
