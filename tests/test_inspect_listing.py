"""The schedules listing by page (issue 35, "listing that stays flat"), on every store.

``GET /_voltro/inspect/schedules`` pages in name order behind an opaque cursor, with ``limit``,
and filters by name prefix, newest outcome (``status``, from ``_voltro_schedule_state``),
``paused`` and ``source``. Without parameters it still answers every schedule (up to the
largest page) in the old shape, plus ``nextCursor``. A bad cursor or filter is a 422 in the one
error shape, never a 500. The life: a run finishing moves its schedule's outcome; an edited
run-time schedule keeps its own, a deleted one leaves the listing and its filter; a pause shows
in the ``paused`` filter; and ``voltro schedule audit`` exits 0 afterwards.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import httpx
import pytest
from support.running import served
from support.waiting import wait_until
from typer.testing import CliRunner

from fastapi_voltro_schedules import (
    RunStatus,
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    define_handler,
    define_schedule,
)
from fastapi_voltro_schedules.cli import app as cli_app
from fastapi_voltro_schedules.clock import iso_z
from fastapi_voltro_schedules.listing import NameIndex, Walk, encode_cursor, walk_sorted
from fastapi_voltro_schedules.migrations import upgrade_to_head
from fastapi_voltro_schedules.testing import ManualClock

OPERATOR = "operator-token-for-listing-tests"
AS_OPERATOR = {"Authorization": f"Bearer {OPERATOR}"}
LIST = "/_voltro/inspect/schedules"
T0 = datetime(2026, 6, 1, 10, 0, 30, tzinfo=UTC)


class Boom(Exception):
    pass


@define_handler(name="tenantJob")
async def tenant_job(ctx: ScheduleContext) -> None:
    if ctx.args.get("fail"):
        raise Boom("tenant job failed on purpose")


async def _noop(ctx: ScheduleContext) -> None:
    return None


def scheduling_on(url: str, clock: ManualClock) -> Scheduling:
    config = SchedulingConfig(database_url=url, replica_id="pod-1", inspect_token=OPERATOR)
    declared = [
        define_schedule(name="billing.daily", cron="0 3 * * *", timezone="UTC", handler=_noop),
        define_schedule(name="billing.hourly", cron="0 * * * *", timezone="UTC", handler=_noop),
    ]
    return Scheduling(declared, config=config, clock=clock, handlers=[tenant_job])


async def page(http: httpx.AsyncClient, **params: Any) -> dict[str, Any]:
    r = await http.get(LIST, params=params, headers=AS_OPERATOR)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def every(http: httpx.AsyncClient, **params: Any) -> list[str]:
    """Follow nextCursor to the end: every name the filter holds, in page order."""
    names: list[str] = []
    cursor = ""
    for _ in range(100):
        body = await page(http, **params, cursor=cursor)
        names += [s["name"] for s in body["schedules"]]
        cursor = body["nextCursor"]
        if cursor is None:
            return names
    raise AssertionError("the listing never ended")


async def test_pages_filters_and_the_life_of_the_state(database_url: str) -> None:
    await upgrade_to_head(database_url)
    clock = ManualClock(T0)
    scheduling = scheduling_on(database_url, clock)
    async with served(scheduling) as http:
        # 12 run-time tenants: every minute, three of them failing
        for i in range(12):
            args = {"tenant": i, "fail": i % 4 == 0}
            body = {"cron": "* * * * *", "timezone": "UTC", "handler": "tenantJob", "args": args}
            r = await http.put(f"{LIST}/tenant-{i:02d}", json=body, headers=AS_OPERATOR)
            assert r.status_code == 201, r.text
        tenants = [f"tenant-{i:02d}" for i in range(12)]
        failing = ["tenant-00", "tenant-04", "tenant-08"]

        # the old shape: one answer holding every schedule, in name order, and no next page
        whole = await page(http)
        assert [s["name"] for s in whole["schedules"]] == [
            "billing.daily",
            "billing.hourly",
            *tenants,
        ]
        assert whole["nextCursor"] is None and whole["coordination"]
        assert all(s["lastStatus"] is None for s in whole["schedules"])

        # pages of 5 walk the same names, each once
        first = await page(http, limit=5)
        assert len(first["schedules"]) == 5 and first["nextCursor"]
        assert await every(http, limit=5) == [s["name"] for s in whole["schedules"]]
        assert await every(http, prefix="billing.", limit=1) == ["billing.daily", "billing.hourly"]
        assert await every(http, source="runtime", limit=4) == tenants
        assert await every(http, source="code") == ["billing.daily", "billing.hourly"]
        assert await every(http, prefix="nobody") == []

        # 10:01 fires every tenant; the outcome filter follows as the runs finish
        await clock.advance(30)

        async def outcomes() -> dict[str, str | None] | None:
            listed = {s["name"]: s["lastStatus"] for s in (await page(http))["schedules"]}
            return listed if all(listed[n] for n in tenants) else None

        listed = await wait_until(outcomes, what="every tenant's 10:01 outcome")
        assert {n for n in tenants if listed[n] == "failed"} == set(failing)
        assert await every(http, status="failed", limit=2) == failing
        assert await every(http, status="failed", prefix="tenant-0") == failing
        assert await every(http, status="failed", prefix="tenant-04") == ["tenant-04"]
        assert await every(http, status="succeeded,failed", limit=5) == tenants
        assert await every(http, status=["failed", "skipped"], source="code") == []

        # a pause shows in the paused filter (and nothing else moves)
        r = await http.post(f"{LIST}/tenant-04/pause", headers=AS_OPERATOR)
        assert r.status_code == 200, r.text
        assert await every(http, paused="true") == ["tenant-04"]
        assert await every(http, paused="true", status="failed") == ["tenant-04"]
        assert "tenant-04" not in await every(http, paused="false", limit=3)

        # an edit keeps the outcome until the edited schedule's own next run moves it
        body = {"cron": "* * * * *", "timezone": "UTC", "handler": "tenantJob", "args": {}}
        r = await http.put(f"{LIST}/tenant-00", json=body, headers=AS_OPERATOR)
        assert r.status_code == 200, r.text
        assert r.json()["lastStatus"] == "failed"
        # a deleted one leaves the listing and every filter, though its state row stays
        r = await http.delete(f"{LIST}/tenant-08", headers=AS_OPERATOR)
        assert r.status_code == 204
        assert await every(http, status="failed") == ["tenant-00", "tenant-04"]

        await clock.advance(60)  # 10:02: tenant-00 now succeeds, tenant-04 is paused

        async def moved() -> bool:
            return await every(http, status="failed") == ["tenant-04"]

        await wait_until(moved, what="tenant-00's 10:02 success")
        detail = (await http.get(f"{LIST}/tenant-00", headers=AS_OPERATOR)).json()
        assert detail["lastStatus"] == "succeeded"
        assert detail["lastRun"]["scheduledAt"] == "2026-06-01T10:02:00.000Z"

        async def settled() -> bool:
            assert scheduling.store is not None
            live = await scheduling.store.list_runs(None, limit=10, statuses=[RunStatus.RUNNING])
            return not live

        await wait_until(settled, what="the 10:02 runs to end")
        now = clock.now()

    span = ["--from", iso_z(T0 - timedelta(minutes=1)), "--to", iso_z(now)]
    cli = await anyio.to_thread.run_sync(
        lambda: CliRunner().invoke(
            cli_app, ["schedule", "audit", "--database-url", database_url, *span]
        )
    )
    assert cli.exit_code == 0, cli.output


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"cursor": "not a cursor"}, "cursor"),
        ({"cursor": "x00"}, "cursor"),
        ({"cursor": "m0"}, "cursor"),  # odd hex
        ({"status": "running"}, "status"),  # not an outcome
        ({"status": "bogus"}, "status"),
        ({"limit": "0"}, "limit"),
        ({"limit": "1001"}, "limit"),
        ({"source": "yaml"}, "source"),
        ({"paused": "perhaps"}, "paused"),
    ],
)
async def test_bad_listing_parameters_are_422_naming_the_field(
    sqlite_url: str, params: dict[str, str], field: str
) -> None:
    scheduling = scheduling_on(sqlite_url, ManualClock(T0))
    async with served(scheduling) as http:
        r = await http.get(LIST, params=params, headers=AS_OPERATOR)
        assert r.status_code == 422, r.text
        body = r.json()
        assert set(body) >= {"code", "detail"}
        assert field in str(body), body


async def test_any_cursor_of_the_shape_is_a_position(sqlite_url: str) -> None:
    """Text of the cursor's shape that no page handed out (bytes that are no UTF-8, a name
    past every schedule) is still a place to start: never a 500."""
    scheduling = scheduling_on(sqlite_url, ManualClock(T0))
    async with served(scheduling) as http:
        for cursor, params in (
            ("pff", {"prefix": "billing"}),
            ("sfffe", {"status": "failed"}),
            ("m999999999.7a7a7a", {}),  # a name gone, past the end
            ("p" + "7a" * 800, {"prefix": "b"}),
        ):
            body = await page(http, cursor=cursor, **params)
            assert body["schedules"] == [] and body["nextCursor"] is None, cursor
        after = await page(http, cursor=encode_cursor("billing.daily", Walk.LISTED, 0))
        assert [s["name"] for s in after["schedules"]] == ["billing.hourly"]
        # the name at the cursor is gone: the walk goes on from where it stood
        gone = await page(http, cursor=encode_cursor("billing.aaa", Walk.LISTED, 0))
        assert [s["name"] for s in gone["schedules"]] == ["billing.hourly"]
        # a cursor of another walk (the filters changed) starts that walk over
        other = await page(http, cursor=encode_cursor("zzz", Walk.SORTED))
        assert [s["name"] for s in other["schedules"]] == ["billing.daily", "billing.hourly"]


def test_the_prefix_walk_is_a_bisect() -> None:
    listed = [f"n{i:05d}" for i in reversed(range(100_000))]
    index = NameIndex()

    class S:
        def __init__(self, name: str) -> None:
            self.name = name

    index.refresh([S(n) for n in listed], stamp=1)  # type: ignore[misc]
    assert index.listed == listed and index.sorted == sorted(listed)
    names = index.sorted
    got = walk_sorted(names, None, "n0999", lambda n: True, 3)
    assert got.names == ["n09990", "n09991", "n09992"]
    rest = walk_sorted(names, "n09997", "n0999", lambda n: True, 10)
    assert rest.names == ["n09998", "n09999"] and rest.next_cursor is None
    # a filter that holds nothing in range answers an empty page and ends the walk
    assert walk_sorted(names, None, "n0999", lambda n: False, 10).names == []
