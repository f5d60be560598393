"""The example app's tenants (issue 31): ``POST``/``PATCH``/``DELETE /tenants`` write a tenant
row and its run-time schedule ``tenant-report.{id}``; each report runs once at its hour in the
tenant's own zone, with its args; an edit moves it, a delete stops it, and the audit is clean.
A crash between a tenant's two writes (the schedule write made to fail) is finished by the next
boot's reconcile.

The app is ``example_app.main.create_app`` on the test's database and a manual clock, with the
handlers of the example but not its declared schedules: a day of the manual clock is then a
handful of slots, not the 17,280 of the five-second heartbeat.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import httpx
import pytest
from sqlalchemy import select
from support.running import runs_of
from support.waiting import wait_until
from typer.testing import CliRunner

from example_app.db import make_engine, tenant_reports, tenants
from example_app.main import create_app
from example_app.tenants.report_cron import tenant_report
from example_app.tenants.schedules import read_tenant, sync_tenant
from fastapi_voltro_schedules import RunStatus, Scheduling, SchedulingConfig, StoreUnavailableError
from fastapi_voltro_schedules.audit import audit_ledger
from fastapi_voltro_schedules.cli import app as cli_app
from fastapi_voltro_schedules.clock import iso_z
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.store import RunRecord, create_store
from fastapi_voltro_schedules.testing import ManualClock

T0 = datetime(2026, 6, 1, 6, 0, 30, tzinfo=UTC)  # 08:00 Berlin, 02:00 New York, 15:00 Tokyo
NINE_BERLIN = datetime(2026, 6, 1, 7, 0, tzinfo=UTC)
NINE_NEW_YORK = datetime(2026, 6, 1, 13, 0, tzinfo=UTC)
NINE_TOKYO = datetime(2026, 6, 2, 0, 0, tzinfo=UTC)
DAY = timedelta(days=1)


@asynccontextmanager
async def example(
    url: str, clock: ManualClock
) -> AsyncIterator[tuple[httpx.AsyncClient, Scheduling]]:
    """The example app booted (its lifespan: tables, scheduler, reconcile) and a client on it;
    a server database migrated first, as ``voltro migrate`` does in a release."""
    await upgrade_to_head(url)
    engine = make_engine(url)
    config = SchedulingConfig(replica_id="pod-1")
    scheduling = Scheduling(config=config, engine=engine, clock=clock, handlers=[tenant_report])
    app = create_app(engine, scheduling)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            yield client, scheduling


async def to(clock: ManualClock, instant: datetime) -> None:
    await clock.advance((instant - clock.now()).total_seconds())


async def settled(scheduling: Scheduling, name: str, count: int) -> list[RunRecord]:
    async def ready() -> list[RunRecord] | None:
        rows = await runs_of(scheduling, name)
        return rows if len(rows) == count and all(r.status.terminal for r in rows) else None

    found: list[RunRecord] = await wait_until(ready, what=f"{count} settled rows of {name}")
    return found


async def reports(url: str) -> list[tuple[int, datetime, str]]:
    engine = make_engine(url)
    try:
        async with engine.connect() as conn:
            rows = (await conn.execute(select(tenant_reports))).all()
    finally:
        await engine.dispose()
    return sorted((r.tenant_id, r.slot.replace(tzinfo=UTC), r.run_id) for r in rows)


async def audit_clean(url: str, names: list[str], now: datetime) -> None:
    """``voltro schedule audit`` exits 0 over the test's span, and the tenants' schedules were
    among those it checked for gaps (read from their versions: no app needed)."""
    store = create_store(url)
    try:
        report = await audit_ledger(store, [], T0 - DAY, now, now=now)
    finally:
        await store.dispose()
    assert report.clean, report.text()
    assert set(names) <= set(report.gap_checked)
    span = ["--from", iso_z(T0 - DAY), "--to", iso_z(now)]
    cli = await anyio.to_thread.run_sync(  # the verb runs its own event loop
        lambda: CliRunner().invoke(cli_app, ["schedule", "audit", "--database-url", url, *span])
    )
    assert cli.exit_code == 0, cli.output
    assert f"gaps checked for {len(names)} self schedule(s): clean" in cli.output


async def create(http: httpx.AsyncClient, name: str, zone: str, hour: int = 9) -> dict[str, Any]:
    r = await http.post("/tenants", json={"name": name, "timezone": zone, "report_hour": hour})
    assert r.status_code == 201, r.text
    tenant: dict[str, Any] = r.json()
    assert tenant["schedule"] == f"tenant-report.{tenant['id']}"
    return tenant


async def test_each_tenant_reports_once_at_nine_in_its_zone_then_edit_and_delete(
    database_url: str,
) -> None:
    clock = ManualClock(T0)
    async with example(database_url, clock) as (http, scheduling):
        acme = await create(http, "acme", "Europe/Berlin")
        globex = await create(http, "globex", "America/New_York")
        initech = await create(http, "initech", "Asia/Tokyo")
        name = {t["name"]: t["schedule"] for t in (acme, globex, initech)}
        for tenant in (acme, globex, initech):  # each schedule carries its tenant's id
            written = scheduling.get(tenant["schedule"])
            assert written is not None and dict(written.args) == {"tenant_id": tenant["id"]}
        listed = scheduling.get(name["acme"])
        assert listed is not None and (listed.cron, listed.timezone, listed.source) == (
            "0 9 * * *",
            "Europe/Berlin",
            "runtime",
        )

        # 09:00 in each zone, in turn: that tenant's report, once, with its args
        expected: list[tuple[int, datetime, str]] = []
        for tenant, nine in ((acme, NINE_BERLIN), (globex, NINE_NEW_YORK), (initech, NINE_TOKYO)):
            await to(clock, nine)
            [run] = await settled(scheduling, tenant["schedule"], 1)
            assert (run.scheduled_at, run.status) == (nine, RunStatus.SUCCEEDED)
            expected.append((tenant["id"], nine, run.id))
            assert await reports(database_url) == sorted(expected)
        for tenant in (acme, globex, initech):  # no other tenant's slot ran meanwhile
            assert len(await runs_of(scheduling, tenant["schedule"])) == 1

        # acme moves to 11:00; initech leaves
        r = await http.patch(f"/tenants/{acme['id']}", json={"report_hour": 11})
        assert (r.status_code, r.json()["report_hour"]) == (200, 11), r.text
        edited = scheduling.get(name["acme"])
        assert edited is not None and edited.cron == "0 11 * * *"
        r = await http.delete(f"/tenants/{initech['id']}")
        assert r.status_code == 204, r.text
        assert scheduling.get(name["initech"]) is None
        assert (await http.delete(f"/tenants/{initech['id']}")).status_code == 404

        await to(clock, NINE_BERLIN + DAY)  # 09:00 Berlin: acme's old hour, nothing
        await to(clock, NINE_BERLIN + DAY + timedelta(hours=2))  # 11:00 Berlin
        runs = await settled(scheduling, name["acme"], 2)
        assert [r.scheduled_at for r in runs] == [
            NINE_BERLIN,
            NINE_BERLIN + DAY + timedelta(hours=2),
        ]
        await to(clock, NINE_NEW_YORK + DAY)
        assert len(await settled(scheduling, name["globex"], 2)) == 2
        await to(clock, NINE_TOKYO + DAY + timedelta(minutes=1))
        assert len(await runs_of(scheduling, name["initech"])) == 1  # deleted: no second day
        ran = {
            (r.name, r.scheduled_at, r.id)
            for n in name.values()
            for r in await runs_of(scheduling, n)
        }
    got = await reports(database_url)
    by_tenant = {
        acme["id"]: name["acme"],
        globex["id"]: name["globex"],
        initech["id"]: name["initech"],
    }
    assert {(by_tenant[t], slot, run) for t, slot, run in got} == ran  # one report per run
    assert len(got) == 5
    await audit_clean(database_url, list(name.values()), clock.now())


async def test_a_crash_between_the_two_writes_is_finished_by_the_next_boot(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock(T0)

    async def crash(*args: Any, **kwargs: Any) -> None:
        raise StoreUnavailableError("the process died here (injected)")

    async with example(sqlite_url, clock) as (http, scheduling):
        kept = await create(http, "kept", "Europe/Berlin")
        doomed = await create(http, "doomed", "Europe/Berlin")
        # The row is written, then the schedule write "crashes": a row without its schedule,
        # an edit without its new cadence, a schedule without its row.
        with monkeypatch.context() as m:
            m.setattr(scheduling, "put_schedule", crash)
            m.setattr(scheduling, "delete_schedule", crash)
            r = await http.post(
                "/tenants", json={"name": "late", "timezone": "Asia/Tokyo", "report_hour": 9}
            )
            assert r.status_code == 503 and "retry" in r.json()["detail"], r.text
            r = await http.patch(f"/tenants/{kept['id']}", json={"report_hour": 8})
            assert r.status_code == 503, r.text
            r = await http.delete(f"/tenants/{doomed['id']}")
            assert r.status_code == 503, r.text
        late = "tenant-report.3"
        assert scheduling.get(late) is None
        stale = scheduling.get(kept["schedule"])
        assert stale is not None and stale.cron == "0 9 * * *"
        assert scheduling.get(doomed["schedule"]) is not None
        # Until the reboot, the orphan fires and writes nothing: its tenant is gone.
        await to(clock, NINE_BERLIN)
        [orphan] = await settled(scheduling, doomed["schedule"], 1)
        assert orphan.status is RunStatus.SUCCEEDED
        assert [t for t, _, _ in await reports(sqlite_url)] == [kept["id"]]

    async with example(sqlite_url, clock) as (http, scheduling):  # the restart
        created = scheduling.get(late)
        assert created is not None and (created.cron, created.timezone) == (
            "0 9 * * *",
            "Asia/Tokyo",
        )
        moved = scheduling.get(kept["schedule"])
        assert moved is not None and moved.cron == "0 8 * * *"
        assert scheduling.get(doomed["schedule"]) is None
        await to(clock, NINE_TOKYO)
        [run] = await settled(scheduling, late, 1)
        assert run.status is RunStatus.SUCCEEDED
        await to(clock, NINE_BERLIN + DAY)  # doomed's hour: nothing any more
        assert len(await runs_of(scheduling, doomed["schedule"])) == 1
    await audit_clean(sqlite_url, [late, kept["schedule"], doomed["schedule"]], clock.now())


async def test_a_sync_follows_a_row_edited_during_its_write(sqlite_url: str) -> None:
    """Two writers on one tenant: the sync that wrote what it read before another writer's
    edit reads the row again after its put, and writes the newer hour."""
    clock = ManualClock(T0)
    async with example(sqlite_url, clock) as (http, scheduling):
        tenant = await create(http, "acme", "Europe/Berlin")
        db = make_engine(sqlite_url)
        put = scheduling.put_schedule
        edited = False

        async def put_then_edit_behind(name: str, **kwargs: Any) -> Any:
            nonlocal edited
            result = await put(name, **kwargs)
            if not edited:  # another writer's row edit lands right after our put
                edited = True
                async with db.begin() as conn:
                    await conn.execute(
                        tenants.update().where(tenants.c.id == tenant["id"]).values(report_hour=10)
                    )
            return result

        try:
            scheduling.put_schedule = put_then_edit_behind  # type: ignore[method-assign]
            wrote = await sync_tenant(scheduling, db, tenant["id"])
            row = await read_tenant(db, tenant["id"])
        finally:
            await db.dispose()
        assert wrote is not None and wrote.cron == "0 10 * * *" and row.report_hour == 10
        schedule = scheduling.get(tenant["schedule"])
        assert schedule is not None and schedule.cron == "0 10 * * *"


async def test_bad_tenants_are_refused_before_anything_is_written(sqlite_url: str) -> None:
    clock = ManualClock(T0)
    async with example(sqlite_url, clock) as (http, scheduling):
        for body, field in [
            ({"name": "x", "timezone": "Mars/Olympus", "report_hour": 9}, "timezone"),
            ({"name": "x", "timezone": "Europe/Berlin", "report_hour": 24}, "report_hour"),
            ({"name": "", "timezone": "Europe/Berlin", "report_hour": 9}, "name"),
        ]:
            r = await http.post("/tenants", json=body)
            assert r.status_code == 422, r.text
            assert field in r.text
        r = await http.patch("/tenants/99", json={"report_hour": 3})
        assert (r.status_code, r.json()["code"]) == (404, "tenant_not_found"), r.text
        # What the OpenAPI says, the routes keep (tests/test_openapi_contract.py fuzzes them):
        # an hour is a JSON integer, a null is no value, every refusal is the error body.
        x = {"name": "x", "timezone": "UTC"}
        for method, url, sent, field in [
            ("POST", "/tenants", {**x, "report_hour": False}, "report_hour"),
            ("POST", "/tenants", {**x, "report_hour": "9"}, "report_hour"),
            ("PATCH", "/tenants/99", {"report_hour": None}, "report_hour"),
            ("PATCH", "/tenants/99", {"timezone": None}, "timezone"),
        ]:
            r = await http.request(method, url, json=sent)
            assert (r.status_code, r.json()["code"]) == (422, "invalid_request"), r.text
            assert r.json()["errors"][0]["loc"] == ["body", field], r.text
        as_json = {"content-type": "application/json"}
        r = await http.post("/tenants", content=b"{not json", headers=as_json)
        assert (r.status_code, r.json()["code"]) == (422, "invalid_request"), r.text
        r = await http.request("OPTIONS", "/tenants/99")
        assert (r.status_code, r.headers["allow"]) == (405, "DELETE, PATCH"), r.text
        assert [s.name for s in scheduling.schedules] == []
    engine = make_engine(sqlite_url)
    try:
        async with engine.connect() as conn:
            assert (await conn.execute(select(tenants))).all() == []
    finally:
        await engine.dispose()
