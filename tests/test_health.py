"""The probes: ``GET /_voltro/health/live`` answers while the process serves; ``GET
/_voltro/health/ready`` only while the scheduler is armed, the ledger answers and its schema is
at head — else ``503`` naming what is not ready and the remedy. On SQLite and Postgres (a
schema stamped behind head; a ledger behind a proxy that is cut, so its port is closed)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from alembic.script import ScriptDirectory
from fastapi import FastAPI
from sqlalchemy import make_url, text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool
from support.tcp_proxy import CUT_LINK_WARNINGS, TcpProxy

from fastapi_voltro_schedules import (
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    define_schedule,
    schedules_router,
)
from fastapi_voltro_schedules.migrations import alembic_config, head_revision, upgrade_to_head
from fastapi_voltro_schedules.models import ALEMBIC_VERSION_TABLE
from fastapi_voltro_schedules.testing import ManualClock

LIVE = "/_voltro/health/live"
READY = "/_voltro/health/ready"
NOW = datetime(2026, 6, 1, 12, 0, 30, tzinfo=UTC)


async def noop(ctx: ScheduleContext) -> None:
    return None


def scheduling_on(url: str, **config: Any) -> Scheduling:
    schedule = define_schedule(name="digest", cron="0 9 * * *", timezone="UTC", handler=noop)
    cfg = SchedulingConfig(database_url=url, replica_id="pod-1", **config)
    return Scheduling([schedule], config=cfg, clock=ManualClock(NOW))


def client_of(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


@asynccontextmanager
async def served(url: str, **config: Any) -> AsyncIterator[httpx.AsyncClient]:
    if not url.startswith("sqlite"):
        await upgrade_to_head(url)  # a server database is migrated by `voltro migrate`
    app = FastAPI()
    app.include_router(schedules_router)
    async with scheduling_on(url, **config).run(app), client_of(app) as client:
        yield client


async def stamp(url: str, revision: str) -> None:
    """Set the ledger's recorded revision, as an older release's database (or a restore) has
    it: the tables stay, only the version row says another migration."""
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with engine.begin() as conn:
            await conn.execute(
                text(f"UPDATE {ALEMBIC_VERSION_TABLE} SET version_num = :rev"), {"rev": revision}
            )
    finally:
        await engine.dispose()


def previous_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_revision(head_revision())
    assert head is not None and isinstance(head.down_revision, str), head
    return head.down_revision


def ready_body(r: httpx.Response, status: int, code: str | None) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    body: dict[str, Any] = r.json()
    assert body["code"] == code, body
    assert body["status"] == ("ready" if code is None else "not ready"), body
    return body


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(f"{request.param}_url"))


async def test_ready_and_live_while_the_scheduler_is_armed_and_the_schema_at_head(
    url: str,
) -> None:
    async with served(url) as client:
        live = await client.get(LIVE)
        assert (live.status_code, live.json()) == (200, {"status": "alive"})
        body = ready_body(await client.get(READY), 200, None)
        assert body == {
            "status": "ready",
            "scheduler": "armed",
            "ledger": "reachable",
            "schema": "at head",
            "code": None,
            "detail": None,
        }
        # The combined probe of earlier versions keeps answering.
        old = await client.get("/_voltro/health")
        assert old.status_code == 200 and old.json()["status"] == "ok", old.text


async def test_a_schema_behind_head_is_503_naming_the_revisions_and_voltro_migrate(
    url: str,
) -> None:
    older = previous_revision()
    async with served(url) as client:
        await stamp(url, older)  # e.g. restored from a backup taken before the upgrade
        body = ready_body(await client.get(READY), 503, "schema")
        assert (body["scheduler"], body["ledger"], body["schema"]) == (
            "armed",
            "reachable",
            "not at head",
        )
        assert f"is at revision {older}, head is {head_revision()}" in body["detail"], body
        assert "run `voltro migrate`" in body["detail"], body
        # Alive all the same: restarting the process would not migrate the database.
        assert (await client.get(LIVE)).status_code == 200
        # The remedy's result (the tables never left head's shape, so only the row changes):
        # the next probe is ready, with no restart.
        await stamp(url, head_revision())
        ready_body(await client.get(READY), 200, None)


async def test_a_schema_ahead_of_this_release_is_503_too(sqlite_url: str) -> None:
    """A newer release migrated the ledger while this one still runs: boot would refuse it, so
    readiness does (the rollout's new pods take the traffic)."""
    async with served(sqlite_url) as client:
        await stamp(sqlite_url, "f00dcafe0001")
        body = ready_body(await client.get(READY), 503, "schema")
        assert "is at revision f00dcafe0001" in body["detail"], body


@CUT_LINK_WARNINGS
async def test_a_ledger_that_does_not_answer_is_503_store_unavailable(postgres_url: str) -> None:
    await upgrade_to_head(postgres_url)
    db = make_url(postgres_url)
    with TcpProxy(db.host or "127.0.0.1", db.port or 5432) as proxy:
        proxied = db.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
        async with served(proxied) as client:
            ready_body(await client.get(READY), 200, None)
            proxy.cut()  # the port is closed: every new connection is refused
            body = ready_body(await client.get(READY), 503, "store_unavailable")
            assert (body["scheduler"], body["ledger"], body["schema"]) == (
                "armed",
                "unreachable",
                "unchecked",
            )
            assert body["detail"].startswith("the scheduler's database did not answer"), body
            assert str(proxy.port) not in body["detail"]  # no driver text in a probe's body
            live = await client.get(LIVE)
            assert live.status_code == 200, live.text  # liveness asks nothing of the ledger
            proxy.restore()
            ready_body(await client.get(READY), 200, None)


async def test_before_boot_ready_is_503_and_live_is_200(sqlite_url: str) -> None:
    app = FastAPI()
    app.include_router(schedules_router)
    async with client_of(app) as client:  # no lifespan entered: nothing booted
        assert (await client.get(LIVE)).status_code == 200
        body = ready_body(await client.get(READY), 503, "scheduler_not_running")
        assert body["scheduler"] == "not running" and body["ledger"] == "unchecked", body
        assert "lifespan" in body["detail"], body


async def test_a_switched_off_scheduler_is_not_ready_but_alive(sqlite_url: str) -> None:
    async with served(sqlite_url, scheduler_enabled=False) as client:
        assert (await client.get(LIVE)).status_code == 200
        body = ready_body(await client.get(READY), 503, "scheduler_disabled")
        assert "VOLTRO_SCHEDULER_ENABLED" in body["detail"], body
