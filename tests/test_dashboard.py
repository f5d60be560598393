"""The dashboard's server side in-process: sign-in, the cookie, sign-out, assets, headers, and
the run-time schedule form (the operator's only; its writes are the inspect API's PUT/DELETE,
refused to a read-only session whatever the page shows).

The page itself (JavaScript, the polling, the buttons) is exercised in real Chromium by
``test_dashboard_browser.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from fastapi import FastAPI
from fastapi.routing import APIRoute
from support.waiting import wait_until

from fastapi_voltro_schedules import (
    Schedule,
    ScheduleContext,
    Scheduling,
    SchedulingConfig,
    define_handler,
    define_schedule,
    schedules_router,
)
from fastapi_voltro_schedules.api.dashboard import STATIC_FILES
from fastapi_voltro_schedules.api.dashboard import router as dashboard_router
from fastapi_voltro_schedules.enums import Trigger
from fastapi_voltro_schedules.testing import ManualClock

NOW = datetime(2026, 6, 1, 11, 59, 30, tzinfo=UTC)
OPERATOR = "operator-secret-0123456789"
READER = "reader-secret-0123456789"
TRIGGER = "trigger-secret-0123456789"
PAGE = "/_voltro/dashboard"


async def noop(ctx: ScheduleContext) -> None:
    return None


@define_handler(name="tenantReport")
async def tenant_report(ctx: ScheduleContext) -> None:
    return None


@define_handler(name="cleanup")
async def cleanup(ctx: ScheduleContext) -> None:
    return None


@asynccontextmanager
async def served(
    sqlite_url: str,
    *,
    base_url: str = "http://test",
    with_handlers: bool = True,
    clock: ManualClock | None = None,
    extra: Sequence[Schedule] = (),
    session_ms: int | None = None,
    **tokens: str | None,
) -> AsyncIterator[httpx.AsyncClient]:
    schedules = [
        define_schedule(name="digest", cron="0 9 * * *", timezone="Europe/Berlin", handler=noop),
        *extra,
    ]
    settings: dict[str, str | None] = {
        "inspect_token": OPERATOR,
        "inspect_read_token": READER,
        "schedule_trigger_token": TRIGGER,
        **tokens,
    }
    more: dict[str, int] = {} if session_ms is None else {"dashboard_session_ms": session_ms}
    config = SchedulingConfig(database_url=sqlite_url, replica_id="pod-1", **settings, **more)
    handlers = [tenant_report, cleanup] if with_handlers else []
    clock = ManualClock(NOW) if clock is None else clock
    scheduling = Scheduling(schedules, config=config, clock=clock, handlers=handlers)
    app = FastAPI()
    app.include_router(schedules_router)
    async with scheduling.run(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=base_url) as client:
            yield client


async def sign_in(client: httpx.AsyncClient, token: str) -> httpx.Response:
    return await client.post(f"{PAGE}/session", data={"token": token})


async def test_without_a_session_the_page_is_the_sign_in_form(sqlite_url: str) -> None:
    async with served(sqlite_url) as client:
        r = await client.get(PAGE)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
        assert '<form method="post" action="/_voltro/dashboard/session"' in r.text
        assert 'name="token"' in r.text and '<label for="token">' in r.text
        assert 'id="schedules"' not in r.text  # no data without a session
        csp = r.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp


async def test_sign_in_sets_a_cookie_that_is_not_the_token(sqlite_url: str) -> None:
    async with served(sqlite_url) as client:
        r = await sign_in(client, OPERATOR)
        assert r.status_code == 303 and r.headers["location"] == PAGE
        cookie = r.headers["set-cookie"]
        assert cookie.startswith("voltro_session=operator.")
        assert OPERATOR not in cookie
        attributes = {part.strip().lower() for part in cookie.split(";")[1:]}
        assert {"httponly", "samesite=strict", "path=/_voltro"} <= attributes
        assert "secure" not in attributes  # plain http: a Secure cookie would never come back

        page = await client.get(PAGE)
        assert page.status_code == 200
        assert 'data-role="operator"' in page.text and 'id="schedules"' in page.text
        assert "/_voltro/dashboard/static/dashboard.js?v=" in page.text
        # the page's own fetches ride the cookie
        listing = await client.get("/_voltro/inspect/schedules")
        assert listing.status_code == 200 and listing.json()["schedules"][0]["name"] == "digest"


async def test_the_read_token_signs_in_read_only(sqlite_url: str) -> None:
    async with served(sqlite_url) as client:
        r = await sign_in(client, READER)
        assert r.status_code == 303 and r.headers["set-cookie"].startswith("voltro_session=read.")
        page = await client.get(PAGE)
        assert 'data-role="read"' in page.text and "read-only" in page.text
        assert (await client.get("/_voltro/inspect/schedules")).status_code == 200
        # the page hides Run now from a viewer; the server refuses it whatever the page does
        fired = await client.post("/_voltro/inspect/schedules/digest/fire")
        assert fired.status_code == 403, fired.text


async def test_the_session_cookie_has_a_max_age(sqlite_url: str) -> None:
    async with served(sqlite_url) as client:
        r = await sign_in(client, OPERATOR)
        attributes = {part.strip().lower() for part in r.headers["set-cookie"].split(";")[1:]}
        assert "max-age=43200" in attributes  # 12 hours by default
        # the expiry is signed into the value too: the server ends the session, not just the
        # browser
        expires = int(r.cookies["voltro_session"].split(".")[1])
        assert expires == int(NOW.timestamp()) + 43200


async def test_the_server_ends_a_session_at_its_max_age(sqlite_url: str) -> None:
    clock = ManualClock(NOW)
    async with served(sqlite_url, clock=clock, session_ms=15 * 60 * 1000) as client:
        r = await sign_in(client, READER)
        assert "Max-Age=900" in r.headers["set-cookie"]
        clock.set(NOW + timedelta(seconds=899))
        assert (await client.get("/_voltro/inspect/schedules")).status_code == 200
        clock.set(NOW + timedelta(seconds=900))
        # the browser would have dropped it; a copy kept past Max-Age is refused all the same
        assert (await client.get("/_voltro/inspect/schedules")).status_code == 401
        page = await client.get(PAGE)
        assert 'name="token"' in page.text and 'id="schedules"' not in page.text
        assert (await sign_in(client, READER)).status_code == 303  # and signing in again works
        assert 'id="schedules"' in (await client.get(PAGE)).text


async def export(ctx: ScheduleContext) -> None:
    if ctx.trigger is Trigger.MANUAL:
        raise RuntimeError("export target refused the connection")


async def test_the_header_shows_the_newest_run_of_any_trigger(sqlite_url: str) -> None:
    """A failed Run now after a succeeded clock-driven run: the listing (what the card's header
    shows) names the failed one as ``newestRun``; ``lastRun`` stays the clock-driven one."""
    clock = ManualClock(NOW)  # 11:59:30
    job = define_schedule(name="export", cron="0 12 * * *", timezone="UTC", handler=export)
    async with served(sqlite_url, clock=clock, extra=[job]) as client:
        await sign_in(client, OPERATOR)

        async def entry(done: Any) -> dict[str, Any] | None:
            listing = (await client.get("/_voltro/inspect/schedules")).json()
            (found,) = [s for s in listing["schedules"] if s["name"] == "export"]
            return found if done(found) else None

        await clock.advance(30)  # 12:00: the timer fires export, which succeeds
        clocked = await wait_until(
            lambda: entry(lambda s: s["newestRun"] and s["newestRun"]["terminal"]),
            what="the clock-driven run",
        )
        assert clocked["lastRun"]["status"] == "succeeded"
        assert clocked["newestRun"]["runId"] == clocked["lastRun"]["runId"]

        await clock.advance(5)
        fired = await client.post("/_voltro/inspect/schedules/export/fire")
        assert fired.status_code == 202, fired.text
        run_id = fired.json()["runId"]
        shown = await wait_until(
            lambda: entry(
                lambda s: s["newestRun"]["runId"] == run_id and s["newestRun"]["terminal"]
            ),
            what="the failed Run now in the listing",
        )
        newest = shown["newestRun"]
        assert (newest["status"], newest["trigger"]) == ("failed", "manual")
        assert "export target refused the connection" in newest["error"]
        assert shown["lastRun"]["runId"] == clocked["lastRun"]["runId"]  # still the clock's
        detail = (await client.get("/_voltro/inspect/schedules/export")).json()
        assert detail["newestRun"]["runId"] == run_id
        # the page's script reads newestRun for the header badge
        script = (await client.get(f"{PAGE}/static/dashboard.js")).text
        assert "s.newestRun || s.lastRun" in script


async def test_the_cookie_is_secure_under_https(sqlite_url: str) -> None:
    async with served(sqlite_url, base_url="https://test") as client:
        r = await sign_in(client, OPERATOR)
        assert r.status_code == 303
        assert "secure" in {p.strip().lower() for p in r.headers["set-cookie"].split(";")}


async def test_a_wrong_token_gets_the_form_again_with_the_reason(sqlite_url: str) -> None:
    async with served(sqlite_url) as client:
        for token in ("nope-nope-nope-nope", TRIGGER, ""):
            r = await sign_in(client, token)
            assert r.status_code == 401, token
            assert "set-cookie" not in r.headers
            assert 'role="alert"' in r.text and 'aria-invalid="true"' in r.text
            reason = "Enter an inspect token" if not token else "not an inspect token"
            assert reason in r.text
            assert token == "" or token not in r.text  # never echoed back


async def test_a_forged_or_stale_cookie_is_no_session(sqlite_url: str) -> None:
    async with served(sqlite_url) as client:
        r = await sign_in(client, READER)
        value = r.cookies["voltro_session"]
        promoted = "operator." + value.split(".", 1)[1]  # a read MAC claiming operator
        for forged in (promoted, "operator.00", "admin.x", "garbage"):
            client.cookies.set("voltro_session", forged, path="/_voltro")
            page = await client.get(PAGE)
            assert 'name="token"' in page.text and 'id="schedules"' not in page.text, forged
            assert (await client.get("/_voltro/inspect/schedules")).status_code == 401, forged


async def test_sign_out_clears_the_cookie(sqlite_url: str) -> None:
    async with served(sqlite_url) as client:
        await sign_in(client, OPERATOR)
        assert 'id="schedules"' in (await client.get(PAGE)).text
        r = await client.post(f"{PAGE}/signout")
        assert r.status_code == 303 and r.headers["location"] == PAGE
        cleared = r.headers["set-cookie"]
        assert cleared.startswith('voltro_session=""') and "Max-Age=0" in cleared
        assert "Path=/_voltro" in cleared
        assert 'name="token"' in (await client.get(PAGE)).text


async def test_no_inspect_token_configured_shuts_the_dashboard_with_the_remedy(
    sqlite_url: str,
) -> None:
    async with served(sqlite_url, inspect_token=None, inspect_read_token=None) as client:
        r = await client.get(PAGE)
        assert r.status_code == 503
        assert "VOLTRO_INSPECT_TOKEN" in r.text and "VOLTRO_INSPECT_READ_TOKEN" in r.text
        assert 'name="token"' not in r.text
        assert (await sign_in(client, OPERATOR)).status_code == 503


async def test_static_files_are_the_fixed_list(sqlite_url: str) -> None:
    async with served(sqlite_url) as client:
        for name, media_type in STATIC_FILES.items():
            r = await client.get(f"{PAGE}/static/{name}")
            assert r.status_code == 200 and r.headers["content-type"] == media_type, name
            assert r.headers["x-content-type-options"] == "nosniff"
        js = (await client.get(f"{PAGE}/static/dashboard.js")).text
        assert "http://" not in js and "https://" not in js  # nothing from elsewhere
        for path in ("nope.js", "..%2Fapi%2Fdashboard.py", "%2E%2E%2F__init__.py"):
            assert (await client.get(f"{PAGE}/static/{path}")).status_code == 404, path


SCHEDULES = "/_voltro/inspect/schedules"
REPORT = {"cron": "0 4 * * *", "timezone": "UTC", "handler": "tenantReport"}


async def test_the_operator_page_carries_the_schedule_form_with_the_registered_handlers(
    sqlite_url: str,
) -> None:
    async with served(sqlite_url) as client:
        await sign_in(client, OPERATOR)
        page = (await client.get(PAGE)).text
        assert 'id="new-schedule"' in page and 'id="schedule-form"' in page
        # the handler is a choice of the handlers this app registered, sorted
        handler = page.index('<select id="f-handler"')
        options = page[handler : page.index("</select>", handler)]
        assert options.index('value="cleanup"') < options.index('value="tenantReport"')
        assert options.count("<option") == 2
        overlap = page[page.index('<select id="f-onOverlap"') :]
        assert '<option value="skip" selected>' in overlap[: overlap.index("</select>")]
        assert 'value="queue"' in overlap and 'value="parallel"' in overlap
        # each field has a place for the server's refusal that names it (422 ``field``)
        for field in ("name", "cron", "timezone", "handler", "onOverlap", "backfill", "args"):
            assert f'data-field="{field}"' in page, field
            assert f'id="f-{field}-error"' in page, field


async def test_without_handlers_the_operator_is_told_how_to_register_one(sqlite_url: str) -> None:
    async with served(sqlite_url, with_handlers=False) as client:
        await sign_in(client, OPERATOR)
        page = (await client.get(PAGE)).text
        assert 'id="no-handlers"' in page and "@define_handler(name=...)" in page
        assert 'id="schedule-form"' not in page and 'id="new-schedule"' not in page


async def test_the_operator_session_writes_through_the_put_and_delete_routes(
    sqlite_url: str,
) -> None:
    async with served(sqlite_url) as client:
        await sign_in(client, OPERATOR)  # the cookie only, no bearer: what the page sends
        url = f"{SCHEDULES}/report.acme"
        created = await client.put(url, json={**REPORT, "args": {"tenant": "acme"}})
        assert created.status_code == 201, created.text
        listing = {s["name"]: s for s in (await client.get(SCHEDULES)).json()["schedules"]}
        report, digest = listing["report.acme"], listing["digest"]
        # everything the edit form prefills comes with the listing
        assert (report["source"], report["handler"], report["args"]) == (
            "runtime",
            "tenantReport",
            {"tenant": "acme"},
        )
        assert (digest["source"], digest["handler"], digest["args"]) == ("code", None, None)

        edited = await client.put(url, json={**REPORT, "cron": "30 5 * * *"})
        assert edited.status_code == 200 and edited.json()["cron"] == "30 5 * * *", edited.text

        bad = await client.put(url, json={**REPORT, "cron": "61 * * * *"})
        assert bad.status_code == 422
        assert (bad.json()["code"], bad.json()["field"]) == ("invalid_schedule", "cron")
        for body, field in (
            ({**REPORT, "onOverlap": "sometimes"}, "onOverlap"),
            ({**REPORT, "handler": "nope"}, "handler"),
            ({**REPORT, "args": [1]}, "args"),
            ({**REPORT, "maxRuntimeMs": "soon"}, "maxRuntimeMs"),
        ):
            refused = await client.put(url, json=body)
            assert (refused.status_code, refused.json()["field"]) == (422, field), refused.text

        declared = await client.put(f"{SCHEDULES}/digest", json=REPORT)
        assert declared.status_code == 409 and declared.json()["code"] == "declared_in_code"
        assert "digest" in declared.json()["detail"]

        assert (await client.delete(url)).status_code == 204
        names = [s["name"] for s in (await client.get(SCHEDULES)).json()["schedules"]]
        assert names == ["digest"]


async def test_a_read_only_session_sees_run_time_schedules_and_every_write_is_403(
    sqlite_url: str,
) -> None:
    async with served(sqlite_url) as client:
        url = f"{SCHEDULES}/report.acme"
        as_operator = {"Authorization": f"Bearer {OPERATOR}"}
        assert (await client.put(url, json=REPORT, headers=as_operator)).status_code == 201

        await sign_in(client, READER)
        page = (await client.get(PAGE)).text
        assert 'data-role="read"' in page
        # no editor, no button: the page has nothing to press
        for control in ('id="schedule-form"', 'id="new-schedule"', 'id="editor"', "data-action"):
            assert control not in page, control
        (report,) = [
            s for s in (await client.get(SCHEDULES)).json()["schedules"] if s["source"] == "runtime"
        ]
        assert (report["name"], report["handler"]) == ("report.acme", "tenantReport")

        # the server refuses the writes whatever the page shows
        writes = (
            await client.put(url, json={**REPORT, "cron": "* * * * *"}),
            await client.put(f"{SCHEDULES}/report.other", json=REPORT),
            await client.delete(url),
            await client.post(f"{url}/fire"),
            await client.post(f"{url}/pause", json={}),
        )
        for refused in writes:
            assert refused.status_code == 403, (refused.request.method, refused.text)
            assert refused.json()["code"] == "forbidden_role"
        listing = (await client.get(SCHEDULES)).json()["schedules"]
        assert [(s["name"], s["cron"], s["paused"]) for s in listing] == [
            ("digest", "0 9 * * *", False),
            ("report.acme", "0 4 * * *", False),
        ]


def test_the_dashboard_has_no_write_route_of_its_own() -> None:
    # One door per write: the page's forms call the inspect API's routes; the dashboard's own
    # routes only serve the page and the session.
    routes = [route for route in dashboard_router.routes if isinstance(route, APIRoute)]
    assert {route.path for route in routes} >= {PAGE, f"{PAGE}/static/{{name}}"}
    writes = {
        (method, route.path) for route in routes for method in route.methods - {"GET", "HEAD"}
    }
    assert writes == {("POST", f"{PAGE}/session"), ("POST", f"{PAGE}/signout")}
